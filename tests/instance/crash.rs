//! A crash (`kill -9`) of an instance in the middle of a burst loses nothing: another
//! instance (on the embedded store, the same one restarted) delivers every accepted
//! notification once its lease runs out, and the only repeats are the deliveries that
//! were in flight at the kill or not yet recorded (the settler's queue and batch), with
//! the same webhook-id. On the embedded store, a restarted instance takes back at once
//! what the killed one had in flight: no other process can hold a lease on its file.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use support::{Backend, Receiver, WAIT};

const SETTINGS: &[(&str, &str)] = &[
    ("POSTBACK_DELIVERY_CONCURRENCY", "32"),
    ("POSTBACK_DELIVERY_TIMEOUT", "1s"),
    ("POSTBACK_DELIVERY_MAX_TIMEOUT", "1s"),
    ("POSTBACK_DELIVERY_LEASE", "6s"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_burst_loses_nothing_and_repeats_only_what_was_in_flight() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let mut first = backend.postback(SETTINGS).await;
    let mut ids = Vec::new();
    for i in 0..400 {
        // Due together once all are registered, so that the kill lands mid-burst.
        let body =
            json!({"url": receiver.url("/slow?sleep_ms=100"), "body": {"order": i}, "delay": "3s"});
        ids.push(first.register(body).await);
    }
    assert!(receiver.wait_for(60, Duration::from_secs(20)).await);
    first.kill();
    let at_kill = receiver.count();
    assert!(
        at_kill < 200,
        "killed mid-burst ({at_kill} of 400 had arrived)"
    );

    let second = backend.postback(SETTINGS).await;
    let all = support::eventually(Duration::from_secs(60), || async {
        let mut delivered = 0;
        for id in &ids {
            if second.notification(id).await["state"] == "delivered" {
                delivered += 1;
            }
        }
        delivered == ids.len()
    })
    .await;
    assert!(
        all,
        "every accepted notification delivered\n{}",
        second.logs()
    );

    let mut per_id: HashMap<String, Vec<bytes::Bytes>> = HashMap::new();
    for r in receiver.requests() {
        per_id.entry(r.id()).or_default().push(r.body.clone());
    }
    assert!(
        ids.iter().all(|id| per_id.contains_key(id)),
        "each reached the receiver"
    );
    let repeated: Vec<_> = per_id.values().filter(|bodies| bodies.len() > 1).collect();
    eprintln!(
        "{} requests had arrived at the kill; {} notifications were sent twice",
        at_kill,
        repeated.len()
    );
    // A settle batch and the queue to it each hold at most the slots, or a quarter of
    // the slots times the shards (up to 8) if that is more: ARCHITECTURE.md, settling.
    let batch = (32 / 4 * backend.shards().min(8)).max(32);
    assert!(
        repeated.len() <= 32 + 2 * batch,
        "only those in flight (the 32 slots) or not yet recorded (2 × {batch}) repeat"
    );
    assert!(
        repeated
            .iter()
            .all(|bodies| bodies.iter().all(|b| *b == bodies[0])),
        "a repeat is the same notification under the same webhook-id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_store_takes_back_a_killed_instances_leases_as_it_starts() {
    let backend = Backend::Embedded(tempfile::tempdir().unwrap());
    let receiver = Receiver::start().await;
    let mut first = backend.postback(&[]).await;
    let hangs = json!({"url": receiver.url("/slow?sleep_ms=60000"), "body": {}});
    let id = first.register(hangs).await;
    assert!(receiver.wait_for(1, WAIT).await, "in flight");
    assert_eq!(first.notification(&id).await["state"], "in_flight");
    first.kill();

    let second = backend.postback(&[]).await;
    assert!(
        receiver.wait_for(2, WAIT).await,
        "sent again within seconds, not when its one-minute lease would have ended\n{}",
        second.logs()
    );
}
