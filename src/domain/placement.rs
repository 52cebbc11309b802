//! `Placement`: which shard a new notification lives on, and so which shard its id
//! names. Every notification of an ordering key must share the shard that keeps the
//! key's order, and a repeated idempotency key must meet its first registration, so a
//! keyed notification goes to the shard its key hashes to (its ordering key's, when it
//! has both); the others take the shards in turn, spreading the load evenly.
//! Registrations that arrive together (within `RUN_FOR`, up to `RUN` of them) share a
//! shard, so that they are stored with one script call (`store/redis_store/enqueue.rs`)
//! rather than one per shard.
//!
//! A shard in trouble costs that shard (`ShardHealth`: its primary cannot acknowledge
//! writes as `store.replica_acks` asks, as the store last saw): unkeyed notifications
//! take the other shards in turn; one fixed to it by its ordering key is refused at once
//! (`ShardUnavailable`); one placed by its idempotency key goes to another shard chosen
//! by the key among the healthy ones, and says which shard it was moved from, so that the
//! store first looks for the key there, and keeps it there before it stores the
//! notification elsewhere (every repeat meets it, wherever it is placed).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

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

/// What places a notification.
#[derive(Debug, Clone, Copy)]
pub enum PlacedBy<'a> {
    /// Nothing: any shard that can take it.
    Nothing,
    /// Its ordering key (within its tenant): that key's shard, whatever its state.
    Ordering(&'a str),
    /// Its idempotency key (`Idempotency::placement_key`): that key's shard, or while it
    /// is degraded another chosen by the key.
    Idempotency(&'a str),
}

/// Where a new notification goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub id: JobId,
    /// The shard its idempotency key hashes to, when that one is degraded and the
    /// notification went elsewhere: its key may be there already.
    pub moved_from: Option<u16>,
}

/// The shard an ordering key fixes a notification to cannot take it now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shard {shard} cannot take new notifications now: {reason}")]
pub struct ShardUnavailable {
    pub shard: u16,
    pub reason: String,
}

#[derive(Debug)]
pub struct Placement {
    shards: u16,
    run: Mutex<Run>,
    health: Arc<ShardHealth>,
}

impl Placement {
    /// Placement over `shards` shards (at least one), every one taken to be healthy.
    pub fn new(shards: u16) -> Self {
        Self::watching(shards, Arc::new(ShardHealth::new(shards)))
    }

    /// Placement over `shards` shards, avoiding those `health` says are degraded.
    pub fn watching(shards: u16, health: Arc<ShardHealth>) -> Self {
        let first = Run {
            shard: 0,
            started: Instant::now(),
            placed: 0,
        };
        Self {
            shards: shards.max(1),
            run: Mutex::new(first),
            health,
        }
    }

    /// The shards' health this placement avoids degraded ones by.
    pub fn health(&self) -> &Arc<ShardHealth> {
        &self.health
    }

    /// A fresh id for a notification nothing places (postback's own).
    pub fn new_id(&self) -> JobId {
        JobId::new(self.in_turn())
    }

    /// A fresh id for a notification placed `by`.
    pub fn place(&self, by: PlacedBy) -> Result<Placed, ShardUnavailable> {
        let n = self.shards;
        let placed = |shard: u16, moved_from| Placed {
            id: JobId::new(shard),
            moved_from,
        };
        match by {
            PlacedBy::Nothing => Ok(placed(self.in_turn(), None)),
            PlacedBy::Ordering(key) => {
                let home = (key_hash(key, 0) % u64::from(n)) as u16;
                match self.health.reason(home) {
                    Some(reason) => Err(ShardUnavailable {
                        shard: home,
                        reason,
                    }),
                    None => Ok(placed(home, None)),
                }
            }
            PlacedBy::Idempotency(key) => {
                let home = (key_hash(key, 0) % u64::from(n)) as u16;
                if !self.health.is_degraded(home) {
                    return Ok(placed(home, None));
                }
                // Among the healthy shards, the one the key ranks first (the same one on
                // every instance while the same shards are degraded).
                let other = (0..n)
                    .filter(|s| !self.health.is_degraded(*s))
                    .max_by_key(|s| key_hash(key, u64::from(*s) + 1));
                Ok(match other {
                    Some(shard) => placed(shard, Some(home)),
                    None => placed(home, None),
                })
            }
        }
    }

