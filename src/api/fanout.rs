//! An event's notifications: planned (one per subscription it reached, checked as
//! `POST /notify` checks a request of the tenant's, under an id fixed before the event
//! is stored), registered together (each with an idempotency key of the event and its
//! subscription, so that registering one again stores nothing new), and the sweep that
//! finishes what a crash or an outage cut short (every unfinished fan-out, each on its
//! own, so that one that cannot be finished holds up none after it) and forgets events
//! and the catalog's topics past retention.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::registration::{prepare_delivery, register_many, Registration};
use super::rules::RegistrationRules;
use super::subscriptions::notify_request;
use super::AppState;
use crate::backoff::backoff;
use crate::domain::{EventId, Fingerprint, JobId, SubscriptionId, Tenant};
use crate::events::{self, Delivery, Event, Subscription};
use crate::store::{Idempotency, JobStatus, StoreError};

/// How often the sweep looks for unfinished fan-outs: one store read each time there is
/// none, on every instance, so that an idle fleet costs the store little.
const EVERY: Duration = Duration::from_secs(15);
/// Events past retention are looked for every this many sweeps (5 minutes).
const RETENTION_EVERY: u32 = 20;
/// A fan-out older than this is taken to be cut short (the API finishes its own within
/// a store round trip or two).
const STALE_MS: i64 = 10_000;
/// Unfinished fan-outs read at once, and events forgotten per sweep at most.
const BATCH: usize = 100;

/// `event` with a delivery for each subscription of `reached`, and the registrations of
/// those whose settings pass the tenant's rules (the others keep the error).
pub(super) fn plan(
    rules: &RegistrationRules,
    mut event: Event,
    reached: &[Subscription],
) -> (Event, Vec<Registration>) {
    let mut registrations = Vec::with_capacity(reached.len());
    for s in reached {
        let mut delivery = Delivery {
            subscription: s.id.clone(),
            notification: None,
            refused: None,
        };
        match registration(rules, &event, s, None) {
            Ok(r) => {
                delivery.notification = Some(r.id().to_string());
                registrations.push(r);
            }
            Err(e) => delivery.refused = Some(e.into_json()),
        }
        event.deliveries.push(delivery);
    }
    (event, registrations)
}

/// The registration of `event`'s notification for `s`, under `id` when it has one.
fn registration(
    rules: &RegistrationRules,
    event: &Event,
    s: &Subscription,
    id: Option<JobId>,
) -> Result<Registration, ApiError> {
    let tenant = Tenant::parse(&event.tenant, "tenant")?;
    let idempotency = Idempotency {
        // A key with spaces: no producer's key is one (`IdempotencyKey`).
        key: format!("event {} {}", event.id, s.id),
        tenant: tenant.clone(),
        fingerprint: Fingerprint::of_request(event.id.as_bytes()),
        ttl: rules.idempotency_ttl,
        moved_from: None,
    };
    let request = notify_request(s, &event.body, &event.topic)?;
    prepare_delivery(rules, &tenant, request, idempotency, id)
}

/// Registers `event`'s notifications together and, once every one is, notes its
/// fan-out finished. Each notification's id and status; the first failure otherwise
/// (the sweep finishes the rest).
pub(super) async fn register(
    state: &AppState,
    event: &Event,
    registrations: Vec<Registration>,
) -> Result<Vec<(JobId, JobStatus)>, ApiError> {
    if registrations.is_empty() {
        return Ok(Vec::new());
    }
    let stored = register_many(state, registrations.into_iter().map(Ok).collect(), None).await;
    let accepted = stored
        .into_iter()
        .map(|a| a.map(|a| (a.id, a.status)))
        .collect::<Result<Vec<_>, _>>()?;
    if let Err(e) = events::fanned_out(state.store.as_ref(), &event.id).await {
        tracing::warn!(event = %event.id, error = %e, "fan-out: cannot note an event's notifications registered; the sweep will");
    }
    Ok(accepted)
}

