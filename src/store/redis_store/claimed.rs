//! The notifications this instance holds a lease on, as its claims read them: a settle,
//! deferral or release is worked out from that (no read of Redis first), and written
//! where the stored record is still it. One not found here (claimed by another
//! instance's store, or forgotten) is read from Redis in a first round instead.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::commit::Held;
use crate::domain::JobId;
use crate::lifecycle::Now;
use crate::store::store_clock_us;

/// A lease as its claim gave it.
struct Claimed {
    held: Held,
    /// Redis's clock at the claim (µs, rounded down) and when this instance asked for it.
    claimed_at_us: i64,
    asked: Instant,
}

#[derive(Default)]
pub struct ClaimedRecords {
    held: Mutex<HashMap<(JobId, u64), Claimed>>,
}

impl ClaimedRecords {
    pub fn remember(&self, id: JobId, lease: u64, held: Held, claimed_at_us: i64, asked: Instant) {
        let claimed = Claimed {
            held,
            claimed_at_us,
            asked,
        };
        self.lock().insert((id, lease), claimed);
    }

    /// The notification as claimed under `lease`, and an upper bound of Redis's clock
    /// now; forgotten here, since the change worked out from it ends the lease (one
    /// tried again after a failed call is read from Redis).
    pub fn take(&self, id: &JobId, lease: u64) -> Option<(Held, Now)> {
        let c = self.lock().remove(&(*id, lease))?;
        Some((
            c.held,
            Now::from_micros(store_clock_us(c.claimed_at_us, c.asked)),
        ))
    }

    /// Forgets leases claimed more than `lease` ago: they have ended, and whatever
    /// comes of them is read from Redis.
    pub fn forget_older_than(&self, lease: Duration) {
        self.lock().retain(|_, c| c.asked.elapsed() < lease);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(JobId, u64), Claimed>> {
        // A panic elsewhere while holding it leaves a map that is still whole.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}
