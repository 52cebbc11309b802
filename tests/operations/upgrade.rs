//! What an earlier build left in Redis (ids of 32 hex digits, a spec as one JSON object, a
//! state record from the registration on, schedules in ms, a claim that wrote
//! `in_flight`) or in the embedded store's file (redb 2's file format, specs as JSON,
//! records with the schedule in ms and the lease raised at the claim) is still read,
//! sent and settled by this one.

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postback::config::RetentionSettings;
use postback::domain::{JobId, JobSpec, Outcome, Tenant};
use postback::store::{
    AuditFilter, ClaimedJob, EmbeddedStore, ListFilter, Listed, OperatorActions, Queue, Reads,
    Settlement, Store, EMBEDDED_FILE,
};
use support::redis_server::RedisServer;
use support::Backend;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn legacy_id() -> JobId {
    format!("ntf_0_{}", uuid::Uuid::now_v7().simple())
        .parse()
        .unwrap()
}

fn legacy_spec() -> JobSpec {
    JobSpec {
        url: "http://merchant.example.com/cb".into(),
        body: "{\"order\":7}".into(),
        content_type: "application/json".into(),
        headers: Vec::new(),
        timeout_ms: 1_000,
        success: Default::default(),
        profile: None,
        topic: Some("payment.succeeded".into()),
        rate_key: "merchant.example.com".into(),
        traceparent: None,
        ordering_key: None,
        tenant: Default::default(),
    }
}

/// A store on a fresh Redis holding one notification as an earlier build wrote it: its
/// spec, its state record `state` (with the schedule in ms), and its place in `index`
/// with `score`.
async fn stored_by_an_earlier_build(
    state: &str,
    index: &str,
    score: u64,
) -> (Backend, Box<dyn Store>, JobId) {
    let backend = Backend::Standalone(RedisServer::start());
    let store = backend.store().await;
    let Backend::Standalone(redis) = &backend else {
        unreachable!()
    };
    let id = legacy_id();
    let key = id.to_string();
    let spec = serde_json::to_string(&legacy_spec()).unwrap();
    redis.query::<()>(
        redis::cmd("HSET")
            .arg("{postback:0}:jobs")
            .arg(&key)
            .arg(spec),
    );
    redis.query::<()>(
        redis::cmd("HSET")
            .arg("{postback:0}:state")
            .arg(&key)
            .arg(state),
    );
    redis.query::<()>(
        redis::cmd("ZADD")
            .arg(format!("{{postback:0}}:{index}"))
            .arg(score)
            .arg(&key),
    );
    (backend, store, id)
}

async fn claim_one(store: &dyn Store) -> ClaimedJob {
    let claimed = support::found(support::WAIT, || async {
        let claim = store.claim(10, Duration::from_secs(60), Duration::ZERO);
        claim.await.unwrap().jobs.into_iter().next()
    });
    claimed.await.expect("something became due")
}

fn settlement(job: &ClaimedJob, outcome: Outcome) -> Settlement {
    Settlement {
        id: job.id,
        lease: job.lease,
        report: support::fixtures::report(outcome),
        jitter_permille: 0,
        ended_at: job.claimed_at_us / 1000,
        ordered: false,
        url: job.spec.url.clone(),
    }
}

#[tokio::test]
async fn a_scheduled_notification_of_an_earlier_build_is_retried_by_its_schedule_and_delivered() {
    let now = now_ms();
    let state = format!(
        r#"{{"state":"scheduled","attempts":0,"lease":0,"max_attempts":3,"schedule":"150,200","created_at":{now},"next_at":{now}}}"#
    );
    let (_backend, store, id) = stored_by_an_earlier_build(&state, "due", now).await;

    let view = store.get(&id).await.unwrap().unwrap();
    assert_eq!(view.spec, legacy_spec());
    assert_eq!((view.status.attempts, view.status.max_attempts), (0, 3));

    let first = claim_one(&*store).await;
    assert_eq!((first.id, first.attempt), (id, 1));
    assert_eq!(first.spec, legacy_spec());
    let failed = settlement(&first, Outcome::Failed);
    assert_eq!(
        store
            .settle(std::slice::from_ref(&failed))
            .await
            .unwrap()
            .applied,
        [true]
    );
    let view = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (view.status.attempts, view.status.next_at),
        (1, Some(failed.ended_at + 150)),
        "retried after the first interval of its schedule in ms"
    );

    let second = claim_one(&*store).await;
    assert_eq!((second.id, second.attempt), (id, 2));
    let delivered = settlement(&second, Outcome::Delivered);
    assert_eq!(store.settle(&[delivered]).await.unwrap().applied, [true]);
    let view = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (format!("{:?}", view.status.state), view.status.attempts),
        ("Delivered".into(), 2)
    );
    assert_eq!(view.history.len(), 2);
}

