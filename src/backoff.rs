//! How long a worker waits before trying a store that did not answer again, and which of
//! its failures in a row it logs: one rule for the claim loop, the settler, the store's
//! claims per shard, its wake-up subscription and its askings of Redis Sentinel.

use std::time::Duration;

/// Exponential from 50 ms to 5 s by the number of `failures` in a row, with ±25% jitter
/// so that instances do not move together.
pub fn backoff(failures: u32) -> Duration {
    let base = 50u64.saturating_mul(1 << failures.min(7)).min(5_000);
    let jitter = base / 4;
    Duration::from_millis(base - jitter + fastrand::u64(0..=2 * jitter))
}

/// Whether the `failures`-th failure in a row is logged: the first and every 20th after,
/// so that a store down for an hour says so without a line every few seconds.
pub fn worth_logging(failures: u32) -> bool {
    failures == 1 || failures.is_multiple_of(20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_and_every_twentieth_are_logged() {
        let logged: Vec<u32> = (1..=60).filter(|&f| worth_logging(f)).collect();
        assert_eq!(logged, vec![1, 20, 40, 60]);
    }

    #[test]
    fn grows_to_five_seconds_and_no_further() {
        let ms = |f| backoff(f).as_millis();
        assert!((37..=63).contains(&ms(0)), "{}", ms(0));
        assert!((75..=125).contains(&ms(1)), "{}", ms(1));
        for f in [7, 8, 30, u32::MAX] {
            assert!((3_750..=6_250).contains(&ms(f)), "{f}: {}", ms(f));
        }
    }
}
