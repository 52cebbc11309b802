//! Paused endpoints as this instance knows them, and letting go of what they held.
//!
//! A pause is kept in the store (`EndpointHealth::set_pause`), which every instance reads
//! whole every `READ_EVERY` (one command on Redis, within the idle cost an instance is
//! allowed); the API applies its own pause or resume here at once. The
//! scheduler holds a claimed notification whose endpoint is paused (`is_paused`) instead
//! of attempting it (`transitions::hold`). A view not refreshed for `STALE` counts as no
//! pause at all: an instance that cannot read the store must not keep holding what a
//! resume let go (and without the store it holds nothing anyway).
//!
//! Held notifications whose endpoint is no longer paused are let go (`attempt_now`) oldest
//! due first, at most `DRAIN_PER_ENDPOINT` per endpoint and `TICK`, so that a resumed
//! endpoint gets its backlog as a steady flow within its rate key's quota rather than
//! all at once; ordering keys keep their order, since only a key's first can be held.
//! The held list is read when a pause ended (this instance resumed it, or a reading of
//! the store no longer has it), while the last reading let some go, and every `RECHECK`
//! while any endpoint is paused or was lately, which also lets go any held by an
//! instance whose view was stale. An instance that never saw a pause reads nothing more.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::backoff::worth_logging;
use crate::domain::{Endpoint, Tenant};
use crate::store::endpoints::key;
use crate::store::{JobView, ListFilter, Listed, Store, StoreResult, WalkCursor};

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
/// How often the held list is read when nothing else asks for it, while an endpoint is
/// paused and for as long after the last pause ended.
const RECHECK: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct EndpointPauses {
    view: RwLock<View>,
    /// This instance resumed one since the last reading: read the held list.
    resumed: AtomicBool,
}

#[derive(Default)]
struct View {
    refreshed: Option<Instant>,
    /// The paused endpoints' keys (`endpoints::key`).
    keys: HashSet<String>,
    /// The tenants with a paused endpoint, so that others' notifications cost one lookup.
    tenants: HashSet<String>,
}

impl View {
    fn of(keys: HashSet<String>) -> Self {
        let tenants = keys
            .iter()
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
        fresh && self.keys.contains(&key(&endpoint.tenant, &endpoint.id()))
    }
}

impl EndpointPauses {
    /// Whether a notification of `tenant` to `url` is to be held: its endpoint is paused.
    pub fn is_paused(&self, tenant: &Tenant, url: &str) -> bool {
        let view = self.view.read().expect("pauses lock");
        // Only a tenant with a paused endpoint pays for reading the URL.
        view.tenants.contains(&**tenant)
            && Endpoint::of_text(tenant, url).is_some_and(|e| view.holds(&e))
    }

    /// Whether `endpoint` is paused.
    fn holds(&self, endpoint: &Endpoint) -> bool {
        self.view.read().expect("pauses lock").holds(endpoint)
    }

    /// This instance's own pause (`true`) or resume of the endpoint of `key`, known here
    /// before the next read of the store.
    pub fn note(&self, key: &str, paused: bool) {
        let mut view = self.view.write().expect("pauses lock");
        let mut keys = std::mem::take(&mut view.keys);
        match paused {
            true => keys.insert(key.to_string()),
            false => keys.remove(key),
        };
        let refreshed = view.refreshed;
        *view = View {
            refreshed,
            ..View::of(keys)
        };
        if !paused {
            self.resumed.store(true, Ordering::Relaxed);
        }
    }

    /// Until `stop`: reads the pauses every `READ_EVERY`, and lets go what ended ones
    /// held.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Store>, stop: CancellationToken) {
        let mut drain = Drain::default();
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failures = 0;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match self.tick(store.as_ref(), &mut drain).await {
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

    async fn tick(&self, store: &dyn Store, drain: &mut Drain) -> StoreResult<()> {
        let read = self.view.read().expect("pauses lock").refreshed;
        let ended = match read.is_none_or(|at| at.elapsed() >= READ_EVERY) {
            true => self.read(store).await?,
            false => false,
        };
        let resumed = self.resumed.swap(false, Ordering::Relaxed);
        let paused = !self.view.read().expect("pauses lock").keys.is_empty();
        if ended || resumed {
            drain.last_pause = Some(Instant::now());
            drain.walk = None;
        }
        if ended || resumed || drain.due(paused) {
            drain.let_go(store, self).await?;
        }
        Ok(())
    }

    /// Reads the pauses from the store; whether one this instance knew of ended.
    async fn read(&self, store: &dyn Store) -> StoreResult<bool> {
        let keys: HashSet<String> = store.pauses().await?.into_iter().map(|(k, _)| k).collect();
        let mut view = self.view.write().expect("pauses lock");
        let ended = view.keys.iter().any(|k| !keys.contains(k));
        *view = View::of(keys);
        Ok(ended)
    }
}

/// When the held list is read next, and from where.
#[derive(Default)]
struct Drain {
    /// The last reading let some go, or stopped before the end: more may wait.
    more: bool,
    last: Option<Instant>,
    /// When a pause last ended, or an endpoint was last seen paused.
    last_pause: Option<Instant>,
    /// Where the next reading starts: before the first page that let some go (more of
    /// theirs may wait there), else where the last one stopped, so that held ones of
    /// endpoints still paused, however many and however old, cannot keep a reading from
    /// reaching those behind them; `None`: from the oldest.
    walk: Option<WalkCursor>,
}

impl Drain {
    fn due(&mut self, paused: bool) -> bool {
        if paused {
            self.last_pause = Some(Instant::now());
        }
        let lately = self.last_pause.is_some_and(|at| at.elapsed() < 2 * RECHECK);
        let recheck = lately && self.last.is_none_or(|at| at.elapsed() >= RECHECK);
        self.more || recheck
    }

    /// Lets go, oldest due first, the held notifications whose endpoint is not paused:
    /// at most `PAGES_PER_TICK` pages of them read.
    async fn let_go(&mut self, store: &dyn Store, pauses: &EndpointPauses) -> StoreResult<()> {
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
    store: &dyn Store,
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
        if *count < DRAIN_PER_ENDPOINT && store.attempt_now(&v.id).await? {
            *count += 1;
            released += 1;
            tracing::info!(id = %v.id, "let go: its endpoint is no longer paused");
        }
    }
    Ok(released)
}
