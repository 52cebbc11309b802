//! What a closed circuit held back, let go at once. When this instance's request closes
//! an endpoint path's circuit, the notifications the circuit holds back (the
//! `held_back` list of the endpoint, at that path) are made due now (`attempt_now`),
//! oldest due first, at most `PER_TICK` per circuit a second, rather than each waiting
//! for the time its deferral named (up to a cooldown and a half later). An instance that
//! only learns of the close leaves them to the one whose request closed it; should that
//! one stop first, each goes at its own time, as before.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::backoff::worth_logging;
use crate::domain::Endpoint;
use crate::lifecycle::LetGo;
use crate::store::{ListFilter, Listed, OperatorActions, Reads, StoreResult, WalkCursor};

/// How often the closed circuits' held-back notifications are let go.
const TICK: Duration = Duration::from_secs(1);
/// Held-back notifications read per page.
const PAGE: usize = 500;
/// Held-back notifications let go per circuit and tick.
const PER_TICK: usize = 100;

/// The store's roles letting go needs: the held-back list and `attempt_now`.
pub trait CircuitsStore: Reads + OperatorActions {}

impl<S: Reads + OperatorActions + ?Sized> CircuitsStore for S {}

/// The circuits this instance closed whose held-back notifications are being let go.
#[derive(Default)]
pub struct ClosedCircuits {
    walks: Mutex<Vec<Walk>>,
}

/// One closed circuit's walk through its endpoint's held-back list.
struct Walk {
    endpoint: Endpoint,
    path: String,
    after: Option<WalkCursor>,
}

impl ClosedCircuits {
    /// This instance's request closed the circuit of `endpoint`'s `path`.
    pub fn closed(&self, endpoint: Endpoint, path: String) {
        let mut walks = self.lock();
        if !walks
            .iter()
            .any(|w| w.endpoint == endpoint && w.path == path)
        {
            walks.push(Walk {
                endpoint,
                path,
                after: None,
            });
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Walk>> {
        self.walks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Until `stop`: every `TICK`, lets go some of what each closed circuit held back.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<impl CircuitsStore + ?Sized>,
        stop: CancellationToken,
    ) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failures = 0;
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match self.let_go(store.as_ref()).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if worth_logging(failures) {
                        tracing::info!(error = %e, failures, "what a closed circuit held back not let go; trying again");
                    }
                }
            }
        }
    }

    /// One page of each walk; the walks with more to read are kept (and, after a store
    /// error, those not read).
    async fn let_go(&self, store: &(impl CircuitsStore + ?Sized)) -> StoreResult<()> {
        let walks = std::mem::take(&mut *self.lock());
        let (mut kept, mut result) = (Vec::new(), Ok(()));
        for mut walk in walks {
            if result.is_ok() {
                match walk.step(store).await {
                    Ok(false) => continue,
                    Ok(true) => {}
                    Err(e) => result = Err(e),
                }
            }
            kept.push(walk);
        }
        self.lock().extend(kept);
        result
    }
}

impl Walk {
    /// Lets go what one page holds back at the walk's path, up to `PER_TICK`; whether
    /// the walk has more to read.
    async fn step(&mut self, store: &(impl CircuitsStore + ?Sized)) -> StoreResult<bool> {
        let filter = ListFilter {
            tenant: Some(self.endpoint.tenant.clone()),
            endpoint: Some(self.endpoint.clone()),
            ..ListFilter::default()
        };
        let page = store
            .list(Listed::HeldBack, &filter, PAGE, self.after.as_ref())
            .await?;
        let mut let_go = 0;
        for v in page
            .items
            .iter()
            .filter(|v| path_of(&v.spec.url) == self.path)
        {
            if let_go == PER_TICK {
                return Ok(true);
            }
            if store.attempt_now(&v.id, LetGo::Now).await? {
                let_go += 1;
                tracing::debug!(id = %v.id, "let go: its circuit closed");
            }
        }
        self.after = page.next_cursor;
        Ok(self.after.is_some())
    }
}

/// The path of a stored callback URL ("" if it cannot be read).
fn path_of(url: &str) -> String {
    url::Url::parse(url).map_or_else(|_| String::new(), |u| u.path().to_string())
}
