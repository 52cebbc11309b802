//! A circuit breaker per endpoint path of a tenant (`Target::circuit`: the tenant, then
//! scheme, host, port and path; two merchants on one host are two circuits, and two
//! tenants' notifications to one path are two circuits): after `threshold` consecutive
//! failures the circuit opens and the path's notifications are held back, without traffic
//! (`Open` says how long until a probe may go); after `cooldown` one probe is let through,
//! and its success closes the circuit (its failure opens it again). The policy never asks
//! about a notification's last attempt (`Policy::admit`): that one is always a real
//! request.
//!
//! The circuits of one endpoint (a tenant's origin: `endpoint_of`) are one hold with its
//! pause: a resume, an operator's attempt now or a success at any of its paths lets its
//! open circuits probe at once (`nudge`; a success does so at most once per cooldown, so
//! that a healthy path beside a dead one does not send the dead one a probe per success).
//! The breaker remembers when each endpoint with an open circuit last answered 2xx
//! (`answered_since`), so that a notification is never dead-lettered for a circuit while
//! its endpoint answers.
//!
//! Instances share what they learn: each failure, and each success that ends a run of
//! failures or answers for an endpoint with an open circuit, is published through the
//! store (`FleetMessaging::publish_health`), and `learn` counts it here as if it were this
//! instance's own. So a dead endpoint costs the fleet `threshold` requests, and every
//! instance opens and closes with the others. What this instance's own attempts change is
//! also kept in the endpoint's record (`EndpointTally::circuits`), from which a restarted
//! instance takes an open circuit back (`restore`) rather than spending a tier per
//! notification to learn it again.
//!
//! An endpoint that saw no failure for `IDLE_COOLDOWNS` cooldowns is forgotten (its next
//! attempt goes as to a new one, as a probe would), so that endpoints never called again
//! do not stay in memory, or open in `/metrics`, for good.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::now_ms;
use crate::domain::{Endpoint, Tenant};

/// Cooldowns without a failure after which an endpoint is forgotten.
const IDLE_COOLDOWNS: u32 = 10;

/// How often at most this instance tells the fleet that an endpoint with an open circuit
/// answered at another of its paths.
const TELL_ANSWERED_EVERY: Duration = Duration::from_secs(1);

pub struct Breaker {
    /// 0: never opens.
    threshold: u32,
    cooldown: Duration,
    endpoints: Mutex<Endpoints>,
}

/// The circuits with recent failures, what their endpoints answered, and when the idle
/// ones were last swept out.
struct Endpoints {
    circuits: HashMap<String, Circuit>,
    /// By endpoint (`endpoint_of`): when it last answered 2xx while one of its circuits
    /// was open.
    answered: HashMap<String, Answered>,
    /// The circuits whose state was read from the store since this instance started, or
    /// that closed here since.
    restored: HashMap<String, Instant>,
    swept: Instant,
}

impl Endpoints {
    /// `circuit` closed by a success: its entry, if it had one. Its state is known from
    /// then on, so that a record not yet written since (it still says open) is not read
    /// back over it (`Breaker::restore`).
    fn closed(&mut self, circuit: &str) -> Option<Circuit> {
        let ended = self.circuits.remove(circuit);
        if ended.is_some() {
            self.restored.insert(circuit.to_string(), Instant::now());
        }
        ended
    }
}

/// An endpoint's last 2xx answer, and when this instance last told the fleet of one.
struct Answered {
    at_ms: i64,
    seen: Instant,
    told: Option<Instant>,
}

/// A circuit with recent failures; circuits without any have no entry.
struct Circuit {
    failures: u32,
    last_failure: Instant,
    open_until: Option<Instant>,
    /// When the probe in flight was let through.
    probing_since: Option<Instant>,
    /// When it opened (wall clock, ms), kept through failed probes.
    opened_at: Option<i64>,
    /// When a success at another path of its endpoint last let it probe at once.
    nudged: Option<Instant>,
}

impl Circuit {
    fn new(now: Instant) -> Self {
        Self {
            failures: 0,
            last_failure: now,
            open_until: None,
            probing_since: None,
            opened_at: None,
            nudged: None,
        }
    }

