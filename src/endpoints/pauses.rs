//! Paused endpoints as this instance knows them, and letting go of what they held.
//!
//! A pause is kept in the store (`EndpointHealth::set_pause`), which every instance reads
//! whole every `READ_EVERY` (one command on Redis, within the idle cost an instance is
//! allowed); the API applies its own pause or resume here at once. The
//! scheduler holds a claimed notification whose endpoint is paused (`is_paused`) instead
//! of attempting it (`transitions::hold`). A view not refreshed for `STALE` counts as no
//! pause at all: an instance that cannot read the store must not keep holding what a
//! resume let go (and without the store it holds nothing anyway). Lists, counts and views
//! show a paused endpoint's notifications as held from the pause on (`paused`, and
//! `listing::shown`), though the scheduler keeps each apart only as it comes due: a
//! pause moves nothing, however large the endpoint's backlog. Each resume this instance
//! sees (its own, or a reading without the pause) is told to the listener it was given
//! (`telling`): the delivery policy, whose open circuits of the endpoint may probe at
//! once.
//!
//! Held notifications whose endpoint is no longer paused are let go (`attempt_now`) oldest
//! due first, at most `DRAIN_PER_ENDPOINT` per endpoint and `TICK`, so that a resumed
//! endpoint gets its backlog as a steady flow within its rate key's quota rather than
//! all at once; ordering keys keep their order, since only a key's first can be held.
//! The held list is read when a pause ended (this instance resumed it, or a reading of
//! the store no longer has it), while the last reading let some go, as an instance
//! starts (it cannot know what a pause that ended before then, resumed just before a
//! crash, say, left held), and every `RECHECK` whatever it saw: that lets go any held by
//! an instance whose view was stale, or that a reading could not list (one held at a
//! time its clock reads ahead of now, after the clock was stepped back), at the cost of
//! one short read of an empty list a minute when nothing is held.
//!
//! An endpoint postback paused for failing is sent a *pause probe* every
//! `endpoints.probe_interval` from its pause (not a circuit's probe, the one request an
//! open circuit of a path lets through: `delivery::policy`): its oldest held notification
//! is let go as a pause probe (`LetGo::Probe`), which the scheduler attempts although the
//! endpoint is paused. A pause probe that is delivered resumes the endpoint
//! (`probe_delivered`); one that fails is held again, its schedule as it was. Every
//! instance tries when a pause probe falls due, and the store lets one of them go (only a
//! held notification can be let go as a pause probe). A pause by hand has no pause
//! probe: the merchant asked for it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

use tokio::sync::Notify;

use crate::backoff::worth_logging;
use crate::clock::now_ms;
use crate::domain::{Endpoint, EndpointId, Tenant};
use crate::endpoints::health::{key, EndpointNotice, EndpointPause, PAUSED_BY_POSTBACK};
use crate::lifecycle::LetGo;
use crate::observability::ops_events::OpsEvents;
use crate::store::{
    EndpointHealth, JobView, ListFilter, Listed, OperatorActions, Paused, Queue, Reads,
};
use crate::store::{StoreResult, WalkCursor};

/// How often the held ones are let go while some are.
const TICK: Duration = Duration::from_secs(1);
/// How often the pauses are read from the store.
const READ_EVERY: Duration = Duration::from_secs(5);
/// A view older than this holds nothing.
const STALE: Duration = Duration::from_secs(15);
/// Held notifications let go per endpoint and tick.
const DRAIN_PER_ENDPOINT: usize = 50;
/// Held notifications read per page, and pages per tick at most.
const PAGE: usize = 500;
const PAGES_PER_TICK: usize = 4;
/// How often the held list is read when nothing else asks for it.
const RECHECK: Duration = Duration::from_secs(60);

/// The store's roles pausing uses: endpoints' records and pauses (`EndpointHealth`), the
/// held list (`Reads`) and letting held ones go (`OperatorActions`).
pub trait PausesStore: EndpointHealth + Reads + OperatorActions {}

impl<S: EndpointHealth + Reads + OperatorActions + ?Sized> PausesStore for S {}

/// Told of each endpoint this instance sees resumed (its own resume, or a reading that
/// no longer has its pause): its circuits may probe at once.
pub type ResumeListener = Box<dyn Fn(&Tenant, &EndpointId) + Send + Sync>;

