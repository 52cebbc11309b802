//! Rate limits per `rate_key` (governor, keyed): the default quota for every key without
//! its own, and per-key quotas. A key can also be paused until a time a receiver asked
//! for with `Retry-After`. A check never waits: it says how long until the key may send.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, RateLimiter};

use super::Quotas;

/// How many checks between two clean-ups of the keyed limiter's idle keys.
const CLEANUP_EVERY: u64 = 10_000;

pub struct RateLimits {
    default: Option<DefaultKeyedRateLimiter<String>>,
    per_key: HashMap<String, Option<DefaultDirectRateLimiter>>,
    paused: Mutex<HashMap<String, Instant>>,
    clock: DefaultClock,
    checks: AtomicU64,
}

impl RateLimits {
    pub fn new(quotas: &Quotas) -> Self {
        Self {
            default: quotas.default.to_governor().map(RateLimiter::keyed),
            per_key: quotas
                .per_key
                .iter()
                .map(|(k, q)| (k.clone(), q.to_governor().map(RateLimiter::direct)))
                .collect(),
            paused: Mutex::new(HashMap::new()),
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
        }
    }

    /// Takes one delivery from `key`'s quota, or says how long until one is free.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        if let Some(wait) = self.paused_for(key) {
            return Err(wait);
        }
        let outcome = match self.per_key.get(key) {
            Some(Some(limiter)) => limiter.check(),
            Some(None) => Ok(()),
            None => match &self.default {
                Some(limiter) => {
                    self.clean_up_now_and_then(limiter);
                    limiter.check_key(&key.to_string())
                }
                None => Ok(()),
            },
        };
        outcome.map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Holds every delivery of `key` back for `wait` (a receiver's `Retry-After`).
    pub fn pause(&self, key: &str, wait: Duration) {
        let until = Instant::now() + wait;
        let mut paused = self.paused.lock().expect("pause map");
        let entry = paused.entry(key.to_string()).or_insert(until);
        *entry = (*entry).max(until);
    }

    fn paused_for(&self, key: &str) -> Option<Duration> {
        let mut paused = self.paused.lock().expect("pause map");
        let until = *paused.get(key)?;
        let now = Instant::now();
        if until > now {
            return Some(until - now);
        }
        paused.remove(key);
        None
    }

    fn clean_up_now_and_then(&self, limiter: &DefaultKeyedRateLimiter<String>) {
        if self.checks.fetch_add(1, Ordering::Relaxed) % CLEANUP_EVERY == CLEANUP_EVERY - 1 {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn limits(default: &str, per_key: &[(&str, &str)]) -> RateLimits {
        RateLimits::new(&Quotas {
            default: default.parse().unwrap(),
            per_key: per_key
                .iter()
                .map(|(k, q)| (k.to_string(), q.parse().unwrap()))
                .collect::<BTreeMap<_, _>>(),
        })
    }

    #[test]
    fn a_key_is_spaced_evenly_while_others_go_on() {
        let l = limits("2/s", &[("vip", "unlimited"), ("slow", "1/m")]);
        assert!(l.check("a").is_ok());
        let wait = l.check("a").unwrap_err();
        assert!(wait > Duration::from_millis(400) && wait <= Duration::from_millis(500));
        assert!(l.check("b").is_ok(), "keys are independent");
        assert!((0..100).all(|_| l.check("vip").is_ok()));
        assert!(l.check("slow").is_ok());
        assert!(l.check("slow").unwrap_err() > Duration::from_secs(50));
    }

    #[test]
    fn a_pause_holds_a_key_back() {
        let l = limits("unlimited", &[]);
        l.pause("a", Duration::from_secs(5));
        assert!(l.check("a").unwrap_err() > Duration::from_secs(4));
        assert!(l.check("b").is_ok());
    }
}
