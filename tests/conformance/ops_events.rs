//! Operational webhooks: a notification that becomes a dead letter is told, as a signed
//! `notification.dead` event gathered per `ops.window`, to its tenant's `ops_url` (about
//! that tenant's only) and to the operator's `ops.url` (about every tenant's); an event
//! that cannot be delivered dies like any notification and is not told again; the
//! topic the events carry is reserved. An endpoint whose attempts fail for
//! `ops.failing_after` is told as `endpoint.failing`, once. On every backend
//! (`scripts/test.sh`).

use crate::support;

use serde_json::{json, Value};
use support::signatures;
use support::tenants::{SECRET_A, SECRET_B};
use support::{Backend, Postback, Receiver, WAIT};

/// Three ops URLs (shop-a's, shop-b's, the operator's) and an instance telling them, with
/// `ops` (lines of `[ops]`, and sections after it) as well.
pub(crate) struct OpsRig {
    pub ops_a: Receiver,
    pub ops_b: Receiver,
    pub operator: Receiver,
    pub pb: Postback,
    pub _backend: Backend,
    pub _dir: tempfile::TempDir,
}

impl OpsRig {
    pub async fn start(ops: &str) -> Self {
        Self::start_with(ops, "").await
    }

    /// As `start`, with `shop_b` (lines) in shop-b's section.
    pub async fn start_with(ops: &str, shop_b: &str) -> Self {
        let (ops_a, ops_b, operator) = (
            Receiver::start().await,
            Receiver::start().await,
            Receiver::start().await,
        );
        let config = format!(
            "[ops]\nurl = \"{}\"\n{ops}\n\n\
             [tenants.shop-a]\nsecrets = [\"{SECRET_A}\"]\nops_url = \"{}\"\n\n\
             [tenants.shop-b]\nsecrets = [\"{SECRET_B}\"]\nops_url = \"{}\"\n{shop_b}\n",
            operator.url("/ops"),
            ops_a.url("/ops"),
            ops_b.url("/ops")
        );
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::start();
        let pb = backend
            .postback(&[("POSTBACK_CONFIG", &support::config_file(&dir, &config))])
            .await;
        Self {
            ops_a,
            ops_b,
            operator,
            pb,
            _backend: backend,
            _dir: dir,
        }
    }
}

/// Registers a notification of `tenant` that fails its only attempt, and waits for it to
/// be dead.
async fn dead_one(pb: &Postback, receiver: &Receiver, tenant: &str) -> String {
    let url = receiver.url(&format!("/{tenant}?fail=9"));
    let body = json!({"url": url, "body": {"t": tenant}, "tenant": tenant, "schedule": []});
    let id = pb.register(body).await;
    pb.wait_state(&id, "dead", WAIT).await;
    id
}

