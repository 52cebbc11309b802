//! Reservations in a rate key's quota, kept by the store so that every instance shares
//! them: the generic cell rate algorithm (GCRA). A key's state is its theoretical arrival
//! time (`tat`: when its quota is next free, all of it used evenly) and the end of any
//! `Retry-After` pause. A reservation of `count` sends at once takes the next `count`
//! free send times, `interval` apart, `tolerance` early at most (the burst); it moves
//! `tat` on by `count × interval`. Times are µs on the store's clock.
//!
//! The embedded store applies `reserve` in its transaction; `lua/reserve.lua` is the
//! same arithmetic on Redis (it must stay in the script to reserve in one atomic step),
//! and `tests/operations/differential.rs` holds the two to the same send times.

use std::time::Duration;

use super::Quota;

/// How much wider than the quota send times are spaced: 1% of a second is 10 ms, more
/// than a send's lateness on a loaded instance.
pub const SPACING_MARGIN_PERCENT: i64 = 1;

/// A rate key's state in the store. A state whose times have both passed is the same as
/// none, so the store may forget it then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateState {
    pub tat_us: i64,
    pub paused_until_us: i64,
}

impl RateState {
    /// Until when the state says more than no state would.
    pub fn matters_until(&self) -> i64 {
        self.tat_us.max(self.paused_until_us)
    }
}

/// What one call asks of one rate key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateAsk {
    pub key: String,
    /// µs between two sends at the quota (0: unlimited).
    pub interval_us: i64,
    /// How much earlier than evenly spaced a send may go: the burst.
    pub tolerance_us: i64,
    /// Send times to reserve (0 with `pause_us` only pauses).
    pub count: u32,
    /// No send time before this (the latest due time of the notifications asking).
    pub not_before_us: i64,
    /// Pause the key for this long from now first (a receiver's `Retry-After`).
    pub pause_us: i64,
}

impl RateAsk {
    /// An ask for `count` sends under `quota`, of which `burst` may go at once. Send
    /// times are spaced `SPACING_MARGIN_PERCENT` wider than the quota: a send a few ms
    /// late beside one on time must not put one more than the quota into a second, as a
    /// receiver counting over any second would see it.
    pub fn new(key: &str, quota: Quota, burst: u32, count: u32, not_before_us: i64) -> Self {
        let exact = quota.interval_us();
        let interval_us = exact + (exact * SPACING_MARGIN_PERCENT + 99) / 100;
        Self {
            key: key.to_string(),
            interval_us,
            tolerance_us: interval_us * i64::from(burst.max(1) - 1),
            count,
            not_before_us: if interval_us == 0 { 0 } else { not_before_us },
            pause_us: 0,
        }
    }

    /// An ask that only pauses `key` for `wait`.
    pub fn pause(key: &str, wait: Duration) -> Self {
        Self {
            key: key.to_string(),
            interval_us: 0,
            tolerance_us: 0,
            count: 0,
            not_before_us: 0,
            pause_us: wait.as_micros() as i64,
        }
    }
}

/// The send times one call reserved in one key: the `i`-th is `SendTimes::at(i)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendTimes {
    /// The store's clock when it reserved them.
    pub now_us: i64,
    /// No send before this: now, the end of a pause, or the asked `not_before`.
    pub start_us: i64,
    /// The key's theoretical arrival time before this reservation (at least `start_us`).
    pub tat_us: i64,
    pub interval_us: i64,
    pub tolerance_us: i64,
}

impl SendTimes {
    /// The `i`-th reserved send time.
    pub fn at(&self, i: u32) -> i64 {
        let evenly = self.tat_us + i64::from(i) * self.interval_us;
        self.start_us.max(evenly - self.tolerance_us)
    }

    /// How long after the reservation the `i`-th send time comes.
    pub fn wait(&self, i: u32) -> Duration {
        Duration::from_micros((self.at(i) - self.now_us).max(0) as u64)
    }
}

/// Reserves `ask.count` send times at `now_us` (after any pause it asks for): the new
/// state and the send times.
pub fn reserve(state: RateState, now_us: i64, ask: &RateAsk) -> (RateState, SendTimes) {
    let mut paused_until_us = state.paused_until_us;
    if ask.pause_us > 0 {
        paused_until_us = paused_until_us.max(now_us + ask.pause_us);
    }
    let start_us = now_us.max(paused_until_us).max(ask.not_before_us);
    let tat_us = state.tat_us.max(start_us);
    let new = RateState {
        tat_us: tat_us + i64::from(ask.count) * ask.interval_us,
        paused_until_us,
    };
    let times = SendTimes {
        now_us,
        start_us,
        tat_us,
        interval_us: ask.interval_us,
        tolerance_us: ask.tolerance_us,
    };
    (new, times)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(quota: &str, burst: u32, count: u32) -> RateAsk {
        RateAsk::new("k", quota.parse().unwrap(), burst, count, 0)
    }

    #[test]
    fn evenly_spaced_by_default_and_continued_by_the_next_call() {
        let (state, slots) = reserve(RateState::default(), 1_000, &ask("10/s", 1, 3));
        let times: Vec<i64> = (0..3).map(|i| slots.at(i)).collect();
        assert_eq!(
            times,
            [1_000, 102_000, 203_000],
            "100 ms apart, and 1% more"
        );
        let (_, next) = reserve(state, 50_000, &ask("10/s", 1, 1));
        assert_eq!(next.at(0), 304_000, "the next call queues behind the first");
        assert_eq!(next.wait(0), Duration::from_micros(254_000));
    }

    #[test]
    fn a_burst_goes_at_once_then_the_rest_is_spaced() {
        let (_, slots) = reserve(RateState::default(), 0, &ask("10/s", 3, 5));
        let times: Vec<i64> = (0..5).map(|i| slots.at(i)).collect();
        assert_eq!(times, [0, 0, 0, 101_000, 202_000]);
    }

    #[test]
    fn a_pause_holds_every_send_back_and_a_quiet_key_starts_afresh() {
        let pause = RateAsk::pause("k", Duration::from_secs(2));
        let (state, _) = reserve(RateState::default(), 0, &pause);
        let (_, slots) = reserve(state, 1_000, &ask("unlimited", 1, 2));
        assert_eq!((slots.at(0), slots.at(1)), (2_000_000, 2_000_000));
        let (state, _) = reserve(RateState::default(), 0, &ask("10/s", 1, 1));
        assert_eq!(state.matters_until(), 101_000);
        let (_, later) = reserve(state, 5_000_000, &ask("10/s", 1, 1));
        assert_eq!(later.at(0), 5_000_000);
    }

    #[test]
    fn not_before_moves_a_limited_key_only() {
        let q: Quota = "10/s".parse().unwrap();
        let (_, slots) = reserve(RateState::default(), 0, &RateAsk::new("k", q, 1, 1, 30_000));
        assert_eq!(slots.at(0), 30_000);
        let free = RateAsk::new("k", Quota::Unlimited, 1, 1, 30_000);
        assert_eq!(reserve(RateState::default(), 0, &free).1.at(0), 0);
    }
}
