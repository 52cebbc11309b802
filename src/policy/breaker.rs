//! A circuit breaker per host: after `threshold` consecutive failures the circuit opens
//! and the host's attempts fail at once, without traffic; after `cooldown` one probe is
//! let through, and its success closes the circuit (its failure opens it again).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Breaker {
    /// 0: never opens.
    threshold: u32,
    cooldown: Duration,
    hosts: Mutex<HashMap<String, Circuit>>,
}

/// A host with recent failures; hosts without any have no entry.
#[derive(Default)]
struct Circuit {
    failures: u32,
    open_until: Option<Instant>,
    /// When the probe in flight was let through.
    probing_since: Option<Instant>,
}

/// Whether an attempt may go to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Closed,
    /// The circuit is half open and this attempt is its probe.
    Probe,
    Open,
}

impl Breaker {
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        Self {
            threshold,
            cooldown,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    pub fn check(&self, host: &str) -> Verdict {
        let mut hosts = self.hosts.lock().expect("breaker");
        let Some(c) = hosts.get_mut(host) else {
            return Verdict::Closed;
        };
        let now = Instant::now();
        match c.open_until {
            None => Verdict::Closed,
            Some(until) if now < until => Verdict::Open,
            // A probe that never reported (its attempt was abandoned) is replaced.
            Some(_) if c.probing_since.is_some_and(|t| now - t < self.cooldown) => Verdict::Open,
            Some(_) => {
                c.probing_since = Some(now);
                Verdict::Probe
            }
        }
    }

    /// The hosts whose circuit is open (or half open), sorted.
    pub fn open_hosts(&self) -> Vec<String> {
        let hosts = self.hosts.lock().expect("breaker");
        let mut open: Vec<String> = hosts
            .iter()
            .filter(|(_, c)| c.open_until.is_some())
            .map(|(h, _)| h.clone())
            .collect();
        open.sort();
        open
    }

    /// Records how an attempt that reached the host went. `true` when this opened the
    /// circuit.
    pub fn record(&self, host: &str, healthy: bool) -> bool {
        if self.threshold == 0 {
            return false;
        }
        let mut hosts = self.hosts.lock().expect("breaker");
        if healthy {
            hosts.remove(host);
            return false;
        }
        let c = hosts.entry(host.to_string()).or_default();
        c.failures += 1;
        let reopen = c.probing_since.take().is_some();
        if reopen || (c.open_until.is_none() && c.failures >= self.threshold) {
            c.open_until = Some(Instant::now() + self.cooldown);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_probes_after_the_cooldown_and_closes() {
        let b = Breaker::new(3, Duration::from_millis(50));
        assert!(!b.record("h", false) && !b.record("h", false));
        assert_eq!(b.check("h"), Verdict::Closed);
        assert!(b.record("h", false), "third failure opens");
        assert_eq!(b.check("h"), Verdict::Open);
        assert_eq!(b.open_hosts(), vec!["h".to_string()]);
        assert_eq!(b.check("other"), Verdict::Closed);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(b.check("h"), Verdict::Probe);
        assert_eq!(b.check("h"), Verdict::Open, "one probe at a time");
        assert!(b.record("h", false), "a failed probe opens it again");
        assert_eq!(b.check("h"), Verdict::Open);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(b.check("h"), Verdict::Probe);
        b.record("h", true);
        assert_eq!(b.check("h"), Verdict::Closed);
        assert!(b.open_hosts().is_empty());
    }

    #[test]
    fn a_threshold_of_zero_never_opens() {
        let b = Breaker::new(0, Duration::from_secs(1));
        for _ in 0..100 {
            b.record("h", false);
        }
        assert_eq!(b.check("h"), Verdict::Closed);
    }
}
