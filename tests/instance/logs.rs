//! An instance's log reads as a person reads it: after a scenario that fails an endpoint
//! until it is paused, holds and resumes it, cancels, resends, replays and purges in
//! bulk, no line shows Rust's debug formatting (`Some(…)`, `None`, `Struct { … }`), and
//! every value is written one way: bare, quoted only when it holds a space.

use crate::support;

use reqwest::Method;
use serde_json::json;
use support::WAIT;

/// What Rust's `Debug` leaves in a line that was meant for a person.
const DEBUG_ARTIFACTS: &[&str] = &["Some(", "None", "{ ", "Object {", "String(", "Number("];

/// A value in quotes although it holds no space (`tenant="default"`): quoted by `Debug`,
/// not by the one rule.
fn quoted_without_need(line: &str) -> Option<&str> {
    let mut rest = line;
    while let Some(at) = rest.find("=\"") {
        let value = &rest[at + 2..];
        let end = value.find('"')?;
        if !value[..end].contains(char::is_whitespace) && !value[..end].contains('\\') {
            return Some(&rest[at.saturating_sub(20)..at + 3 + end]);
        }
        rest = &value[end + 1..];
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_of_pauses_bulk_actions_and_failing_endpoints_has_no_debug_formatting() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_ENDPOINTS_PAUSE_AFTER", "1s"),
        ("POSTBACK_OPS_FAILING_AFTER", "1s"),
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "0"),
    ])
    .await;
    let delivered = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}}))
        .await;
    let dead = support::dead_one(&pb, &receiver).await;
    let down = receiver.url("/down?fail=999");
    let held = pb
        .register(json!({"url": down, "body": {}, "schedule": vec!["200ms"; 50]}))
        .await;
    pb.wait_state(&held, "held", WAIT).await;
    pb.wait_state(&delivered, "delivered", WAIT).await;
    let later = json!({"url": receiver.url("/later"), "body": {}, "delay": "1h"});
    let cancelled = pb.register(later).await;

    let (_, endpoints) = pb.get("/endpoints?state=paused").await;
    let paused = endpoints["items"][0]["id"].as_str().unwrap().to_string();
    let calls = [
        (Method::DELETE, format!("/notifications/{cancelled}"), None),
        (
            Method::POST,
            format!("/notifications/{delivered}/resend"),
            None,
        ),
        (
            Method::POST,
            "/notifications/resend".to_string(),
            Some(json!({"state": "delivered", "host": "127.0.0.1"})),
        ),
        (Method::POST, format!("/endpoints/{paused}/resume"), None),
        (
            Method::POST,
            "/dead-letters/replay".to_string(),
            Some(json!({"topic": "nothing.matches", "since": "2020-01-01T00:00:00Z"})),
        ),
        (
            Method::POST,
            "/dead-letters/purge".to_string(),
            Some(json!({"host": "127.0.0.1"})),
        ),
    ];
    for (method, path, body) in calls {
        let (status, answer) = pb.request(method.clone(), &path, body, &[]).await;
        assert!((200..300).contains(&status), "{method} {path}: {answer}");
    }
    let (status, _) = pb.get(&format!("/notifications/{dead}")).await;
    assert_eq!(status, 404, "purged");

    let logs = pb.logs();
    for said in [
        "endpoint paused",
        "notification cancelled",
        "notification resent",
        "notifications resent in bulk",
        "endpoint resumed",
        "dead letters purged",
    ] {
        assert!(logs.contains(said), "{said}:\n{logs}");
    }
    for line in logs.lines() {
        for artifact in DEBUG_ARTIFACTS {
            assert!(!line.contains(artifact), "`{artifact}` in: {line}");
        }
        if let Some(value) = quoted_without_need(line) {
            panic!("quoted without need (`{value}`) in: {line}");
        }
    }
    let paused_line = logs
        .lines()
        .find(|l| l.contains("endpoint paused"))
        .unwrap();
    assert!(
        paused_line.contains("failing_since=20"),
        "a time, in RFC 3339: {paused_line}"
    );
    let resent = logs
        .lines()
        .find(|l| l.contains("notification resent"))
        .unwrap();
    assert!(resent.contains("was=delivered"), "{resent}");
}

/// The lines of `log` that contain `words`.
fn lines_with<'l>(log: &'l str, words: &str) -> Vec<&'l str> {
    log.lines().filter(|l| l.contains(words)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_logs_once_as_it_opens_and_once_as_it_closes_and_failures_say_when_next() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "3"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "300ms"),
    ])
    .await;
    receiver.set_down(true);
    let url = receiver.url("/hook");
    let id = pb
        .register(json!({"url": url, "body": {}, "schedule": vec!["100ms"; 40]}))
        .await;
    let probed = support::eventually(WAIT, || async {
        lines_with(&pb.logs(), "circuit probe failed").len() >= 2
    });
    assert!(probed.await, "probes failed:\n{}", pb.logs());
    receiver.set_down(false);
    pb.wait_state(&id, "delivered", WAIT).await;
    let closed = support::eventually(WAIT, || async {
        !lines_with(&pb.logs(), "circuit closed").is_empty()
    });
    assert!(closed.await, "its close is logged");

    let log = pb.logs();
    let opened = lines_with(&log, "circuit opened");
    assert_eq!(opened.len(), 1, "one line as it opens: {opened:#?}");
    assert!(
        opened[0].contains("WARN") && opened[0].contains("probe_at="),
        "{}",
        opened[0]
    );
    let probes = lines_with(&log, "circuit probe failed");
    assert!(probes.iter().all(|l| l.contains("DEBUG")), "{probes:#?}");
    assert_eq!(
        lines_with(&log, "circuit closed").len(),
        1,
        "one line as it closes"
    );
    let failed = lines_with(&log, "attempt failed");
    assert!(!failed.is_empty());
    for line in failed {
        assert!(
            line.contains("next_attempt_at="),
            "says when it is next due: {line}"
        );
    }
}