pub struct EndpointPauses {
    view: RwLock<View>,
    /// This instance resumed one since the last reading: read the held list.
    resumed: AtomicBool,
    /// How often an endpoint paused for failing is probed; zero: never.
    probe_interval: Duration,
    on_resume: Option<ResumeListener>,
}

#[derive(Default)]
struct View {
    refreshed: Option<Instant>,
    /// The paused endpoints' pauses, by key (`endpoints::key`).
    keys: HashMap<String, EndpointPause>,
    /// The tenants with a paused endpoint, so that others' notifications cost one lookup.
    tenants: HashSet<String>,
}

impl View {
    fn of(keys: HashMap<String, EndpointPause>) -> Self {
        let tenants = keys
            .keys()
            .filter_map(|k| Some(k.rsplit_once(' ')?.0.to_string()))
            .collect();
        Self {
            refreshed: Some(Instant::now()),
            keys,
            tenants,
        }
    }

    /// Whether `endpoint` is paused, as far as a fresh view tells: one older than
    /// `STALE` pauses nothing.
    fn holds(&self, endpoint: &Endpoint) -> bool {
        let fresh = self.refreshed.is_some_and(|at| at.elapsed() < STALE);
        fresh
            && self
                .keys
                .contains_key(&key(&endpoint.tenant, &endpoint.id()))
    }
}

impl EndpointPauses {
    pub fn new(probe_interval: Duration) -> Self {
        Self {
            view: RwLock::default(),
            resumed: AtomicBool::new(false),
            probe_interval,
            on_resume: None,
        }
    }

    /// The same, telling `listener` of each endpoint it sees resumed.
    pub fn telling(self, listener: ResumeListener) -> Self {
        Self {
            on_resume: Some(listener),
            ..self
        }
    }

    /// Tells the listener that the endpoint of `key` was resumed.
    fn tell_resumed(&self, key: &str) {
        let (Some(listener), Some((tenant, id))) = (&self.on_resume, parse_key(key)) else {
            return;
        };
        listener(&tenant, &id);
    }

    /// Whether a notification of `tenant` to `url` is to be held: its endpoint is paused.
    pub fn is_paused(&self, tenant: &Tenant, url: &str) -> bool {
        let view = self.view.read().expect("pauses lock");
        // Only a tenant with a paused endpoint pays for reading the URL.
        view.tenants.contains(&**tenant)
            && Endpoint::of_text(tenant, url).is_some_and(|e| view.holds(&e))
    }

    /// The endpoints paused, as lists and views show them (`listing::shown`): none when
    /// the view is stale, as for the scheduler.
    pub fn paused(&self) -> Paused {
        let view = self.view.read().expect("pauses lock");
        let fresh = view.refreshed.is_some_and(|at| at.elapsed() < STALE);
        match fresh {
            true => Paused::of(view.keys.keys()),
            false => Paused::default(),
        }
    }

    /// Whether `endpoint` is paused.
    fn holds(&self, endpoint: &Endpoint) -> bool {
        self.view.read().expect("pauses lock").holds(endpoint)
    }

    /// This instance's own pause (`Some`) or resume (`None`) of the endpoint of `key`,
    /// known here before the next read of the store.
    pub fn note(&self, key: &str, pause: Option<&EndpointPause>) {
        let mut view = self.view.write().expect("pauses lock");
        let mut keys = std::mem::take(&mut view.keys);
        match pause {
            Some(p) => keys.insert(key.to_string(), p.clone()),
            None => keys.remove(key),
        };
        let refreshed = view.refreshed;
        *view = View {
            refreshed,
            ..View::of(keys)
        };
        if pause.is_none() {
            self.resumed.store(true, Ordering::Relaxed);
            self.tell_resumed(key);
        }
    }

