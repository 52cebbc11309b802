//! What this instance knows of when each shard next has work, so that a claim asks only
//! the shards that have some, and how far ahead each is claimed. It learns from each
//! claim's reply (the shard's next due time or lease end) and from wake-ups that name a
//! shard and when its new earliest is due (a registration or retry, from this instance or
//! another through pub/sub). A shard with few due is claimed further ahead (up to four
//! times as far), so that a load spread over many shards is claimed in larger groups.
//! Every `TURN_EVERY` a claim also asks one more shard in turn, whatever it knows: that
//! bounds what a lost wake-up can cost, and keeps an idle instance on a cluster with many
//! shards at about one command per idle sleep instead of one per shard.
//! Where instances share the shards (`fleet.rs`), it asks only the shards this instance
//! owns, for as long as its ownership is renewed; past that, every shard again.
//! A shard whose claim failed (its node failing over) is asked again after a backoff of
//! its own, so that the others are claimed meanwhile.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::backoff;

/// A claim that takes fewer than this many notifications doubles how far ahead its shard
/// is next claimed; one that takes four times as many, or is cut short by its limit,
/// halves it, so that a shard with few due is claimed in larger groups.
const TARGET_BATCH: usize = 8;
/// How far ahead a sparse shard's claim may reach at most, as a multiple of the
/// scheduler's own look-ahead. What a claim takes is in flight, held by the scheduler
/// until due: it no longer lists as retrying, and a cancel no longer stops its attempt,
/// so this stays a small multiple.
const MAX_STRETCH: u32 = 4;
/// How often an instance also asks one shard in turn, whatever it knows of it: that is
/// what bounds the cost of a lost wake-up (an idle instance asks one per idle sleep).
const TURN_EVERY: Duration = Duration::from_millis(250);

struct Shard {
    /// When it next has work; `None` when it has none that this instance knows of.
    next: Option<Instant>,
    /// Bumped by every wake-up, so that a claim's older reply cannot hide a newer one.
    wakes: u64,
    /// How much further ahead than the scheduler's look-ahead this shard is claimed.
    stretch: u32,
    /// Claims of it that failed in a row.
    failures: u32,
}

impl Shard {
    fn wake(&mut self) {
        self.wake_at(Instant::now());
    }

    fn wake_at(&mut self, at: Instant) {
        self.next = Some(self.next.map_or(at, |next| next.min(at)));
        self.wakes += 1;
    }
}

struct Clock {
    shards: Vec<Shard>,
    /// The shards this instance owns, until when; `None` (not known, or not renewed in
    /// time): every shard.
    owned: Option<(Vec<bool>, Instant)>,
    /// The shard asked next whatever is known of it (modulo the number of shards).
    turn: usize,
    last_turn: Instant,
}

impl Clock {
    /// Whether this instance claims `shard`: it owns it, or its ownership is not known.
    fn claims(&self, shard: usize, now: Instant) -> bool {
        match &self.owned {
            Some((owned, until)) if now < *until => owned[shard],
            _ => true,
        }
    }
}

pub struct ShardClock(Mutex<Clock>);

