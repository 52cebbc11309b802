//! Operational webhooks: what an operator and a merchant learn without watching a
//! dashboard. A notification that becomes a dead letter is told as a `notification.dead`
//! event to its tenant's `ops_url` (about that tenant's notifications only) and to the
//! operator's `ops.url` (about every tenant's), gathered per `ops.window`: one event per
//! recipient and window, counting every dead letter and listing up to `MAX_LISTED`.
//!
//! The events are notifications themselves, with the reserved topic `postback.ops`:
//! stored before they are sent, signed with the recipient tenant's keys (the operator's
//! under `default`) in the Standard Webhooks form, and retried on the default schedule.
//! An event that dies is logged like any dead letter and never told, so that an ops URL
//! that is down cannot feed itself. Each instance tells what it saw die; dead letters
//! gathered and not yet stored when an instance stops are told before it stops.
//!
//! An endpoint whose attempts have all failed for `ops.failing_after` is told as
//! `endpoint.failing`, to its tenant's `ops_url` and the operator's, once per run of
//! failures and at most hourly; one with no success for `endpoints.pause_after` is paused
//! and told as `endpoint.paused`. The store's write of its record decides both
//! (`endpoints::health`), so one instance of the fleet tells each. A pause or resume by
//! hand is told as `endpoint.paused` or `endpoint.resumed` by the instance that made it.
//! Ops events' own deliveries are not counted by endpoint, so an ops URL that fails is
//! never told about itself.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backoff::backoff;
use crate::config::Config;
use crate::domain::{
    rfc3339, CallbackUrl, ExtraHeaders, Notification, Payload, Placement, Schedule, SuccessRule,
    Tenant,
};
use crate::endpoints::health::EndpointNotice;
use crate::store::{ClaimedJob, EndpointRecord, Queue};

/// The topic of every event, which producers may not use (`postback.` is reserved).
pub const TOPIC: &str = "postback.ops";

/// Dead letters listed in one event at most; the count covers every one.
const MAX_LISTED: usize = 100;
/// Endpoint events kept for another try at most, while the store does not take them.
const MAX_UNSENT: usize = 1_000;

/// Who an event is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Recipient {
    /// The operator (`ops.url`), about every tenant.
    Operator,
    /// A tenant (its `ops_url`), about its own.
    Tenant(Tenant),
}

/// The dead letters of one window for one recipient.
#[derive(Debug, Default)]
struct Gathered {
    count: usize,
    listed: Vec<Value>,
}

impl Gathered {
    fn add(&mut self, item: &Value) {
        self.count += 1;
        if self.listed.len() < MAX_LISTED {
            self.listed.push(item.clone());
        }
    }

    fn merge(&mut self, later: Gathered) {
        self.count += later.count;
        let room = MAX_LISTED.saturating_sub(self.listed.len());
        self.listed.extend(later.listed.into_iter().take(room));
    }
}

/// The instance's ops events: what to tell whom, and what is gathered meanwhile.
pub struct OpsEvents {
    operator: Option<CallbackUrl>,
    tenants: BTreeMap<Tenant, CallbackUrl>,
    window: Duration,
    schedule: Schedule,
    timeout: Duration,
    placement: Placement,
    gathered: Mutex<BTreeMap<Recipient, Gathered>>,
    /// Endpoint events the store did not take yet.
    unsent: Mutex<Vec<Notification>>,
}

