//! The delivery policy: whether a claimed notification may be sent now. Each host gets
//! at most `host_concurrency` deliveries at once from this instance (one turned away
//! waits about as long as an attempt there takes), and an endpoint whose circuit is
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

pub use breaker::{Breaker, CircuitState, Recorded};
pub use gcra::{reserve, RateAsk, RateState, SendTimes};
pub use host_slots::{Busy, HostSlot, HostSlots};
pub use quota::{Quota, Quotas};

use crate::domain::{AttemptReport, Reach};

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
    /// come back at once), unless past its deadline.
    CircuitOpen { wait: Duration },
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

    /// Whether a notification to `endpoint`, on `host`, may be sent now. Its `last`
    /// attempt is never failed by an open circuit: no notification is dead without one
    /// real request at the end of its schedule (its outcome counts as a probe's).
    pub fn admit(&self, host: &str, endpoint: &str, last: bool) -> Admission {
        match self.host_slots.try_acquire(host) {
            Ok(slot) => match self.admit_with(slot, endpoint, last) {
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
        endpoint: &str,
        last: bool,
    ) -> Result<HostSlot, Refusal> {
        match self.host_slots.acquire(host, HOST_WAIT_BUDGET).await {
            Ok(slot) => self.admit_with(slot, endpoint, last),
            Err(busy) => Err(host_busy(busy.wait)),
        }
    }

    /// With a slot at its host: the endpoint's circuit.
    fn admit_with(&self, slot: HostSlot, endpoint: &str, last: bool) -> Result<HostSlot, Refusal> {
        if last {
            return Ok(slot);
        }
        match self.breaker.check(endpoint) {
            CircuitState::Open { probe_in } => {
                let spread = self.breaker.cooldown().as_millis() as u64 / 2;
                let wait = probe_in + Duration::from_millis(fastrand::u64(0..=spread));
                Err(Refusal::CircuitOpen { wait })
            }
            CircuitState::Closed | CircuitState::Probe => Ok(slot),
        }
    }

    /// The endpoints whose circuit is open now, sorted.
    pub fn open_circuits(&self) -> Vec<String> {
        self.breaker.open_endpoints()
    }

    /// Learns from an attempt that was sent: its endpoint's health feeds the breaker.
    /// `Some(healthy)` when the other instances should learn it too.
    pub fn record(&self, endpoint: &str, report: &AttemptReport) -> Option<bool> {
        let Reach::Sent { healthy } = report.reach else {
            return None;
        };
        let recorded = self.breaker.record(endpoint, healthy);
        if recorded.opened {
            tracing::warn!(%endpoint, "circuit opened: notifications to this endpoint are held back until a probe succeeds");
        }
        recorded.tell
    }

    /// Learns what another instance told of an endpoint's health.
    pub fn learn(&self, endpoint: &str, healthy: bool) {
        if self.breaker.learn(endpoint, healthy) {
            tracing::warn!(%endpoint, "circuit opened by failures other instances saw: notifications to this endpoint are held back until a probe succeeds");
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