    /// The shard of the run going on, or of a new run on the next healthy shard (on the
    /// next shard at all when none is healthy: the store then answers why).
    fn in_turn(&self) -> u16 {
        let shards = usize::from(self.shards);
        let mut run = self.run.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let degraded = self.health.is_degraded(run.shard as u16);
        if degraded || (run.placed > 0 && (run.placed == RUN || now >= run.started + RUN_FOR)) {
            let next = (1..=shards)
                .map(|step| (run.shard + step) % shards)
                .find(|s| !self.health.is_degraded(*s as u16))
                .unwrap_or((run.shard + 1) % shards);
            *run = Run {
                shard: next,
                started: now,
                placed: 0,
            };
        } else if run.placed == 0 {
            run.started = now;
        }
        run.placed += 1;
        run.shard as u16
    }
}

/// The first 8 bytes of the SHA-256 of `key`, salted by `salt` (0: the key's own shard).
fn key_hash(key: &str, salt: u64) -> u64 {
    let mut hasher = Sha256::new();
    if salt > 0 {
        hasher.update(salt.to_be_bytes());
    }
    hasher.update(key.as_bytes());
    u64::from_be_bytes(hasher.finalize()[..8].try_into().expect("8 bytes"))
}

/// Which shards can take new notifications now, as this instance last saw them: one is
/// degraded while its primary has fewer replicas than `store.replica_acks` asks for, or
/// for a while after a write to it came back with fewer acknowledgements. The store
/// keeps it up to date; placement, `/readyz`, `/stats` and the metrics read it.
#[derive(Debug)]
pub struct ShardHealth {
    degraded: Vec<AtomicBool>,
    /// Why each degraded shard is, and since when (ms since the epoch).
    why: Mutex<Vec<Option<(String, i64)>>>,
}

/// A degraded shard, as `/stats` and `/readyz` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Degraded {
    pub shard: u16,
    pub reason: String,
    /// ms since the epoch.
    pub since: i64,
}

impl ShardHealth {
    /// `shards` shards, every one healthy.
    pub fn new(shards: u16) -> Self {
        let n = usize::from(shards.max(1));
        Self {
            degraded: (0..n).map(|_| AtomicBool::new(false)).collect(),
            why: Mutex::new(vec![None; n]),
        }
    }

    pub fn is_degraded(&self, shard: u16) -> bool {
        self.degraded
            .get(usize::from(shard))
            .is_some_and(|d| d.load(Ordering::Relaxed))
    }

    /// Why `shard` is degraded, if it is.
    pub fn reason(&self, shard: u16) -> Option<String> {
        let why = self.why.lock().unwrap_or_else(|p| p.into_inner());
        why.get(usize::from(shard))?
            .as_ref()
            .map(|(r, _)| r.clone())
    }

    /// Notes `shard` degraded for `reason` at `now_ms` (keeping when it first was), or
    /// healthy (`None`). Whether that changed its state.
    pub fn set(&self, shard: u16, reason: Option<String>, now_ms: i64) -> bool {
        let i = usize::from(shard);
        let Some(flag) = self.degraded.get(i) else {
            return false;
        };
        let mut why = self.why.lock().unwrap_or_else(|p| p.into_inner());
        let was = why[i].is_some();
        why[i] = match (reason, why[i].take()) {
            (Some(reason), Some((_, since))) => Some((reason, since)),
            (Some(reason), None) => Some((reason, now_ms)),
            (None, _) => None,
        };
        flag.store(why[i].is_some(), Ordering::Relaxed);
        was != why[i].is_some()
    }

