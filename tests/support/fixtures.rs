//! Values the tests of the store's port build by hand: a notification as the API would
//! have validated it, and how an attempt went.

use std::time::Duration;

use postback::domain::{
    AttemptReport, CallbackUrl, Destinations, ExtraHeaders, JobId, Notification, Outcome, Payload,
    Reach, Schedule,
};

/// A notification to `http://merchant.example.com/cb` of the default tenant, with a body
/// of `{"a": 1}`, `schedule` between attempts and `delay` before the first.
pub fn notification(schedule: &[&str], delay: Duration) -> Notification {
    Notification {
        id: JobId::new(0),
        url: CallbackUrl::parse("http://merchant.example.com/cb", Destinations::PublicOnly)
            .unwrap(),
        payload: Payload::json(&serde_json::json!({"a": 1})),
        headers: ExtraHeaders::default(),
        schedule: Schedule::parse(schedule).unwrap(),
        delay,
        timeout: Duration::from_secs(1),
        success: Default::default(),
        profile: None,
        topic: None,
        rate_key: "merchant.example.com".into(),
        tenant: Default::default(),
        traceparent: None,
        ordering_key: None,
    }
}

/// An attempt that ended in `outcome`: answered 200 when delivered, 500 otherwise.
pub fn report(outcome: Outcome) -> AttemptReport {
    let delivered = outcome == Outcome::Delivered;
    AttemptReport {
        outcome,
        status: Some(if delivered { 200 } else { 500 }),
        error: None,
        duration_ms: 1,
        response: String::new(),
        headers: Vec::new(),
        retry_after: None,
        reach: Reach::Sent { healthy: delivered },
    }
}
