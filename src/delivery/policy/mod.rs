//! The delivery policy: whether a claimed notification may be sent now. Each host gets
//! at most `host_concurrency` deliveries at once from this instance (one turned away
//! waits about as long as an attempt there takes), and an endpoint path whose circuit is
//! open holds its notifications back until a probe may go (its circuit learned from
//! every instance, `breaker`). What may not go yet is deferred, which is not an attempt
//! and holds no slot; but a notification for a
//! fast host at its cap waits here a moment for a slot instead (`admit_after_wait`),
//! since going back to the store would cost more than the wait. Each `rate_key`'s quota and `Retry-After` pauses are kept by the store for the
//! whole fleet (`gcra`): the scheduler reserves send times there before it asks here.

use std::time::Duration;

mod breaker;
mod gcra;
mod host_slots;
mod quota;

use breaker::circuit_endpoint;
pub use breaker::{Breaker, CircuitChange, CircuitState, OpenCircuit, Recorded};
pub use gcra::{reserve, RateAsk, RateState, SendTimes};
pub use host_slots::{Busy, HostSlot, HostSlots};
pub use quota::{Quota, Quotas};

use crate::domain::{AttemptReport, EndpointId, Reach, Tenant};

pub struct Policy {
    host_slots: HostSlots,
    quotas: Quotas,
    breaker: Breaker,
}

/// Most time a notification waits in process for a slot at a fast host before it is
/// deferred after all.
const HOST_WAIT_BUDGET: Duration = Duration::from_millis(500);

/// What to do with a claimed notification.
pub enum Admission {
    /// Send it now, holding `slot` at its host for the attempt.
    Send(HostSlot),
    /// Its host is at its cap but fast: wait for a slot (`Policy::admit_after_wait`).
    WaitForHost,
    Refuse(Refusal),
}

/// Why a claimed notification is not sent now.
pub enum Refusal {
    /// Not now: due again after `wait`, without counting an attempt. `reason` is
    /// `host_busy`.
    Defer {
        wait: Duration,
        reason: &'static str,
    },
    /// The endpoint's circuit is open: held back without a request, due again after
    /// `wait` (when a probe may go, spread over half a cooldown so that they do not all
    /// come back at once). `judged`: no probe is in flight, so the circuit's open state
    /// is a verdict on the endpoint, by which one past its deadline is dead.
    CircuitOpen { wait: Duration, judged: bool },
}

/// What the circuit is asked of a claimed notification.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ask {
    /// Its last attempt: never held back (no notification is dead without one real
    /// request at the end of its schedule; its outcome counts as a probe's).
    pub last: bool,
    /// A paused endpoint's probe: it probes an open circuit at once, unless a probe is in
    /// flight.
    pub probe: bool,
    /// Past its deadline, held back since then (ms): it goes if its endpoint answered
    /// 2xx since, rather than being dead-lettered for a circuit while the endpoint
    /// answers.
    pub spare_since: Option<i64>,
}

/// The per-host limits of the policy (`[delivery]` in the configuration).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Deliveries at once to one host, per instance.
    pub host_concurrency: usize,
    /// Failed attempts in a row that open an endpoint's circuit (the fleet's together).
    pub breaker_failures: u32,
    /// How long a circuit stays open before one attempt may probe the host.
    pub breaker_cooldown: Duration,
}

impl Policy {
    pub fn new(limits: Limits, quotas: &Quotas) -> Self {
        Self {
            host_slots: HostSlots::new(limits.host_concurrency),
            quotas: quotas.clone(),
            breaker: Breaker::new(limits.breaker_failures, limits.breaker_cooldown),
        }
    }

    /// A rate key's quota and how many of its sends may go at once, for a reservation.
    pub fn ask(&self, rate_key: &str, count: u32, not_before_us: i64) -> RateAsk {
        let quota = self.quotas.of(rate_key);
        RateAsk::new(rate_key, quota, self.quotas.burst, count, not_before_us)
    }

    /// A reservation behind every send time the key has reserved, with no burst: for
    /// notifications that lost the times they held (claimed too late for them).
    pub fn ask_behind(&self, rate_key: &str, count: u32) -> RateAsk {
        RateAsk::new(rate_key, self.quotas.of(rate_key), 1, count, 0)
    }

    /// Whether a notification to `circuit`, on `host`, may be sent now, as `ask` says.
    pub fn admit(&self, host: &str, circuit: &str, ask: Ask) -> Admission {
        match self.host_slots.try_acquire(host) {
            Ok(slot) => match self.admit_with(slot, circuit, ask) {
                Ok(slot) => Admission::Send(slot),
                Err(refusal) => Admission::Refuse(refusal),
            },
            Err(busy) if busy.worth_waiting() => Admission::WaitForHost,
            Err(busy) => Admission::Refuse(host_busy(busy.wait)),
        }
    }