    /// Lets its next probe go at once, if it is open and none is in flight; whether it
    /// did.
    fn probe_at_once(&mut self, now: Instant) -> bool {
        let waiting = self.open_until.is_some_and(|until| until > now);
        let nudged = waiting && self.probing_since.is_none();
        if nudged {
            self.open_until = Some(now);
        }
        nudged
    }
}

/// Whether an attempt may go to the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    Closed,
    /// The circuit is half open and this attempt is its probe.
    Probe,
    /// No attempt may go: the next probe may in `probe_in` (the cooldown's end, or the
    /// end of the cooldown since the probe in flight went, which replaces it if it never
    /// reports). `probing`: a probe is in flight, whose outcome is not known yet.
    Open {
        probe_in: Duration,
        probing: bool,
    },
}

/// An open circuit as the endpoint's record keeps it: since when (wall clock, ms), and
/// when its next probe may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenCircuit {
    pub since: i64,
    pub probe_at: i64,
}

/// How a circuit changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitChange {
    /// It opened.
    Opened(OpenCircuit),
    /// Its probe failed: open again, until a later probe.
    Reopened(OpenCircuit),
    /// A request succeeded: closed.
    Closed,
}

/// What recording an attempt changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recorded {
    pub change: Option<CircuitChange>,
    /// The other instances should learn of it (a failure, the success that ended a run
    /// of failures, or one at an endpoint with an open circuit): `Some(healthy)`.
    pub tell: Option<bool>,
}

/// The endpoint (a tenant's origin) a circuit belongs to, as a circuit's key starts: its
/// key up to the path.
pub fn endpoint_of(circuit: &str) -> &str {
    let after_scheme = circuit.find("://").map_or(0, |i| i + 3);
    match circuit[after_scheme..].find('/') {
        Some(i) => &circuit[..after_scheme + i],
        None => circuit,
    }
}

/// The endpoint a circuit belongs to, read off its key (`<tenant> <url>`).
pub fn circuit_endpoint(circuit: &str) -> Option<Endpoint> {
    let (tenant, url) = circuit.split_once(' ')?;
    Endpoint::of_text(&Tenant::parse(tenant, "tenant").ok()?, url)
}

