//! The embedded store: the default when no Redis is configured, one instance per file,
//! and nothing accepted is lost when that instance is killed (`kill -9`) under load and
//! started again on the same file.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use support::instance::TOKEN;
use support::{Postback, Receiver};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_store_configured_it_keeps_notifications_in_data_and_says_so() {
    let cwd = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let pb = Postback::start_in(cwd.path(), &[]).await;

    let id = pb
        .register(json!({"url": receiver.url("/ok"), "body": {"a": 1}}))
        .await;
    pb.wait_state(&id, "delivered", Duration::from_secs(10))
        .await;
    assert!(cwd.path().join("data/postback.redb").is_file());
    let logs = pb.logs();
    let opened = logs
        .lines()
        .find(|l| l.contains("store opened"))
        .unwrap_or_default();
    assert!(
        opened.contains("embedded") && opened.contains("data/postback.redb"),
        "the start-up line names the store and its file: {opened:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_on_the_same_file_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let _first = Postback::start_embedded(dir.path(), &[]).await;

    let data_dir = dir.path().to_str().unwrap();
    let said = Postback::refused_start(&[("POSTBACK_STORE_DATA_DIR", data_dir)]);
    assert!(
        said.contains("store.data_dir") && said.contains("in use by another postback instance"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_instance_does_not_write_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let pb = Postback::start_embedded(dir.path(), &[]).await;
    let id = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}, "delay": "1h"}))
        .await;
    // Its endpoint is written within a second of its registration; then nothing is.
    let known = support::eventually(support::WAIT, || async {
        let (_, page) = pb.get("/endpoints").await;
        page["items"]
            .as_array()
            .is_some_and(|items| items.len() == 1)
    });
    assert!(known.await, "the registration's endpoint is known");
    // Time is the point: past the write that listed it, then six idle sleeps of the test
    // settings' 500 ms without a write.
    support::hold(Duration::from_millis(500)).await;
    let file = dir.path().join("postback.redb");
    let before = std::fs::metadata(&file).unwrap().modified().unwrap();
    support::hold(Duration::from_secs(3)).await;
    let after = std::fs::metadata(&file).unwrap().modified().unwrap();
    assert_eq!(before, after, "nothing was due, yet the file was written");
    assert_eq!(pb.notification(&id).await["state"], "scheduled");
}

#[test]
fn a_data_dir_that_cannot_be_created_stops_start_up_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let in_the_way = dir.path().join("a-file");
    std::fs::write(&in_the_way, "not a directory").unwrap();
    let said =
        Postback::refused_start(&[("POSTBACK_STORE_DATA_DIR", in_the_way.to_str().unwrap())]);
    assert!(
        said.contains("store.data_dir (POSTBACK_STORE_DATA_DIR): cannot create"),
        "{said}"
    );
}

/// Registrations from a producer that keeps each `Idempotency-Key`'s answer, and stops
/// at the first request without one (the instance died under it).
struct Producer {
    accepted: Vec<(String, String)>,
    unanswered: Vec<String>,
}

async fn produce(
    url: String,
    callback: String,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicUsize>,
) -> Producer {
    let client = reqwest::Client::new();
    let mut p = Producer {
        accepted: Vec::new(),
        unanswered: Vec::new(),
    };
    while !stop.load(Ordering::Relaxed) {
        let key = format!("order-{}", next.fetch_add(1, Ordering::Relaxed));
        match register(&client, &url, &callback, &key).await {
            Some(id) => p.accepted.push((key, id)),
            None => {
                p.unanswered.push(key);
                break;
            }
        }
    }
    p
}