/// A shard to claim from, how far ahead, and how many wake-ups it had had when it was
/// chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub shard: usize,
    pub ahead: Duration,
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
                stretch: 1,
                failures: 0,
            })
            .collect();
        Self(Mutex::new(Clock {
            shards,
            owned: None,
            turn: 0,
            last_turn: now,
        }))
    }

    /// A shard has work now.
    pub fn wake(&self, shard: usize) {
        self.wake_in(shard, Duration::ZERO);
    }

    /// A shard has work in `due_in` (or earlier, if this instance knows of some). True
    /// when this instance claims that shard, so that its scheduler should look again;
    /// another's shard is remembered for when this instance gains it or stops knowing
    /// what it owns.
    pub fn wake_in(&self, shard: usize, due_in: Duration) -> bool {
        let mut clock = self.lock();
        let now = Instant::now();
        let Some(s) = clock.shards.get_mut(shard) else {
            return false;
        };
        s.wake_at(now + due_in);
        clock.claims(shard, now)
    }

    /// This instance owns `shards` (and no other) until `until`. The shards it did not
    /// own before are due now, since their work was another's; true when there are any.
    pub fn own(&self, shards: &[usize], until: Instant) -> bool {
        let mut clock = self.lock();
        let now = Instant::now();
        let n = clock.shards.len();
        let mut owned = vec![false; n];
        let mut gained = false;
        for &shard in shards.iter().filter(|&&s| s < n) {
            owned[shard] = true;
            if !clock.claims(shard, now) {
                clock.shards[shard].wake();
                gained = true;
            }
        }
        clock.owned = Some((owned, until));
        gained
    }

    /// Every shard may have work now (after a gap in the wake-ups).
    pub fn wake_all(&self) {
        self.lock().shards.iter_mut().for_each(Shard::wake);
    }

    /// The shards to claim from now, of those this instance claims: those with work due
    /// within `ahead`, each to be claimed as far ahead as its own stretch says, then one
    /// more in turn when `TURN_EVERY` has passed since the last.
    pub fn to_ask(&self, ahead: Duration) -> Vec<Ask> {
        let now = Instant::now();
        let horizon = now + ahead;
        let mut clock = self.lock();
        let n = clock.shards.len();
        let mine: Vec<usize> = (0..n)
            .map(|i| (clock.turn + i) % n)
            .filter(|&i| clock.claims(i, now))
            .collect();
        let ask = |shard: usize, s: &Shard| Ask {
            shard,
            ahead: ahead * s.stretch,
            wakes: s.wakes,
        };
        let mut asks: Vec<Ask> = mine
            .iter()
            .filter(|&&i| clock.shards[i].next.is_some_and(|at| at <= horizon))
            .map(|&i| ask(i, &clock.shards[i]))
            .collect();
        if now >= clock.last_turn + TURN_EVERY {
            if let Some(&next) = mine.first() {
                if !asks.iter().any(|a| a.shard == next) {
                    asks.push(ask(next, &clock.shards[next]));
                }
                clock.turn = next + 1;
            }
            clock.last_turn = now;
        }
        asks
    }

    /// What a claim of `ask` learnt: it took `took` notifications (`limited`: as many as
    /// it was allowed), and the shard next has work in `next` (`None`: none). A wake-up
    /// since the shard was chosen wins. Returns how many claims of it had failed in a row
    /// before this one.
    pub fn claimed(&self, ask: Ask, took: usize, limited: bool, next: Option<Duration>) -> u32 {
        let mut clock = self.lock();
        let s = &mut clock.shards[ask.shard];
        let failures = std::mem::take(&mut s.failures);
        if limited || took >= 4 * TARGET_BATCH {
            s.stretch = (s.stretch / 2).max(1);
        } else if took < TARGET_BATCH {
            s.stretch = (s.stretch * 2).min(MAX_STRETCH);
        }
        if s.wakes == ask.wakes {
            s.next = next.map(|d| Instant::now() + d);
        }
        failures
    }

    /// A claim of `ask` failed: the shard is asked again after a backoff that grows with
    /// its failures in a row (returned), or at its next wake-up (a write reached it).
    pub fn failed(&self, ask: Ask) -> u32 {
        let mut clock = self.lock();
        let s = &mut clock.shards[ask.shard];
        s.failures += 1;
        s.next = Some(Instant::now() + backoff(s.failures));
        s.failures
    }

    /// Whether this instance claims some shards and every one of them failed its last
    /// claim: until one is asked again, nothing says the store is back. An instance that
    /// owns none (others claim them all) has nothing failing.
    pub fn all_failing(&self) -> bool {
        let now = Instant::now();
        let clock = self.lock();
        let mut mine = (0..clock.shards.len())
            .filter(|&i| clock.claims(i, now))
            .peekable();
        mine.peek().is_some() && mine.all(|i| clock.shards[i].failures > 0)
    }

    /// How long until the earliest work known of in the shards this instance claims;
    /// zero when some is due.
    pub fn next_wake(&self) -> Option<Duration> {
        let now = Instant::now();
        let clock = self.lock();
        (0..clock.shards.len())
            .filter(|&i| clock.claims(i, now))
            .filter_map(|i| clock.shards[i].next)
            .min()
            .map(|at| at.saturating_duration_since(now))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(asks: &[Ask]) -> Vec<usize> {
        asks.iter().map(|a| a.shard).collect()
    }

    fn claimed_none(clock: &ShardClock, asks: Vec<Ask>) {
        for ask in asks {
            clock.claimed(ask, 0, false, None);
        }
    }

    #[test]
    fn all_failing_until_one_shard_answers() {
        let clock = ShardClock::new(2);
        assert!(!clock.all_failing(), "nothing failed yet");
        let asks = clock.to_ask(Duration::ZERO);
        clock.failed(asks[0]);
        assert!(!clock.all_failing(), "one shard still answers");
        clock.failed(asks[1]);
        assert!(clock.all_failing());
        clock.claimed(asks[1], 0, false, None);
        assert!(!clock.all_failing(), "a shard answered again");
        clock.failed(asks[1]);
        clock.own(&[], Instant::now() + Duration::from_secs(60));
        assert!(!clock.all_failing(), "owning no shard is no failure");
    }

    #[test]
    fn asks_due_shards_and_one_in_turn_every_so_often() {
        let clock = ShardClock::new(4);
        let first = clock.to_ask(Duration::ZERO);
        assert_eq!(shards(&first), vec![0, 1, 2, 3], "all unknown, so all due");
        claimed_none(&clock, first);
        assert_eq!(clock.next_wake(), None);
        std::thread::sleep(TURN_EVERY);
        assert_eq!(
            shards(&clock.to_ask(Duration::ZERO)),
            vec![0],
            "one in turn"
        );
        assert!(clock.to_ask(Duration::ZERO).is_empty(), "not again at once");
        clock.wake(3);
        let ask = clock.to_ask(Duration::ZERO);
        assert_eq!(shards(&ask), vec![3]);
        clock.claimed(ask[0], 1, false, Some(Duration::from_secs(60)));
        assert!(clock.next_wake().unwrap() > Duration::from_secs(59));
        std::thread::sleep(TURN_EVERY);
        assert_eq!(
            shards(&clock.to_ask(Duration::ZERO)),
            vec![1],
            "the next in turn"
        );
    }

    #[test]
    fn a_wake_up_names_when_the_shard_is_due() {
        let clock = ShardClock::new(2);
        claimed_none(&clock, clock.to_ask(Duration::ZERO));
        clock.wake_in(1, Duration::from_millis(500));
        assert!(clock.to_ask(Duration::from_millis(40)).is_empty());
        let wake = clock.next_wake().unwrap();
        assert!(wake > Duration::from_millis(400) && wake <= Duration::from_millis(500));
        assert_eq!(shards(&clock.to_ask(Duration::from_millis(600))), vec![1]);
        clock.wake_in(1, Duration::from_secs(5));
        assert!(
            clock.next_wake().unwrap() <= Duration::from_millis(500),
            "the earlier stands"
        );
    }

    #[test]
    fn a_sparse_shard_is_claimed_further_ahead_and_a_busy_one_less() {
        let base = Duration::from_millis(40);
        let clock = ShardClock::new(1);
        let mut reaches = Vec::new();
        for _ in 0..4 {
            let ask = clock.to_ask(base)[0];
            reaches.push(ask.ahead.as_millis());
            clock.claimed(ask, 1, false, Some(Duration::ZERO));
        }
        assert_eq!(reaches, vec![40, 80, 160, 160]);
        let reach = |took: usize, limited: bool| {
            let ask = clock.to_ask(base)[0];
            clock.claimed(ask, took, limited, Some(Duration::ZERO));
            clock.to_ask(base)[0].ahead.as_millis()
        };
        assert_eq!(reach(50, true), 80, "cut short: less far");
        assert_eq!(reach(4 * TARGET_BATCH, false), 40, "plenty: less far");
        assert_eq!(reach(1, false), 80, "few: further");
        assert_eq!(reach(TARGET_BATCH, false), 80, "enough: as it was");
    }

    #[test]
    fn asks_only_the_shards_it_owns_while_it_owns_them() {
        let clock = ShardClock::new(4);
        claimed_none(&clock, clock.to_ask(Duration::ZERO));
        let until = Instant::now() + Duration::from_millis(600);
        assert!(
            !clock.own(&[1, 3], until),
            "it claimed every shard until now: nothing gained"
        );
        clock.wake_all();
        assert!(
            !clock.wake_in(2, Duration::ZERO),
            "another's shard: no need to look again"
        );
        assert!(clock.wake_in(3, Duration::ZERO), "its own");
        let asked = shards(&clock.to_ask(Duration::ZERO));
        assert_eq!(
            asked,
            vec![1, 3],
            "a wake-up of another's shard is not for it"
        );
        claimed_none(&clock, clock.to_ask(Duration::ZERO));
        assert!(clock.own(&[0, 1, 3], until), "shard 0 gained");
        assert_eq!(shards(&clock.to_ask(Duration::ZERO)), vec![0], "and due");
        claimed_none(&clock, clock.to_ask(Duration::ZERO));
        std::thread::sleep(TURN_EVERY);
        assert_eq!(
            shards(&clock.to_ask(Duration::ZERO)),
            vec![0],
            "its own in turn"
        );
        assert_eq!(clock.next_wake(), None, "shard 2's work is another's");
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(
            clock.next_wake(),
            Some(Duration::ZERO),
            "ownership not renewed: every shard again"
        );
        assert!(shards(&clock.to_ask(Duration::ZERO)).contains(&2));
    }

    #[test]
    fn waking_all_makes_every_shard_due() {
        let clock = ShardClock::new(3);
        claimed_none(&clock, clock.to_ask(Duration::ZERO));
        clock.wake_all();
        assert_eq!(shards(&clock.to_ask(Duration::ZERO)).len(), 3);
    }

    #[test]
    fn a_failing_shard_waits_its_backoff_while_the_others_are_asked() {
        let clock = ShardClock::new(2);
        let asks = clock.to_ask(Duration::ZERO);
        assert_eq!(clock.failed(asks[0]), 1);
        assert_eq!(clock.claimed(asks[1], 0, false, Some(Duration::ZERO)), 0);
        assert_eq!(
            shards(&clock.to_ask(Duration::ZERO)),
            vec![1],
            "0 backs off"
        );
        assert_eq!(clock.next_wake(), Some(Duration::ZERO), "shard 1 is due");
        std::thread::sleep(backoff(1) * 2);
        let again = clock.to_ask(Duration::ZERO);
        assert!(shards(&again).contains(&0), "0 again after its backoff");
        let ask0 = again.into_iter().find(|a| a.shard == 0).unwrap();
        assert_eq!(clock.failed(ask0), 2);
        assert_eq!(
            clock.claimed(ask0, 1, false, None),
            2,
            "failures it recovered from"
        );
        assert_eq!(clock.failed(ask0), 1, "counted afresh");
    }

    #[test]
    fn a_wake_up_during_a_claim_is_not_lost() {
        let clock = ShardClock::new(2);
        let ask = clock.to_ask(Duration::ZERO)[0];
        clock.wake(ask.shard);
        clock.claimed(ask, 0, false, None);
        assert_eq!(clock.next_wake(), Some(Duration::ZERO));
    }
}
