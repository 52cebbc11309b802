//! `Placement`: which shard a new notification lives on, and so which shard its id
//! names. A repeated idempotency key must meet its first registration, so a keyed
//! notification goes to the shard its key hashes to; the others take the shards in
//! turn, spreading the load evenly.

use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

use super::JobId;

#[derive(Debug)]
pub struct Placement {
    shards: u16,
    turn: AtomicUsize,
}

impl Placement {
    /// Placement over `shards` shards (at least one).
    pub fn new(shards: u16) -> Self {
        Self {
            shards: shards.max(1),
            turn: AtomicUsize::new(0),
        }
    }

    /// A fresh id for a notification registered with this idempotency key, if any.
    pub fn new_id(&self, idempotency_key: Option<&str>) -> JobId {
        let n = usize::from(self.shards);
        let shard = match idempotency_key {
            Some(key) => {
                let digest = Sha256::digest(key.as_bytes());
                let head = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
                (head % n as u64) as usize
            }
            None => self.turn.fetch_add(1, Ordering::Relaxed) % n,
        };
        JobId::new(shard as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_meets_its_shard_and_the_rest_take_turns() {
        let placement = Placement::new(12);
        let keyed = placement.new_id(Some("order-1001")).shard();
        for _ in 0..20 {
            assert_eq!(placement.new_id(Some("order-1001")).shard(), keyed);
        }
        let turns: Vec<u16> = (0..24).map(|_| placement.new_id(None).shard()).collect();
        assert_eq!(turns[..12], (0..12).collect::<Vec<_>>()[..]);
        assert_eq!(turns[..12], turns[12..]);
        assert_eq!(Placement::new(1).new_id(Some("any")).shard(), 0);
    }
}
