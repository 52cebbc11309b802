//! The scheduler: claims due notifications in batches, hands each to the sender on its
//! own task, and queues the outcome for the settler. It sleeps exactly until the next due
//! time (capped), and wakes at once when a new earliest notification is announced.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::DeliverySettings;
use crate::domain::Outcome;
use crate::sender::Sender;
use crate::settler::{self, backoff, Leases};
use crate::store::{ClaimedJob, Settlement, Store};

/// The delivery pipeline of one instance: scheduler, sender tasks and settler.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    sender: Arc<Sender>,
    wake: Arc<Notify>,
    settings: DeliverySettings,
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        sender: Sender,
        wake: Arc<Notify>,
        settings: DeliverySettings,
    ) -> Self {
        Self {
            store,
            sender: Arc::new(sender),
            wake,
            settings,
        }
    }

    /// Runs until `stop` fires, then lets deliveries in flight finish within the grace
    /// period, settles them, and releases whatever did not finish.
    pub async fn run(self, stop: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.settings.concurrency));
        let (tx, rx) = mpsc::channel(self.settings.concurrency);
        let leases = Leases::default();
        let abort = CancellationToken::new();
        let give_up = CancellationToken::new();
        let tasks = TaskTracker::new();
        let settler = tokio::spawn(settler::run(
            self.store.clone(),
            rx,
            leases.clone(),
            self.wake.clone(),
            give_up.clone(),
        ));

        let ctx = AttemptContext {
            sender: self.sender.clone(),
            settle: tx,
            leases: leases.clone(),
            abort: abort.clone(),
        };
        self.claim_loop(&slots, &ctx, &tasks, &stop).await;
        drop(ctx);

        tasks.close();
        let grace = self.settings.shutdown_grace;
        if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
            tracing::warn!(grace = %humantime::format_duration(grace), "deliveries still running after the grace period; releasing them");
            abort.cancel();
            tasks.wait().await;
        }
        let mut settler = settler;
        if tokio::time::timeout(grace, &mut settler).await.is_err() {
            give_up.cancel();
            let _ = settler.await;
        }
        self.release(leases.take_all()).await;
    }

    async fn claim_loop(
        &self,
        slots: &Arc<Semaphore>,
        ctx: &AttemptContext,
        tasks: &TaskTracker,
        stop: &CancellationToken,
    ) {
        let mut failures = 0u32;
        loop {
            let Some(permits) = self.free_slots(slots, stop).await else {
                return;
            };
            match self.store.claim(permits.len(), self.settings.lease).await {
                Ok(claim) => {
                    if failures > 0 {
                        tracing::info!(failures, "claiming resumed");
                        failures = 0;
                    }
                    let full = claim.jobs.len() == permits.len();
                    for (job, permit) in claim.jobs.into_iter().zip(permits) {
                        tasks.spawn(ctx.clone().attempt(job, permit));
                    }
                    if !full {
                        let nap = claim.next_wake.map_or(self.settings.max_idle_sleep, |d| {
                            d.min(self.settings.max_idle_sleep)
                        });
                        if !self.nap(nap, stop).await {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if failures == 0 {
                        tracing::error!(error = %e, "cannot claim notifications; retrying with backoff");
                    }
                    failures += 1;
                    drop(permits);
                    if !self.nap(backoff(failures), stop).await {
                        return;
                    }
                }
            }
        }
    }

    /// Waits for at least one free delivery slot, then takes as many as are free, up to
    /// the claim batch. `None` when told to stop.
    async fn free_slots(
        &self,
        slots: &Arc<Semaphore>,
        stop: &CancellationToken,
    ) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = tokio::select! {
            _ = stop.cancelled() => return None,
            p = slots.clone().acquire_owned() => p.expect("semaphore never closed"),
        };
        let mut permits = vec![first];
        while permits.len() < self.settings.claim_batch {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        Some(permits)
    }

    /// Sleeps for `d` unless woken; false when told to stop.
    async fn nap(&self, d: Duration, stop: &CancellationToken) -> bool {
        tokio::select! {
            _ = stop.cancelled() => false,
            _ = self.wake.notified() => true,
            _ = tokio::time::sleep(d) => true,
        }
    }

    async fn release(&self, leases: Vec<(crate::domain::JobId, u64)>) {
        if leases.is_empty() {
            return;
        }
        match self.store.release(&leases).await {
            Ok(n) => tracing::info!(
                released = n,
                "released unfinished deliveries; they are due again now"
            ),
            Err(e) => {
                tracing::error!(error = %e, count = leases.len(), "cannot release deliveries; they will be retried when their lease expires")
            }
        }
    }
}

/// What a sender task needs: shared by every attempt of this instance.
#[derive(Clone)]
struct AttemptContext {
    sender: Arc<Sender>,
    settle: mpsc::Sender<Settlement>,
    leases: Leases,
    abort: CancellationToken,
}

impl AttemptContext {
    async fn attempt(self, job: ClaimedJob, permit: OwnedSemaphorePermit) {
        self.leases.hold(job.id, job.lease);
        let host = job.spec.host();
        let span = tracing::info_span!("attempt", id = %job.id, attempt = job.attempt, host = %host, lateness_ms = job.claimed_at - job.due_at);
        async move {
            let report = tokio::select! {
                r = self.sender.send(&job.id, &job.spec) => r,
                _ = self.abort.cancelled() => return,
            };
            match report.outcome {
                Outcome::Delivered => {
                    tracing::debug!(status = report.status, ms = report.duration_ms, "delivered")
                }
                Outcome::Failed => tracing::info!(
                    status = report.status,
                    error = report.error.as_deref(),
                    ms = report.duration_ms,
                    "attempt failed"
                ),
            }
            let settlement = Settlement {
                id: job.id,
                lease: job.lease,
                outcome: report.outcome,
                status: report.status,
                error: report.error,
                duration_ms: report.duration_ms,
                response: report.response,
            };
            // Past the grace period the lease is released instead.
            tokio::select! {
                _ = self.settle.send(settlement) => {}
                _ = self.abort.cancelled() => {}
            }
            drop(permit);
        }
        .instrument(span)
        .await
    }
}