/// The events a receiver got, parsed, in arrival order.
pub(crate) fn events(receiver: &Receiver) -> Vec<Value> {
    let requests = receiver.requests();
    requests
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// The ids an event lists.
fn listed(event: &Value) -> Vec<String> {
    let items = event["data"]["notifications"].as_array().unwrap();
    let ids = items.iter().map(|n| n["id"].as_str().unwrap().to_string());
    ids.collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_told_to_its_tenant_and_to_the_operator_signed() {
    let merchant = Receiver::start().await;
    let OpsRig {
        ops_a,
        ops_b,
        operator,
        pb,
        _backend,
        _dir,
    } = OpsRig::start("window = \"300ms\"").await;

    let a1 = dead_one(&pb, &merchant, "shop-a").await;
    let a2 = dead_one(&pb, &merchant, "shop-a").await;
    let b1 = dead_one(&pb, &merchant, "shop-b").await;
    let delivered = pb
        .register(json!({"url": merchant.url("/ok"), "body": {}, "tenant": "shop-a"}))
        .await;
    pb.wait_state(&delivered, "delivered", WAIT).await;

    for (receiver, count) in [(&ops_a, 2), (&ops_b, 1), (&operator, 3)] {
        let told = support::eventually(WAIT, || async {
            events(receiver).iter().flat_map(listed).count() >= count
        });
        assert!(told.await, "{count} told");
    }
    // A later dead letter, told to the operator in a later window: the windows before it
    // told nothing else.
    let later = dead_one(&pb, &merchant, "default").await;
    let told_later = support::eventually(WAIT, || async {
        events(&operator)
            .iter()
            .flat_map(listed)
            .any(|id| id == later)
    });
    assert!(told_later.await, "the later one told");

    let told_a: Vec<String> = events(&ops_a).iter().flat_map(listed).collect();
    assert_eq!(sorted(told_a), sorted(vec![a1.clone(), a2.clone()]));
    assert_eq!(
        events(&ops_b).iter().flat_map(listed).collect::<Vec<_>>(),
        vec![b1.clone()]
    );
    let told_operator: Vec<String> = events(&operator).iter().flat_map(listed).collect();
    assert_eq!(
        sorted(told_operator),
        sorted(vec![a1.clone(), a2, b1, later])
    );

    let event = &events(&ops_a)[0];
    assert_eq!(event["type"], "notification.dead", "{event}");
    assert_eq!(event["data"]["tenant"], "shop-a", "{event}");
    let first = &event["data"]["notifications"][0];
    assert_eq!(first["attempts"], 1, "{event}");
    assert_eq!(first["last_status"], 500, "{event}");
    assert!(
        first["url"].as_str().unwrap().contains("/shop-a"),
        "{event}"
    );
    let request = &ops_a.requests()[0];
    assert!(
        signatures::of(request).contains(&signatures::v1(SECRET_A, request)),
        "signed with the tenant's own secret"
    );
    let request = &ops_b.requests()[0];
    assert!(signatures::of(request).contains(&signatures::v1(SECRET_B, request)));
    assert_eq!(
        merchant.requests_for(&delivered).len(),
        1,
        "a delivery is not an event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dead_at_its_circuits_deadline_is_told_with_no_attempt() {
    let merchant = Receiver::start().await;
    let delivery = "\n[delivery]\nbreaker_failures = 3\nbreaker_cooldown = \"1h\"";
    let rig = OpsRig::start(&format!("window = \"300ms\"{delivery}")).await;
    for _ in 0..3 {
        dead_one(&rig.pb, &merchant, "shop-a").await;
    }
    let url = merchant.url("/shop-a");
    let body = json!({"url": url, "body": {}, "tenant": "shop-a", "schedule": ["300ms"]});
    let held = rig.pb.register(body).await;
    rig.pb.wait_state(&held, "dead", WAIT).await;

    let told = || {
        let events = events(&rig.ops_a);
        let items = events
            .iter()
            .flat_map(|e| e["data"]["notifications"].as_array().unwrap().clone());
        items.into_iter().find(|n| n["id"] == held.as_str())
    };
    assert!(
        support::eventually(WAIT, || async { told().is_some() }).await,
        "told to shop-a"
    );
    let item = told().unwrap();
    assert_eq!(item["attempts"], 0, "{item}");
    assert!(item["last_status"].is_null(), "{item}");
    let error = item["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("circuit_open until its deadline"),
        "{item}"
    );
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// The events of `kind` a receiver got.
fn of_kind(receiver: &Receiver, kind: &str) -> Vec<Value> {
    events(receiver)
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_long_enough_is_told_once_to_its_tenant_and_the_operator() {
    let (merchant, healthy) = (Receiver::start().await, Receiver::start().await);
    let later_failing = Receiver::start().await;
    let OpsRig {
        ops_a,
        ops_b,
        operator,
        pb,
        _backend,
        _dir,
    } = OpsRig::start("failing_after = \"300ms\"").await;

    let schedule = vec!["100ms"; 8];
    let body = json!({"url": merchant.url("/a?fail=99"), "body": {}, "tenant": "shop-a", "schedule": schedule});
    let failing = pb.register(body).await;
    let body = json!({"url": healthy.url("/b"), "body": {}, "tenant": "shop-b"});
    let delivered = pb.register(body).await;
    pb.wait_state(&failing, "dead", WAIT).await;
    pb.wait_state(&delivered, "delivered", WAIT).await;

    let told = support::eventually(WAIT, || async {
        !of_kind(&ops_a, "endpoint.failing").is_empty()
            && !of_kind(&operator, "endpoint.failing").is_empty()
    });
    assert!(told.await, "endpoint.failing told");
    // Another endpoint failing from now on, told after the instance's writes that follow:
    // those did not tell the first one again.
    let body = json!({"url": later_failing.url("/a?fail=99"), "body": {}, "tenant": "shop-a", "schedule": schedule});
    pb.register(body).await;
    let later_origin = later_failing.url("/").trim_end_matches('/').to_string();
    let about = |events: Vec<Value>, origin: &str| -> Vec<Value> {
        let about_origin = |e: &Value| e["data"]["endpoint"]["url"] == origin;
        events.into_iter().filter(about_origin).collect()
    };
    let told_later = support::eventually(WAIT, || async {
        !about(of_kind(&operator, "endpoint.failing"), &later_origin).is_empty()
    });
    assert!(told_later.await, "the later endpoint told");

    let origin = merchant.url("/").trim_end_matches('/').to_string();
    let to_a = about(of_kind(&ops_a, "endpoint.failing"), &origin);
    assert_eq!(to_a.len(), 1, "{to_a:?}");
    let to_operator = about(of_kind(&operator, "endpoint.failing"), &origin);
    assert_eq!(to_operator.len(), 1, "{to_operator:?}");
    assert_eq!(to_operator[0]["data"], to_a[0]["data"]);
    assert!(
        of_kind(&ops_b, "endpoint.failing").is_empty(),
        "shop-b's endpoint is healthy, and shop-a's is not shop-b's"
    );
    let data = &to_a[0]["data"];
    assert_eq!(data["tenant"], "shop-a", "{data}");
    assert_eq!(data["endpoint"]["url"], origin.as_str(), "{data}");
    assert!(
        data["endpoint"]["id"].as_str().unwrap().starts_with("ep_"),
        "{data}"
    );
    assert!(
        data["consecutive_failures"].as_u64().unwrap() >= 3,
        "{data}"
    );
    assert_eq!(data["last_failure"]["status"], 500, "{data}");
    assert!(
        data["failing_since"].is_string() && data["last_success_at"].is_null(),
        "{data}"
    );

    let request = ops_a
        .requests()
        .into_iter()
        .find(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["type"] == "endpoint.failing");
    let request = request.unwrap();
    assert!(
        signatures::of(&request).contains(&signatures::v1(SECRET_A, &request)),
        "signed with the tenant's own secret"
    );
    let (_, page) = pb
        .get(&format!(
            "/endpoints/{}",
            data["endpoint"]["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(page["state"], "failing", "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_cannot_be_delivered_is_not_told_again() {
    let merchant = Receiver::start().await;
    let broken_ops = Receiver::start().await;
    let config = format!(
        "[ops]\nurl = \"{}\"\nwindow = \"200ms\"\n\n[schedules]\ndefault = [\"100ms\"]\n",
        broken_ops.url("/ops?fail=99")
    );
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start();
    let pb = backend
        .postback(&[("POSTBACK_CONFIG", &support::config_file(&dir, &config))])
        .await;

    let first = dead_one(&pb, &merchant, "default").await;
    assert!(
        broken_ops.wait_for(2, WAIT).await,
        "the event was tried twice"
    );
    let dead_events = || async {
        let (_, page) = pb.get("/notifications?topic=postback.ops&state=dead").await;
        page["items"].as_array().unwrap().len()
    };
    assert!(support::eventually(WAIT, || async { dead_events().await == 1 }).await);
    // A later dead letter, told in a later window: none before it told the event's death.
    let later = dead_one(&pb, &merchant, "default").await;
    let told_later = support::eventually(WAIT, || async {
        let told = events(&broken_ops)
            .iter()
            .flat_map(listed)
            .collect::<Vec<_>>();
        told.iter().filter(|id| **id == later).count() == 2
    });
    assert!(told_later.await, "the later one told, and tried twice");
    let told: Vec<String> = events(&broken_ops).iter().flat_map(listed).collect();
    assert_eq!(
        sorted(told),
        sorted(vec![first.clone(), first, later.clone(), later]),
        "each dead letter told in one event, tried twice; the events' deaths not told"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_topic_is_reserved() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    for topic in ["postback.ops", "postback.anything"] {
        let (status, answer) = pb
            .notify(json!({"url": receiver.url("/cb"), "body": {}, "topic": topic}))
            .await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (422, Some("topic")),
            "{answer}"
        );
    }
}

#[test]
fn an_ops_url_that_is_not_a_callback_url_is_refused_at_start_naming_the_key() {
    let said = Postback::refused_start(&[("POSTBACK_OPS_URL", "ftp://ops.example/x")]);
    assert!(said.contains("ops.url"), "{said}");
    let dir = tempfile::tempdir().unwrap();
    let config = "[tenants.shop-a]\nops_url = \"not a url\"\n";
    let said = Postback::refused_start(&[("POSTBACK_CONFIG", &support::config_file(&dir, config))]);
    assert!(said.contains("tenants.shop-a.ops_url"), "{said}");
    let said = Postback::refused_start(&[("POSTBACK_OPS_FAILING_AFTER", "0s")]);
    assert!(said.contains("ops.failing_after"), "{said}");
}