/// Until `cancel` fires: finishes the fan-outs cut short, and forgets the events, and
/// the catalog's topics, published longer than `max_age` ago.
pub async fn run(state: AppState, max_age: Duration, cancel: CancellationToken) {
    let mut failures = 0;
    let mut topics_after = None;
    for round in 0u32.. {
        let forget = round % RETENTION_EVERY == 0;
        let pause = match sweep(&state, forget.then_some(max_age), &mut topics_after).await {
            Ok(()) => {
                failures = 0;
                EVERY
            }
            Err(e) => {
                tracing::warn!(error = %e, "fan-out sweep: the store did not answer");
                failures += 1;
                backoff(failures).max(EVERY)
            }
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// Finishes the fan-outs cut short and, with `max_age`, forgets the events and the
/// catalog's topics older (the topics a page at a time, from `topics_after`).
async fn sweep(
    state: &AppState,
    max_age: Option<Duration>,
    topics_after: &mut Option<String>,
) -> Result<(), StoreError> {
    let store = state.store.as_ref();
    let now = crate::clock::now_ms();
    finish_unfinished(state, now).await?;
    let Some(max_age) = max_age else {
        return Ok(());
    };
    let before = now - max_age.as_millis() as i64;
    let forgotten = events::forget_events(store, before, BATCH).await?;
    let (topics, next) =
        events::forget_topics(store, before, topics_after.as_deref(), BATCH).await?;
    *topics_after = next;
    if forgotten + topics > 0 {
        tracing::info!(
            events = forgotten,
            topics,
            "retention: events and topics forgotten"
        );
    }
    Ok(())
}

/// Every unfinished fan-out older than `STALE_MS`, a page at a time to the last, each
/// finished on its own: one that cannot be finished now is tried again next sweep and
/// holds up none after it. Stops only when the store does not answer.
async fn finish_unfinished(state: &AppState, now: i64) -> Result<(), StoreError> {
    let store = state.store.as_ref();
    let mut after: Option<String> = None;
    loop {
        let page = events::unfinished(store, after.as_deref(), BATCH).await?;
        for (id, _) in page.iter().filter(|(_, at)| now - at >= STALE_MS) {
            finish_one(state, id).await?;
        }
        match page.last() {
            Some((last, _)) if page.len() == BATCH => after = Some(last.clone()),
            _ => return Ok(()),
        }
    }
}

/// Finishes the fan-out of the event `id`. An event that cannot be read is left as it
/// is, for an operator to see in the log, and tried again next sweep.
async fn finish_one(state: &AppState, id: &str) -> Result<(), StoreError> {
    let store = state.store.as_ref();
    let read = match EventId::parse(id, "event") {
        Ok(event_id) => events::event(store, &event_id).await,
        Err(e) => Err(StoreError::Corrupt(format!(
            "a fan-out's event id: {}",
            e.message
        ))),
    };
    match read {
        Ok(Some(event)) => finish(state, &event).await,
        Ok(None) => events::fanned_out(store, id).await?,
        Err(e) if e.is_bug() => {
            tracing::error!(event = %id, error = %e, "fan-out: cannot read the event; tried again later")
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

/// Registers what `event` planned again: what was registered stays as it is, what was
/// not is now (with its subscription's settings as they are now; one deleted meanwhile,
/// or that its tenant's rules no longer pass, is left out). One that the store refuses
/// for good (a `4xx`: its idempotency key holds another request) makes no notification,
/// and the event's delivery keeps the error instead; the fan-out is finished once
/// nothing else is left to register.
async fn finish(state: &AppState, event: &Event) {
    let Some(registrations) = replan(state, event).await else {
        return;
    };
    let (subscriptions, registrations): (Vec<String>, Vec<Registration>) =
        registrations.into_iter().unzip();
    let stored = match registrations.is_empty() {
        true => Vec::new(),
        false => register_many(state, registrations.into_iter().map(Ok).collect(), None).await,
    };
    let (mut registered, mut refused, mut again) = (0, Vec::new(), false);
    for (subscription, result) in subscriptions.into_iter().zip(stored) {
        match result {
            Ok(_) => registered += 1,
            Err(e) if e.is_final() => refused.push((subscription, e.into_json())),
            Err(e) => {
                tracing::warn!(event = %event.id, error = %e.into_json(), "fan-out: not finished; tried again later");
                again = true;
            }
        }
    }
    if again {
        return;
    }
    let store = state.store.as_ref();
    let noted = match refused.is_empty() {
        true => events::fanned_out(store, &event.id).await,
        false => events::refused(store, &event.id, &refused).await,
    };
    match noted {
        Ok(()) => {
            tracing::info!(event = %event.id, notifications = registered, refused = refused.len(), "fan-out finished")
        }
        Err(e) => {
            tracing::warn!(event = %event.id, error = %e, "fan-out: cannot note an event finished; tried again later")
        }
    }
}

/// The registrations of `event`'s notifications, each with its subscription's id;
/// `None` when a subscription cannot be read now.
async fn replan(state: &AppState, event: &Event) -> Option<Vec<(String, Registration)>> {
    let store = state.store.as_ref();
    let mut registrations = Vec::new();
    for d in &event.deliveries {
        let Some(id) = d.notification.as_deref().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let found = match SubscriptionId::parse(&d.subscription, "subscription") {
            Ok(sid) => events::subscription(store, &sid).await,
            Err(_) => Ok(None),
        };
        match found {
            Ok(Some(Err(u))) => {
                tracing::warn!(event = %event.id, %id, subscription = %u.id, error = %u.error, "fan-out: the subscription cannot be read; left out")
            }
            Ok(Some(Ok(s))) => match registration(&state.rules, event, &s, Some(id)) {
                Ok(r) => registrations.push((s.id, r)),
                Err(e) => {
                    tracing::warn!(event = %event.id, %id, error = %e.into_json(), "fan-out: a notification no longer passes its tenant's rules; left out")
                }
            },
            Ok(None) => {
                tracing::warn!(event = %event.id, %id, subscription = %d.subscription, "fan-out: the subscription was deleted before its notification was registered; left out")
            }
            Err(e) => {
                tracing::warn!(event = %event.id, error = %e, "fan-out: cannot read a subscription; tried again later");
                return None;
            }
        }
    }
    Some(registrations)
}
