//! What this instance sees of endpoints (`domain::Endpoint`): the registrations to each,
//! how its attempts there went and how they changed its circuits, gathered in memory and added to the endpoints'
//! records in the store every second (`EndpointHealth`), where every instance's add up.
//! The API notes registrations, so an endpoint is known from its first notification; the
//! scheduler notes attempts. A store that cannot be reached keeps the tallies for the next
//! second; an instance killed loses at most a second of counts, never a notification.
//! What a write decides (an endpoint failing for `ops.failing_after`, one paused for
//! failing `endpoints.pause_after`) goes to `ops_events`, which tells it; a pause is
//! applied here at once, before the next reading of the pauses.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backoff::{backoff, worth_logging};
use crate::clock::now_ms;
use crate::domain::{AttemptReport, Endpoint, Outcome, Tenant};
use crate::endpoints::health::{CircuitRecord, EndpointNotice, EndpointRules, Failure};
use crate::endpoints::pauses::EndpointPauses;
use crate::observability::ops_events::OpsEvents;
use crate::store::{EndpointHealth, EndpointTally, Queue, StoreResult};

/// How often the tallies go to the store.
const PERIOD: Duration = Duration::from_secs(1);
/// Endpoints a tenant's registrations add at most between two writes: beyond it, its
/// registrations to further endpoints are not noted (their attempts are), so that a
/// tenant's flood of distinct callback origins bounds what one write carries and leaves
/// other tenants' registrations noted.
const MAX_NEW_PER_TENANT: usize = 1_000;
/// Records written per store call.
const PER_CALL: usize = 200;

pub struct EndpointTallies {
    gathered: Mutex<Gathered>,
    /// When the writes tell an endpoint failing and pause it.
    rules: EndpointRules,
}

/// What was seen since the last write.
#[derive(Default)]
struct Gathered {
    tallies: HashMap<Endpoint, EndpointTally>,
    /// Endpoints each tenant's registrations added.
    new_per_tenant: HashMap<Tenant, usize>,
}

impl EndpointTallies {
    pub fn new(rules: EndpointRules) -> Self {
        Self {
            gathered: Mutex::default(),
            rules,
        }
    }

    /// Notes a registration to `url` for `tenant`.
    pub fn registered(&self, tenant: &Tenant, url: &url::Url) {
        let Some(endpoint) = Endpoint::of(tenant, url) else {
            return;
        };
        let at = now_ms();
        let mut gathered = self.lock();
        if let Some(tally) = gathered.tallies.get_mut(&endpoint) {
            tally.registered(at);
            return;
        }
        let added = gathered.new_per_tenant.entry(tenant.clone()).or_default();
        if *added < MAX_NEW_PER_TENANT {
            *added += 1;
            let tally = EndpointTally::new(endpoint.clone(), at);
            gathered.tallies.insert(endpoint, tally);
        }
    }

    /// Notes an attempt at `url` for `tenant`, which `report` tells of.
    pub fn attempted(&self, tenant: &Tenant, url: &url::Url, report: &AttemptReport) {
        let Some(endpoint) = Endpoint::of(tenant, url) else {
            return;
        };
        let at = now_ms();
        let failure = (report.outcome != Outcome::Delivered).then(|| Failure {
            at,
            status: report.status,
            error: report.error.clone(),
        });
        self.lock()
            .tallies
            .entry(endpoint.clone())
            .or_insert_with(|| EndpointTally::new(endpoint, at))
            .attempted(at, failure);
    }

    /// Notes a change of the circuit of `tenant`'s `url` (its endpoint and path) that
    /// this instance's request made, for the endpoint's record.
    pub fn circuit(&self, tenant: &Tenant, url: &url::Url, change: CircuitRecord) {
        let Some(endpoint) = Endpoint::of(tenant, url) else {
            return;
        };
        let at = change.at;
        self.lock()
            .tallies
            .entry(endpoint.clone())
            .or_insert_with(|| EndpointTally::new(endpoint, at))
            .circuit(change);
    }