impl Breaker {
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        Self {
            threshold,
            cooldown,
            endpoints: Mutex::new(Endpoints {
                circuits: HashMap::new(),
                answered: HashMap::new(),
                restored: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Endpoints> {
        self.endpoints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// At most once per idle period, forgets the circuits and answers idle that long.
    fn sweep(&self, endpoints: &mut Endpoints, now: Instant) {
        let idle = self.cooldown * IDLE_COOLDOWNS;
        if now - endpoints.swept < idle {
            return;
        }
        let fresh = |at: Instant| now - at < idle;
        endpoints.circuits.retain(|_, c| fresh(c.last_failure));
        endpoints.answered.retain(|_, a| fresh(a.seen));
        endpoints.restored.retain(|_, at| fresh(*at));
        endpoints.swept = now;
    }

    /// Counts a failure at `circuit`; first sweeps out idle entries.
    fn failed<'e>(&self, endpoints: &'e mut Endpoints, circuit: &str) -> &'e mut Circuit {
        let now = Instant::now();
        self.sweep(endpoints, now);
        let c = endpoints
            .circuits
            .entry(circuit.to_string())
            .or_insert_with(|| Circuit::new(now));
        c.failures += 1;
        c.last_failure = now;
        c
    }

    /// Whether an attempt may go to `circuit`; `probe`: it asks to probe an open circuit
    /// at once (a paused endpoint's probe), which it does unless a probe is in flight.
    pub fn check(&self, circuit: &str, probe: bool) -> CircuitState {
        let mut endpoints = self.lock();
        let Some(c) = endpoints.circuits.get_mut(circuit) else {
            return CircuitState::Closed;
        };
        let now = Instant::now();
        if probe {
            c.probe_at_once(now);
        }
        match c.open_until {
            None => CircuitState::Closed,
            Some(until) if now < until => CircuitState::Open {
                probe_in: until - now,
                probing: false,
            },
            // A probe that never reported (its attempt was abandoned) is replaced.
            Some(_) if c.probing_since.is_some_and(|t| now - t < self.cooldown) => {
                let since = c.probing_since.map_or(Duration::ZERO, |t| now - t);
                CircuitState::Open {
                    probe_in: self.cooldown - since,
                    probing: true,
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

    /// The circuits that are open (or half open), sorted.
    pub fn open_circuits(&self) -> Vec<String> {
        let endpoints = self.lock();
        let mut open: Vec<String> = endpoints
            .circuits
            .iter()
            .filter(|(_, c)| c.open_until.is_some())
            .map(|(e, _)| e.clone())
            .collect();
        open.sort();
        open
    }

    /// `circuit` as the endpoint's record keeps it, while open.
    #[cfg(test)]
    fn open(&self, circuit: &str) -> Option<OpenCircuit> {
        let endpoints = self.lock();
        let c = endpoints.circuits.get(circuit)?;
        open_circuit(c, Instant::now())
    }

    /// Lets every open circuit `chosen` by its key, without a probe in flight, probe at
    /// once: its endpoint was resumed, or an operator asked for an attempt now. How many.
    pub fn nudge(&self, chosen: impl Fn(&str) -> bool) -> usize {
        let now = Instant::now();
        let mut endpoints = self.lock();
        let of_it = endpoints.circuits.iter_mut().filter(|(k, _)| chosen(k));
        of_it
            .map(|(_, c)| c.probe_at_once(now))
            .filter(|n| *n)
            .count()
    }

    /// Whether `circuit`'s endpoint answered 2xx at or after `since` (ms), as far as this
    /// instance saw or was told.
    pub fn answered_since(&self, circuit: &str, since: i64) -> bool {
        let endpoints = self.lock();
        let answered = endpoints.answered.get(endpoint_of(circuit));
        answered.is_some_and(|a| a.at_ms >= since)
    }

    /// Records how an attempt of this instance that reached `circuit` went.
    pub fn record(&self, circuit: &str, healthy: bool) -> Recorded {
        if self.threshold == 0 {
            return Recorded::default();
        }
        let mut endpoints = self.lock();
        if healthy {
            return self.succeeded(&mut endpoints, circuit);
        }
        let c = self.failed(&mut endpoints, circuit);
        let reopen = c.probing_since.take().is_some();
        let change = if reopen {
            Some(self.open_now(c, CircuitChange::Reopened))
        } else if c.open_until.is_none() && c.failures >= self.threshold {
            Some(self.open_now(c, CircuitChange::Opened))
        } else {
            None
        };
        Recorded {
            change,
            tell: Some(false),
        }
    }

    /// Opens `c` for a cooldown from now; the change, as `how`.
    fn open_now(&self, c: &mut Circuit, how: fn(OpenCircuit) -> CircuitChange) -> CircuitChange {
        let now = Instant::now();
        c.open_until = Some(now + self.cooldown);
        c.opened_at.get_or_insert(now_ms());
        how(open_circuit(c, now).expect("opened"))
    }

    /// A success of this instance at `circuit`: closes it, notes its endpoint answered,
    /// lets the endpoint's other open circuits probe; told when it ended a run of
    /// failures or the endpoint has open circuits the fleet may not know answered.
    fn succeeded(&self, endpoints: &mut Endpoints, circuit: &str) -> Recorded {
        let ended = endpoints.closed(circuit);
        let closed = ended.as_ref().is_some_and(|c| c.open_until.is_some());
        let others_open = self.answered(endpoints, circuit);
        let tell_answered = others_open && self.tell_answered(endpoints, circuit);
        Recorded {
            change: closed.then_some(CircuitChange::Closed),
            tell: (ended.is_some() || tell_answered).then_some(true),
        }
    }

    /// Notes that `circuit`'s endpoint answered now, if one of its circuits is open, and
    /// lets those probe at once (each at most once per cooldown). Whether any is open.
    fn answered(&self, endpoints: &mut Endpoints, circuit: &str) -> bool {
        let endpoint = endpoint_of(circuit);
        let now = Instant::now();
        let cooldown = self.cooldown;
        let mut open = false;
        for (_, c) in endpoints
            .circuits
            .iter_mut()
            .filter(|(k, c)| endpoint_of(k) == endpoint && c.open_until.is_some())
        {
            open = true;
            if c.nudged.is_none_or(|at| now - at >= cooldown) && c.probe_at_once(now) {
                c.nudged = Some(now);
            }
        }
        if open {
            let a = endpoints
                .answered
                .entry(endpoint.to_string())
                .or_insert(Answered {
                    at_ms: 0,
                    seen: now,
                    told: None,
                });
            (a.at_ms, a.seen) = (now_ms(), now);
        }
        open
    }

    /// Whether to tell the fleet that `circuit`'s endpoint answered: not told within
    /// `TELL_ANSWERED_EVERY`.
    fn tell_answered(&self, endpoints: &mut Endpoints, circuit: &str) -> bool {
        let Some(a) = endpoints.answered.get_mut(endpoint_of(circuit)) else {
            return false;
        };
        let now = Instant::now();
        let due = a.told.is_none_or(|t| now - t >= TELL_ANSWERED_EVERY);
        if due {
            a.told = Some(now);
        }
        due
    }

    /// Counts what another instance told of `circuit`: a success closes it (and lets its
    /// endpoint's other open circuits probe); a failure counts towards opening it. An
    /// open circuit keeps its own cooldown (each instance probes once per cooldown):
    /// were the others' failures to restart it, their last attempts, which go beside
    /// the probe, would hold this instance's back for good. What it changed: only an
    /// opening or a closing.
    pub fn learn(&self, circuit: &str, healthy: bool) -> Option<CircuitChange> {
        if self.threshold == 0 {
            return None;
        }
        let mut endpoints = self.lock();
        if healthy {
            let ended = endpoints.closed(circuit);
            self.answered(&mut endpoints, circuit);
            let closed = ended.is_some_and(|c| c.open_until.is_some());
            return closed.then_some(CircuitChange::Closed);
        }
        let c = self.failed(&mut endpoints, circuit);
        let opens = c.open_until.is_none() && c.failures >= self.threshold;
        opens.then(|| self.open_now(c, CircuitChange::Opened))
    }

    /// Whether this instance knows `circuit`'s state: it has seen it fail, or read it
    /// from the store (`restore`) since it started.
    pub fn knows(&self, circuit: &str) -> bool {
        let endpoints = self.lock();
        endpoints.circuits.contains_key(circuit) || endpoints.restored.contains_key(circuit)
    }

    /// Takes back what the store kept of `circuit` (`None`: closed, or never open): an
    /// open circuit probes at its `probe_at`, or at once if that has passed. A circuit
    /// this instance has an entry for keeps its own state.
    pub fn restore(&self, circuit: &str, open: Option<OpenCircuit>) {
        if self.threshold == 0 {
            return;
        }
        let now = Instant::now();
        let mut endpoints = self.lock();
        endpoints.restored.insert(circuit.to_string(), now);
        let Some(open) = open else { return };
        let wait = Duration::from_millis((open.probe_at - now_ms()).max(0) as u64);
        endpoints
            .circuits
            .entry(circuit.to_string())
            .or_insert_with(|| Circuit {
                failures: self.threshold,
                open_until: Some(now + wait.min(self.cooldown)),
                opened_at: Some(open.since),
                ..Circuit::new(now)
            });
    }
}

/// `c` as the endpoint's record keeps it, while open at `now`.
fn open_circuit(c: &Circuit, now: Instant) -> Option<OpenCircuit> {
    let until = c.open_until?;
    let probe_in = until.saturating_duration_since(now);
    let probe_at = now_ms() + probe_in.as_millis() as i64;
    Some(OpenCircuit {
        since: c.opened_at.unwrap_or(probe_at),
        probe_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: &str = "shop-a https://pay.example:443/hook";
    const SIBLING: &str = "shop-a https://pay.example:443/other";

    fn open(b: &Breaker, circuit: &str) {
        for _ in 0..3 {
            b.record(circuit, false);
        }
        assert!(matches!(b.check(circuit, false), CircuitState::Open { .. }));
    }

    #[test]
    fn opens_after_the_threshold_probes_after_the_cooldown_and_closes() {
        let b = Breaker::new(3, Duration::from_millis(50));
        assert_eq!(b.record("e", false).change, None);
        assert_eq!(b.record("e", false).change, None);
        assert_eq!(b.check("e", false), CircuitState::Closed);
        let opened = b.record("e", false).change;
        assert!(
            matches!(opened, Some(CircuitChange::Opened(_))),
            "third failure opens"
        );
        assert!(
            matches!(b.check("e", false), CircuitState::Open { probe_in, probing: false } if probe_in <= Duration::from_millis(50)),
            "a probe may go at the cooldown's end"
        );
        assert_eq!(b.open_circuits(), vec!["e".to_string()]);
        assert_eq!(b.check("other", false), CircuitState::Closed);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(b.check("e", false), CircuitState::Probe);
        assert!(
            matches!(b.check("e", false), CircuitState::Open { probe_in, probing: true } if probe_in > Duration::from_millis(40)),
            "one probe at a time: the next only when it could be replaced"
        );
        let reopened = b.record("e", false).change;
        assert!(
            matches!(reopened, Some(CircuitChange::Reopened(_))),
            "a failed probe"
        );
        assert!(matches!(b.check("e", false), CircuitState::Open { .. }));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(b.check("e", false), CircuitState::Probe);
        let closed = b.record("e", true);
        assert_eq!(closed.change, Some(CircuitChange::Closed));
        assert_eq!(closed.tell, Some(true), "the others learn it closed");
        assert_eq!(b.check("e", false), CircuitState::Closed);
        assert!(b.open_circuits().is_empty());
        assert_eq!(
            b.record("e", true),
            Recorded::default(),
            "a success alone is not news"
        );
    }

    #[test]
    fn an_open_circuit_keeps_when_it_opened_through_failed_probes() {
        let b = Breaker::new(3, Duration::from_millis(20));
        open(&b, E);
        let first = b.open(E).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(b.check(E, false), CircuitState::Probe);
        let Some(CircuitChange::Reopened(again)) = b.record(E, false).change else {
            panic!("reopened")
        };
        assert_eq!(again.since, first.since);
        assert!(again.probe_at > first.probe_at);
    }

    #[test]
    fn a_nudge_lets_the_endpoints_open_circuits_probe_at_once() {
        let b = Breaker::new(3, Duration::from_secs(60));
        open(&b, E);
        open(&b, SIBLING);
        open(&b, "shop-b https://pay.example:443/hook");
        let of_shop_a = |k: &str| endpoint_of(k) == "shop-a https://pay.example:443";
        assert_eq!(b.nudge(of_shop_a), 2);
        assert_eq!(b.check(E, false), CircuitState::Probe);
        assert!(
            matches!(b.check(E, false), CircuitState::Open { probing: true, .. }),
            "one probe at a time"
        );
        assert_eq!(b.nudge(of_shop_a), 0, "one in flight");
        assert_eq!(b.check(SIBLING, false), CircuitState::Probe);
        assert!(
            matches!(
                b.check("shop-b https://pay.example:443/hook", false),
                CircuitState::Open { probing: false, .. }
            ),
            "another tenant's circuit is its own"
        );
    }

    #[test]
    fn a_success_at_another_path_lets_it_probe_once_per_cooldown_and_is_remembered() {
        let b = Breaker::new(3, Duration::from_secs(60));
        open(&b, E);
        let before = now_ms();
        let told = b.record(SIBLING, true);
        assert_eq!(
            told,
            Recorded {
                change: None,
                tell: Some(true)
            },
            "the fleet learns it answered"
        );
        assert!(b.answered_since(E, before));
        assert!(!b.answered_since(E, now_ms() + 1_000));
        assert_eq!(b.check(E, false), CircuitState::Probe);
        assert!(matches!(
            b.record(E, false).change,
            Some(CircuitChange::Reopened(_))
        ));
        b.record(SIBLING, true);
        assert!(
            matches!(b.check(E, false), CircuitState::Open { probing: false, .. }),
            "not again within the cooldown"
        );
        assert_eq!(
            b.record(SIBLING, true).tell,
            None,
            "told at most once a second"
        );
    }

    #[test]
    fn a_pauses_probe_is_the_circuits_probe() {
        let b = Breaker::new(3, Duration::from_secs(60));
        open(&b, E);
        assert_eq!(b.check(E, true), CircuitState::Probe);
        assert!(matches!(
            b.check(E, true),
            CircuitState::Open { probing: true, .. }
        ));
    }

    #[test]
    fn failures_told_by_other_instances_count_as_ones_own() {
        let b = Breaker::new(3, Duration::from_secs(60));
        assert_eq!(b.learn("e", false), None);
        assert_eq!(b.record("e", false).change, None);
        assert!(
            matches!(b.learn("e", false), Some(CircuitChange::Opened(_))),
            "the third failure, wherever it happened, opens"
        );
        assert!(matches!(b.check("e", false), CircuitState::Open { .. }));
        assert_eq!(b.learn("e", true), Some(CircuitChange::Closed));
        assert_eq!(
            b.check("e", false),
            CircuitState::Closed,
            "a probe elsewhere closed it"
        );
    }

    #[test]
    fn a_circuit_read_back_from_the_store_probes_when_it_said() {
        let b = Breaker::new(3, Duration::from_secs(60));
        assert!(!b.knows(E));
        let later = OpenCircuit {
            since: now_ms() - 5_000,
            probe_at: now_ms() + 30_000,
        };
        b.restore(E, Some(later));
        assert!(b.knows(E));
        assert!(
            matches!(b.check(E, false), CircuitState::Open { probe_in, .. } if probe_in > Duration::from_secs(25))
        );
        assert_eq!(b.open(E).map(|o| o.since), Some(later.since));
        let due = OpenCircuit {
            since: now_ms() - 5_000,
            probe_at: now_ms() - 1,
        };
        b.restore(SIBLING, Some(due));
        assert_eq!(
            b.check(SIBLING, false),
            CircuitState::Probe,
            "its first request probes"
        );
        b.restore("shop-a https://pay.example:443/closed", None);
        assert!(b.knows("shop-a https://pay.example:443/closed"));
        assert_eq!(
            b.check("shop-a https://pay.example:443/closed", false),
            CircuitState::Closed
        );
    }

    #[test]
    fn a_circuits_endpoint_is_its_key_up_to_the_path() {
        let endpoint = circuit_endpoint(E).unwrap();
        assert_eq!(
            (&*endpoint.tenant, endpoint.origin.as_str()),
            ("shop-a", "https://pay.example")
        );
        assert_eq!(endpoint_of(E), "shop-a https://pay.example:443");
        assert_eq!(endpoint_of("t http://h:80"), "t http://h:80");
        assert_eq!(endpoint_of("t http://h:80/a/b?c"), "t http://h:80");
    }

    #[test]
    fn endpoints_idle_for_ten_cooldowns_are_forgotten() {
        let b = Breaker::new(3, Duration::from_millis(10));
        b.record("failing", false);
        b.record("failing", false);
        for _ in 0..3 {
            b.learn("gone", false);
        }
        assert_eq!(b.open_circuits(), vec!["gone".to_string()]);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            b.record("failing", false).change,
            None,
            "its two failures 150 ms ago were forgotten"
        );
        assert!(b.open_circuits().is_empty(), "nor is `gone` open for good");
        assert_eq!(b.check("gone", false), CircuitState::Closed);
    }

    #[test]
    fn a_threshold_of_zero_never_opens() {
        let b = Breaker::new(0, Duration::from_secs(1));
        for _ in 0..100 {
            b.record("e", false);
            b.learn("e", false);
        }
        assert_eq!(b.check("e", false), CircuitState::Closed);
    }
}
