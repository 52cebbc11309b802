//! The delivery policy: whether a claimed notification may be sent now. Each host gets
//! at most `host_concurrency` deliveries at once (one turned away waits about as long as
//! an attempt there takes), each `rate_key` its quota (and any
//! `Retry-After` pause a receiver asked for), and a host whose circuit is open fails
//! fast. What may not go yet is deferred, which is not an attempt and holds no slot.

use std::time::Duration;

mod breaker;
mod host_slots;
mod quota;
mod rate_limit;

pub use breaker::{Breaker, Verdict};
pub use host_slots::{HostSlot, HostSlots};
pub use quota::Quota;
pub use rate_limit::RateLimits;

use crate::config::{DeliverySettings, Quotas};
use crate::sender::{AttemptReport, Reach};

pub struct Policy {
    host_slots: HostSlots,
    rate_limits: RateLimits,
    breaker: Breaker,
}

/// What to do with a claimed notification.
pub enum Admission {
    /// Send it now, holding `slot` at its host for the attempt.
    Send(HostSlot),
    /// Not now: due again after `wait`, without counting an attempt. `reason` is
    /// `host_busy` or `rate_limit` (quota or `Retry-After`).
    Defer {
        wait: Duration,
        reason: &'static str,
    },
    /// The host's circuit is open: record a failed attempt without sending.
    CircuitOpen,
}

impl Policy {
    pub fn new(settings: &DeliverySettings, quotas: &Quotas) -> Self {
        Self {
            host_slots: HostSlots::new(settings.host_concurrency),
            rate_limits: RateLimits::new(quotas),
            breaker: Breaker::new(settings.breaker_failures, settings.breaker_cooldown),
        }
    }

    pub fn admit(&self, host: &str, rate_key: &str) -> Admission {
        let slot = match self.host_slots.try_acquire(host) {
            Ok(slot) => slot,
            Err(wait) => {
                // ±50%, so that a host's backlog does not come back all at once.
                let ms = wait.as_millis() as u64;
                let wait = Duration::from_millis(fastrand::u64(ms / 2..=ms * 3 / 2));
                return Admission::Defer {
                    wait,
                    reason: "host_busy",
                };
            }
        };
        if let Err(wait) = self.rate_limits.check(rate_key) {
            return Admission::Defer {
                wait,
                reason: "rate_limit",
            };
        }
        match self.breaker.check(host) {
            Verdict::Open => Admission::CircuitOpen,
            Verdict::Closed | Verdict::Probe => Admission::Send(slot),
        }
    }

    /// The hosts whose circuit is open now, sorted.
    pub fn open_circuits(&self) -> Vec<String> {
        self.breaker.open_hosts()
    }

    /// Learns from an attempt that was sent: a `Retry-After` pauses its rate key, and its
    /// host's health feeds the breaker.
    pub fn record(&self, host: &str, rate_key: &str, report: &AttemptReport) {
        if let Some(wait) = report.retry_after {
            self.rate_limits.pause(rate_key, wait);
        }
        if let Reach::Sent { healthy } = report.reach {
            if self.breaker.record(host, healthy) {
                tracing::warn!(%host, "circuit opened: attempts to this host fail fast until a probe succeeds");
            }
        }
    }
}