#[tokio::test]
async fn a_notification_an_earlier_build_left_in_flight_comes_back_when_its_lease_ends() {
    let now = now_ms();
    // Claims of builds before 2026-11-23 wrote `in_flight` and raised the lease number.
    let state = format!(
        r#"{{"state":"in_flight","attempts":0,"lease":1,"max_attempts":2,"schedule":"100","created_at":{now},"next_at":{now}}}"#
    );
    let (_backend, store, id) = stored_by_an_earlier_build(&state, "inflight", now + 300).await;

    let view = store.get(&id).await.unwrap().unwrap();
    assert_eq!(format!("{:?}", view.status.state), "InFlight");
    let job = claim_one(&*store).await;
    assert_eq!((job.id, job.attempt, job.lease > 1), (id, 1, true));
    let settled = store
        .settle(&[settlement(&job, Outcome::Delivered)])
        .await
        .unwrap();
    assert_eq!(settled.applied, vec![true]);
    let view = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (format!("{:?}", view.status.state), view.status.attempts),
        ("Delivered".into(), 1)
    );
}

/// Layout 3 (builds up to 2026-11-25) kept the ordering key and the tenant as the last
/// fields of the meta line, where the scripts read them; no state record until the
/// first change. Such a notification is claimed, counted for its tenant and settled,
/// and leaves its ordering key's list.
#[tokio::test]
async fn a_notification_of_layout_3_keeps_its_tenant_and_ordering_key() {
    let backend = Backend::Standalone(RedisServer::start());
    let store = backend.store().await;
    let Backend::Standalone(redis) = &backend else {
        unreachable!()
    };
    let (now, id) = (now_ms().to_string(), JobId::new(0).to_string());
    let list = "{postback:0}:order:shop-a o1";
    // Registered in 2023 (`loyw3v28`, base 36), and due now by its place in the index.
    let spec = "v3 loyw3v28 0 150\n{\"url\":\"http://merchant.example.com/cb\",\"success\":{\"json_pointer\":\"/a\",\"json_equals\":{\"ordering_key\":\"x y\"}},\"ordering_key\":\"o1\",\"tenant\":\"shop-a\"}\n{}";
    for args in [
        ["HSET", "{postback:0}:jobs", &id, spec],
        ["ZADD", "{postback:0}:due", &now, &id],
        ["HSET", "{postback:0}:tenants", "shop-a due", "1"],
    ] {
        redis.query::<()>(redis::cmd(args[0]).arg(&args[1..]));
    }
    redis.query::<()>(redis::cmd("RPUSH").arg(list).arg(&id));

    let job = claim_one(&*store).await;
    assert_eq!(
        (
            &*job.spec.tenant,
            job.spec.ordering_key.as_ref().map(|k| k.as_str())
        ),
        ("shop-a", Some("o1"))
    );
    let counts = |field: &str| -> i64 {
        redis
            .query::<Option<i64>>(redis::cmd("HGET").arg("{postback:0}:tenants").arg(field))
            .unwrap_or(0)
    };
    assert_eq!((counts("shop-a due"), counts("shop-a inflight")), (0, 1));
    let delivered = Settlement {
        ordered: true,
        ..settlement(&job, Outcome::Delivered)
    };
    assert_eq!(store.settle(&[delivered]).await.unwrap().applied, [true]);
    assert_eq!((counts("shop-a inflight"), counts("shop-a done")), (0, 1));
    assert_eq!(
        redis.query::<i64>(redis::cmd("EXISTS").arg(list)),
        0,
        "it left its key's list"
    );
}

