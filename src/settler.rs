//! The settler: records what became of claimed notifications in the store in batches
//! (attempts made, and deferrals of those that could not go yet), so that one script call
//! settles many. A small batch waits up to `LINGER` for more, holding the delivery slots
//! of its notifications meanwhile, so that a steady trickle is not one call per
//! notification, and what a crash would repeat stays within the slots. It keeps retrying
//! a batch while the store is unreachable; meanwhile the bounded queue stops new claims.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::backoff;
use crate::domain::JobId;
use crate::store::{Deferral, Settlement, Store, StoreError, StoreResult};

/// Most reports recorded by one batch.
const MAX_BATCH: usize = 256;

/// How long a batch smaller than its flush size waits for more reports. The merchant does
/// not wait for it: the attempt has been made, and a retry is due counted from when the
/// attempt ended; only the notification's state reads `in_flight` that much longer.
const LINGER: Duration = Duration::from_millis(20);

/// What became of one claimed notification.
#[derive(Debug, Clone)]
pub enum Report {
    /// An attempt was made (or failed fast): record it.
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

/// A report with the delivery slot its notification held: the slot is only held, and
/// given back when the settler drops it, once the report has gone to the store.
pub struct Queued {
    pub report: Report,
    pub _slot: OwnedSemaphorePermit,
}

/// Leases this instance holds and has not settled: what to release at shutdown.
#[derive(Clone, Default)]
pub struct Leases(Arc<Mutex<HashMap<JobId, u64>>>);

impl Leases {
    pub fn hold(&self, id: JobId, lease: u64) {
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
/// `slots` is the instance's number of delivery slots.
pub async fn run(
    store: Arc<dyn Store>,
    mut rx: mpsc::Receiver<Queued>,
    leases: Leases,
    wake: Arc<Notify>,
    give_up: CancellationToken,
    slots: usize,
) {
    let flush_at = flush_size(slots);
    let mut queued = Vec::with_capacity(MAX_BATCH);
    while gather(&mut rx, &mut queued, flush_at).await {
        let batch: Vec<Report> = queued.drain(..).map(|q| q.report).collect();
        if record(store.as_ref(), &batch, &wake, &give_up).await {
            leases.drop_settled(&batch);
        }
    }
}

/// A batch goes to the store once it holds a quarter of the delivery slots (or `LINGER`
/// after its first report), so at most a quarter of the slots wait on it.
fn flush_size(slots: usize) -> usize {
    (slots / 4).clamp(1, MAX_BATCH)
}

/// Waits for a first report, then up to `LINGER` until `flush_at` are queued (or the
/// channel closed, or a deferral came). False when the channel is closed and empty.
async fn gather(
    rx: &mut mpsc::Receiver<Queued>,
    queued: &mut Vec<Queued>,
    flush_at: usize,
) -> bool {
    if rx.recv_many(queued, MAX_BATCH).await == 0 {
        return false;
    }
    let deadline = Instant::now() + LINGER;
    while queued.len() < flush_at && !holds_deferral(queued) {
        let room = MAX_BATCH - queued.len();
        match tokio::time::timeout_at(deadline, rx.recv_many(queued, room)).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    true
}

/// A deferral does not wait for company: its wait counts from when it is recorded.
fn holds_deferral(queued: &[Queued]) -> bool {
    queued
        .iter()
        .any(|q| matches!(q.report, Report::Deferred(_)))
}

/// Records one batch; false when it gave up.
async fn record(
    store: &dyn Store,
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
        crate::metrics::dead_lettered(settled.dead_lettered);
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
                crate::metrics::store_error(what);
                if failures == 0 {
                    tracing::error!(error = %e, "cannot {what}; retrying");
                }
                if matches!(e, StoreError::Corrupt(_)) || give_up.is_cancelled() {
                    tracing::error!(error = %e, "gave up trying to {what}; the leases will expire and the notifications come back");
                    return None;
                }
                failures += 1;
                tokio::select! {
                    _ = tokio::time::sleep(backoff(failures)) => {}
                    _ = give_up.cancelled() => {}
                }
            }
        }
    }
}
