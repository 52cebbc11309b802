//! When each claimed notification may be sent: when it is due, and not before a send
//! time reserved in its rate key's quota. The store keeps each quota for the whole fleet
//! (`policy::reserve`); a claimed batch asks once per rate key it holds, and the k-th of
//! a key's notifications gets the k-th free send time. A notification that was deferred
//! to its reserved time holds it already and does not ask again, unless it is claimed
//! more than `RESERVATION_KEPT` after that time (`holds_its_place`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::delivery::policy::Policy;
use crate::observability::metrics;
use crate::store::{ClaimedJob, RateReservations};

/// A send time further away than this is not waited for in process (holding a delivery
/// slot): the notification is deferred to it in the store, once.
pub const HOLD_AT_MOST: Duration = Duration::from_millis(250);

/// How long past its reserved send time a claimed notification keeps it: a send that
/// late narrows the gap to the next send time by as much, so this is the jitter a quota
/// allows (a claim is normally made ahead of the time, so is not late).
pub const RESERVATION_KEPT: Duration = Duration::from_millis(50);

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
    // By rate key, and whether they lost a place they held: those ask for times behind
    // every one reserved, without the key's burst (which would put them beside the
    // times others hold).
    let mut by_key: BTreeMap<(String, bool), Vec<usize>> = BTreeMap::new();
    for (i, job) in jobs.iter().enumerate() {
        if !holds_its_place(job) {
            let key = (job.spec.quota_key(), job.reserved);
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
        .map(|((key, lost_place), members)| {
            let latest_due = members.last().map_or(0, |&i| jobs[i].due_at);
            let count = members.len() as u32;
            match lost_place {
                true => policy.ask_behind(key, count),
                false => policy.ask(key, count, latest_due * 1000),
            }
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

/// Whether `job` goes at the send time it reserved before: only if it was claimed
/// within `RESERVATION_KEPT` of that time. One claimed later (its instance was down or
/// slow, its clock stalled) lost its place and asks again, behind every send time
/// reserved since: sent at once, it would go too close after the next one's (and every
/// notification deferred to a time the instance missed would go at once when it is
/// back).
fn holds_its_place(job: &ClaimedJob) -> bool {
    job.reserved && job.claimed_at_us - job.due_at * 1000 <= RESERVATION_KEPT.as_micros() as i64
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
        assert!(holds_its_place(&reserved(1_000, 960_000)), "claimed ahead");
        assert!(holds_its_place(&reserved(1_000, 1_000_000)));
        assert!(holds_its_place(&reserved(1_000, 1_050_000)));
        assert!(!ClaimedJob::example(1_000, 1_000_000).reserved);
    }

    #[test]
    fn a_reserved_send_time_claimed_late_is_asked_again() {
        assert!(!holds_its_place(&reserved(1_000, 1_051_000)));
        assert!(
            !holds_its_place(&reserved(1_000, 1_352_000)),
            "late within the spacing"
        );
        assert!(!holds_its_place(&reserved(1_000, 5_000_000)), "missed");
    }
}
