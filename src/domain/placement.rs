//! `Placement`: which shard a new notification lives on, and so which shard its id
//! names. A repeated idempotency key must meet its first registration, and every
//! notification of an ordering key must share the shard that keeps the key's order, so a
//! keyed notification goes to the shard its key hashes to (its ordering key's, when it
//! has both); the others take the shards in
//! turn, spreading the load evenly. Registrations that arrive together (within
//! `RUN_FOR`, up to `RUN` of them) share a shard, so that they are stored with one
//! script call (`store/redis_store/enqueue.rs`) rather than one per shard.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::JobId;

/// Most registrations in a row placed on one shard.
const RUN: usize = 32;
/// How long a run lasts at most: a registration later than this after the first of its
/// run goes to the next shard. Longer than the enqueuer's linger
/// (`store/redis_store/enqueue.rs`), so that one instance's group is not split over
/// shards by its run.
const RUN_FOR: Duration = Duration::from_millis(4);

/// The run of unkeyed registrations going on now.
#[derive(Debug)]
struct Run {
    shard: usize,
    started: Instant,
    placed: usize,
}

#[derive(Debug)]
pub struct Placement {
    shards: u16,
    run: Mutex<Run>,
}

impl Placement {
    /// Placement over `shards` shards (at least one).
    pub fn new(shards: u16) -> Self {
        let first = Run {
            shard: 0,
            started: Instant::now(),
            placed: 0,
        };
        Self {
            shards: shards.max(1),
            run: Mutex::new(first),
        }
    }

    /// A fresh id for a notification placed by this key (its ordering key, or else its
    /// idempotency key), if any.
    pub fn new_id(&self, key: Option<&str>) -> JobId {
        let n = usize::from(self.shards);
        let shard = match key {
            Some(key) => {
                let digest = Sha256::digest(key.as_bytes());
                let head = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
                (head % n as u64) as usize
            }
            None => self.in_turn(n),
        };
        JobId::new(shard as u16)
    }

    /// The shard of the run going on, or of a new run on the next shard.
    fn in_turn(&self, shards: usize) -> usize {
        let mut run = self.run.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if run.placed > 0 && (run.placed == RUN || now >= run.started + RUN_FOR) {
            *run = Run {
                shard: (run.shard + 1) % shards,
                started: now,
                placed: 0,
            };
        } else if run.placed == 0 {
            run.started = now;
        }
        run.placed += 1;
        run.shard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_meets_its_shard() {
        let placement = Placement::new(12);
        let keyed = placement.new_id(Some("order-1001")).shard();
        for _ in 0..20 {
            assert_eq!(placement.new_id(Some("order-1001")).shard(), keyed);
        }
        assert_eq!(Placement::new(1).new_id(Some("any")).shard(), 0);
    }

    #[test]
    fn registrations_apart_take_the_shards_in_turn() {
        let placement = Placement::new(3);
        let turns: Vec<u16> = (0..6)
            .map(|_| {
                std::thread::sleep(2 * RUN_FOR);
                placement.new_id(None).shard()
            })
            .collect();
        assert_eq!(turns, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn registrations_together_share_a_shard_up_to_a_run() {
        let placement = Placement::new(12);
        let together: Vec<u16> = (0..RUN + 1)
            .map(|_| placement.new_id(None).shard())
            .collect();
        // A tight loop takes far less than RUN_FOR; the run then ends at RUN.
        assert!(together[..RUN].iter().all(|&s| s == together[0]));
        assert_eq!(together[RUN], together[0] + 1);
    }
}
