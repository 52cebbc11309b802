//! The settler: records what became of claimed notifications in the store in batches
//! (attempts made, and deferrals of those that could not go yet), so that one script call
//! settles many. A small batch waits a little for more (`Batching`), so that a steady
//! trickle is not one call per notification. A batch and the queue to the settler each
//! hold at most `Batching::size` reports, and a sender keeps its delivery slot until the
//! queue takes its report, so what is sent and not yet recorded (what a crash would
//! repeat) stays within the slots and twice that size. Each report holds its
//! notification's place among the claimed until it is recorded, so a store that is slow
//! or unreachable (a batch is retried until it is recorded) stops new claims.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::backoff;
use crate::domain::{JobId, Outcome};
use crate::store::{Deferral, Queue, Settlement, StoreResult};

/// Most reports recorded by one batch.
const MAX_BATCH: usize = 256;

/// How long a batch smaller than its flush size waits for more reports, once it holds a
/// failed attempt: its retry is due counted from when the attempt ended, and a retry
/// interval may be this short. The merchant does not wait for it either way; only the
/// notification's state reads `in_flight` that much longer.
const LINGER: Duration = Duration::from_millis(20);

/// Shards beyond this many do not make batches any larger or longer (`Batching`).
const MAX_SPREAD: usize = 8;

/// What became of one claimed notification.
#[derive(Debug, Clone)]
pub enum Report {
    /// An attempt was made (or refused by the SSRF guard): record it.
    Attempted(Settlement),
    /// It may not go yet: due again later, not an attempt.
    Deferred(Deferral),
}

impl Report {
    fn lease(&self) -> (JobId, u64) {
        match self {
            Report::Attempted(s) => (s.id, s.lease),
            Report::Deferred(d) => (d.id, d.lease),
        }
    }
}

/// A report with its notification's place among the claimed: the place is only held, and
/// given back when the settler drops it, once the report has gone to the store.
pub struct Queued {
    pub report: Report,
    pub _claimed: OwnedSemaphorePermit,
}

/// How a batch of reports gathers: how many make it go at once, and how long it waits
/// for more otherwise.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    flush_at: usize,
    /// The most one batch takes: under load, what queued while the last was recorded.
    most: usize,
    /// How long a batch of outcomes with nothing due after them (delivered, gone) waits.
    final_linger: Duration,
}

impl Batching {
    /// For an instance of `slots` delivery slots on a store of `shards` shards: a quarter
    /// of the slots, and `LINGER`, times the shards (up to `MAX_SPREAD`). A batch is
    /// recorded with one script call per shard, so the more shards, the larger a batch
    /// must be for each shard's share to be a group rather than one or two. A batch takes
    /// at most as many as the slots, or its flush size if larger, so that under load one
    /// call records what the slots sent meanwhile.
    pub fn new(slots: usize, shards: u16) -> Self {
        let spread = usize::from(shards).clamp(1, MAX_SPREAD);
        let flush_at = (slots / 4 * spread).clamp(1, MAX_BATCH);
        Self {
            flush_at,
            most: slots.clamp(flush_at, MAX_BATCH),
            final_linger: LINGER * spread as u32,
        }
    }

    /// The most reports one batch records, and the room in the queue to the settler.
    pub fn size(&self) -> usize {
        self.most
    }

    /// How long the first of `reports` may wait for company: a deferral not at all (its
    /// wait counts from when it is recorded), a failed attempt `LINGER`, others
    /// `final_linger`, except one of an ordering key, whose next waits for it: not at all.
    fn patience(&self, reports: &[Queued]) -> Duration {
        let of = |q: &Queued| match &q.report {
            Report::Deferred(_) => Duration::ZERO,
            Report::Attempted(s) if s.report.outcome == Outcome::Failed => LINGER,
            Report::Attempted(s) if s.ordered => Duration::ZERO,
            Report::Attempted(_) => self.final_linger,
        };
        reports.iter().map(of).min().unwrap_or(Duration::ZERO)
    }
}

/// Leases this instance holds and has not settled: what to release at shutdown.
#[derive(Clone, Default)]
pub struct Leases(Arc<Mutex<HashMap<JobId, u64>>>);

impl Leases {
    /// Notes a claim's lease, released at shutdown unless settled first.
    pub fn note(&self, id: JobId, lease: u64) {
        self.0.lock().expect("lease map").insert(id, lease);
    }

    fn drop_settled(&self, batch: &[Report]) {
        let mut map = self.0.lock().expect("lease map");
        for (id, lease) in batch.iter().map(Report::lease) {
            if map.get(&id) == Some(&lease) {
                map.remove(&id);
            }
        }
    }

    pub fn take_all(&self) -> Vec<(JobId, u64)> {
        self.0.lock().expect("lease map").drain().collect()
    }
}

/// Runs until every sender of `rx` is gone and the queue is empty, or until `give_up`
/// fires while the store is down (leases then expire and the work is done again).
pub async fn run(
    store: Arc<dyn Queue>,
    mut rx: mpsc::Receiver<Queued>,
    leases: Leases,
    wake: Arc<Notify>,
    give_up: CancellationToken,
    batching: Batching,
) {
    let mut queued = Vec::with_capacity(batching.most);
    while gather(&mut rx, &mut queued, batching).await {
        let batch: Vec<Report> = queued.drain(..).map(|q| q.report).collect();
        if record(store.as_ref(), &batch, &wake, &give_up).await {
            leases.drop_settled(&batch);
        }
    }
}