impl OpsEvents {
    /// The recipients `config` names.
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let s = &config.settings;
        let tenants = config.tenants.iter();
        let tenants = tenants.filter_map(|(t, c)| Some((t.clone(), c.ops_url.clone()?)));
        let schedule = s.schedules.get("default").cloned();
        Ok(Self {
            operator: config.ops_url.clone(),
            tenants: tenants.collect(),
            window: s.ops.window,
            schedule: schedule.ok_or_else(|| anyhow::anyhow!("schedules.default: required"))?,
            timeout: s.delivery.timeout,
            placement: Placement::new(config.shards),
            gathered: Mutex::new(BTreeMap::new()),
            unsent: Mutex::new(Vec::new()),
        })
    }

    /// Whether attempts of `job` are ops events (not counted by endpoint, never told).
    pub fn is_event(job: &ClaimedJob) -> bool {
        job.spec.topic.as_deref() == Some(TOPIC)
    }

    /// Stores the events `notices` tell, for each endpoint's tenant's ops URL and the
    /// operator's, with those the store did not take before; what it does not take now
    /// is kept for the next call.
    pub async fn endpoints(
        &self,
        store: &(impl Queue + ?Sized),
        wake: &Notify,
        notices: &[EndpointNotice],
    ) {
        let mut events =
            std::mem::take(&mut *self.unsent.lock().unwrap_or_else(|e| e.into_inner()));
        events.extend(notices.iter().flat_map(|n| self.endpoint_events(n)));
        for event in events {
            match store.enqueue(&event, None).await {
                Ok(enqueued) => {
                    if enqueued.earliest.is_some() {
                        wake.notify_one();
                    }
                    tracing::info!(id = %event.id, tenant = %event.tenant, "ops event about an endpoint registered");
                }
                Err(e) => {
                    let mut unsent = self.unsent.lock().unwrap_or_else(|e| e.into_inner());
                    if unsent.len() < MAX_UNSENT {
                        unsent.push(event);
                    } else {
                        tracing::warn!(error = %e, "ops event about an endpoint not stored, and too many wait: dropped");
                    }
                }
            }
        }
    }

    /// The events `notice` tells: to its endpoint's tenant, and to the operator.
    fn endpoint_events(&self, notice: &EndpointNotice) -> Vec<Notification> {
        let (kind, data) = match notice {
            EndpointNotice::Failing(r) => ("endpoint.failing", health(r)),
            EndpointNotice::Paused(r, pause) => {
                let mut data = health(r);
                data["paused_at"] = json!(rfc3339(pause.since));
                data["paused_by"] = json!(pause.by);
                ("endpoint.paused", data)
            }
            EndpointNotice::Resumed(r, by) => {
                let mut data = about(r);
                data["resumed_by"] = json!(by);
                ("endpoint.resumed", data)
            }
        };
        let tenant = notice.record().tenant.clone();
        [Recipient::Operator, Recipient::Tenant(tenant)]
            .iter()
            .filter_map(|to| self.event(to, kind, data.clone()))
            .collect()
    }

    /// Notes that `job` is a dead letter after `attempts` attempts, the last of its
    /// history ending with `status` or `error`.
    pub fn dead(&self, job: &ClaimedJob, attempts: u32, status: Option<u16>, error: Option<&str>) {
        let tenant = &job.spec.tenant;
        if Self::is_event(job) {
            return;
        }
        let to_tenant = self.tenants.contains_key(tenant);
        if !to_tenant && self.operator.is_none() {
            return;
        }
        let item = json!({
            "id": job.id.to_string(),
            "tenant": tenant.to_string(),
            "url": job.spec.url,
            "topic": job.spec.topic,
            "attempts": attempts,
            "last_status": status,
            "last_error": error,
            "dead_at": humantime::format_rfc3339_seconds(crate::clock::system_now()).to_string(),
        });
        let mut gathered = self.gathered.lock().unwrap_or_else(|e| e.into_inner());
        if to_tenant {
            let recipient = Recipient::Tenant(tenant.clone());
            gathered.entry(recipient).or_default().add(&item);
        }
        if self.operator.is_some() {
            gathered.entry(Recipient::Operator).or_default().add(&item);
        }
    }

    /// Stores what was gathered as events every `ops.window` until `stop` fires, then
    /// once more; `wake` wakes the scheduler for them.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<dyn Queue>,
        wake: Arc<Notify>,
        stop: CancellationToken,
    ) {
        if self.operator.is_none() && self.tenants.is_empty() {
            return;
        }
        let mut failures = 0;
        loop {
            let pause = match failures {
                0 => self.window,
                n => backoff(n),
            };
            let stopping = tokio::select! {
                biased;
                _ = tokio::time::sleep(pause) => false,
                _ = stop.cancelled() => true,
            };
            failures = match self.store_events(store.as_ref(), &wake).await {
                true => 0,
                false if stopping => {
                    tracing::warn!("stopping with ops events not stored: their dead letters stay listed, untold");
                    return;
                }
                false => failures + 1,
            };
            if stopping {
                return;
            }
        }
    }

    /// Stores one event per recipient with something gathered; what could not be stored
    /// is kept for the next round. Whether everything was stored.
    async fn store_events(&self, store: &dyn Queue, wake: &Notify) -> bool {
        let taken = std::mem::take(&mut *self.gathered.lock().unwrap_or_else(|e| e.into_inner()));
        let mut all_stored = true;
        for (recipient, gathered) in taken {
            let Some(event) = self.dead_event(&recipient, &gathered) else {
                continue;
            };
            match store.enqueue(&event, None).await {
                Ok(enqueued) => {
                    if enqueued.earliest.is_some() {
                        wake.notify_one();
                    }
                    tracing::info!(id = %event.id, count = gathered.count, "ops event notification.dead registered");
                }
                Err(e) => {
                    tracing::warn!(error = %e, count = gathered.count, "ops event not stored; kept for another try");
                    self.keep(recipient, gathered);
                    all_stored = false;
                }
            }
        }
        all_stored
    }

    fn keep(&self, recipient: Recipient, gathered: Gathered) {
        let mut now = self.gathered.lock().unwrap_or_else(|e| e.into_inner());
        let mut merged = gathered;
        if let Some(later) = now.remove(&recipient) {
            merged.merge(later);
        }
        now.insert(recipient, merged);
    }

    /// The `notification.dead` event for `recipient` (`None` for a recipient without a
    /// URL, which nothing is gathered for).
    fn dead_event(&self, recipient: &Recipient, gathered: &Gathered) -> Option<Notification> {
        let mut data = json!({
            "count": gathered.count,
            "notifications": gathered.listed,
        });
        if let Recipient::Tenant(t) = recipient {
            data["tenant"] = json!(t.to_string());
        }
        self.event(recipient, "notification.dead", data)
    }

    /// An event of `kind` for `recipient`, as a notification of its tenant (the
    /// operator's: `default`); `None` for a recipient without a URL.
    fn event(&self, recipient: &Recipient, kind: &str, data: Value) -> Option<Notification> {
        let (tenant, url) = match recipient {
            Recipient::Operator => (Tenant::default(), self.operator.clone()?),
            Recipient::Tenant(t) => (t.clone(), self.tenants.get(t).cloned()?),
        };
        let body = json!({
            "type": kind,
            "timestamp": humantime::format_rfc3339_seconds(crate::clock::system_now()).to_string(),
            "data": data,
        });
        Some(Notification {
            id: self.placement.new_id(),
            rate_key: url.host().to_string(),
            url,
            payload: Payload::json(&body),
            headers: ExtraHeaders::default(),
            schedule: self.schedule.clone(),
            delay: Duration::ZERO,
            timeout: self.timeout,
            success: SuccessRule::default(),
            profile: None,
            topic: Some(TOPIC.to_string()),
            tenant,
            ordering_key: None,
            traceparent: None,
        })
    }
}

/// Which endpoint an event is about.
fn about(r: &EndpointRecord) -> Value {
    json!({
        "tenant": r.tenant.to_string(),
        "endpoint": {"id": r.id().to_string(), "url": r.origin},
    })
}

/// Which endpoint, and how its attempts have gone.
fn health(r: &EndpointRecord) -> Value {
    let mut data = about(r);
    data["failing_since"] = json!(r.failing_since.map(rfc3339));
    data["consecutive_failures"] = json!(r.consecutive_failures);
    data["last_success_at"] = json!(r.last_success.map(rfc3339));
    data["last_failure"] = json!(r.last_failure.as_ref().map(|f| json!({
        "at": rfc3339(f.at), "status": f.status, "error": f.error,
    })));
    data
}