/// The id of the registration under `key`, or `None` when no answer came.
async fn register(
    client: &reqwest::Client,
    url: &str,
    callback: &str,
    key: &str,
) -> Option<String> {
    let sent = client
        .post(url)
        .bearer_auth(TOKEN)
        .header("idempotency-key", key)
        .json(&json!({"url": callback, "body": {"key": key}, "schedule": ["100ms", "200ms"]}))
        .send()
        .await
        .ok()?;
    assert_eq!(sent.status(), 202);
    let answer: Value = sent.json().await.ok()?;
    Some(answer["id"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_then_restart_loses_nothing_accepted() {
    let settings = [
        ("POSTBACK_DELIVERY_TIMEOUT", "1s"),
        ("POSTBACK_DELIVERY_MAX_TIMEOUT", "1s"),
        ("POSTBACK_DELIVERY_LEASE", "6s"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let mut first = Postback::start_embedded(dir.path(), &settings).await;

    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let producers: Vec<_> = (0..8)
        .map(|_| {
            let callback = receiver.url("/cb?flaky=30");
            tokio::spawn(produce(
                first.url("/notify"),
                callback,
                stop.clone(),
                next.clone(),
            ))
        })
        .collect();
    assert!(receiver.wait_for(300, Duration::from_secs(20)).await);
    first.kill();
    stop.store(true, Ordering::Relaxed);
    let mut accepted = Vec::new();
    let mut unanswered = Vec::new();
    for p in producers {
        let p = p.await.unwrap();
        accepted.extend(p.accepted);
        unanswered.extend(p.unanswered);
    }

    let second = Postback::start_embedded(dir.path(), &settings).await;
    // A careful producer sends what got no answer again, under the same key.
    let client = reqwest::Client::new();
    for key in &unanswered {
        let callback = receiver.url("/cb?flaky=30");
        let id = register(&client, &second.url("/notify"), &callback, key).await;
        accepted.push((key.clone(), id.unwrap()));
    }
    let ids: BTreeSet<String> = accepted.iter().map(|(_, id)| id.clone()).collect();
    assert_eq!(ids.len(), accepted.len(), "one notification per key");

    let settled = support::eventually(Duration::from_secs(60), || async {
        let (_, stats) = second.get("/stats").await;
        stats["scheduled"] == 0 && stats["in_flight"] == 0
    })
    .await;
    let (_, stats) = second.get("/stats").await;
    assert!(settled, "{stats}\n{}", second.logs());
    let finished = stats["finished"].as_u64().unwrap() + stats["dead"].as_u64().unwrap();
    assert_eq!(
        finished,
        ids.len() as u64,
        "every accepted one, nothing else: {stats}"
    );
    let seen = receiver.per_id();
    let missing: Vec<_> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(missing.is_empty(), "never sent: {missing:?}");
    for id in ids.iter().step_by(25) {
        let n = second.notification(id).await;
        let state = n["state"].as_str().unwrap();
        assert!(state == "delivered" || state == "dead", "{n}");
    }
    eprintln!(
        "{} accepted ({} of them sent again after the kill, unanswered before it); {} requests received",
        ids.len(),
        unanswered.len(),
        receiver.count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_frees_its_file_and_keeps_what_it_stored() {
    use postback::config::RetentionSettings;
    use postback::store::{EmbeddedStore, Queue, Reads};

    let dir = tempfile::tempdir().unwrap();
    let retention = RetentionSettings::default();
    let n = support::fixtures::notification(&["1s"], Duration::from_secs(60));
    let store = EmbeddedStore::open(dir.path(), &retention).unwrap();
    store.enqueue(&n, None).await.unwrap();
    assert!(
        EmbeddedStore::open(dir.path(), &retention).is_err(),
        "locked while open"
    );
    drop(store);

    let again = EmbeddedStore::open(dir.path(), &retention).expect("free once closed");
    let seen = again.get(&n.id).await.unwrap().expect("kept");
    assert_eq!(seen.status.state, postback::store::JobState::Scheduled);
    assert_eq!(seen.status.max_attempts, 2);
}

/// An instance killed after it stored an event and before it registered the event's
/// notifications (the event and its fan-out written, as `POST /events` writes them
/// first): the next instance's fan-out sweep registers them, under the ids the event
/// named, and they are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_notifications_were_not_registered_before_a_crash_is_fanned_out_after_it() {
    use postback::config::RetentionSettings;
    use postback::domain::{EventId, JobId};
    use postback::store::collections::{Change, Collection, Collections};
    use postback::store::EmbeddedStore;

    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let mut pb = Postback::start_embedded(dir.path(), &[]).await;
    let (status, sub) = pb
        .request(
            reqwest::Method::POST,
            "/subscriptions",
            Some(json!({"url": receiver.url("/later"), "topics": ["payment.*"]})),
            &[],
        )
        .await;
    assert_eq!(status, 201, "{sub}");
    pb.kill();

    let (event, notification) = (EventId::new().to_string(), JobId::new(0).to_string());
    let published_at = 1_000_i64;
    let doc = json!({
        "id": event, "tenant": "default", "topic": "payment.succeeded", "body": {"order": 5},
        "created_at": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 - 20_000,
        "fingerprint": "f",
        "deliveries": [{"subscription": sub["id"], "notification": notification}],
    });
    let store = EmbeddedStore::open(dir.path(), &RetentionSettings::default()).unwrap();
    let written = store
        .write(&[
            Change::put(Collection::Events, &event, doc.to_string()),
            Change::put(
                Collection::TenantEvents,
                format!("default {event}"),
                "payment.succeeded",
            ),
            Change::put(Collection::Fanouts, &event, published_at.to_string()),
        ])
        .await
        .unwrap();
    assert!(written);
    drop(store);

    let pb = Postback::start_embedded(dir.path(), &[]).await;
    let path = format!("/notifications/{notification}");
    let delivered = support::eventually(Duration::from_secs(20), || async {
        pb.get(&path).await.1["state"] == "delivered"
    })
    .await;
    assert!(
        delivered,
        "registered and delivered: {}",
        pb.get(&path).await.1
    );
    assert_eq!(
        pb.notification(&notification).await["topic"],
        "payment.succeeded"
    );
    let got = receiver.requests_for(&notification);
    assert_eq!(got.len(), 1);
    assert_eq!(
        serde_json::from_slice::<Value>(&got[0].body).unwrap(),
        json!({"order": 5})
    );
    let (_, shown) = pb.get(&format!("/events/{event}")).await;
    assert_eq!(shown["deliveries"][0]["state"], "delivered", "{shown}");
}

/// The store on a disk in memory, as a simulation runs it: every step commits on the
/// caller's thread, and a crash keeps exactly what was committed.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn in_memory_a_crash_keeps_what_was_committed_and_nothing_else() {
    use postback::clock::Simulated;
    use postback::config::RetentionSettings;
    use postback::store::{EmbeddedStore, MemoryDisk, Queue, Reads};
    let _clock = Simulated::install(std::time::SystemTime::now(), 1);
    let disk = MemoryDisk::new();
    let retention = RetentionSettings::default();
    let store = EmbeddedStore::open_in_memory(disk.clone(), &retention).unwrap();
    let kept = support::fixtures::notification(&["1s"], Duration::from_secs(60));
    let id = kept.id;
    store.enqueue(&kept, None).await.unwrap();
    let claimed = store
        .claim(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert!(claimed.jobs.is_empty(), "due in a minute");

    let after = EmbeddedStore::open_in_memory(disk.crashed(), &retention).unwrap();
    let view = after
        .get(&id)
        .await
        .unwrap()
        .expect("committed before the crash");
    assert_eq!(view.status.attempts, 0);
    drop(store);
    // The store's clock is the simulated one, which follows tokio's paused clock.
    tokio::time::advance(Duration::from_secs(61)).await;
    let due = after
        .claim(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(due.jobs.len(), 1, "due a minute later");
}
