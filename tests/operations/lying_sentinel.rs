//! A sentinel that lies among those configured: a real sentinel that names another Redis
//! (an attacker's, with data of its own) under the primary's name. An instance follows
//! only an address that a strict majority of the configured sentinels name, wherever
//! the liar is listed: at start, through a failover, and when the sentinels stop
//! agreeing (it keeps the primary it has, says so once, and counts it); and the
//! attacker's Redis never hears the data nodes' password. Two sentinels that name two
//! addresses are no majority: the start is refused, naming how they split.

use crate::support;

use std::time::Duration;

use serde_json::json;

use support::redis_sentinel::{PASSWORD, USER};
use support::{LyingSentinel, Postback, RedisServer, SentinelGroup, LONG_WAIT};

/// The data nodes' credentials, as an instance is given them.
const CREDENTIALS: [(&str, &str); 2] = [
    ("POSTBACK_STORE_REDIS_USERNAME", USER),
    ("POSTBACK_STORE_REDIS_PASSWORD", PASSWORD),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_sentinel_wherever_listed_never_redirects_an_instance_nor_hears_its_password() {
    let mut group = SentinelGroup::start();
    group.require_password();
    let liar = LyingSentinel::start();
    let instances = one_per_place_of_the_liar(&group, &liar).await;
    let old = group.primary_port();
    all_land_on(&instances, group.server(old), "at-start").await;

    group.kill_primary();
    let new = tokio::task::block_in_place(|| group.wait_failover(old));
    all_land_on(&instances, group.server(new), "after-failover").await;

    // The liar and one honest sentinel left: one address each, no majority.
    let before = splits_of(&instances).await;
    group.stop_sentinel(1);
    let split = [liar.named(), format!("127.0.0.1:{new}")];
    for pb in &instances {
        sees_the_split(pb, &split).await;
    }
    all_land_on(&instances, group.server(new), "while-split").await;
    for (pb, before) in instances.iter().zip(before) {
        assert_eq!(Splits::of(pb).await, before.one_more(), "{}", pb.logs());
        assert_eq!(pb.metric("postback_sentinels_agree").await, Some(0.0));
        let ready = pb.status_without_token("/readyz").await;
        assert_eq!(ready, 200, "{}", pb.logs());
        assert!(!pb.logs().contains(PASSWORD), "{}", pb.logs());
    }
    assert_eq!(liar.passwords_heard(), Vec::<String>::new());
    assert_eq!(liar.postback_keys(), Vec::<String>::new());
}

#[test]
fn two_sentinels_that_name_two_primaries_are_no_majority_and_the_start_is_refused() {
    let (a, b) = (LyingSentinel::start(), LyingSentinel::start());
    for listed in [[&a, &b], [&b, &a]] {
        let list = format!("{},{}", listed[0].address(), listed[1].address());
        let mut env = vec![("POSTBACK_STORE_REDIS_SENTINELS", list.as_str())];
        env.extend(CREDENTIALS);
        let said = Postback::refused_start(&env);
        assert!(said.contains("store.redis_sentinels"), "{said}");
        for sentinel in listed {
            assert!(said.contains(&sentinel.address()), "{said}");
            assert!(said.contains(&sentinel.named()), "how they split: {said}");
        }
        assert!(!said.contains(PASSWORD), "{said}");
    }
    for sentinel in [&a, &b] {
        assert_eq!(sentinel.passwords_heard(), Vec::<String>::new());
        assert_eq!(sentinel.postback_keys(), Vec::<String>::new());
    }
}

/// Three instances, each on two of the group's sentinels and the liar, listed first,
/// second and third, with the data nodes' credentials.
async fn one_per_place_of_the_liar(group: &SentinelGroup, liar: &LyingSentinel) -> Vec<Postback> {
    let honest = [group.sentinel_address(0), group.sentinel_address(1)];
    let mut instances = Vec::new();
    for at in 0..=2 {
        let mut listed = honest.to_vec();
        listed.insert(at, liar.address());
        let store = ("POSTBACK_STORE_REDIS_SENTINELS", listed.join(","));
        let pb = Postback::start_on((store.0, &store.1), &CREDENTIALS).await;
        instances.push(pb);
    }
    instances
}

/// `lands_on` through each instance, under keys named after `when`.
async fn all_land_on(instances: &[Postback], server: &RedisServer, when: &str) {
    for (n, pb) in instances.iter().enumerate() {
        lands_on(pb, server, &format!("{when}-{n}")).await;
    }
}

/// Registers a notification through `pb` (retrying `503` under one idempotency key
/// while the primary moves) and checks that it was stored on `server`.
async fn lands_on(pb: &Postback, server: &RedisServer, key: &str) {
    let body = json!({"url": "http://127.0.0.1:9/hook", "body": {}, "delay": "1h"});
    let accepted = support::found(LONG_WAIT, || async {
        let (status, answer) = pb
            .notify_with(body.clone(), &[("Idempotency-Key", key)])
            .await;
        let id = answer["id"].as_str().map(String::from);
        id.filter(|_| status == 202)
    })
    .await;
    let id = accepted.unwrap_or_else(|| panic!("{key} accepted:\n{}", pb.logs()));
    let stored: bool = server.query(redis::cmd("HEXISTS").arg("{postback:0}:jobs").arg(&id));
    assert!(stored, "{key} stored on {}:\n{}", server.port, pb.logs());
}

/// What an instance logs as the sentinels stop agreeing.
const SPLIT: &str = "the sentinels do not agree on a primary";

/// Waits until `pb` logs that the sentinels stopped agreeing, naming the addresses
/// they name (`split`).
async fn sees_the_split(pb: &Postback, split: &[String]) {
    let warned = support::eventually(Duration::from_secs(15), || async {
        let logs = pb.logs();
        let last = logs.lines().rfind(|l| l.contains(SPLIT));
        last.is_some_and(|l| split.iter().all(|a| l.contains(a.as_str())))
    })
    .await;
    assert!(warned, "split between {split:?}:\n{}", pb.logs());
}

/// Each instance's `Splits` now: a failover may have split the sentinels for a moment.
async fn splits_of(instances: &[Postback]) -> Vec<Splits> {
    let mut each = Vec::new();
    for pb in instances {
        each.push(Splits::of(pb).await);
    }
    each
}

/// How many times an instance logged and counted that the sentinels stopped agreeing.
#[derive(Debug, PartialEq)]
struct Splits {
    logged: usize,
    counted: Option<f64>,
}

impl Splits {
    async fn of(pb: &Postback) -> Self {
        Self {
            logged: pb.logs().matches(SPLIT).count(),
            counted: pb.metric("postback_sentinel_disagreements_total").await,
        }
    }

    /// One split more: logged once, not at every asking while it lasts.
    fn one_more(&self) -> Self {
        Self {
            logged: self.logged + 1,
            counted: Some(self.counted.unwrap_or_default() + 1.0),
        }
    }
}