    /// Every degraded shard, in shard order.
    pub fn degraded(&self) -> Vec<Degraded> {
        let why = self.why.lock().unwrap_or_else(|p| p.into_inner());
        why.iter()
            .enumerate()
            .filter_map(|(shard, w)| {
                w.as_ref().map(|(reason, since)| Degraded {
                    shard: shard as u16,
                    reason: reason.clone(),
                    since: *since,
                })
            })
            .collect()
    }

    /// Whether no shard can take a new notification.
    pub fn all_degraded(&self) -> bool {
        self.degraded.iter().all(|d| d.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard_of(placement: &Placement, by: PlacedBy) -> u16 {
        placement.place(by).unwrap().id.shard()
    }

    #[test]
    fn a_key_always_meets_its_shard() {
        let placement = Placement::new(12);
        let keyed = shard_of(&placement, PlacedBy::Idempotency("order-1001"));
        for _ in 0..20 {
            assert_eq!(
                shard_of(&placement, PlacedBy::Idempotency("order-1001")),
                keyed
            );
            assert_eq!(
                shard_of(&placement, PlacedBy::Ordering("order-1001")),
                keyed
            );
        }
        assert_eq!(
            shard_of(&Placement::new(1), PlacedBy::Idempotency("any")),
            0
        );
    }

    #[test]
    fn registrations_apart_take_the_shards_in_turn() {
        let placement = Placement::new(3);
        let turns: Vec<u16> = (0..6)
            .map(|_| {
                std::thread::sleep(2 * RUN_FOR);
                shard_of(&placement, PlacedBy::Nothing)
            })
            .collect();
        assert_eq!(turns, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn registrations_together_share_a_shard_up_to_a_run() {
        let placement = Placement::new(12);
        let together: Vec<u16> = (0..RUN + 1)
            .map(|_| shard_of(&placement, PlacedBy::Nothing))
            .collect();
        // A tight loop takes far less than RUN_FOR; the run then ends at RUN.
        assert!(together[..RUN].iter().all(|&s| s == together[0]));
        assert_eq!(together[RUN], together[0] + 1);
    }

    #[test]
    fn a_degraded_shard_takes_no_unkeyed_notification() {
        let health = Arc::new(ShardHealth::new(3));
        health.set(1, Some("no replica".into()), 0);
        let placement = Placement::watching(3, health.clone());
        let shards: Vec<u16> = (0..200)
            .map(|_| shard_of(&placement, PlacedBy::Nothing))
            .collect();
        assert!(!shards.contains(&1), "{shards:?}");
        assert!(shards.contains(&0) && shards.contains(&2));
        health.set(1, None, 0);
        let again: Vec<u16> = (0..200)
            .map(|_| shard_of(&placement, PlacedBy::Nothing))
            .collect();
        assert!(again.contains(&1), "back once healthy");
    }

    #[test]
    fn an_ordering_key_of_a_degraded_shard_is_refused_and_an_idempotency_key_moved() {
        let health = Arc::new(ShardHealth::new(3));
        let placement = Placement::watching(3, health.clone());
        let key = (0..)
            .map(|n| format!("k{n}"))
            .find(|k| shard_of(&placement, PlacedBy::Ordering(k)) == 2)
            .unwrap();
        health.set(2, Some("the primary has 0 of the 1 replicas".into()), 7);
        let refused = placement.place(PlacedBy::Ordering(&key)).unwrap_err();
        assert_eq!(refused.shard, 2);
        let moved = placement.place(PlacedBy::Idempotency(&key)).unwrap();
        assert_eq!(moved.moved_from, Some(2));
        assert_ne!(moved.id.shard(), 2);
        let again = placement.place(PlacedBy::Idempotency(&key)).unwrap();
        assert_eq!(
            again.id.shard(),
            moved.id.shard(),
            "the same shard each time"
        );
        assert_eq!(health.degraded()[0].since, 7);
        assert!(!health.all_degraded());
    }
}
