//! The Postgres store in operation: its schema created and upgraded by versioned
//! migrations (and a newer one refused), several instances on one database with one of
//! them killed (`kill -9`) mid-burst, and Postgres itself killed and restarted under
//! load. Nothing the API accepted is lost; what was in flight may arrive twice.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::load::{accepted, all_delivered, refused, steady};
use support::{Postback, PostgresServer, Receiver};

fn migrate(pg: &PostgresServer) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_postback"))
        .arg("migrate")
        .env_clear()
        .env("POSTBACK_STORE_POSTGRES_URL", pg.url())
        .env("POSTBACK_STORE_CONNECT_WAIT", "1s")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postback_migrate_creates_the_schema_once_and_an_instance_uses_it() {
    let pg = PostgresServer::start();
    let first = migrate(&pg);
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{said}");
    let version = pg.psql("SELECT max(version) FROM postback.migrations");
    let version = version.trim();
    let created = format!("postback: created the schema postback at version {version}");
    assert_eq!(said.trim(), created);
    let again = migrate(&pg);
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{said}");
    let nothing =
        format!("postback: the schema postback is at version {version} already: nothing to do");
    assert_eq!(said.trim(), nothing, "migrating again changes nothing");
    let applied = pg.psql("SELECT count(*) FROM postback.migrations");
    assert_eq!(applied.trim(), version, "each version applied once");

    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    let id = pb
        .register(json!({"url": receiver.url("/ok"), "body": {"a": 1}}))
        .await;
    pb.wait_state(&id, "delivered", support::WAIT).await;
    let logs = pb.logs();
    assert!(!logs.contains("schema migrated"), "already migrated");
    assert!(!logs.contains("NOTICE"), "nothing to notice: {logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_this_build_is_refused_naming_the_key() {
    let pg = PostgresServer::start();
    assert!(migrate(&pg).status.success());
    pg.psql("INSERT INTO postback.migrations (version) VALUES (99)");
    let said = Postback::refused_start(&[("POSTBACK_STORE_POSTGRES_URL", &pg.url())]);
    assert!(
        said.contains("store.postgres_url (POSTBACK_STORE_POSTGRES_URL)")
            && said.contains("version 99, newer than this build knows"),
        "{said}"
    );
}

#[test]
fn an_unreachable_database_stops_start_up_naming_the_key() {
    let url = format!("postgres://postgres@127.0.0.1:{}/x", support::free_port());
    let said = Postback::refused_start(&[("POSTBACK_STORE_POSTGRES_URL", &url)]);
    assert!(
        said.contains("store.postgres_url (POSTBACK_STORE_POSTGRES_URL): Postgres is unreachable"),
        "{said}"
    );
    let both = Postback::refused_start(&[
        ("POSTBACK_STORE_POSTGRES_URL", &url),
        ("POSTBACK_STORE_REDIS_URL", "redis://127.0.0.1:1"),
    ]);
    assert!(both.contains("not both"), "{both}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_instances_killed_mid_burst_loses_nothing_accepted() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let settings = [
        ("POSTBACK_DELIVERY_TIMEOUT", "1s"),
        ("POSTBACK_DELIVERY_MAX_TIMEOUT", "1s"),
        ("POSTBACK_DELIVERY_LEASE", "6s"),
    ];
    let mut doomed = Postback::start_on_postgres(&pg, &settings).await;
    let survivor = Postback::start_on_postgres(&pg, &settings).await;
    let producer = steady(&survivor, &receiver, Duration::from_millis(10));
    assert!(receiver.wait_for(300, support::LONG_WAIT).await);
    doomed.kill();
    assert!(producer.accepted_more(50).await, "the burst goes on");
    let answers = producer.stop().await;
    assert!(
        answers.iter().all(|a| a.status == 202),
        "the survivor answered every one"
    );

    let twice = all_delivered(&survivor, &receiver, &answers).await;
    eprintln!(
        "{} accepted by two instances on one database, one killed mid-burst; {twice} sent twice",
        accepted(&answers).len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_and_restarted_under_load_loses_nothing_accepted() {
    let mut pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    let producer = steady(&pb, &receiver, Duration::from_millis(10));
    assert!(producer.accepted_more(100).await, "under load");

    pg.kill();
    let not_ready = support::eventually(Duration::from_secs(5), || async {
        pb.status_without_token("/readyz").await == 503
    })
    .await;
    assert!(not_ready, "/readyz turns 503 while Postgres is away");
    // Time is the point: an outage of two seconds under load.
    support::hold(Duration::from_secs(2)).await;
    pg.restart();
    let restarted = Instant::now();
    let ready = support::eventually(Duration::from_secs(15), || async {
        pb.status_without_token("/readyz").await == 200
    })
    .await;
    assert!(ready, "{}", pb.logs());
    assert!(producer.accepted_more(50).await, "accepting again");
    let answers = producer.stop().await;

    let refused = refused(&answers, "Postgres");
    assert!(!refused.is_empty(), "the outage was under load");
    assert!(
        answers.iter().any(|a| a.status == 202 && a.at > restarted),
        "accepting again after the restart:\n{}",
        pb.logs()
    );
    let twice = all_delivered(&pb, &receiver, &answers).await;
    eprintln!(
        "{} accepted, {} refused with 503 across a kill -9 of Postgres; {twice} sent twice",
        accepted(&answers).len(),
        refused.len()
    );
}

/// A producer's database role that may register for the default tenant, and its table
/// of payments.
fn producer_role(pg: &PostgresServer) {
    pg.psql(
        "CREATE ROLE shop LOGIN;
         GRANT USAGE ON SCHEMA postback TO shop;
         GRANT EXECUTE ON FUNCTION postback.notify(text, jsonb, jsonb) TO shop;
         INSERT INTO postback.tenant_grants (role, tenant) VALUES ('shop', 'default');
         CREATE TABLE payments (id int PRIMARY KEY);
         GRANT INSERT, SELECT ON payments TO shop;",
    );
}

/// Waits until an instance has taken in the registration `id` (a moment after its
/// transaction commits): from then on the API shows it.
async fn taken_in(pb: &Postback, id: &str) {
    let path = format!("/notifications/{id}");
    let shown = support::eventually(support::WAIT, || async { pb.get(&path).await.0 == 200 });
    assert!(shown.await, "{id} never taken in\n{}", pb.logs());
}

/// `postback.notify()` inside a transaction of `shop` that also records payment `n`,
/// ended by `end` (`COMMIT` or `ROLLBACK`): the id it returned, or what psql said.
fn pay(pg: &PostgresServer, n: u32, notify: &str, end: &str) -> Result<String, String> {
    let sql = format!(
        "BEGIN; INSERT INTO payments VALUES ({n}); SELECT postback.notify({notify}); {end};"
    );
    pg.psql_as("shop", &sql).map(|out| out.trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_in_the_producers_transaction_is_delivered_only_if_it_commits() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    producer_role(&pg);
    let url = receiver.url("/paid");

    let rolled_back = pay(
        &pg,
        1,
        &format!("'{url}?n=1', '{{\"order\": 1}}'"),
        "ROLLBACK",
    );
    let rolled_back = rolled_back.unwrap();
    assert!(rolled_back.starts_with("ntf_0_"), "{rolled_back}");
    let committed = pay(
        &pg,
        2,
        &format!("'{url}?n=2', '{{\"order\": 2}}'"),
        "COMMIT",
    );
    let committed = committed.unwrap();

    taken_in(&pb, &committed).await;
    let n = pb.wait_state(&committed, "delivered", support::WAIT).await;
    assert_eq!(n["attempts"], 1, "{n}");
    pb.wait_quiet().await;
    let got = receiver.requests();
    assert_eq!(got.len(), 1, "only the committed one: {got:?}");
    let body: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["order"], 2, "{body}");
    assert_eq!(got[0].id(), committed);
    let (status, _) = pb.get(&format!("/notifications/{rolled_back}")).await;
    assert_eq!(status, 404, "the rolled-back registration never existed");
    assert_eq!(pg.psql("SELECT count(*) FROM postback.intake").trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_in_the_database_behaves_as_over_http() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    producer_role(&pg);
    let url = receiver.url("/paid");
    let call = |body: &str| format!("'{url}', '{body}', '{{\"idempotency_key\": \"pay-7\"}}'");

    let first = pay(&pg, 1, &call(r#"{"order": 7}"#), "COMMIT").unwrap();
    taken_in(&pb, &first).await;
    pb.wait_state(&first, "delivered", support::WAIT).await;
    let again = pay(&pg, 2, &call(r#"{"order": 7}"#), "COMMIT").unwrap();
    assert_eq!(again, first, "the same key names the same notification");
    let other = pay(&pg, 3, &call(r#"{"order": 8}"#), "COMMIT").unwrap_err();
    assert!(
        other.contains("idempotency_key") && other.contains("another request"),
        "{other}"
    );
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 1, "delivered once");
    let by_key = pb.get("/notifications?idempotency_key=pay-7").await.1;
    assert_eq!(support::item_ids(&by_key), vec![first.as_str()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_refuses_a_role_without_a_grant_and_postback_what_post_notify_would() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    producer_role(&pg);
    let url = receiver.url("/paid");

    let other_tenant = format!("'{url}', '{{}}', '{{\"tenant\": \"shop-b\"}}'");
    let refused = pay(&pg, 1, &other_tenant, "COMMIT").unwrap_err();
    assert!(
        refused.contains("role shop may not register for tenant shop-b"),
        "{refused}"
    );
    let stranger = pg
        .psql_as("postgres", "CREATE ROLE stranger LOGIN")
        .map(drop);
    stranger.unwrap();
    let no_execute = pg.psql_as(
        "stranger",
        &format!("SELECT postback.notify('{url}', '{{}}')"),
    );
    assert!(no_execute.unwrap_err().contains("permission denied"));
    let unknown = pay(
        &pg,
        2,
        &format!("'{url}', '{{}}', '{{\"colour\": \"red\"}}'"),
        "COMMIT",
    );
    assert!(unknown.unwrap_err().contains("colour: unknown field"));

    // What only postback's configuration can tell is refused when it is taken in, with
    // the error POST /notify answers, and kept for the producer to read.
    let bad_schedule = format!("'{url}', '{{}}', '{{\"schedule\": \"no-such-schedule\"}}'");
    let id = pay(&pg, 3, &bad_schedule, "COMMIT").unwrap();
    let (_, over_http) = pb
        .notify(json!({"url": url, "body": {}, "schedule": "no-such-schedule"}))
        .await;
    let kept = support::eventually(support::WAIT, || async {
        let sql = format!("SELECT error FROM postback.intake_refused WHERE id = '{id}'");
        !pg.psql(&sql).trim().is_empty()
    })
    .await;
    assert!(kept, "{}", pb.logs());
    let sql = format!("SELECT error FROM postback.intake_refused WHERE id = '{id}'");
    let error: serde_json::Value = serde_json::from_str(pg.psql(&sql).trim()).unwrap();
    assert_eq!(error, over_http["error"], "the error POST /notify answers");
    assert_eq!(pb.get(&format!("/notifications/{id}")).await.0, 404);
    assert_eq!(
        pb.metric("postback_intake_refused_total").await,
        Some(1.0),
        "counted for the alert PostbackIntakeRefused"
    );
    assert_eq!(receiver.count(), 0);
}

/// A tenant's idempotency key is its own: the same key used for another tenant names
/// another notification, and neither answers with the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_idempotency_key_in_the_database_is_not_anothers() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    producer_role(&pg);
    pg.psql("INSERT INTO postback.tenant_grants (role, tenant) VALUES ('shop', 'shop-b')");
    let url = receiver.url("/paid");
    let call = |tenant: &str, order: u32| {
        format!(
            "'{url}', '{{\"order\": {order}}}', '{{\"idempotency_key\": \"pay-1\", \"tenant\": \"{tenant}\"}}'"
        )
    };

    let b = pay(&pg, 1, &call("shop-b", 2), "COMMIT").unwrap();
    let mine = pay(&pg, 2, &call("default", 1), "COMMIT").unwrap();
    assert_ne!(mine, b, "another tenant's key names another notification");
    taken_in(&pb, &mine).await;
    pb.wait_state(&mine, "delivered", support::WAIT).await;
    let got = receiver.requests_for(&mine);
    let body: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["order"], 1, "its own body, not the other tenant's");
    let again = pay(&pg, 3, &call("default", 1), "COMMIT").unwrap();
    assert_eq!(again, mine, "and within the tenant the key still repeats");
}

/// An instance on `pg` with the tenants and tokens of `support::tenants`, and `env`.
async fn with_tenants(pg: &PostgresServer, env: &[(&str, &str)]) -> (tempfile::TempDir, Postback) {
    let dir = tempfile::tempdir().unwrap();
    let path = support::config_file(&dir, &support::tenants::config());
    let mut env = env.to_vec();
    env.push(("POSTBACK_CONFIG", &path));
    let pb = Postback::start_on_postgres(pg, &env).await;
    (dir, pb)
}

/// A role granted only `default` cannot reach another tenant's idempotency keys: not by
/// writing that tenant's name into a key (refused as `POST /notify` refuses it), and not
/// with the same key (another tenant's is another key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_role_cannot_take_another_tenants_idempotency_key() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let (_dir, pb) = with_tenants(&pg, &[]).await;
    producer_role(&pg);
    let url = receiver.url("/paid");

    let forged = format!(
        "'{url}', '{{\"order\": 80}}', '{{\"idempotency_key\": \"shop-b order-80\", \"delay\": \"7d\"}}'"
    );
    let refused = pay(&pg, 1, &forged, "COMMIT").unwrap_err();
    assert!(
        refused.contains("idempotency_key") && refused.contains("visible ASCII"),
        "{refused}"
    );
    let same_key = format!(
        "'{url}', '{{\"order\": 80}}', '{{\"idempotency_key\": \"order-80\", \"delay\": \"7d\"}}'"
    );
    let default_one = pay(&pg, 2, &same_key, "COMMIT").unwrap();
    taken_in(&pb, &default_one).await;

    let shop_b = json!({"url": url, "body": {"order": 80}, "delay": "7d"});
    let (status, answer, headers) = pb
        .request_raw(
            "tok-all-b",
            reqwest::Method::POST,
            "/notify",
            &shop_b.to_string(),
            &[("idempotency-key", "order-80")],
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    assert!(
        headers.get("idempotent-replayed").is_none(),
        "a new notification of shop-b's"
    );
    let id = answer["id"].as_str().unwrap();
    assert_ne!(id, default_one);
    let (status, view) = pb
        .request_as(
            "tok-all-b",
            reqwest::Method::GET,
            &format!("/notifications/{id}"),
            None,
            &[],
        )
        .await;
    assert_eq!((status, &view["tenant"]), (200, &json!("shop-b")), "{view}");
}

/// The keys and bodies `POST /notify` refuses, `postback.notify()` refuses, in the
/// producer's transaction, with the error the API answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_refuses_the_keys_and_sizes_post_notify_refuses_with_its_error() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[("POSTBACK_SERVER_MAX_BODY_BYTES", "2048")]).await;
    producer_role(&pg);
    let url = receiver.url("/paid");
    let long = "k".repeat(256);
    for key in ["a b", "a\\tb", "caf\u{e9}", "", long.as_str()] {
        let call = format!("'{url}', '{{}}', '{{\"idempotency_key\": \"{key}\"}}'");
        let refused = pay(&pg, 1, &call, "COMMIT").unwrap_err();
        let batch = json!({"items": [{"url": url, "body": {}, "idempotency_key": serde_json::from_str::<String>(&format!("\"{key}\"")).unwrap()}]});
        let (_, answer) = pb
            .request(reqwest::Method::POST, "/notify/batch", Some(batch), &[])
            .await;
        let message = answer["items"][0]["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            refused.contains(&message),
            "{key:?}: {refused}\nthe API: {message}"
        );
        assert!(
            refused.contains("\"field\":\"idempotency_key\""),
            "{refused}"
        );
    }
    let big = format!("{{\"filler\": \"{}\"}}", "x".repeat(4096));
    let refused = pay(&pg, 2, &format!("'{url}', '{big}'"), "COMMIT").unwrap_err();
    let (status, answer, _) = pb
        .request_raw(
            support::instance::TOKEN,
            reqwest::Method::POST,
            "/notify",
            &json!({"url": url, "body": serde_json::from_str::<serde_json::Value>(&big).unwrap()})
                .to_string(),
            &[],
        )
        .await;
    assert_eq!(status, 413, "{answer}");
    let code = answer["error"]["code"].as_str().unwrap();
    assert!(
        refused.contains(code) && refused.contains("2048"),
        "{refused}\nthe API: {answer}"
    );
    assert_eq!(pg.psql("SELECT count(*) FROM postback.intake").trim(), "0");
}

/// The same request through the database and over HTTP is one request: the same
/// fingerprint, so an `Idempotency-Key` repeated over HTTP answers what the database
/// registered, whose id is of the same kind as the API's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_the_database_and_over_http_is_the_same_request() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    producer_role(&pg);
    let url = receiver.url("/paid");
    let call = format!(
        "'{url}', '{{\"order\": 9, \"total\": 10.10, \"big\": 12345678901234567890123}}', '{{\"idempotency_key\": \"pay-9\", \"topic\": \"payment\"}}'"
    );
    let id = pay(&pg, 1, &call, "COMMIT").unwrap();
    let parsed: postback::domain::JobId = id.parse().unwrap();
    assert_eq!(
        id.len(),
        "ntf_0_".len() + 22,
        "{id}: 22 base-62 digits, as the API's"
    );
    assert_eq!(parsed.to_string(), id);
    taken_in(&pb, &id).await;

    let over_http = format!(
        r#"{{"topic": "payment", "body": {{"big": 12345678901234567890123, "total": 10.10, "order": 9}}, "url": "{url}"}}"#
    );
    let (status, answer, headers) = pb
        .request_raw(
            support::instance::TOKEN,
            reqwest::Method::POST,
            "/notify",
            &over_http,
            &[("idempotency-key", "pay-9")],
        )
        .await;
    assert_eq!(
        (status, answer["id"].as_str()),
        (202, Some(id.as_str())),
        "{answer}"
    );
    assert_eq!(headers["idempotent-replayed"], "true");
}

/// Bodies written through `postback.notify()` arrive value for value (the database keeps
/// a `jsonb`: every digit, not the key order or spacing), and the fingerprint postback
/// computes of a request is the one the database computes of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_through_the_database_arrive_value_for_value() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let _pb = Postback::start_on_postgres(&pg, &[]).await;
    producer_role(&pg);
    let mut bodies = support::json_text::sample_bodies(40);
    // Repeated keys at every level: the database keeps the last of each; and thousands
    // of keys, each twice, in an order of chance.
    bodies.push(
        r#"{"b":1,"a":2,"b":3,"":0,"a":{"x":1,"x":[2],"x":{"y":1,"y":2}},"":5,"ab":6,"b":7}"#
            .to_string(),
    );
    let mut many: Vec<String> = (0..5_000).map(|i| format!(r#""{}":{i}"#, i / 2)).collect();
    fastrand::Rng::with_seed(68).shuffle(&mut many);
    bodies.push(format!("{{{}}}", many.join(",")));
    let mut ids = Vec::new();
    for (n, body) in bodies.iter().enumerate() {
        let call = format!("'{}', $j${body}$j$", receiver.url(&format!("/sql/{n}")));
        ids.push(pay(&pg, n as u32, &call, "COMMIT").unwrap());
        let canonical = pg.psql(&format!("SELECT $j${body}$j$::jsonb::text"));
        assert_eq!(
            postback::domain::canonical_json(body.as_bytes()).unwrap(),
            canonical.trim_end_matches('\n'),
            "{body}"
        );
    }
    assert!(receiver.wait_for(bodies.len(), support::LONG_WAIT).await);
    for (n, body) in bodies.iter().enumerate() {
        let got = receiver
            .requests()
            .into_iter()
            .find(|r| r.path == format!("/sql/{n}"))
            .unwrap();
        let same = pg.psql(&format!(
            "SELECT $j${body}$j$::jsonb = $k${}$k$::jsonb",
            String::from_utf8_lossy(&got.body)
        ));
        assert_eq!(same.trim(), "t", "{body} arrived as {:?}", got.body);
    }
    drop(ids);
}

/// Every option `POST /notify` takes (its OpenAPI schema), `postback.notify()` knows, of
/// the same JSON type: the database's first check keeps its own list of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_knows_every_option_post_notify_takes() {
    let pg = PostgresServer::start();
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    producer_role(&pg);
    let (status, document) = pb.get("/openapi.json").await;
    assert_eq!(status, 200, "{document}");
    let fields = document["components"]["schemas"]["NotifyRequest"]["properties"]
        .as_object()
        .expect("NotifyRequest's properties")
        .clone();
    assert!(fields.len() > 10, "{fields:?}");
    for (n, (field, schema)) in fields.iter().enumerate() {
        if field == "url" || field == "body" {
            continue;
        }
        let types = match &schema["type"] {
            Value::Array(types) => types.clone(),
            one => vec![one.clone()],
        };
        let value = match types.contains(&json!("string")) {
            true => json!("x"),
            false => json!({}),
        };
        let options = json!({ field.as_str(): value }).to_string();
        let notify = format!("'http://127.0.0.1:9/paid', '{{}}', '{options}'");
        let answer = pay(&pg, n as u32, &notify, "ROLLBACK");
        let said = answer.err().unwrap_or_default();
        assert!(
            !said.contains("unknown field") && !said.contains("a string is required"),
            "{field} ({schema}): {said}"
        );
    }
}

/// A producer's role `role` granted `tenant`, with the rights the docs name: registering,
/// and reading why a registration was refused.
fn tenant_role(pg: &PostgresServer, role: &str, tenant: &str) {
    pg.psql(&format!(
        "CREATE ROLE {role} LOGIN;
         GRANT USAGE ON SCHEMA postback TO {role};
         GRANT EXECUTE ON FUNCTION postback.notify(text, jsonb, jsonb) TO {role};
         GRANT EXECUTE ON FUNCTION postback.refusal(text) TO {role};
         INSERT INTO postback.tenant_grants (role, tenant) VALUES ('{role}', '{tenant}');"
    ));
}

/// A producer reads why its registration was refused when taken in, with
/// `postback.refusal(id)`, for the tenants its role is granted only (the table itself
/// is not its to read: it holds every tenant's); and `GET /notifications/{id}` says so to
/// a token of the tenant, while to another tenant's it is as unknown as any id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_reads_why_its_tenants_registrations_were_refused_and_no_others() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let (_dir, pb) = with_tenants(&pg, &[]).await;
    tenant_role(&pg, "shop_a", "shop-a");
    tenant_role(&pg, "shop_b", "shop-b");
    let url = receiver.url("/paid");
    let register = |role: &str, tenant: &str| {
        let options = json!({"tenant": tenant, "schedule": "no-such-schedule"});
        let sql = format!("SELECT postback.notify('{url}', '{{}}', '{options}')");
        pg.psql_as(role, &sql).unwrap().trim().to_string()
    };
    let (a, b) = (register("shop_a", "shop-a"), register("shop_b", "shop-b"));
    let refusal = |role: &str, id: &str| {
        let said = pg.psql_as(role, &format!("SELECT postback.refusal('{id}')"));
        said.unwrap().trim().to_string()
    };
    let kept = support::eventually(support::WAIT, || async {
        !refusal("shop_a", &a).is_empty() && !refusal("shop_b", &b).is_empty()
    });
    assert!(kept.await, "{}", pb.logs());
    let as_token = |token: &'static str, path: String| {
        let pb = &pb;
        async move {
            pb.request_as(token, reqwest::Method::GET, &path, None, &[])
                .await
        }
    };
    let over_http = json!({"url": url, "body": {}, "schedule": "no-such-schedule"});
    let (_, over_http) = pb
        .request_as(
            "tok-checkout-a",
            reqwest::Method::POST,
            "/notify",
            Some(over_http),
            &[],
        )
        .await;
    let error: Value = serde_json::from_str(&refusal("shop_a", &a)).unwrap();
    assert_eq!(error, over_http["error"], "the error POST /notify answers");
    assert_eq!(
        refusal("shop_a", &b),
        "",
        "another tenant's is not the role's"
    );
    assert_eq!(refusal("shop_b", &a), "");
    let table = pg.psql_as("shop_a", "SELECT error FROM postback.intake_refused");
    assert!(table.unwrap_err().contains("permission denied"));

    for token in ["tok-checkout-a", "tok-reader-a"] {
        let (status, answer) = as_token(token, format!("/notifications/{a}")).await;
        assert_eq!(status, 404, "{answer}");
        assert_eq!(answer["error"]["code"], "refused_at_intake", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        let why = over_http["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{message}");
        assert_eq!(answer["error"]["field"], over_http["error"]["field"]);
    }
    let (_, unknown) = as_token(
        "tok-reader-a",
        "/notifications/ntf_0_0000000000000000000000".into(),
    )
    .await;
    let (status, answer) = as_token("tok-all-b", format!("/notifications/{a}")).await;
    assert_eq!((status, &answer), (404, &unknown), "as any unknown id");
    let (status, answer) = as_token("tok-all-b", format!("/notifications/{b}")).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (404, &json!("refused_at_intake"))
    );
    let (status, answer) = as_token("tok-ops", format!("/notifications/{b}")).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (404, &json!("refused_at_intake")),
        "a token of every tenant"
    );
}