/// Notifications an earlier build stored, which kept no index per tenant, are put into
/// their tenants' own indexes once, as the first instance starts: each tenant's lists
/// find them, and its retention counts them.
#[tokio::test]
async fn notifications_of_an_earlier_build_join_their_tenants_indexes_once() {
    let redis = RedisServer::start();
    let now = now_ms();
    let (scheduled, dead) = (JobId::new(0).to_string(), JobId::new(0).to_string());
    let spec = |at: u64| {
        format!(
            "v4 {} 0 150 shop-a\n{{\"url\":\"http://merchant.example.com/cb\"}}\n{{}}",
            base36(at)
        )
    };
    for args in [
        ["HSET", "{postback:0}:jobs", &scheduled, &spec(now)],
        ["HSET", "{postback:0}:jobs", &dead, &spec(now - 10)],
        [
            "ZADD",
            "{postback:0}:due",
            &(now + 3_600_000).to_string(),
            &scheduled,
        ],
        ["ZADD", "{postback:0}:dead", &(now - 5).to_string(), &dead],
        [
            "HSET",
            "{postback:0}:state",
            &dead,
            &format!(
                r#"{{"state":"dead","attempts":1,"lease":1,"max_attempts":1,"schedule":"","created_at":{},"finished_at":{}}}"#,
                now - 10,
                now - 5
            ),
        ],
    ] {
        redis.query::<()>(redis::cmd(args[0]).arg(&args[1..]));
    }
    let purged = r#"{"actor":"ops","tenant":"shop-a","action":"purge","count":1}"#;
    let everyone = r#"{"actor":"ops","action":"purge","count":3}"#;
    for entry in [purged, everyone] {
        redis.query::<()>(
            redis::cmd("XADD")
                .arg("{postback:audit}")
                .arg("*")
                .arg("r")
                .arg(entry),
        );
    }
    let backend = Backend::Standalone(redis);
    let store = backend.store().await;

    let shop_a = ListFilter {
        tenant: Some(Tenant::parse("shop-a", "tenant").unwrap()),
        ..ListFilter::default()
    };
    for (listed, id) in [(Listed::Scheduled, &scheduled), (Listed::Dead, &dead)] {
        let page = store.list(listed, &shop_a, 10, None).await.unwrap();
        let ids: Vec<String> = page.items.iter().map(|v| v.id.to_string()).collect();
        assert_eq!(&ids, std::slice::from_ref(id), "{listed:?}");
        assert_eq!(page.examined, 1, "{listed:?}");
    }
    let default = ListFilter {
        tenant: Some(Tenant::default()),
        ..ListFilter::default()
    };
    let page = store.list(Listed::Dead, &default, 10, None).await.unwrap();
    assert!(page.items.is_empty(), "shop-a's are shop-a's alone");
    let audit = AuditFilter {
        tenant: shop_a.tenant.clone(),
        ..AuditFilter::default()
    };
    let entries = store.audit_entries(&audit, None, 10).await.unwrap();
    let actions: Vec<u64> = entries.iter().map(|e| e.record.count).collect();
    assert_eq!(actions, [1], "shop-a's entry in its own log");
    let Backend::Standalone(redis) = &backend else {
        unreachable!()
    };
    let upgrades: Vec<String> = redis.query(redis::cmd("SMEMBERS").arg("{postback:0}:upgrades"));
    assert!(
        upgrades.contains(&"tenant-indexes".to_string()),
        "{upgrades:?}"
    );
}

/// A tenant's index entry that no longer matches its notification (a build that knew no
/// tenant indexes replayed the dead letter since) is dropped by retention alone: the
/// notification, scheduled again, keeps its records and is delivered.
#[tokio::test]
async fn retention_drops_a_stale_entry_of_a_tenants_index_and_keeps_the_notification() {
    let backend = Backend::Standalone(RedisServer::start());
    let store = backend.store().await;
    let Backend::Standalone(redis) = &backend else {
        unreachable!()
    };
    let (now, id) = (now_ms(), JobId::new(0).to_string());
    let spec = format!(
        "v4 {} 0 150\n{{\"url\":\"http://merchant.example.com/cb\"}}\n{{}}",
        base36(now)
    );
    for args in [
        ["HSET", "{postback:0}:jobs", &id, &spec],
        [
            "ZADD",
            "{postback:0}:due",
            &(now + 3_600_000).to_string(),
            &id,
        ],
        [
            "ZADD",
            "{postback:0}:t:default:pending",
            &(now + 3_600_000).to_string(),
            &id,
        ],
        ["ZADD", "{postback:0}:t:default:dead", "1", &id],
        ["SADD", "{postback:0}:tenant_names", "default", "default"],
    ] {
        redis.query::<()>(redis::cmd(args[0]).arg(&args[1..]));
    }
    assert_eq!(store.trim().await.unwrap(), 0, "nothing deleted");
    let view = store
        .get(&id.parse().unwrap())
        .await
        .unwrap()
        .expect("kept");
    assert_eq!(format!("{:?}", view.status.state), "Scheduled");
    let stale: Option<f64> = redis.query(
        redis::cmd("ZSCORE")
            .arg("{postback:0}:t:default:dead")
            .arg(&id),
    );
    assert_eq!(stale, None, "the stale entry is dropped");
}