/// Waits for a first report, then for more until `flush_at` are queued, the channel is
/// closed, or the patience of one of them (`Batching::patience`) has run out. False when
/// the channel is closed and empty.
async fn gather(
    rx: &mut mpsc::Receiver<Queued>,
    queued: &mut Vec<Queued>,
    batching: Batching,
) -> bool {
    if rx.recv_many(queued, batching.most).await == 0 {
        return false;
    }
    let mut deadline = Instant::now() + batching.patience(queued);
    while queued.len() < batching.flush_at {
        let seen = queued.len();
        match tokio::time::timeout_at(deadline, rx.recv_many(queued, batching.most - seen)).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                deadline = deadline.min(Instant::now() + batching.patience(&queued[seen..]));
            }
        }
    }
    true
}

/// Records one batch; false when it gave up.
async fn record(
    store: &dyn Queue,
    batch: &[Report],
    wake: &Notify,
    give_up: &CancellationToken,
) -> bool {
    let (mut settlements, mut deferrals) = (Vec::new(), Vec::new());
    for report in batch {
        match report {
            Report::Attempted(s) => settlements.push(s.clone()),
            Report::Deferred(d) => deferrals.push(d.clone()),
        }
    }
    if !settlements.is_empty() {
        let Some(settled) =
            with_retry("settle attempts", give_up, || store.settle(&settlements)).await
        else {
            return false;
        };
        crate::observability::metrics::dead_lettered(settled.dead_lettered);
        let ignored = settled.applied.iter().filter(|a| !**a).count();
        if ignored > 0 {
            tracing::warn!(ignored, "settlements ignored: their lease had been lost");
        }
        if settled.trimmed > 0 {
            tracing::info!(
                deleted = settled.trimmed,
                "retention deleted expired notifications"
            );
        }
        if settled.earliest {
            wake.notify_one();
        }
    }
    if !deferrals.is_empty() {
        let Some(earliest) =
            with_retry("defer notifications", give_up, || store.defer(&deferrals)).await
        else {
            return false;
        };
        if earliest {
            wake.notify_one();
        }
    }
    true
}

/// Runs `op` until it succeeds, backing off while the store is unreachable. `None` when
/// the data is corrupt or `give_up` fired.
async fn with_retry<T, F, Fut>(
    what: &'static str,
    give_up: &CancellationToken,
    mut op: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = StoreResult<T>>,
{
    let mut failures = 0u32;
    loop {
        match op().await {
            Ok(value) => {
                if failures > 0 {
                    tracing::info!(failures, "store reachable again: {what} resumed");
                }
                return Some(value);
            }
            Err(e) => {
                crate::observability::metrics::store_error(what);
                if failures == 0 {
                    tracing::error!(error = %e, "cannot {what}; retrying");
                }
                if e.is_bug() || give_up.is_cancelled() {
                    tracing::error!(error = %e, "gave up trying to {what}; the leases will expire and the notifications come back");
                    return None;
                }
                failures += 1;
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(backoff(failures)) => {}
                    _ = give_up.cancelled() => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::Semaphore;

    use super::*;
    use crate::domain::AttemptReport;
    use crate::store::Back;

    fn queued(report: Report) -> Queued {
        let places = Arc::new(Semaphore::new(1));
        Queued {
            report,
            _claimed: places.try_acquire_owned().expect("a free place"),
        }
    }

    fn attempted(outcome: Outcome) -> Queued {
        queued(Report::Attempted(Settlement {
            id: JobId::new(0),
            lease: 1,
            report: AttemptReport {
                outcome,
                ..AttemptReport::failure(None, "timeout".into(), String::new())
            },
            jitter_permille: 0,
            ended_at: 0,
            ordered: false,
            url: "https://merchant.example/hook".into(),
        }))
    }

    #[test]
    fn batches_grow_with_the_shards_a_settle_is_split_over() {
        let one = Batching::new(64, 1);
        assert_eq!(
            (one.flush_at, one.size(), one.final_linger),
            (16, 64, LINGER)
        );
        let twelve = Batching::new(64, 12);
        assert_eq!(
            (twelve.flush_at, twelve.size(), twelve.final_linger),
            (128, 128, 8 * LINGER)
        );
        assert_eq!(Batching::new(256, 12).size(), MAX_BATCH);
        assert_eq!(Batching::new(1, 1).size(), 1);
    }

    #[test]
    fn only_outcomes_with_nothing_due_after_them_wait_long() {
        let batching = Batching::new(64, 12);
        let delivered = attempted(Outcome::Delivered);
        assert_eq!(
            batching.patience(std::slice::from_ref(&delivered)),
            8 * LINGER
        );
        let failed = attempted(Outcome::Failed);
        assert_eq!(batching.patience(&[delivered, failed]), LINGER);
        let mut ordered = attempted(Outcome::Delivered);
        if let Report::Attempted(s) = &mut ordered.report {
            s.ordered = true;
        }
        assert_eq!(batching.patience(&[ordered]), Duration::ZERO);
        let deferred = queued(Report::Deferred(Deferral {
            id: JobId::new(0),
            lease: 1,
            back: Back::After {
                delay: Duration::ZERO,
                reserved: false,
            },
        }));
        assert_eq!(batching.patience(&[deferred]), Duration::ZERO);
    }
}
