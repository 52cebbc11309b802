//! What this instance knows of when each shard next has work, so that a claim asks only
//! the shards that have some. It learns from each claim's reply (the shard's next due
//! time or lease end) and from wake-ups that name a shard (a registration or retry that
//! became its earliest, from this instance or another through pub/sub). Each claim also
//! asks one more shard in turn, whatever it knows: that bounds what a lost wake-up can
//! cost, and on a cluster with many shards keeps an idle instance at about one command
//! per idle sleep instead of one per shard.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Shard {
    /// When it next has work; `None` when it has none that this instance knows of.
    next: Option<Instant>,
    /// Bumped by every wake-up, so that a claim's older reply cannot hide a newer one.
    wakes: u64,
}

impl Shard {
    fn wake(&mut self) {
        self.next = Some(Instant::now());
        self.wakes += 1;
    }
}

pub struct ShardClock {
    shards: Mutex<Vec<Shard>>,
    /// The shard asked next whatever is known of it (modulo the number of shards).
    turn: AtomicUsize,
}

/// A shard to claim from, and how many wake-ups it had had when it was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub shard: usize,
    wakes: u64,
}

impl ShardClock {
    /// Every shard is due at first: nothing is known yet.
    pub fn new(shards: usize) -> Self {
        let now = Instant::now();
        let shards = (0..shards)
            .map(|_| Shard {
                next: Some(now),
                wakes: 0,
            })
            .collect();
        Self {
            shards: Mutex::new(shards),
            turn: AtomicUsize::new(0),
        }
    }

    /// A shard has work now.
    pub fn wake(&self, shard: usize) {
        if let Some(s) = self.lock().get_mut(shard) {
            s.wake();
        }
    }

    /// Every shard may have work now (after a gap in the wake-ups).
    pub fn wake_all(&self) {
        self.lock().iter_mut().for_each(Shard::wake);
    }

    /// The shards to claim from now: those with work due within `ahead`, then one more in
    /// turn.
    pub fn to_ask(&self, ahead: Duration) -> Vec<Ask> {
        let horizon = Instant::now() + ahead;
        let shards = self.lock();
        let n = shards.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % n;
        let ask = |shard: usize| Ask {
            shard,
            wakes: shards[shard].wakes,
        };
        let mut asks: Vec<Ask> = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&s| shards[s].next.is_some_and(|at| at <= horizon))
            .map(ask)
            .collect();
        if !asks.iter().any(|a| a.shard == start) {
            asks.push(ask(start));
        }
        asks
    }

    /// What a claim of `ask` learnt: the shard next has work in `next` (`None`: none).
    /// A wake-up since the shard was chosen wins.
    pub fn claimed(&self, ask: Ask, next: Option<Duration>) {
        let mut shards = self.lock();
        let s = &mut shards[ask.shard];
        if s.wakes == ask.wakes {
            s.next = next.map(|d| Instant::now() + d);
        }
    }

    /// How long until the earliest work known of; zero when some is due.
    pub fn next_wake(&self) -> Option<Duration> {
        let now = Instant::now();
        self.lock()
            .iter()
            .filter_map(|s| s.next)
            .min()
            .map(|at| at.saturating_duration_since(now))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Shard>> {
        self.shards.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(asks: &[Ask]) -> Vec<usize> {
        asks.iter().map(|a| a.shard).collect()
    }

    #[test]
    fn asks_due_shards_and_one_more_in_turn() {
        let clock = ShardClock::new(4);
        let first = clock.to_ask(Duration::ZERO);
        assert_eq!(shards(&first), vec![0, 1, 2, 3], "all unknown, so all due");
        for ask in first {
            clock.claimed(ask, None);
        }
        assert_eq!(
            shards(&clock.to_ask(Duration::ZERO)),
            vec![1],
            "none due: one in turn"
        );
        assert_eq!(clock.next_wake(), None);
        clock.wake(3);
        assert_eq!(shards(&clock.to_ask(Duration::ZERO)), vec![3, 2]);
        let later = clock.to_ask(Duration::ZERO)[0];
        clock.claimed(later, Some(Duration::from_secs(60)));
        assert!(clock.next_wake().unwrap() > Duration::from_secs(59));
    }

    #[test]
    fn waking_all_makes_every_shard_due() {
        let clock = ShardClock::new(3);
        for ask in clock.to_ask(Duration::ZERO) {
            clock.claimed(ask, None);
        }
        clock.wake_all();
        assert_eq!(shards(&clock.to_ask(Duration::ZERO)).len(), 3);
    }

    #[test]
    fn a_wake_up_during_a_claim_is_not_lost() {
        let clock = ShardClock::new(2);
        let ask = clock.to_ask(Duration::ZERO)[0];
        clock.wake(ask.shard);
        clock.claimed(ask, None);
        assert_eq!(clock.next_wake(), Some(Duration::ZERO));
    }
}