fn base36(mut n: u64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(digits[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

/// One notification as the embedded store of an earlier build kept it: its record (with
/// the schedule in ms) and its index entry.
struct EarlierRow {
    id: JobId,
    record: String,
    index: &'static str,
    at: i64,
}

fn earlier_row(id: JobId, state: &str, attempts: u32, at: i64, lease: u64) -> EarlierRow {
    let (index, next_at, finished_at, lease_until) = match state {
        "scheduled" => ("due", Some(at), None, None),
        "in_flight" => ("inflight", Some(at - 100), None, Some(at)),
        "dead" => ("dead", None, Some(at), None),
        _ => ("done", None, Some(at), None),
    };
    let json = |v: Option<i64>| v.map_or("null".to_string(), |v| v.to_string());
    let record = format!(
        r#"{{"state":"{state}","attempts":{attempts},"max_attempts":2,"created_at":{},"next_at":{},"finished_at":{},"replays":0,"cancel_requested":false,"schedule":[100],"lease":{lease},"lease_until":{}}}"#,
        at - 1000,
        json(next_at),
        json(finished_at),
        json(lease_until)
    );
    EarlierRow {
        id,
        record,
        index,
        at,
    }
}

/// Writes `rows` into a new file in `dir` as an earlier build did: with redb 2.
fn write_earlier_file(dir: &std::path::Path, rows: &[EarlierRow]) {
    use redb2::TableDefinition;
    type Index = TableDefinition<'static, (i64, &'static str), ()>;
    const TEXT: [&str; 3] = ["specs", "records", "history"];
    let db = redb2::Database::create(dir.join(EMBEDDED_FILE)).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let specs_def: TableDefinition<&str, &str> = TableDefinition::new(TEXT[0]);
        let records_def: TableDefinition<&str, &str> = TableDefinition::new(TEXT[1]);
        let mut specs = tx.open_table(specs_def).unwrap();
        let mut records = tx.open_table(records_def).unwrap();
        let spec = serde_json::to_string(&legacy_spec()).unwrap();
        for row in rows {
            let id = row.id.to_string();
            specs.insert(id.as_str(), spec.as_str()).unwrap();
            records.insert(id.as_str(), row.record.as_str()).unwrap();
            let index: Index = TableDefinition::new(row.index);
            tx.open_table(index)
                .unwrap()
                .insert((row.at, id.as_str()), ())
                .unwrap();
        }
    }
    tx.commit().unwrap();
}

#[tokio::test]
async fn an_embedded_file_of_an_earlier_build_is_upgraded_once_and_carried_on() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_ms() as i64;
    let [retrying, flying, dead, cancelled] = [(); 4].map(|_| legacy_id());
    write_earlier_file(
        dir.path(),
        &[
            earlier_row(retrying, "scheduled", 1, now - 5, 1),
            // Left in flight by an instance that died; its lease ended 50 ms ago.
            earlier_row(flying, "in_flight", 0, now - 50, 1),
            earlier_row(dead, "dead", 2, now - 10, 2),
            earlier_row(cancelled, "cancelled", 0, now - 20, 0),
        ],
    );

    let retention = RetentionSettings::default();
    let store = EmbeddedStore::open(dir.path(), &retention).unwrap();
    let own = ListFilter {
        tenant: Some(Tenant::default()),
        ..ListFilter::default()
    };
    for (listed, id) in [(Listed::Dead, dead), (Listed::Cancelled, cancelled)] {
        let page = store.list(listed, &own, 10, None).await.unwrap();
        let ids: Vec<JobId> = page.items.iter().map(|v| v.id).collect();
        assert_eq!(ids, [id], "in its tenant's own index: {listed:?}");
    }
    let jobs = std::sync::Mutex::new(Vec::new());
    support::eventually(support::WAIT, || async {
        let claim = store.claim(10, Duration::from_secs(60), Duration::ZERO);
        let claimed = claim.await.unwrap().jobs;
        let mut jobs = jobs.lock().unwrap();
        jobs.extend(claimed);
        jobs.len() == 2
    })
    .await;
    let mut jobs = jobs.into_inner().unwrap();
    jobs.sort_by_key(|j| j.id != retrying);
    assert_eq!(
        jobs.iter().map(|j| (j.id, j.attempt)).collect::<Vec<_>>(),
        [(retrying, 2), (flying, 1)]
    );
    assert_eq!(jobs[0].spec, legacy_spec());
    let delivered: Vec<_> = jobs
        .iter()
        .map(|j| settlement(j, Outcome::Delivered))
        .collect();
    assert_eq!(
        store.settle(&delivered).await.unwrap().applied,
        [true, true]
    );
    let replayed = store
        .replay(&dead, None, None, Duration::from_secs(3600))
        .await
        .unwrap()
        .expect("the dead letter replays");
    assert_eq!((replayed.attempts, replayed.max_attempts), (0, 2));
    drop(store);

    // Opened again: the file is redb 3's now, and holds what happened.
    let store = EmbeddedStore::open(dir.path(), &retention).unwrap();
    let mut seen = Vec::new();
    for id in [retrying, flying, dead, cancelled] {
        let s = store.get(&id).await.unwrap().unwrap().status;
        seen.push((format!("{:?}", s.state), s.attempts));
    }
    let expected = [
        ("Delivered", 2),
        ("Delivered", 1),
        ("Scheduled", 0),
        ("Cancelled", 0),
    ];
    assert_eq!(seen, expected.map(|(state, n)| (state.to_string(), n)));
    assert!(
        redb2::Database::open(dir.path().join(EMBEDDED_FILE)).is_err(),
        "no longer redb 2's format"
    );
}