    /// After `Admission::WaitForHost`: waits for a slot at `host` while it stays fast
    /// (at most `HOST_WAIT_BUDGET`), then decides as `admit` does: the slot to send
    /// with, or why not.
    pub async fn admit_after_wait(
        &self,
        host: &str,
        circuit: &str,
        ask: Ask,
    ) -> Result<HostSlot, Refusal> {
        match self.host_slots.acquire(host, HOST_WAIT_BUDGET).await {
            Ok(slot) => self.admit_with(slot, circuit, ask),
            Err(busy) => Err(host_busy(busy.wait)),
        }
    }

    /// With a slot at its host: the circuit.
    fn admit_with(&self, slot: HostSlot, circuit: &str, ask: Ask) -> Result<HostSlot, Refusal> {
        if ask.last {
            return Ok(slot);
        }
        match self.breaker.check(circuit, ask.probe) {
            CircuitState::Open { probe_in, probing } => {
                let answered = |since| self.breaker.answered_since(circuit, since);
                if ask.spare_since.is_some_and(answered) {
                    return Ok(slot);
                }
                let spread = self.breaker.cooldown().as_millis() as u64 / 2;
                let wait = probe_in + Duration::from_millis(fastrand::u64(0..=spread));
                Err(Refusal::CircuitOpen {
                    wait,
                    judged: !probing,
                })
            }
            CircuitState::Closed | CircuitState::Probe => Ok(slot),
        }
    }

    /// The circuits open now, sorted.
    pub fn open_circuits(&self) -> Vec<String> {
        self.breaker.open_circuits()
    }

    /// Lets the open circuits of `tenant`'s endpoint `id` probe at once: it was resumed.
    pub fn nudge_endpoint(&self, tenant: &Tenant, id: &EndpointId) {
        let of_it = |circuit: &str| {
            circuit_endpoint(circuit).is_some_and(|e| e.tenant == *tenant && e.id() == *id)
        };
        let nudged = self.breaker.nudge(of_it);
        if nudged > 0 {
            tracing::debug!(endpoint = %id, circuits = nudged, "resumed: its open circuits may probe at once");
        }
    }

    /// Lets `circuit` probe at once, if open: an operator asked for an attempt now.
    pub fn nudge_circuit(&self, circuit: &str) {
        if self.breaker.nudge(|k| k == circuit) > 0 {
            tracing::debug!(%circuit, "asked for an attempt now: the circuit may probe at once");
        }
    }

    /// Whether this instance knows the state of `circuit` (else a held-back notification's
    /// circuit is read back from the store first: `restore`).
    pub fn knows(&self, circuit: &str) -> bool {
        self.breaker.knows(circuit)
    }

    /// Takes back what the store kept of `circuit` (`None`: not open).
    pub fn restore(&self, circuit: &str, open: Option<OpenCircuit>) {
        self.breaker.restore(circuit, open);
        if let Some(open) = open {
            let probe_at = crate::domain::rfc3339(open.probe_at);
            tracing::info!(%circuit, %probe_at, "circuit open, as the store kept it: notifications to it are held back until a circuit probe succeeds");
        }
    }

    /// Learns from an attempt that was sent: its endpoint's health feeds the breaker. Logs
    /// an opening (a failed probe only at debug) and a closing.
    pub fn record(&self, circuit: &str, report: &AttemptReport) -> Recorded {
        let Reach::Sent { healthy } = report.reach else {
            return Recorded::default();
        };
        let recorded = self.breaker.record(circuit, healthy);
        match recorded.change {
            Some(CircuitChange::Opened(open)) => {
                let probe_at = crate::domain::rfc3339(open.probe_at);
                tracing::warn!(%circuit, %probe_at, "circuit opened: notifications to this endpoint path are held back until a circuit probe succeeds");
            }
            Some(CircuitChange::Reopened(open)) => {
                let probe_at = crate::domain::rfc3339(open.probe_at);
                tracing::debug!(%circuit, %probe_at, "circuit probe failed; open until the next probe");
            }
            Some(CircuitChange::Closed) => {
                tracing::info!(%circuit, "circuit closed: a request succeeded; what it held back goes")
            }
            None => {}
        }
        recorded
    }

    /// Learns what another instance told of an endpoint's health (logged at debug: the
    /// instance whose request changed the circuit logs it).
    pub fn learn(&self, circuit: &str, healthy: bool) {
        match self.breaker.learn(circuit, healthy) {
            Some(CircuitChange::Closed) => {
                tracing::debug!(%circuit, "circuit closed by another instance's request")
            }
            Some(_) => {
                tracing::debug!(%circuit, "circuit opened by failures other instances saw")
            }
            None => {}
        }
    }
}

/// A deferral for a busy host, its wait spread ±50% so that the host's backlog does not
/// come back all at once.
fn host_busy(wait: Duration) -> Refusal {
    let ms = wait.as_millis() as u64;
    Refusal::Defer {
        wait: Duration::from_millis(fastrand::u64(ms / 2..=ms * 3 / 2)),
        reason: "host_busy",
    }
}
