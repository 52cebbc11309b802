//! A circuit breaker per endpoint of a tenant (`Target::circuit`: the tenant, then
//! scheme, host, port and path; two merchants on one host are two endpoints, and two
//! tenants' notifications to one endpoint are two circuits): after `threshold` consecutive failures the circuit opens and
//! the endpoint's notifications are held back, without traffic (`Open` says how long
//! until a probe may go); after `cooldown` one probe is let through, and its success
//! closes the circuit (its failure opens it again). The policy never asks about a
//! notification's last attempt (`Policy::admit`): that one is always a real request.
//!
//! Instances share what they learn: each failure, and each success that ends a run of
//! failures, is published through the store (`FleetMessaging::publish_health`), and `learn`
//! counts it here as if it were this instance's own. So a dead endpoint costs the fleet
//! `threshold` requests, and every instance opens and closes with the others.
//!
//! An endpoint that saw no failure for `IDLE_COOLDOWNS` cooldowns is forgotten (its next
//! attempt goes as to a new one, as a probe would), so that endpoints never called again
//! do not stay in memory, or open in `/metrics`, for good.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Cooldowns without a failure after which an endpoint is forgotten.
const IDLE_COOLDOWNS: u32 = 10;

pub struct Breaker {
    /// 0: never opens.
    threshold: u32,
    cooldown: Duration,
    endpoints: Mutex<Endpoints>,
}

/// The endpoints with recent failures, and when the idle ones were last swept out.
struct Endpoints {
    circuits: HashMap<String, Circuit>,
    swept: Instant,
}

/// An endpoint with recent failures; endpoints without any have no entry.
struct Circuit {
    failures: u32,
    last_failure: Instant,
    open_until: Option<Instant>,
    /// When the probe in flight was let through.
    probing_since: Option<Instant>,
}

/// Whether an attempt may go to the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    Closed,
    /// The circuit is half open and this attempt is its probe.
    Probe,
    /// No attempt may go: the next probe may in `probe_in` (the cooldown's end, or the
    /// end of the cooldown since the probe in flight went, which replaces it if it never
    /// reports).
    Open {
        probe_in: Duration,
    },
}

/// What recording an attempt changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recorded {
    /// This attempt opened the circuit.
    pub opened: bool,
    /// The other instances should learn of it (a failure, or the success that ended a
    /// run of failures): `Some(healthy)`.
    pub tell: Option<bool>,
}

