//! The JSON shapes of notifications and dead letters in API answers.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::store::{JobState, JobView};

/// Milliseconds since the epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// `GET /notifications/{id}`: state, attempts, next attempt, history.
pub fn notification(v: &JobView) -> Value {
    let s = &v.status;
    json!({
        "id": v.id.to_string(),
        "state": s.state,
        "url": v.spec.url,
        "topic": v.spec.topic,
        "rate_key": v.spec.rate_key,
        "attempts": s.attempts,
        "max_attempts": s.max_attempts,
        "next_attempt_at": matches!(s.state, JobState::Scheduled | JobState::InFlight).then_some(s.next_at).flatten().map(rfc3339),
        "created_at": rfc3339(s.created_at),
        "finished_at": s.finished_at.map(rfc3339),
        "cancel_requested": s.cancel_requested,
        "replays": s.replays,
        "history": v.history.iter().map(|a| json!({
            "at": rfc3339(a.at),
            "status": a.status,
            "error": a.error,
            "duration_ms": a.duration_ms,
            "response": a.response,
        })).collect::<Vec<_>>(),
    })
}

/// `GET /dead-letters/{id}`: the notification with its body and when it died.
pub fn dead_letter(v: &JobView) -> Value {
    let mut out = notification(v);
    out["body"] = v.spec.body.clone().into();
    out["content_type"] = v.spec.content_type.clone().into();
    out["dead_at"] = v.status.finished_at.map(rfc3339).into();
    out
}

/// One line of `GET /dead-letters`: what it was, when it died, and the last failure.
pub fn dead_letter_item(v: &JobView) -> Value {
    let last = v.history.last();
    json!({
        "id": v.id.to_string(),
        "url": v.spec.url,
        "topic": v.spec.topic,
        "attempts": v.status.attempts,
        "dead_at": v.status.finished_at.map(rfc3339),
        "last_status": last.and_then(|a| a.status),
        "last_error": last.and_then(|a| a.error.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_milliseconds() {
        assert_eq!(rfc3339(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
    }
}