    /// A probe of `tenant`'s endpoint at `url` was delivered: resumes the endpoint, and
    /// tells it (`endpoint.resumed`, by `probe`).
    pub async fn probe_delivered(
        &self,
        store: &(impl EndpointHealth + Queue + ?Sized),
        ops: &OpsEvents,
        wake: &Notify,
        tenant: &Tenant,
        url: &str,
    ) {
        let Some(endpoint) = Endpoint::of_text(tenant, url) else {
            return;
        };
        let key = key(tenant, &endpoint.id());
        let resumed = async {
            let record = store.endpoint(tenant, &endpoint.id()).await?;
            let resumed = store.set_pause(&key, None).await?;
            StoreResult::Ok(record.filter(|_| resumed))
        };
        match resumed.await {
            Ok(Some(record)) => {
                self.note(&key, None);
                tracing::info!(endpoint = %record.id(), tenant = %tenant, "endpoint resumed: a pause probe was delivered");
                let notice = EndpointNotice::Resumed(record, "probe".to_string());
                ops.endpoints(store, wake, &[notice]).await;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, endpoint = %endpoint.id(), "a pause probe was delivered, but its endpoint could not be resumed; the next pause probe tries again");
            }
        }
    }

    /// Until `stop`: reads the pauses every `READ_EVERY`, and lets go what ended ones
    /// held.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<impl PausesStore + ?Sized>,
        stop: CancellationToken,
    ) {
        let mut drain = Drain::default();
        let mut probes = Probes::default();
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failures = 0;
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match self.tick(store.as_ref(), &mut drain, &mut probes).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    // The outage itself is warned of by the parts it stops; here it
                    // only delays a pause, so it is told at info.
                    if worth_logging(failures) {
                        tracing::info!(error = %e, failures, "endpoint pauses not read; trying again");
                    }
                }
            }
        }
    }

    async fn tick(
        &self,
        store: &(impl PausesStore + ?Sized),
        drain: &mut Drain,
        probes: &mut Probes,
    ) -> StoreResult<()> {
        let read = self.view.read().expect("pauses lock").refreshed;
        let ended = match read.is_none_or(|at| at.elapsed() >= READ_EVERY) {
            true => self.read(store).await?,
            false => false,
        };
        let resumed = self.resumed.swap(false, Ordering::Relaxed);
        let paused = !self.view.read().expect("pauses lock").keys.is_empty();
        if ended || resumed {
            drain.walk = None;
        }
        if ended || resumed || drain.due() {
            drain.let_go(store, self).await?;
        }
        if paused {
            self.probe(store, probes).await?;
        }
        Ok(())
    }

    /// Lets go one held notification of each endpoint paused for failing whose probe is
    /// due: every `probe_interval` from its pause, once per interval on this instance.
    async fn probe(
        &self,
        store: &(impl PausesStore + ?Sized),
        probes: &mut Probes,
    ) -> StoreResult<()> {
        let interval = self.probe_interval.as_millis() as i64;
        if interval == 0 {
            return Ok(());
        }
        let now = now_ms();
        let due: Vec<(String, i64)> = {
            let view = self.view.read().expect("pauses lock");
            probes.last.retain(|k, _| view.keys.contains_key(k));
            let by_postback = view.keys.iter().filter(|(_, p)| p.by == PAUSED_BY_POSTBACK);
            by_postback
                .map(|(k, p)| (k.clone(), (now - p.since).div_euclid(interval)))
                .filter(|(k, round)| *round > 0 && probes.last.get(k) < Some(round))
                .collect()
        };
        for (key, round) in due {
            probes.last.insert(key.clone(), round);
            if let Some(id) = oldest_held(store, &key).await? {
                if store.attempt_now(&id, LetGo::Probe).await? {
                    tracing::info!(%id, endpoint = %key, "let go as its paused endpoint's pause probe");
                }
            }
        }
        Ok(())
    }

    /// Reads the pauses from the store; whether one this instance knew of ended.
    async fn read(&self, store: &(impl EndpointHealth + ?Sized)) -> StoreResult<bool> {
        let keys: HashMap<String, EndpointPause> = store.pauses().await?.into_iter().collect();
        let ended: Vec<String> = {
            let mut view = self.view.write().expect("pauses lock");
            let ended = view.keys.keys().filter(|k| !keys.contains_key(*k));
            let ended = ended.cloned().collect();
            *view = View::of(keys);
            ended
        };
        for key in &ended {
            self.tell_resumed(key);
        }
        Ok(!ended.is_empty())
    }
}