impl Breaker {
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        Self {
            threshold,
            cooldown,
            endpoints: Mutex::new(Endpoints {
                circuits: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    /// Counts a failure at `endpoint`; first, at most once per idle period, forgets the
    /// endpoints idle that long.
    fn failed<'e>(&self, endpoints: &'e mut Endpoints, endpoint: &str) -> &'e mut Circuit {
        let now = Instant::now();
        let idle = self.cooldown * IDLE_COOLDOWNS;
        if now - endpoints.swept >= idle {
            endpoints
                .circuits
                .retain(|_, c| now - c.last_failure < idle);
            endpoints.swept = now;
        }
        let c = endpoints
            .circuits
            .entry(endpoint.to_string())
            .or_insert_with(|| Circuit {
                failures: 0,
                last_failure: now,
                open_until: None,
                probing_since: None,
            });
        c.failures += 1;
        c.last_failure = now;
        c
    }

    pub fn check(&self, endpoint: &str) -> CircuitState {
        let mut endpoints = self.endpoints.lock().expect("breaker");
        let Some(c) = endpoints.circuits.get_mut(endpoint) else {
            return CircuitState::Closed;
        };
        let now = Instant::now();
        match c.open_until {
            None => CircuitState::Closed,
            Some(until) if now < until => CircuitState::Open {
                probe_in: until - now,
            },
            // A probe that never reported (its attempt was abandoned) is replaced.
            Some(_) if c.probing_since.is_some_and(|t| now - t < self.cooldown) => {
                let since = c.probing_since.map_or(Duration::ZERO, |t| now - t);
                CircuitState::Open {
                    probe_in: self.cooldown - since,
                }
            }
            Some(_) => {
                c.probing_since = Some(now);
                CircuitState::Probe
            }
        }
    }

    /// How long a circuit stays open before a probe.
    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// The endpoints whose circuit is open (or half open), sorted.
    pub fn open_endpoints(&self) -> Vec<String> {
        let endpoints = self.endpoints.lock().expect("breaker");
        let mut open: Vec<String> = endpoints
            .circuits
            .iter()
            .filter(|(_, c)| c.open_until.is_some())
            .map(|(e, _)| e.clone())
            .collect();
        open.sort();
        open
    }

    /// Records how an attempt of this instance that reached the endpoint went.
    pub fn record(&self, endpoint: &str, healthy: bool) -> Recorded {
        if self.threshold == 0 {
            return Recorded::default();
        }
        let mut endpoints = self.endpoints.lock().expect("breaker");
        if healthy {
            let ended_failures = endpoints.circuits.remove(endpoint).is_some();
            return Recorded {
                opened: false,
                tell: ended_failures.then_some(true),
            };
        }
        let c = self.failed(&mut endpoints, endpoint);
        let reopen = c.probing_since.take().is_some();
        let opened = reopen || (c.open_until.is_none() && c.failures >= self.threshold);
        if opened {
            c.open_until = Some(Instant::now() + self.cooldown);
        }
        Recorded {
            opened,
            tell: Some(false),
        }
    }

    /// Counts what another instance told of an endpoint: a success closes its circuit; a
    /// failure counts towards opening it. An open circuit keeps its own cooldown (each
    /// instance probes once per cooldown): were the others' failures to restart it, their
    /// last attempts, which go beside the probe, would hold this instance's back for good.
    /// `true` when this opened the circuit.
    pub fn learn(&self, endpoint: &str, healthy: bool) -> bool {
        if self.threshold == 0 {
            return false;
        }
        let mut endpoints = self.endpoints.lock().expect("breaker");
        if healthy {
            endpoints.circuits.remove(endpoint);
            return false;
        }
        let c = self.failed(&mut endpoints, endpoint);
        let opened = c.open_until.is_none() && c.failures >= self.threshold;
        if opened {
            c.open_until = Some(Instant::now() + self.cooldown);
        }
        opened
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_probes_after_the_cooldown_and_closes() {
        let b = Breaker::new(3, Duration::from_millis(50));
        assert!(!b.record("e", false).opened && !b.record("e", false).opened);
        assert_eq!(b.check("e"), CircuitState::Closed);
        assert!(b.record("e", false).opened, "third failure opens");
        assert!(
            matches!(b.check("e"), CircuitState::Open { probe_in } if probe_in <= Duration::from_millis(50)),
            "a probe may go at the cooldown's end"
        );
        assert_eq!(b.open_endpoints(), vec!["e".to_string()]);
        assert_eq!(b.check("other"), CircuitState::Closed);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(b.check("e"), CircuitState::Probe);
        assert!(
            matches!(b.check("e"), CircuitState::Open { probe_in } if probe_in > Duration::from_millis(40)),
            "one probe at a time: the next only when it could be replaced"
        );
        assert!(b.record("e", false).opened, "a failed probe opens it again");
        assert!(matches!(b.check("e"), CircuitState::Open { .. }));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(b.check("e"), CircuitState::Probe);
        assert_eq!(
            b.record("e", true).tell,
            Some(true),
            "the others learn it closed"
        );
        assert_eq!(b.check("e"), CircuitState::Closed);
        assert!(b.open_endpoints().is_empty());
        assert_eq!(
            b.record("e", true).tell,
            None,
            "a success alone is not news"
        );
    }

    #[test]
    fn failures_told_by_other_instances_count_as_ones_own() {
        let b = Breaker::new(3, Duration::from_secs(60));
        assert!(!b.learn("e", false));
        assert!(!b.record("e", false).opened);
        assert!(
            b.learn("e", false),
            "the third failure, wherever it happened, opens"
        );
        assert!(matches!(b.check("e"), CircuitState::Open { .. }));
        b.learn("e", true);
        assert_eq!(
            b.check("e"),
            CircuitState::Closed,
            "a probe elsewhere closed it"
        );
    }

    #[test]
    fn endpoints_idle_for_ten_cooldowns_are_forgotten() {
        let b = Breaker::new(3, Duration::from_millis(10));
        b.record("failing", false);
        b.record("failing", false);
        for _ in 0..3 {
            b.learn("gone", false);
        }
        assert_eq!(b.open_endpoints(), vec!["gone".to_string()]);
        std::thread::sleep(Duration::from_millis(150));
        assert!(
            !b.record("failing", false).opened,
            "its two failures 150 ms ago were forgotten"
        );
        assert!(b.open_endpoints().is_empty(), "nor is `gone` open for good");
        assert_eq!(b.check("gone"), CircuitState::Closed);
    }

    #[test]
    fn a_threshold_of_zero_never_opens() {
        let b = Breaker::new(0, Duration::from_secs(1));
        for _ in 0..100 {
            b.record("e", false);
            b.learn("e", false);
        }
        assert_eq!(b.check("e"), CircuitState::Closed);
    }
}
