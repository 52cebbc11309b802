//! A paused endpoint's notifications are held from the pause on: lists, counts and views
//! show each as held at once (but one waiting behind its ordering key), whatever the
//! scheduler has done with it yet. On every backend (`scripts/test.sh`).

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::{Postback, Receiver};

/// The id of the endpoint at `receiver`'s origin, once listed.
async fn endpoint_id(pb: &Postback, receiver: &Receiver) -> String {
    let found = pb
        .endpoint_listed(support::instance::TOKEN, "", &receiver.url(""))
        .await;
    found["id"].as_str().unwrap().to_string()
}

/// The ids `GET /notifications?state=…` lists, sorted.
async fn listed(pb: &Postback, state: &str) -> Vec<String> {
    let (status, page) = pb.get(&format!("/notifications?state={state}")).await;
    assert_eq!(status, 200, "{page}");
    let mut ids: Vec<String> = support::item_ids(&page)
        .into_iter()
        .map(String::from)
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_endpoints_notifications_are_held_from_the_pause_on() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/hook");
    let later = |seq: u64, key: Option<&str>| {
        let mut body = json!({"url": url, "body": {"seq": seq}, "delay": "1h"});
        if let Some(key) = key {
            body["ordering_key"] = json!(key);
        }
        body
    };
    let mut ids = Vec::new();
    for seq in 0..3 {
        ids.push(pb.register(later(seq, None)).await);
    }
    let head = pb.register(later(3, Some("k"))).await;
    let behind = pb.register(later(4, Some("k"))).await;
    ids.push(head);
    ids.sort();
    let id = endpoint_id(&pb, &receiver).await;

    let pause = format!("/endpoints/{id}/pause");
    let (status, paused) = pb.request(Method::POST, &pause, None, &[]).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(
        paused["notifications"],
        json!({"pending": 1, "held": 4, "held_back": 0, "complete": true}),
        "held at once, but the one waiting behind its ordering key: {paused}"
    );
    assert_eq!(listed(&pb, "held").await, ids);
    assert!(listed(&pb, "scheduled").await == vec![behind.clone()]);
    let shown = pb.notification(&ids[0]).await;
    assert_eq!(
        (&shown["state"], &shown["next_attempt_at"]),
        (&json!("held"), &Value::Null),
        "{shown}"
    );
    let (_, overview) = pb.get("/overview").await;
    assert_eq!(overview["held"]["count"], 4, "{overview}");

    let resume = format!("/endpoints/{id}/resume");
    let (_, resumed) = pb.request(Method::POST, &resume, None, &[]).await;
    assert_eq!(
        resumed["notifications"],
        json!({"pending": 5, "held": 0, "held_back": 0, "complete": true}),
        "{resumed}"
    );
    assert_eq!(pb.notification(&ids[0]).await["state"], "scheduled");
}
