//! The settler: records attempt outcomes in the store in batches, so that a busy
//! instance settles many attempts with one script call. It keeps retrying a batch while
//! the store is unreachable; meanwhile the bounded queue stops new claims.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::domain::JobId;
use crate::store::{Settlement, Store, StoreError};

/// Most settlements recorded by one script call.
const MAX_BATCH: usize = 256;

/// Leases this instance holds and has not settled: what to release at shutdown.
#[derive(Clone, Default)]
pub struct Leases(Arc<Mutex<HashMap<JobId, u64>>>);

impl Leases {
    pub fn hold(&self, id: JobId, lease: u64) {
        self.0.lock().expect("lease map").insert(id, lease);
    }

    fn drop_settled(&self, batch: &[Settlement]) {
        let mut map = self.0.lock().expect("lease map");
        for s in batch {
            if map.get(&s.id) == Some(&s.lease) {
                map.remove(&s.id);
            }
        }
    }

    pub fn take_all(&self) -> Vec<(JobId, u64)> {
        self.0.lock().expect("lease map").drain().collect()
    }
}

/// Runs until every sender of `rx` is gone and the queue is empty, or until `deadline`
/// passes while the store is down (leases then expire and the work is done again).
pub async fn run(
    store: Arc<dyn Store>,
    mut rx: mpsc::Receiver<Settlement>,
    leases: Leases,
    wake: Arc<Notify>,
    give_up: tokio_util::sync::CancellationToken,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        if settle_with_retry(store.as_ref(), &batch, &wake, &give_up).await {
            leases.drop_settled(&batch);
        }
        batch.clear();
    }
}

async fn settle_with_retry(
    store: &dyn Store,
    batch: &[Settlement],
    wake: &Notify,
    give_up: &tokio_util::sync::CancellationToken,
) -> bool {
    let mut failures = 0u32;
    loop {
        match store.settle(batch).await {
            Ok(settled) => {
                if failures > 0 {
                    tracing::info!(failures, "settling resumed");
                }
                let ignored = settled.applied.iter().filter(|a| !**a).count();
                if ignored > 0 {
                    tracing::warn!(ignored, "settlements ignored: their lease had been lost");
                }
                if settled.earliest {
                    wake.notify_one();
                }
                if settled.trimmed > 0 {
                    tracing::info!(
                        deleted = settled.trimmed,
                        "retention deleted expired notifications"
                    );
                }
                return true;
            }
            Err(e) => {
                if failures == 0 {
                    tracing::error!(error = %e, count = batch.len(), "cannot settle attempts; retrying");
                }
                if matches!(e, StoreError::Corrupt(_)) || give_up.is_cancelled() {
                    tracing::error!(error = %e, count = batch.len(), "gave up settling; the leases will expire and the attempts be made again");
                    return false;
                }
                failures += 1;
                tokio::select! {
                    _ = tokio::time::sleep(backoff(failures)) => {}
                    _ = give_up.cancelled() => {}
                }
            }
        }
    }
}

/// Exponential from 50 ms to 5 s, with ±25% jitter so that instances do not move together.
pub fn backoff(failures: u32) -> Duration {
    let base = 50u64.saturating_mul(1 << failures.min(7)).min(5_000);
    let jitter = base / 4;
    Duration::from_millis(base - jitter + fastrand::u64(0..=2 * jitter))
}
