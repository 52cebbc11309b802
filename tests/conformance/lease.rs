//! Leases: a notification whose worker went silent comes back, and a settle from the
//! lost lease changes nothing.

use crate::support;

use std::time::Duration;

use postback::domain::{JobId, Notification, Outcome};
use postback::store::{ClaimedJob, Settlement, Store};
use support::Backend;

/// A store on a fresh backend holding one registered notification.
async fn one_registered() -> (Backend, Box<dyn Store>, Notification) {
    let backend = Backend::start();
    let store = backend.store().await;
    let n = support::fixtures::notification(&["100ms"], Duration::ZERO);
    store.enqueue(&n, None).await.unwrap();
    (backend, store, n)
}

/// Claims until something is due (a registration is due from the next millisecond).
async fn claim_some(store: &dyn Store, lease: Duration) -> Vec<ClaimedJob> {
    let claimed = support::found(support::WAIT, || async {
        let claim = store.claim(10, lease, Duration::ZERO).await.unwrap();
        (!claim.jobs.is_empty()).then_some(claim.jobs)
    });
    claimed.await.expect("something became due")
}

fn settlement(id: JobId, lease: u64, outcome: Outcome) -> Settlement {
    Settlement {
        id,
        lease,
        report: support::fixtures::report(outcome),
        jitter_permille: 0,
        ended_at: i64::MAX,
        ordered: false,
        url: "http://merchant.example.com/cb".into(),
    }
}

#[tokio::test]
async fn an_expired_lease_returns_the_notification_and_its_late_settle_is_ignored() {
    let (_backend, store, n) = one_registered().await;

    let first = claim_some(&*store, Duration::from_millis(100)).await;
    assert_eq!(first.len(), 1);
    assert_eq!(
        store
            .claim(10, Duration::from_millis(100), Duration::ZERO)
            .await
            .unwrap()
            .jobs
            .len(),
        0,
        "leased, not claimable"
    );

    let second = claim_some(&*store, Duration::from_secs(60)).await;
    assert_eq!(second.len(), 1, "the expired lease came back");
    let (old, new) = (&first[0], &second[0]);
    assert_eq!(new.attempt, 1, "a lost attempt is not counted");
    assert!(new.lease > old.lease);

    let stale = store
        .settle(&[settlement(n.id, old.lease, Outcome::Delivered)])
        .await
        .unwrap();
    assert_eq!(stale.applied, vec![false]);
    let view = store.get(&n.id).await.unwrap().unwrap();
    assert_eq!(
        (
            format!("{:?}", view.status.state),
            view.status.attempts,
            view.history.len()
        ),
        ("InFlight".into(), 0, 0)
    );

    let current = store
        .settle(&[settlement(n.id, new.lease, Outcome::Failed)])
        .await
        .unwrap();
    assert_eq!(current.applied, vec![true]);
    let again = store
        .settle(&[settlement(n.id, new.lease, Outcome::Failed)])
        .await
        .unwrap();
    assert_eq!(again.applied, vec![false], "a settle is applied once");
    let view = store.get(&n.id).await.unwrap().unwrap();
    assert_eq!(
        (format!("{:?}", view.status.state), view.status.attempts),
        ("Scheduled".into(), 1)
    );
}

