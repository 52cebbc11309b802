//! When each claimed notification may be sent: when it is due, and not before a send
//! time reserved in its rate key's quota. The store keeps each quota for the whole fleet
//! (`policy::reserve`); a claimed batch asks once per rate key it holds, and the k-th of
//! a key's notifications gets the k-th free send time. A notification that was deferred
//! to its reserved time holds it already and does not ask again, unless it is claimed
//! well after that time (`holds_its_place`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::delivery::policy::Policy;
use crate::observability::metrics;
use crate::store::{ClaimedJob, RateReservations};

/// A send time further away than this is not waited for in process (holding a delivery
/// slot): the notification is deferred to it in the store, once.
pub const HOLD_AT_MOST: Duration = Duration::from_millis(250);

/// How long past its reserved send time a claimed notification keeps it, at least.
const RESERVATION_KEPT: Duration = HOLD_AT_MOST;

/// Deferred this long when its quota could not be asked (the store is failing).
const UNASKED_DELAY: Duration = Duration::from_secs(1);

/// When a claimed notification goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendAt {
    /// After this wait, in process.
    After(Duration),
    /// Deferred in the store for this long; `reserved` when that is its send time in
    /// its quota. `reason` is `rate_limit`, `retry_after` or `quota_unavailable`.
    Deferred {
        wait: Duration,
        reserved: bool,
        reason: &'static str,
    },
}

/// When each of `jobs` goes, in order.
pub async fn send_times(
    store: &dyn RateReservations,
    policy: &Policy,
    jobs: &[&ClaimedJob],
) -> Vec<SendAt> {
    let mut by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, job) in jobs.iter().enumerate() {
        let key = job.spec.quota_key();
        if !holds_its_place(job, policy.spacing(&key)) {
            by_key.entry(key).or_default().push(i);
        }
    }
    let mut times: Vec<SendAt> = jobs.iter().map(|j| SendAt::After(j.until_due())).collect();
    if by_key.is_empty() {
        return times;
    }
    for members in by_key.values_mut() {
        members.sort_by_key(|&i| jobs[i].due_at);
    }
    let asks: Vec<_> = by_key
        .iter()
        .map(|(key, members)| {
            let latest_due = members.last().map_or(0, |&i| jobs[i].due_at);
            policy.ask(key, members.len() as u32, latest_due * 1000)
        })
        .collect();
    match store.reserve(&asks).await {
        Ok(reserved) => {
            metrics::reserved(by_key.values().map(Vec::len).sum());
            for ((members, key_times), ask) in by_key.values().zip(reserved).zip(&asks) {
                let paused = key_times.start_us > key_times.now_us.max(ask.not_before_us);
                for (k, &i) in members.iter().enumerate() {
                    let wait = key_times.wait(k as u32).max(jobs[i].until_due());
                    times[i] = send_at(wait, paused);
                }
            }
        }
        Err(e) => {
            metrics::store_error("reserve");
            tracing::warn!(error = %e, "cannot reserve send times in rate keys' quotas; deferring the claimed notifications");
            for &i in by_key.values().flatten() {
                times[i] = SendAt::Deferred {
                    wait: UNASKED_DELAY,
                    reserved: false,
                    reason: "quota_unavailable",
                };
            }
        }
    }
    times
}

/// Whether `job` goes at the send time it reserved before, its quota spacing sends by
/// `spacing`: only if it was claimed within `RESERVATION_KEPT` (or `spacing`, if
/// longer) of that time. One claimed later (its instance was down, its store slow)
/// lost its place and asks again: otherwise every notification deferred to a time the
/// instance missed would go at once when it is back.
fn holds_its_place(job: &ClaimedJob, spacing: Duration) -> bool {
    let kept = RESERVATION_KEPT.max(spacing).as_micros() as i64;
    job.reserved && job.claimed_at_us - job.due_at * 1000 <= kept
}

fn send_at(wait: Duration, paused: bool) -> SendAt {
    if wait <= HOLD_AT_MOST {
        return SendAt::After(wait);
    }
    SendAt::Deferred {
        wait,
        reserved: true,
        reason: if paused { "retry_after" } else { "rate_limit" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserved(due_at: i64, claimed_at_us: i64) -> ClaimedJob {
        ClaimedJob {
            reserved: true,
            ..ClaimedJob::example(due_at, claimed_at_us)
        }
    }

    #[test]
    fn a_reserved_send_time_is_kept_when_claimed_on_time() {
        let spacing = Duration::from_millis(200);
        assert!(holds_its_place(&reserved(1_000, 1_000_000), spacing));
        assert!(holds_its_place(&reserved(1_000, 1_250_000), spacing));
        assert!(!ClaimedJob::example(1_000, 1_000_000).reserved);
    }

    #[test]
    fn a_reserved_send_time_the_instance_missed_is_asked_again() {
        let spacing = Duration::from_millis(200);
        assert!(!holds_its_place(&reserved(1_000, 1_251_000), spacing));
        assert!(!holds_its_place(&reserved(1_000, 5_000_000), spacing));
        let slow = Duration::from_secs(2);
        assert!(
            holds_its_place(&reserved(1_000, 2_900_000), slow),
            "a slow quota's spacing"
        );
    }
}