    /// Adds the tallies to the store every second until `stop` fires, then once more;
    /// `ops` tells what the writes decide, `pauses` learns the pauses they make at once,
    /// `wake` wakes the scheduler for the events.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<impl EndpointHealth + Queue + ?Sized>,
        ops: Arc<OpsEvents>,
        pauses: Arc<EndpointPauses>,
        wake: Arc<Notify>,
        stop: CancellationToken,
    ) {
        let mut failures = 0;
        loop {
            let pause = match failures {
                0 => PERIOD,
                n => backoff(n).max(PERIOD),
            };
            let stopping = tokio::select! {
                biased;
                _ = tokio::time::sleep(pause) => false,
                _ = stop.cancelled() => true,
            };
            match self.write(store.as_ref()).await {
                Ok(notices) => {
                    failures = 0;
                    for notice in &notices {
                        if let EndpointNotice::Paused(record, pause) = notice {
                            pauses.note(&record.key(), Some(pause));
                            tracing::warn!(endpoint = %record.id(), tenant = %record.tenant, failing_since = record.failing_since.map(crate::domain::rfc3339), "endpoint paused: no success for its pause_after; its notifications are held");
                        }
                    }
                    ops.endpoints(store.as_ref(), &wake, &notices).await;
                }
                Err(e) => {
                    failures += 1;
                    if stopping || worth_logging(failures) {
                        tracing::warn!(error = %e, failures, "endpoints' health not stored; kept for another try");
                    }
                }
            }
            if stopping {
                return;
            }
        }
    }

    /// Writes what was gathered; what could not be written is kept, merged with what
    /// came meanwhile. What the writes decided.
    async fn write(
        &self,
        store: &(impl EndpointHealth + ?Sized),
    ) -> StoreResult<Vec<EndpointNotice>> {
        let taken = std::mem::take(&mut *self.lock()).tallies;
        let taken: Vec<EndpointTally> = taken.into_values().collect();
        let mut written = 0;
        let mut notices = Vec::new();
        for chunk in taken.chunks(PER_CALL) {
            match store.record_endpoints(chunk, &self.rules).await {
                Ok(told) => notices.extend(told),
                Err(e) => {
                    self.keep(taken.into_iter().skip(written));
                    return Err(e);
                }
            }
            written += chunk.len();
        }
        Ok(notices)
    }

    fn keep(&self, tallies: impl Iterator<Item = EndpointTally>) {
        let gathered = &mut self.lock().tallies;
        for mut tally in tallies {
            if let Some(later) = gathered.remove(&tally.endpoint) {
                tally.merge(later);
            }
            gathered.insert(tally.endpoint.clone(), tally);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gathered> {
        self.gathered.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(n: usize) -> url::Url {
        url::Url::parse(&format!("https://host-{n}.example/n")).unwrap()
    }

    fn noted(tallies: &EndpointTallies, tenant: &Tenant) -> usize {
        let gathered = tallies.lock();
        gathered
            .tallies
            .keys()
            .filter(|e| e.tenant == *tenant)
            .count()
    }

    #[test]
    fn one_tenants_flood_of_origins_leaves_anothers_registrations_noted() {
        let (a, b) = (
            Tenant::parse("shop-a", "t").unwrap(),
            Tenant::parse("shop-b", "t").unwrap(),
        );
        let tallies = EndpointTallies::new(EndpointRules::default());
        for n in 0..MAX_NEW_PER_TENANT + 50 {
            tallies.registered(&a, &url(n));
        }
        tallies.registered(&b, &url(0));
        assert_eq!(noted(&tallies, &a), MAX_NEW_PER_TENANT);
        assert_eq!(noted(&tallies, &b), 1);
        // An attempt is noted whatever the registrations did.
        let report = AttemptReport::failure(Some(500), "HTTP 500".into(), String::new());
        tallies.attempted(&a, &url(MAX_NEW_PER_TENANT + 1), &report);
        assert_eq!(noted(&tallies, &a), MAX_NEW_PER_TENANT + 1);
    }
}