#[tokio::test]
async fn a_settle_cannot_resurrect_a_finished_notification() {
    let (_backend, store, n) = one_registered().await;
    let job = claim_some(&*store, Duration::from_secs(60)).await.remove(0);

    store
        .settle(&[settlement(n.id, job.lease, Outcome::Delivered)])
        .await
        .unwrap();
    let late = store
        .settle(&[settlement(n.id, job.lease, Outcome::Failed)])
        .await
        .unwrap();
    assert_eq!(late.applied, vec![false]);
    let view = store.get(&n.id).await.unwrap().unwrap();
    assert_eq!(
        (format!("{:?}", view.status.state), view.status.attempts),
        ("Delivered".into(), 1)
    );
    assert_eq!(
        store
            .claim(10, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap()
            .jobs
            .len(),
        0
    );
}

#[tokio::test]
async fn a_cancel_during_an_attempt_holds_when_the_lease_expires_or_is_released() {
    let (_backend, store, n) = one_registered().await;
    let job = claim_some(&*store, Duration::from_millis(100))
        .await
        .remove(0);
    assert!(matches!(
        store.cancel(&n.id).await.unwrap(),
        postback::store::Cancelled::AfterAttempt
    ));
    let ended = support::found(support::WAIT, || async {
        let claim = store.claim(10, Duration::from_secs(60), Duration::ZERO);
        assert!(claim.await.unwrap().jobs.is_empty(), "not claimed again");
        let view = store.get(&n.id).await.unwrap().unwrap();
        (format!("{:?}", view.status.state) == "Cancelled").then_some(view)
    });
    let view = ended.await.expect("the expired lease ends it");
    assert_eq!(
        (format!("{:?}", view.status.state), view.status.attempts),
        ("Cancelled".into(), 0),
        "the expired lease ends it instead of sending it again"
    );
    assert_eq!(
        store
            .settle(&[settlement(n.id, job.lease, Outcome::Delivered)])
            .await
            .unwrap()
            .applied,
        vec![false]
    );

    let second = support::fixtures::notification(&["100ms"], Duration::ZERO);
    store.enqueue(&second, None).await.unwrap();
    let job = claim_some(&*store, Duration::from_secs(60)).await.remove(0);
    store.cancel(&second.id).await.unwrap();
    assert_eq!(store.release(&[(second.id, job.lease)]).await.unwrap(), 0);
    let view = store.get(&second.id).await.unwrap().unwrap();
    assert_eq!(
        format!("{:?}", view.status.state),
        "Cancelled",
        "released at shutdown"
    );
}

#[tokio::test]
async fn a_notification_claimed_before_it_is_due_keeps_its_due_time_when_released() {
    let backend = Backend::start();
    let store = backend.store().await;
    let n = Notification {
        delay: Duration::from_secs(30),
        ..support::fixtures::notification(&["100ms"], Duration::ZERO)
    };
    store.enqueue(&n, None).await.unwrap();
    let due = store.get(&n.id).await.unwrap().unwrap().status.next_at;
    let lease = Duration::from_secs(60);

    let now = store.claim(10, lease, Duration::ZERO).await.unwrap();
    assert!(now.jobs.is_empty(), "not due yet");
    let ahead = store
        .claim(10, lease, Duration::from_secs(31))
        .await
        .unwrap();
    assert_eq!(ahead.jobs.len(), 1, "due within the next 31 s");
    assert_eq!(Some(ahead.jobs[0].due_at), due);
    let view = store.get(&n.id).await.unwrap().unwrap();
    assert_eq!(
        (format!("{:?}", view.status.state), view.status.next_at),
        ("InFlight".into(), due),
        "a claimed notification reads in flight, due when it was"
    );

    let released = store.release(&[(n.id, ahead.jobs[0].lease)]).await.unwrap();
    assert_eq!(released, 1);
    let view = store.get(&n.id).await.unwrap().unwrap();
    assert_eq!(
        (format!("{:?}", view.status.state), view.status.next_at),
        ("Scheduled".into(), due),
        "handed back due when it was due, not at once"
    );
    let again = store.claim(10, lease, Duration::ZERO).await.unwrap();
    assert!(again.jobs.is_empty(), "still not due");
}

/// On Redis a settle is worked out from the state record its claim read, and written
/// where the stored record is still that one. A store that did not claim it (another
/// instance's, or one that forgot the lease) reads the stored record first and works it
/// out from that. Both ways give a notification the same state, attempts and times.
#[tokio::test]
async fn a_settle_by_a_store_that_did_not_claim_comes_to_the_same_as_the_claimers() {
    let backend = Backend::start();
    let store = backend.store().await;
    let other = if backend.is_shared() {
        Some(backend.store().await)
    } else {
        None
    };
    let (claimer, stranger) = (
        support::fixtures::notification(&["100ms"], Duration::ZERO),
        support::fixtures::notification(&["100ms"], Duration::ZERO),
    );
    store.enqueue(&claimer, None).await.unwrap();
    store.enqueue(&stranger, None).await.unwrap();

    for round in 0..2 {
        let mut jobs = Vec::new();
        while jobs.len() < 2 {
            jobs.extend(claim_some(&*store, Duration::from_secs(60)).await);
        }
        // A time already past on the store's clock, so that neither way clamps it to now.
        let ended_at = jobs.iter().map(|j| j.claimed_at_us / 1000).min().unwrap();
        let mut seen = Vec::new();
        for job in &jobs {
            let mut s = settlement(job.id, job.lease, Outcome::Failed);
            s.ended_at = ended_at;
            let settler = match &other {
                Some(other) if job.id == stranger.id => &**other,
                _ => &*store,
            };
            assert_eq!(settler.settle(&[s]).await.unwrap().applied, vec![true]);
            let st = store.get(&job.id).await.unwrap().unwrap().status;
            seen.push((
                format!("{:?}", st.state),
                st.attempts,
                st.next_at.map(|t| t - ended_at),
                st.finished_at.map(|t| t - ended_at),
            ));
        }
        let expected = if round == 0 {
            ("Scheduled".to_string(), 1, Some(100), None)
        } else {
            ("Dead".to_string(), 2, None, Some(0))
        };
        assert_eq!(seen, vec![expected.clone(), expected], "round {round}");
    }
}

/// An attempt's end is never taken to be after the store's now, whichever way the settle
/// is applied, so an instance that reckons it later cannot push the retry out.
#[tokio::test]
async fn an_attempt_reckoned_to_end_after_now_is_settled_as_ending_now() {
    let (_backend, store, n) = one_registered().await;
    let job = claim_some(&*store, Duration::from_secs(60)).await.remove(0);
    let ahead = job.store_now() + 60_000;
    let mut s = settlement(n.id, job.lease, Outcome::Failed);
    s.ended_at = ahead;
    assert_eq!(store.settle(&[s]).await.unwrap().applied, vec![true]);
    let view = store.get(&n.id).await.unwrap().unwrap();
    let next_at = view.status.next_at.unwrap();
    assert!(
        next_at < ahead,
        "next attempt at {next_at}, the attempt said to end at {ahead}"
    );
}
