//! The scheduler: claims due notifications in batches, asks the delivery policy whether
//! each may go now, hands those that may (or that wait a moment for a fast host's slot)
//! to the sender on their own task, and queues every outcome (attempt or deferral) for
//! the settler. A claim also takes what falls due within the next `CLAIM_AHEAD` (or, in a
//! shard with few due, up to four times that: see the store), each held on its own task
//! until its due time, so that a steady stream is claimed in groups rather than one store
//! call per notification. A held notification takes a delivery slot only when it is due,
//! and gives it back when its outcome is queued for the settler. A busy scheduler also
//! claims a reserve of due notifications to queue for the next slots that free (`slots`).
//! It sleeps until shortly before the next due time (capped), and wakes at once when a
//! new earliest notification is announced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backoff::{backoff, worth_logging};
use crate::clock::now_ms;
use crate::config::{DeliverySettings, Percent};
use crate::delivery::policy::{
    Admission, Ask, CircuitChange, HostSlot, OpenCircuit, Policy, RateAsk, Refusal,
};
use crate::delivery::reservations::{self, SendAt};
use crate::delivery::sender::Sender;
use crate::delivery::settler::{self, Leases, Queued, Report};
use crate::delivery::slots::{InQueue, Slot, Slots};
use crate::delivery::tenant_shares::{Share, TenantShares};
use crate::domain::{rfc3339, AttemptReport, Endpoint, Outcome, Target, CIRCUIT_DEADLINE};
use crate::endpoints::circuits::ClosedCircuits;
use crate::endpoints::health::{CircuitRecord, EndpointRecord};
use crate::endpoints::pauses::EndpointPauses;
use crate::endpoints::tallies::EndpointTallies;
use crate::observability::metrics;
use crate::observability::ops_events::OpsEvents;
use crate::observability::traces;
use crate::store::{Back, ClaimedJob, Deferral, Settlement, Store};

/// How far ahead of their due time notifications are claimed while at least three
/// quarters of the delivery slots are free. The scheduler wakes when the next is half
/// this away, so each claim takes about half of it worth of them. A busier instance
/// claims only `BUSY_CLAIM_AHEAD` ahead: there a held notification would keep a slot from
/// one that is due now (a busy host's deferred notifications would come back to be held,
/// deferred and held again), and its claims are large anyway.
const CLAIM_AHEAD: Duration = Duration::from_millis(40);

/// How far ahead a busy instance claims: a registration is due from the next
/// millisecond (its due time is rounded up), and is then claimed at once and held for
/// that fraction instead of waiting for the next claim.
const BUSY_CLAIM_AHEAD: Duration = Duration::from_millis(2);

/// Notifications an instance has claimed and not yet settled at most (held until due,
/// being sent, or waiting for the settler), as a multiple of its delivery slots.
const CLAIMED_PER_SLOT: usize = 4;

/// How long a held notification that has fallen due waits for a delivery slot at most;
/// past it, it is released to be due again at once (for this or another instance), so
/// that its lease cannot run out while it waits.
const SLOT_WAIT: Duration = Duration::from_secs(2);

/// How long a notification whose tenant holds all the slots it may is deferred: about
/// as long as a slow attempt, so that it is not claimed again and again meanwhile.
const TENANT_WAIT: Duration = Duration::from_millis(500);

/// The delivery pipeline of one instance: scheduler, sender tasks and settler.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    sender: Arc<Sender>,
    /// Each tenant's share of the delivery slots, taken with a slot.
    shares: Arc<TenantShares>,
    policy: Arc<Policy>,
    wake: Arc<Notify>,
    settings: DeliverySettings,
    /// The store's shards: settle batches grow with them (`settler::Batching`).
    shards: u16,
    /// Told of every attempt and every dead letter.
    observers: Observers,
}

/// What is told of the pipeline's attempts as they end, and what it asks of endpoints.
#[derive(Clone)]
pub struct Observers {
    /// Of every notification an attempt here makes a dead letter.
    pub ops: Arc<OpsEvents>,
    /// Of every attempt, by endpoint.
    pub endpoints: Arc<EndpointTallies>,
    /// Which endpoints are paused: their notifications are held, not attempted (but for
    /// probes, whose delivery resumes their endpoint).
    pub pauses: Arc<EndpointPauses>,
    /// Of every circuit this instance's request closed: what it held back goes at once.
    pub circuits: Arc<ClosedCircuits>,
    /// Wakes this instance's scheduler for the ops events they store.
    pub wake: Arc<Notify>,
}

