//! What an earlier build left in Redis (ids of 32 hex digits, a spec as one JSON object, a
//! state record from the registration on, schedules in ms, a claim that wrote
//! `in_flight`) is still read, sent and settled by this one.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postback::domain::{JobId, JobSpec, Outcome};
use postback::store::{ClaimedJob, Settlement, Store};
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
        expect_body: None,
        topic: Some("payment.succeeded".into()),
        rate_key: "merchant.example.com".into(),
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
    for _ in 0..100 {
        let claim = store
            .claim(10, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        if let Some(job) = claim.jobs.into_iter().next() {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing became due");
}

fn settlement(job: &ClaimedJob, outcome: Outcome) -> Settlement {
    Settlement {
        id: job.id,
        lease: job.lease,
        outcome,
        status: Some(if outcome == Outcome::Delivered {
            200
        } else {
            500
        }),
        error: None,
        duration_ms: 3,
        response: String::new(),
        retry_after: None,
        jitter_permille: 0,
        ended_at: job.claimed_at_us / 1000,
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