/// The last round of probes this instance took part in, by endpoint key.
#[derive(Default)]
struct Probes {
    last: HashMap<String, i64>,
}

/// The tenant and the id of the endpoint of `key` (`endpoints::key`).
fn parse_key(key: &str) -> Option<(Tenant, EndpointId)> {
    let (tenant, id) = key.rsplit_once(' ')?;
    let tenant = Tenant::parse(tenant, "tenant").ok()?;
    Some((tenant, EndpointId::parse(id, "id").ok()?))
}

/// The oldest held notification of the endpoint of `key`, if any: the first of its
/// held ones, walking at most `PAGES_PER_TICK` pages.
async fn oldest_held(
    store: &(impl EndpointHealth + Reads + ?Sized),
    key: &str,
) -> StoreResult<Option<crate::domain::JobId>> {
    let Some((tenant, id)) = parse_key(key) else {
        return Ok(None);
    };
    let Some(record) = store.endpoint(&tenant, &id).await? else {
        return Ok(None);
    };
    let filter = ListFilter {
        tenant: Some(tenant),
        endpoint: Some(record.endpoint()),
        ..ListFilter::default()
    };
    let mut after = None;
    for _ in 0..PAGES_PER_TICK {
        let page = store.list(Listed::Held, &filter, 1, after.as_ref()).await?;
        if let Some(first) = page.items.first() {
            return Ok(Some(first.id));
        }
        after = page.next_cursor;
        if after.is_none() {
            break;
        }
    }
    Ok(None)
}

/// When the held list is read next, and from where.
#[derive(Default)]
struct Drain {
    /// The last reading let some go, or stopped before the end: more may wait.
    more: bool,
    last: Option<Instant>,
    /// Where the next reading starts: before the first page that let some go (more of
    /// theirs may wait there), else where the last one stopped, so that held ones of
    /// endpoints still paused, however many and however old, cannot keep a reading from
    /// reaching those behind them; `None`: from the oldest.
    walk: Option<WalkCursor>,
}

impl Drain {
    /// Whether to read: more may wait, or it was not read for `RECHECK` (or ever: as an
    /// instance starts, a pause may have ended just before, leaving held ones).
    fn due(&self) -> bool {
        self.more || self.last.is_none_or(|at| at.elapsed() >= RECHECK)
    }

    /// Lets go, oldest due first, the held notifications whose endpoint is not paused:
    /// at most `PAGES_PER_TICK` pages of them read.
    async fn let_go(
        &mut self,
        store: &(impl Reads + OperatorActions + ?Sized),
        pauses: &EndpointPauses,
    ) -> StoreResult<()> {
        self.last = Some(Instant::now());
        let mut sent: HashMap<Endpoint, usize> = HashMap::new();
        let (mut after, mut again) = (self.walk.take(), None);
        for _ in 0..PAGES_PER_TICK {
            let page = store
                .list(Listed::Held, &ListFilter::default(), PAGE, after.as_ref())
                .await?;
            let released = release(store, pauses, &page.items, &mut sent).await?;
            if released > 0 && again.is_none() {
                again = Some(after.clone());
            }
            after = page.next_cursor;
            if after.is_none() {
                break;
            }
        }
        self.more = again.is_some() || after.is_some();
        self.walk = again.unwrap_or(after);
        Ok(())
    }
}

/// Lets go those of `held` whose endpoint is not paused, up to `DRAIN_PER_ENDPOINT` per
/// endpoint (`sent` counts them); how many.
async fn release(
    store: &(impl OperatorActions + ?Sized),
    pauses: &EndpointPauses,
    held: &[JobView],
    sent: &mut HashMap<Endpoint, usize>,
) -> StoreResult<usize> {
    let mut released = 0;
    for v in held {
        let Some(endpoint) = Endpoint::of_text(&v.spec.tenant, &v.spec.url) else {
            continue;
        };
        if pauses.holds(&endpoint) {
            continue;
        }
        let count = sent.entry(endpoint).or_default();
        if *count < DRAIN_PER_ENDPOINT && store.attempt_now(&v.id, LetGo::Now).await? {
            *count += 1;
            released += 1;
            tracing::info!(id = %v.id, "let go: its endpoint is no longer paused");
        }
    }
    Ok(released)
}