impl Dispatcher {
    /// The pipeline of `store`'s notifications, sent by `sender` within the tenants'
    /// `shares` of the delivery slots; attempts and dead letters are told to `observers`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn Store>,
        sender: Sender,
        shares: TenantShares,
        policy: Arc<Policy>,
        wake: Arc<Notify>,
        settings: DeliverySettings,
        shards: u16,
        observers: Observers,
    ) -> Self {
        Self {
            store,
            sender: Arc::new(sender),
            shares: Arc::new(shares),
            policy,
            wake,
            settings,
            shards,
            observers,
        }
    }

    /// Runs until `stop` fires, then lets deliveries in flight finish within the grace
    /// period, settles them, and releases whatever did not finish.
    pub async fn run(self, stop: CancellationToken) {
        let slots = Arc::new(Slots::new(self.settings.concurrency));
        let claimed = Arc::new(Semaphore::new(CLAIMED_PER_SLOT * self.settings.concurrency));
        let batching = settler::Batching::new(self.settings.concurrency, self.shards);
        let (tx, rx) = mpsc::channel(batching.size());
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
            batching,
        ));

        let ctx = AttemptContext {
            store: self.store.clone(),
            sender: self.sender.clone(),
            policy: self.policy.clone(),
            settle: tx,
            slots: slots.clone(),
            shares: self.shares.clone(),
            leases: leases.clone(),
            abort: abort.clone(),
            jitter: self.settings.jitter,
            observers: self.observers.clone(),
        };
        self.claim_loop((&slots, &claimed), &ctx, &tasks, &stop)
            .await;
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

    /// Claims while more are worth claiming (`Slots::claimable`): when busy (at least a
    /// quarter of the slots in use), the free slots and what their reserve lacks, due
    /// now; otherwise up to `claim_batch`, to hold until due. Every claimed notification
    /// holds a place among the claimed until it is settled.
    async fn claim_loop(
        &self,
        (slots, claimed): (&Arc<Slots>, &Arc<Semaphore>),
        ctx: &AttemptContext,
        tasks: &TaskTracker,
        stop: &CancellationToken,
    ) {
        let mut failures = 0u32;
        // Whether the last claim took all it asked for: the store may have more due,
        // worth topping the reserve up for. After one that came back short, only a free
        // slot (or a wake-up, in the nap) makes the next claim.
        let mut more_due = true;
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = slots.claimable(more_due) => {}
            }
            let (limit, ahead) = if slots.mostly_free() {
                (self.settings.claim_batch, CLAIM_AHEAD)
            } else {
                let wanted = slots.wanted();
                (wanted.clamp(1, self.settings.claim_batch), BUSY_CLAIM_AHEAD)
            };
            let Some(places) = self.places(claimed, limit, stop).await else {
                return;
            };
            let claim = self
                .store
                .claim(places.len(), self.settings.lease, ahead)
                .await;
            match claim {
                Ok(claim) if claim.waiting_out_failures => {
                    drop(places);
                    let nap = claim.next_wake.unwrap_or_else(|| backoff(failures.max(1)));
                    if !self.nap(nap, stop).await {
                        return;
                    }
                }
                Ok(claim) => {
                    if failures > 0 {
                        tracing::info!(failures, "claiming resumed");
                        failures = 0;
                    }
                    let full = claim.jobs.len() == places.len();
                    more_due = full;
                    ctx.dispatch(claim.jobs, places, tasks).await;
                    if !full {
                        let nap = claim.next_wake.map_or(self.settings.max_idle_sleep, |d| {
                            before_due(d).min(self.settings.max_idle_sleep)
                        });
                        if !self.nap(nap, stop).await {
                            return;
                        }
                    }
                }
                Err(e) => {
                    metrics::store_error("claim");
                    failures += 1;
                    // At the first failure and then about every minute and a half (the
                    // backoff is 5 s at most) while it lasts.
                    if worth_logging(failures) {
                        tracing::error!(error = %e, failures, "cannot claim notifications; retrying with backoff");
                    }
                    drop(places);
                    if !self.nap(backoff(failures), stop).await {
                        return;
                    }
                }
            }
        }
    }

    /// Waits for at least one free place among the claimed, then takes as many as are
    /// free, up to `limit`. `None` when told to stop.
    async fn places(
        &self,
        claimed: &Arc<Semaphore>,
        limit: usize,
        stop: &CancellationToken,
    ) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = tokio::select! {
            biased;
            _ = stop.cancelled() => return None,
            p = claimed.clone().acquire_owned() => p.ok()?,
        };
        let mut places = vec![first];
        places.extend((1..limit).map_while(|_| claimed.clone().try_acquire_owned().ok()));
        Some(places)
    }

    /// Sleeps for `d` unless woken; false when told to stop.
    async fn nap(&self, d: Duration, stop: &CancellationToken) -> bool {
        tokio::select! {
            biased;
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

/// How long to sleep when the next wake-up is `d` away. What falls due within
/// `CLAIM_AHEAD` was claimed, so a wake-up that near is a lease ending, slept to exactly;
/// for a due time, the scheduler wakes half of `CLAIM_AHEAD` before it.
fn before_due(d: Duration) -> Duration {
    if d > CLAIM_AHEAD {
        d - CLAIM_AHEAD / 2
    } else {
        d
    }
}

/// What a claimed notification holds: its place among those this instance has claimed,
/// from the claim until its outcome is recorded (which bounds what it holds in memory
/// and what a crash would repeat), and a delivery slot from its due time until its
/// outcome is queued for the settler.
struct Place {
    claimed: OwnedSemaphorePermit,
    /// Its tenant's share of the slots, taken with its slot.
    share: Option<Share>,
    slot: Option<Slot>,
}

impl Place {
    /// A claimed notification's place, before it has a slot.
    fn of(claimed: OwnedSemaphorePermit) -> Self {
        Self {
            claimed,
            share: None,
            slot: None,
        }
    }
}

/// What a sender task needs: shared by every attempt of this instance.
#[derive(Clone)]
struct AttemptContext {
    store: Arc<dyn Store>,
    sender: Arc<Sender>,
    policy: Arc<Policy>,
    settle: mpsc::Sender<Queued>,
    /// The delivery slots, which a claimed notification queues for when it falls due.
    slots: Arc<Slots>,
    shares: Arc<TenantShares>,
    leases: Leases,
    abort: CancellationToken,
    /// ± spread of retry intervals.
    jitter: Percent,
    observers: Observers,
}

impl AttemptContext {
    /// Sends each claimed notification at its send time (`reservations`) on its own
    /// task if the policy admits it (waiting there for a slot at a fast, busy host);
    /// otherwise defers it (held back by its endpoint's open circuit, among others),
    /// without holding a delivery slot. One whose time is a moment away waits on its own task until then, and only
    /// then asks the policy; one whose time is further is deferred to it in the store.
    /// Each job comes with its place among the claimed (`claims`), and takes a
    /// delivery slot when it is due.
    async fn dispatch(
        &self,
        jobs: Vec<ClaimedJob>,
        claims: Vec<OwnedSemaphorePermit>,
        tasks: &TaskTracker,
    ) {
        for job in &jobs {
            self.leases.note(job.id, job.lease);
        }
        let pauses = &self.observers.pauses;
        let (held, jobs): (Vec<_>, Vec<_>) = jobs
            .into_iter()
            .zip(claims)
            .partition(|(job, _)| !job.probe && pauses.is_paused(&job.spec.tenant, &job.spec.url));
        for (job, claimed) in held {
            let place = Place::of(claimed);
            self.defer(job, place, Back::Held, "endpoint_paused").await;
        }
        self.restore_circuits(&jobs).await;
        let refs: Vec<&ClaimedJob> = jobs.iter().map(|(job, _)| job).collect();
        let times = reservations::send_times(self.store.as_ref(), &self.policy, &refs).await;
        for ((job, claimed), at) in jobs.into_iter().zip(times) {
            let place = Place::of(claimed);
            match at {
                SendAt::After(wait) if wait.is_zero() => self.take_slot(job, place, tasks).await,
                SendAt::After(wait) => {
                    // Boxed, as an attempt is (`admit`).
                    let when_due = self.clone().when_due(wait, job, place, tasks.clone());
                    tasks.spawn(Box::pin(when_due));
                }
                SendAt::Deferred {
                    wait,
                    reserved,
                    reason,
                } => {
                    let back = Back::After {
                        delay: wait,
                        reserved,
                    };
                    self.defer(job, place, back, reason).await
                }
            }
        }
    }

    /// Reads back from the store the circuits of held-back notifications whose circuit
    /// this instance does not know (it started since they were held back), so that their
    /// first request after a restart is the circuit's probe, at the time the circuit
    /// said, rather than one attempt each. One read per endpoint, once.
    async fn restore_circuits(&self, jobs: &[(ClaimedJob, OwnedSemaphorePermit)]) {
        let mut unknown: HashMap<Endpoint, Vec<(String, String)>> = HashMap::new();
        for (job, _) in jobs.iter().filter(|(job, _)| job.waiting_since.is_some()) {
            let target = job.spec.target();
            let Some(url) = target.url.filter(|_| !self.policy.knows(&target.circuit)) else {
                continue;
            };
            if let Some(endpoint) = Endpoint::of(&job.spec.tenant, &url) {
                let circuit = (target.circuit, url.path().to_string());
                unknown.entry(endpoint).or_default().push(circuit);
            }
        }
        for (endpoint, circuits) in unknown {
            let record = match self.store.endpoint(&endpoint.tenant, &endpoint.id()).await {
                Ok(record) => record,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read an endpoint's circuits; asking again at its next claim");
                    continue;
                }
            };
            for (circuit, path) in circuits {
                let open = record.as_ref().and_then(|r| open_in(r, &path));
                self.policy.restore(&circuit, open);
            }
        }
    }

    /// A due notification takes a free slot, or queues for the next.
    async fn take_slot(&self, job: ClaimedJob, place: Place, tasks: &TaskTracker) {
        match self.slots.try_take() {
            Some(slot) => self.with_slot(job, place, slot, tasks).await,
            None => {
                let queued = self.slots.queue();
                let when_free = self
                    .clone()
                    .when_slot_frees(queued, job, place, tasks.clone());
                tasks.spawn(Box::pin(when_free));
            }
        }
    }

    /// Waits until the job is due, then for a delivery slot.
    async fn when_due(self, wait: Duration, job: ClaimedJob, place: Place, tasks: TaskTracker) {
        tokio::select! {
            biased;
            _ = self.abort.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        self.take_slot(job, place, &tasks).await
    }

    /// Waits in the queue for a delivery slot, then asks the policy. One that finds no
    /// slot within `SLOT_WAIT` is handed back, due at once.
    async fn when_slot_frees(
        self,
        queued: InQueue,
        job: ClaimedJob,
        place: Place,
        tasks: TaskTracker,
    ) {
        let slot = tokio::select! {
            biased;
            _ = self.abort.cancelled() => return,
            slot = queued.take(SLOT_WAIT) => slot,
        };
        match slot {
            Some(slot) => self.with_slot(job, place, slot, &tasks).await,
            None => {
                self.defer(job, place, Back::later(Duration::ZERO), "slots_busy")
                    .await
            }
        }
    }

    /// With a slot, its tenant's share of the slots too (a share counts slots held, not
    /// places in the queue for one); when its tenant holds all it may, the slot goes
    /// back and the notification is deferred `tenant_busy`, so that other tenants'
    /// notifications behind it are claimed meanwhile.
    async fn with_slot(&self, job: ClaimedJob, mut place: Place, slot: Slot, tasks: &TaskTracker) {
        let Some(share) = self.shares.take(&job.spec.tenant) else {
            drop(slot);
            return self
                .defer(job, place, Back::later(TENANT_WAIT), "tenant_busy")
                .await;
        };
        place.slot = Some(slot);
        place.share = Some(share);
        self.admit(job, place, tasks).await
    }

    async fn admit(&self, job: ClaimedJob, place: Place, tasks: &TaskTracker) {
        let target = job.spec.target();
        match self
            .policy
            .admit(&target.host_key, &target.circuit, ask(&job))
        {
            Admission::Send(slot) => {
                // Boxed: an attempt's future is large, and spawning moves it by value
                // into its task (a pointer moves instead).
                tasks.spawn(Box::pin(self.clone().attempt(job, target, place, slot)));
            }
            Admission::WaitForHost => {
                tasks.spawn(Box::pin(self.clone().wait_for_host(job, target, place)));
            }
            Admission::Refuse(refusal) => self.refuse(refusal, job, &target, place).await,
        }
    }

    /// Waits for a slot at the job's host, then sends it or turns it away.
    async fn wait_for_host(self, job: ClaimedJob, target: Target, place: Place) {
        let admission = tokio::select! {
            biased;
            a = self.policy.admit_after_wait(&target.host_key, &target.circuit, ask(&job)) => a,
            _ = self.abort.cancelled() => return,
        };
        match admission {
            Ok(slot) => self.attempt(job, target, place, slot).await,
            Err(refusal) => self.refuse(refusal, job, &target, place).await,
        }
    }

    async fn refuse(&self, refusal: Refusal, job: ClaimedJob, target: &Target, place: Place) {
        match refusal {
            Refusal::Defer { wait, reason } => {
                self.defer(job, place, Back::later(wait), reason).await
            }
            Refusal::CircuitOpen { wait, judged } => {
                if judged && job.dies_waiting() {
                    self.dead_at_deadline(&job, &target.host);
                }
                let url = job.spec.url.clone();
                let back = Back::Circuit {
                    delay: wait,
                    url,
                    judged,
                };
                self.defer(job, place, back, "circuit_open").await
            }
        }
    }

    /// Tells of a notification its circuit holds back past its deadline, which its
    /// deferral makes a dead letter (`transitions::wait_for_circuit`), as of one whose
    /// last attempt failed.
    fn dead_at_deadline(&self, job: &ClaimedJob, host: &str) {
        let tenant = &*job.spec.tenant;
        attempt_span(job, host).in_scope(|| {
            tracing::warn!(
                tenant,
                error = CIRCUIT_DEADLINE,
                "dead-lettered: its endpoint's circuit was still open at its deadline"
            )
        });
        metrics::dead_lettered(1);
        let attempts = job.attempt.saturating_sub(1);
        self.observers
            .ops
            .dead(job, attempts, None, Some(CIRCUIT_DEADLINE));
    }

    /// Hands a claimed notification back as `back` says, without an attempt.
    async fn defer(&self, job: ClaimedJob, place: Place, back: Back, reason: &'static str) {
        metrics::deferred(reason);
        tracing::debug!(id = %job.id, reason, back = %back, "deferred");
        let deferral = Deferral {
            id: job.id,
            lease: job.lease,
            back,
        };
        self.report(Report::Deferred(deferral), place).await;
    }

    /// What the fleet learns from an attempt: the breaker counts it here (a change of
    /// its circuit goes to the endpoint's record), and on its own task (so that a slow
    /// store holds back neither the slot nor the settle) the other instances are told of
    /// the endpoint's health, and a receiver's `Retry-After` pauses its rate key in the
    /// store.
    fn learn_from(&self, job: &ClaimedJob, target: &Target, report: &AttemptReport) {
        let recorded = self.policy.record(&target.circuit, report);
        if let Some(change) = recorded.change {
            self.note_circuit(job, target, change);
        }
        let tell = recorded.tell.filter(|_| self.store.fleet().is_some());
        let endpoint = target.circuit.as_str();
        let pause = report
            .retry_after
            .map(|wait| RateAsk::pause(&job.spec.quota_key(), wait));
        if tell.is_none() && pause.is_none() {
            return;
        }
        let (store, endpoint) = (self.store.clone(), endpoint.to_string());
        tokio::spawn(async move {
            if let (Some(healthy), Some(fleet)) = (tell, store.fleet()) {
                if let Err(e) = fleet.publish_health(&endpoint, healthy).await {
                    metrics::store_error("publish_health");
                    tracing::debug!(error = %e, "cannot tell the other instances of an endpoint's health");
                }
            }
            if let Some(pause) = pause {
                if let Err(e) = store.reserve(std::slice::from_ref(&pause)).await {
                    metrics::store_error("pause");
                    tracing::warn!(error = %e, rate_key = %pause.key, "cannot pause the rate key for its Retry-After; only this notification waits");
                }
            }
        });
    }

    /// Keeps a change of a circuit, which this instance's request made, in its
    /// endpoint's record (but for ops events, whose endpoints are not followed).
    fn note_circuit(&self, job: &ClaimedJob, target: &Target, change: CircuitChange) {
        let Some(url) = target.url.as_ref().filter(|_| !OpsEvents::is_event(job)) else {
            return;
        };
        let open = match change {
            CircuitChange::Opened(open) | CircuitChange::Reopened(open) => Some(open),
            CircuitChange::Closed => None,
        };
        let endpoint = Endpoint::of(&job.spec.tenant, url);
        if let Some(endpoint) = endpoint.filter(|_| open.is_none()) {
            let path = url.path().to_string();
            self.observers.circuits.closed(endpoint, path);
        }
        let record = CircuitRecord {
            path: url.path().to_string(),
            at: now_ms(),
            open_since: open.map(|o| o.since),
            probe_at: open.map(|o| o.probe_at),
        };
        self.observers
            .endpoints
            .circuit(&job.spec.tenant, url, record);
    }

    async fn attempt(self, job: ClaimedJob, target: Target, place: Place, slot: HostSlot) {
        let span = attempt_span(&job, &target.host);
        record_lateness(&job);
        async move {
            let report = tokio::select! {
                biased;
                r = self.sender.send(&job.id, &job.spec, target.url.as_ref()) => r,
                _ = self.abort.cancelled() => return,
            };
            slot.finish(Duration::from_millis(report.duration_ms));
            let settlement = self.settlement(&job, report);
            let report = &settlement.report;
            self.learn_from(&job, &target, report);
            log_outcome(&job, &settlement);
            if let Some(url) = target.url.as_ref().filter(|_| !OpsEvents::is_event(&job)) {
                let tenant = &job.spec.tenant;
                self.observers.endpoints.attempted(tenant, url, report);
            }
            if makes_it_dead(&job, report) {
                let error = report.error.as_deref();
                self.observers
                    .ops
                    .dead(&job, job.attempt, report.status, error);
            }
            if job.probe && report.outcome == Outcome::Delivered {
                self.resume_probed(&job);
            }
            traces::attempt_ended(&tracing::Span::current(), report);
            self.report(Report::Attempted(settlement), place).await;
        }
        .instrument(span)
        .await
    }

    /// Resumes the paused endpoint `job` probed, on its own task.
    fn resume_probed(&self, job: &ClaimedJob) {
        let (store, wake) = (self.store.clone(), self.observers.wake.clone());
        let (pauses, ops) = (self.observers.pauses.clone(), self.observers.ops.clone());
        let (tenant, url) = (job.spec.tenant.clone(), job.spec.url.clone());
        tokio::spawn(async move {
            pauses
                .probe_delivered(store.as_ref(), &ops, &wake, &tenant, &url)
                .await;
        });
    }

    fn settlement(&self, job: &ClaimedJob, report: AttemptReport) -> Settlement {
        let spread = self.jitter.get() as i32 * 10;
        Settlement {
            id: job.id,
            lease: job.lease,
            report,
            ended_at: job.store_now(),
            ordered: job.spec.ordering_key.is_some(),
            url: job.spec.url.clone(),
            jitter_permille: if spread == 0 {
                0
            } else {
                fastrand::i32(-spread..=spread)
            },
        }
    }

    /// Queues a report for the settler with the notification's place among the claimed,
    /// which it holds until the report goes to the store. The delivery slot is held until
    /// the queue takes the report, so a settler that falls behind slows sending, and what
    /// is sent but not recorded (what a crash would repeat) stays within the slots, the
    /// queue and one batch. Past the grace period the lease is released instead.
    async fn report(&self, report: Report, place: Place) {
        let Place {
            claimed,
            share: _share,
            slot: _slot,
        } = place;
        tokio::select! {
            biased;
            _ = self.settle.send(Queued {
                report,
                _claimed: claimed,
            }) => {}
            _ = self.abort.cancelled() => {}
        }
    }
}

/// The span every log line of an attempt is in; exported, it is a child of the
/// registration's span.
fn attempt_span(job: &ClaimedJob, host: &str) -> tracing::Span {
    let span = tracing::info_span!("attempt", id = %job.id, attempt = job.attempt, host = %host, lateness_ms = job.lateness_ms());
    traces::continue_from(&span, job.spec.traceparent.as_deref());
    span
}

fn record_lateness(job: &ClaimedJob) {
    metrics::lateness(Duration::from_millis(job.lateness_ms() as u64));
}

/// What the circuit is asked of `job`: its last attempt is always sent, a paused
/// endpoint's probe probes at once, and one that its deferral would make a dead letter
/// goes if its endpoint answered since it was held back.
fn ask(job: &ClaimedJob) -> Ask {
    Ask {
        last: job.is_last(),
        probe: job.probe,
        spare_since: job.waiting_since.filter(|_| job.dies_waiting()),
    }
}

/// The open circuit of `path` that `record` keeps, if open.
fn open_in(record: &EndpointRecord, path: &str) -> Option<OpenCircuit> {
    let kept = record.circuit(path)?;
    Some(OpenCircuit {
        since: kept.open_since?,
        probe_at: kept.probe_at.unwrap_or(kept.at),
    })
}

/// When the attempt `s` settles is next due if it failed, as the store will work it out
/// (`Verdict::wait_after`, from its end); `None` for a paused endpoint's probe, which is
/// held again, and for a last attempt.
fn next_attempt_at(job: &ClaimedJob, s: &Settlement) -> Option<i64> {
    let interval = job.next_interval_ms.filter(|_| !job.probe)?;
    Some(s.ended_at + s.verdict().wait_after(interval))
}

/// Logs and counts how an attempt ended: one line at `info` for a delivery, or a failure
/// (with when it is next due), at `warn` for an attempt that makes its notification a
/// dead letter (gone, or its last), in the attempt's span (which names the notification
/// and the attempt).
fn log_outcome(job: &ClaimedJob, settlement: &Settlement) {
    let report = &settlement.report;
    metrics::attempt(report);
    let (tenant, status, ms) = (&*job.spec.tenant, report.status, report.duration_ms);
    let error = report.error.as_deref();
    match report.outcome {
        Outcome::Delivered => tracing::info!(tenant, status, ms, "delivered"),
        Outcome::Gone => tracing::warn!(
            tenant,
            status,
            error,
            ms,
            "dead-lettered: the receiver answered 410 Gone"
        ),
        Outcome::Failed if makes_it_dead(job, report) => {
            tracing::warn!(
                tenant,
                status,
                error,
                ms,
                "dead-lettered: its last attempt failed"
            )
        }
        Outcome::Failed => match next_attempt_at(job, settlement) {
            Some(at) => {
                let next_attempt_at = rfc3339(at);
                tracing::info!(tenant, status, error, ms, %next_attempt_at, "attempt failed")
            }
            None => tracing::info!(
                tenant,
                status,
                error,
                ms,
                "pause probe failed: held again while its endpoint is paused"
            ),
        },
    }
}

/// Whether `report`'s attempt makes `job` a dead letter: the receiver said it is gone,
/// or its last attempt failed.
fn makes_it_dead(job: &ClaimedJob, report: &AttemptReport) -> bool {
    match report.outcome {
        Outcome::Gone => true,
        Outcome::Failed => job.is_last(),
        Outcome::Delivered => false,
    }
}

/// Whether the delivery pipeline (the scheduler and its senders) is running, for
/// `/readyz`: an instance whose pipeline stopped (a panic in it) answers the API but
/// delivers nothing, and should be restarted.
#[derive(Debug, Clone, Default)]
pub struct Pipeline(Arc<AtomicBool>);

impl Pipeline {
    pub fn is_running(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Marks the pipeline running until the guard is dropped, however its task ends.
    pub(crate) fn running(&self) -> Running {
        self.0.store(true, Ordering::Relaxed);
        Running(self.0.clone())
    }
}

pub(crate) struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}
