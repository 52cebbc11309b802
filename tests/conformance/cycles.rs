//! A notification's history read by cycle: its registration, then each replay or
//! resend, when and why each began and the URL its attempts went to; each history entry
//! names its cycle and the URL it actually went to, and the counts agree with what is
//! shown.

use crate::support;

use reqwest::{Method, Url};
use serde_json::{json, Value};
use support::Postback;

use support::WAIT;

async fn post(pb: &Postback, path: &str, body: Value) -> Value {
    let (status, answer) = pb.request(Method::POST, path, Some(body), &[]).await;
    assert_eq!(status, 200, "{path}: {answer}");
    answer
}

/// Each entry's `field`, oldest first.
fn each(n: &Value, list: &str, field: &str) -> Vec<Value> {
    n[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[field].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cycle_shows_why_it_began_and_the_url_each_attempt_went_to() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = support::dead_one(&pb, &receiver).await;
    let first = pb.notification(&id).await["url"].clone();

    post(&pb, &format!("/dead-letters/{id}/replay"), json!({})).await;
    pb.wait_state(&id, "dead", WAIT).await;
    let (status, dead) = pb.get(&format!("/dead-letters/{id}")).await;
    assert_eq!(status, 200, "{dead}");
    assert_eq!(
        (
            &dead["attempts"],
            &dead["max_attempts"],
            &dead["total_attempts"]
        ),
        (&json!(2), &json!(2), &json!(4)),
        "2 of 2 in this cycle; 4 in all: {dead}"
    );
    assert_eq!(each(&dead, "history", "cycle"), [0, 0, 1, 1]);
    assert_eq!(each(&dead, "cycles", "began"), ["registered", "replay"]);
    assert_eq!(each(&dead, "cycles", "attempts"), [2, 2]);

    let fixed = receiver.url("/fixed");
    let path = format!("/dead-letters/{id}/replay");
    post(&pb, &path, json!({"url": fixed, "schedule": ["100ms"]})).await;
    pb.wait_state(&id, "delivered", WAIT).await;
    post(&pb, &format!("/notifications/{id}/resend"), json!({})).await;
    let n = pb.wait_state(&id, "delivered", WAIT).await;
    assert_eq!(n["total_attempts"], 6, "{n}");
    assert_eq!(n["attempts"], 1);
    assert_eq!(n["cycle"], 3, "the current cycle");
    assert_eq!(
        (&n["replays"], &n["resends"]),
        (&json!(2), &json!(1)),
        "replays and resends counted apart: {n}"
    );
    assert_eq!(
        each(&n, "cycles", "name"),
        ["Registered", "Replay 1", "Replay 2", "Resend 3"]
    );

    assert_eq!(each(&n, "cycles", "cycle"), [0, 1, 2, 3]);
    assert_eq!(
        each(&n, "cycles", "began"),
        ["registered", "replay", "replay", "resend"]
    );
    assert_eq!(
        each(&n, "cycles", "url"),
        [first.clone(), first, json!(fixed), json!(fixed)]
    );
    assert_eq!(each(&n, "cycles", "attempts"), [2, 2, 1, 1]);
    assert!(each(&n, "cycles", "began_at")
        .iter()
        .all(|at| at.is_string()));
    assert_eq!(each(&n, "history", "cycle"), [0, 0, 1, 1, 2, 3]);
    assert!(each(&n, "history", "kind").iter().all(|k| k == "attempt"));

    let went: Vec<String> = receiver
        .requests_for(&id)
        .iter()
        .map(|r| r.path.clone())
        .collect();
    let shown: Vec<String> = each(&n, "history", "url")
        .iter()
        .map(|u| Url::parse(u.as_str().unwrap()).unwrap().path().to_string())
        .collect();
    assert_eq!(shown, went, "each attempt names the URL it went to");
    assert_eq!(
        n["request"]["url"],
        fixed.as_str(),
        "the next attempt's request"
    );
}
