//! Registrations that arrive through the database instead of HTTP: a producer calls
//! `postback.notify()` inside its own transaction (on Postgres), and once that commits
//! an instance takes the registration in, checks it as `POST /notify` checks a request
//! of a token bound to its tenant, and stores it, or keeps it refused with the error the
//! API would have answered. Instances sharing the database take each one once.

use std::sync::Arc;
use std::time::Duration;

use super::error::ApiError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::offload::pass_over;
use super::registration::prepare_intake;
use super::rules::{RegistrationRules, MAX_REQUEST_KEY};
use crate::backoff::backoff;
use crate::domain::{FieldError, IdempotencyKey};
use crate::store::{IntakeItem, IntakeRules, Store, TakenIn};

/// Registrations taken in per transaction.
const BATCH: usize = 200;
/// How often the intake is looked at without a signal (one lost while the database was
/// unreachable is made up for then).
const POLL: Duration = Duration::from_secs(1);

/// Writes the rules `postback.notify()` checks first (the same rules as `POST /notify`'s),
/// so that they hold from the moment the instance serves; whether they were written
/// (`run` tries again until they are). Nothing to write on a store without an intake.
pub async fn publish_rules(store: &dyn Store, rules: &RegistrationRules) -> bool {
    let Some(intake) = store.intake() else {
        return true;
    };
    match intake.publish_rules(&published_rules(rules)).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "intake: cannot write postback.intake_rules; will try again");
            false
        }
    }
}

/// Takes registrations in until `cancel` fires; `wake` wakes the scheduler for one that
/// is due first. Writes the rules first unless `rules_written`.
pub async fn run(
    store: Arc<dyn Store>,
    rules: Arc<RegistrationRules>,
    mut rules_written: bool,
    wake: Arc<Notify>,
    cancel: CancellationToken,
) {
    let Some(arrivals) = store.intake().map(|i| i.arrivals()) else {
        return;
    };
    let checked_by = rules.clone();
    let check = move |item: &IntakeItem| {
        let checked = pass_over(item.request.len(), || prepare_intake(&checked_by, item));
        checked.map_err(ApiError::into_json)
    };
    let mut failures = 0;
    loop {
        let Some(intake) = store.intake() else { return };
        if !rules_written {
            rules_written = publish_rules(store.as_ref(), &rules).await;
        }
        let pause = match intake.take_in(BATCH, &check).await {
            Ok(taken) => {
                failures = 0;
                report(&taken, &wake);
                if taken.len() == BATCH {
                    continue;
                }
                POLL
            }
            Err(e) => {
                tracing::warn!(error = %e, "intake: cannot take registrations in");
                failures += 1;
                backoff(failures)
            }
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = arrivals.notified() => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// What `postback.notify()` checks at once, as `POST /notify` checks it: the key rule
/// and the size limit, each with the error the API answers.
fn published_rules(rules: &RegistrationRules) -> IntakeRules {
    let key_error = FieldError::new("idempotency_key", IdempotencyKey::RULE);
    let size_error = ApiError::too_large(rules.max_request_bytes, MAX_REQUEST_KEY);
    IntakeRules {
        key_pattern: IdempotencyKey::PATTERN.to_string(),
        key_error: ApiError::from(key_error).into_json().to_string(),
        max_request_bytes: rules.max_request_bytes as i64,
        size_error: size_error.into_json().to_string(),
    }
}

fn report(taken: &[TakenIn], wake: &Notify) {
    for t in taken {
        match t {
            TakenIn::Stored { id, enqueued } if enqueued.id != *id || enqueued.mismatch => {
                tracing::warn!(%id, registered = %enqueued.id, "intake: its idempotency key registered another notification over HTTP meanwhile; nothing stored under this id");
            }
            TakenIn::Stored { id, enqueued } => {
                if enqueued.earliest.is_some() {
                    wake.notify_one();
                }
                if !enqueued.duplicate {
                    crate::observability::metrics::accepted();
                    tracing::info!(%id, via = "postback.notify", "notification registered");
                }
            }
            TakenIn::Refused { id, error } => {
                crate::observability::metrics::intake_refused(1);
                tracing::warn!(%id, %error, "intake: registration refused; kept in postback.intake_refused");
            }
        }
    }
}
