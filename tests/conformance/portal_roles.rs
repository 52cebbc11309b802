//! What a portal link may call: each route of the API, with a link that lacks one role
//! the call needs (refused, `403 forbidden`, before anything is looked up) and a link
//! with just those roles (allowed). `operate` on a link resends, attempts now, pauses
//! and resumes; every other action needs the role named for it, and a resend what its
//! notification's state asks besides (a dead one `replay`, a cancelled one `cancel`);
//! registering, the audit log and issuing links are never a link's. A link of a tenant
//! no longer configured is refused. On every backend (`scripts/test.sh`).

use crate::support;

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::{json, Value};
use support::tenants::{self, Fleet};
use support::WAIT;

use super::portal::{credential, portal_link, signed_elsewhere, SECRET};

/// Every role a link may carry besides `read`, which every link has.
const LINK_ROLES: [&str; 8] = [
    "operate",
    "cancel",
    "replay",
    "redirect",
    "reschedule",
    "discard",
    "bulk",
    "subscriptions",
];

/// One call and the link roles it needs; `None`: no link may make it.
struct Case {
    method: Method,
    path: String,
    body: Option<Value>,
    needs: Option<&'static [&'static str]>,
}

fn case(method: Method, path: &str, body: Option<Value>, needs: &'static [&'static str]) -> Case {
    Case {
        method,
        path: path.to_string(),
        body,
        needs: Some(needs),
    }
}

fn never(method: Method, path: &str, body: Value) -> Case {
    Case {
        method,
        path: path.to_string(),
        body: Some(body),
        needs: None,
    }
}

/// Links by their roles, issued once each.
struct Links<'a> {
    fleet: &'a Fleet,
    issued: BTreeMap<Vec<&'static str>, String>,
}

impl Links<'_> {
    fn with(&mut self, roles: Vec<&'static str>) -> String {
        let fleet = self.fleet;
        let link = self.issued.entry(roles).or_insert_with_key(|roles| {
            let roles = [&["read"][..], roles].concat().join(",");
            let args = ["--tenant", "shop-a", "--ttl", "10m", "--roles", &roles];
            credential(&portal_link(fleet, &args).unwrap())
        });
        link.clone()
    }

    /// A link with every role but `missing`.
    fn without(&mut self, missing: &str) -> String {
        self.with(LINK_ROLES.into_iter().filter(|r| *r != missing).collect())
    }
}

/// shop-a's things each call acts on, by name: notifications scheduled (an hour away),
/// delivered and dead, an endpoint, a subscription and an event it took.
async fn fixtures(f: &Fleet) -> BTreeMap<&'static str, String> {
    let mut made = BTreeMap::new();
    let ok = f.receiver.url("/ok");
    for name in ["scheduled-1", "scheduled-2"] {
        let body = json!({"url": ok, "body": {}, "delay": "1h"});
        made.insert(name, f.register("tok-checkout-a", body).await);
    }
    for name in ["delivered-1", "delivered-2"] {
        let id = f
            .register("tok-checkout-a", json!({"url": ok, "body": {}}))
            .await;
        f.pb.wait_state(&id, "delivered", WAIT).await;
        made.insert(name, id);
    }
    for name in ["dead-1", "dead-2", "dead-3", "dead-4", "dead-5"] {
        made.insert(name, f.dead_letter("tok-checkout-a", None, "portal").await);
    }
    let subscribe = json!({"url": ok, "topics": ["portal.*"]});
    let (status, sub) = f
        .call("tok-ops-a", Method::POST, "/subscriptions", Some(subscribe))
        .await;
    assert_eq!(status, 201, "{sub}");
    made.insert("subscription", sub["id"].as_str().unwrap().to_string());
    let publish = json!({"topic": "portal.paid", "body": {}});
    let (status, event) = f
        .call("tok-checkout-a", Method::POST, "/events", Some(publish))
        .await;
    assert_eq!(status, 202, "{event}");
    let made_for = event["deliveries"][0]["notification"].as_str().unwrap();
    f.pb.wait_state(made_for, "delivered", WAIT).await;
    made.insert("event", event["id"].as_str().unwrap().to_string());
    // Endpoints' records are written every second.
    let listed = support::eventually(WAIT, || async {
        let (_, page) = f.get("tok-reader-a", "/endpoints").await;
        page["items"][0]["id"].is_string()
    });
    assert!(listed.await, "shop-a's endpoint is listed");
    let (_, page) = f.get("tok-reader-a", "/endpoints").await;
    made.insert("endpoint", page["items"][0]["id"].as_str().unwrap().into());
    made
}

/// Every protected route, in an order where each allowed call finds what it acts on.
fn cases(ids: &BTreeMap<&'static str, String>) -> Vec<Case> {
    let p = |template: &str| {
        ids.iter().fold(template.to_string(), |path, (name, id)| {
            path.replace(&format!("{{{name}}}"), id)
        })
    };
    let notify = json!({"url": "http://127.0.0.1:9/x", "body": {}});
    let nothing = json!({"topic": "nothing.matches"});
    use Method as M;
    vec![
        case(M::GET, "/me", None, &[]),
        never(M::POST, "/notify", notify.clone()),
        never(M::POST, "/notify/batch", json!({"items": [notify]})),
        never(
            M::POST,
            "/events",
            json!({"topic": "portal.paid", "body": {}}),
        ),
        never(M::POST, "/events/batch", json!({"items": []})),
        never(M::GET, "/audit", Value::Null),
        never(M::POST, "/portal-links", json!({"tenant": "shop-a"})),
        case(M::GET, "/notifications?state=delivered", None, &[]),
        case(M::GET, &p("/notifications/{delivered-1}"), None, &[]),
        case(
            M::DELETE,
            &p("/notifications/{scheduled-1}"),
            None,
            &["cancel"],
        ),
        case(
            M::POST,
            &p("/notifications/{scheduled-2}/attempt-now"),
            None,
            &["operate"],
        ),
        case(
            M::POST,
            &p("/notifications/{delivered-1}/resend"),
            None,
            &["operate"],
        ),
        case(
            M::POST,
            &p("/notifications/{delivered-2}/resend"),
            Some(json!({"delay": "1s"})),
            &["operate", "reschedule"],
        ),
        case(
            M::POST,
            &p("/notifications/{dead-5}/resend"),
            None,
            &["operate", "replay"],
        ),
        case(
            M::POST,
            &p("/notifications/{scheduled-1}/resend"),
            None,
            &["operate", "cancel"],
        ),
        case(
            M::POST,
            "/notifications/resend",
            Some(json!({"state": "delivered", "topic": "nothing.matches"})),
            &["operate", "bulk"],
        ),
        case(
            M::POST,
            "/notifications/resend",
            Some(json!({"state": "dead", "topic": "nothing.matches"})),
            &["operate", "bulk", "replay"],
        ),
        case(
            M::POST,
            "/notifications/resend",
            Some(json!({"state": "cancelled", "topic": "nothing.matches", "schedule": ["1s"]})),
            &["operate", "bulk", "cancel", "reschedule"],
        ),
        case(M::GET, "/dead-letters", None, &[]),
        case(M::GET, &p("/dead-letters/{dead-1}"), None, &[]),
        case(
            M::POST,
            &p("/dead-letters/{dead-1}/replay"),
            None,
            &["replay"],
        ),
        case(
            M::POST,
            &p("/dead-letters/{dead-2}/replay"),
            Some(json!({"url": "http://127.0.0.1:9/elsewhere"})),
            &["replay", "redirect"],
        ),
        case(
            M::POST,
            &p("/dead-letters/{dead-3}/replay"),
            Some(json!({"schedule": ["1s"]})),
            &["replay", "reschedule"],
        ),
        case(M::DELETE, &p("/dead-letters/{dead-4}"), None, &["discard"]),
        case(
            M::POST,
            "/dead-letters/replay",
            Some(nothing.clone()),
            &["replay", "bulk"],
        ),
        case(
            M::POST,
            "/dead-letters/replay",
            Some(json!({"topic": "nothing.matches", "delay": "1s"})),
            &["replay", "bulk", "reschedule"],
        ),
        case(
            M::POST,
            "/dead-letters/purge",
            Some(nothing),
            &["discard", "bulk"],
        ),
        case(M::GET, "/overview", None, &[]),
        case(M::GET, "/stats", None, &[]),
        case(M::GET, "/endpoints", None, &[]),
        case(M::GET, &p("/endpoints/{endpoint}"), None, &[]),
        case(
            M::POST,
            &p("/endpoints/{endpoint}/pause"),
            None,
            &["operate"],
        ),
        case(
            M::POST,
            &p("/endpoints/{endpoint}/resume"),
            None,
            &["operate"],
        ),
        case(M::GET, "/events", None, &[]),
        case(M::GET, &p("/events/{event}"), None, &[]),
        case(
            M::POST,
            &p("/events/{event}/resend"),
            None,
            &["operate", "bulk"],
        ),
        case(M::GET, "/topics", None, &[]),
        case(M::GET, "/subscriptions", None, &[]),
        case(M::GET, &p("/subscriptions/{subscription}"), None, &[]),
        case(
            M::POST,
            "/subscriptions",
            Some(json!({"url": "http://127.0.0.1:9/hooks", "topics": ["portal.*"]})),
            &["subscriptions"],
        ),
        case(
            M::PATCH,
            &p("/subscriptions/{subscription}"),
            Some(json!({"enabled": false})),
            &["subscriptions"],
        ),
        case(
            M::DELETE,
            &p("/subscriptions/{subscription}"),
            None,
            &["subscriptions"],
        ),
    ]
}

/// `/openapi.json`'s routes that need a token, as `METHOD /path/{param}`.
async fn protected_routes(f: &Fleet) -> Vec<String> {
    let (_, doc) = f.get("", "/openapi.json").await;
    let mut routes = Vec::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            if operation.get("security").is_some() {
                routes.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    routes
}

/// `METHOD /path/{param}` of a case: its ids put back as parameters, its query left out.
fn route_of(case: &Case, ids: &BTreeMap<&'static str, String>) -> String {
    let path = case.path.split('?').next().unwrap();
    let path = path
        .split('/')
        .map(|segment| match ids.values().any(|id| id == segment) {
            true => "{id}",
            false => segment,
        })
        .collect::<Vec<_>>()
        .join("/");
    format!("{} {path}", case.method)
}

async fn refused(f: &Fleet, link: &str, case: &Case, why: &str) {
    let (status, answer) = f
        .call(link, case.method.clone(), &case.path, case.body.clone())
        .await;
    let what = format!("{} {} {why}", case.method, case.path);
    assert_eq!(status, 403, "{what}: {answer}");
    assert_eq!(answer["error"]["code"], "forbidden", "{what}: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_link_calls_what_its_roles_name_and_nothing_more() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let ids = fixtures(&f).await;
    let cases = cases(&ids);
    let covered: Vec<String> = cases.iter().map(|c| route_of(c, &ids)).collect();
    for route in protected_routes(&f).await {
        assert!(covered.contains(&route), "{route} has no case");
    }
    let mut links = Links {
        fleet: &f,
        issued: BTreeMap::new(),
    };
    for case in &cases {
        let Some(needs) = case.needs else {
            let every = links.with(LINK_ROLES.to_vec());
            refused(&f, &every, case, "with every role").await;
            continue;
        };
        for role in needs {
            let link = links.without(role);
            refused(&f, &link, case, &format!("without `{role}`")).await;
        }
        let link = links.with(needs.to_vec());
        let (status, answer) = f
            .call(&link, case.method.clone(), &case.path, case.body.clone())
            .await;
        let what = format!("{} {} with {needs:?}", case.method, case.path);
        assert!((200..300).contains(&status), "{what}: {status} {answer}");
    }
    let (_, audit) = f.get("tok-audit-a", "/audit?action=cancel").await;
    assert_eq!(audit["items"][0]["actor"], "portal:shop-a", "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_link_shows_what_it_may_do_and_refuses_unknown_roles() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let args = ["--tenant", "shop-a", "--roles", "read,operate,cancel"];
    let link = credential(&portal_link(&f, &args).unwrap());
    let (_, me) = f.get(&link, "/me").await;
    assert_eq!(me["roles"], json!(["read", "operate", "cancel"]), "{me}");
    assert_eq!(
        me["may"],
        json!(["lookup", "read", "resend", "pause", "cancel"]),
        "{me}"
    );
    let grants =
        json!({"read": ["lookup", "read"], "operate": ["resend", "pause"], "cancel": ["cancel"]});
    assert_eq!(
        me["grants"], grants,
        "a link's operate resends and pauses: {me}"
    );
    let (_, me) = f.get("tok-ops-a", "/me").await;
    let operate = me["grants"]["operate"].as_array().unwrap();
    assert!(
        operate.len() > 2 && operate.contains(&json!("cancel")),
        "a token's operate does more: {me}"
    );
    let args = ["--tenant", "shop-a", "--roles", "read,purge"];
    let said = portal_link(&f, &args).unwrap_err();
    assert!(said.contains("--roles") && said.contains("purge"), "{said}");
    for role in ["notify", "audit"] {
        let args = ["--tenant", "shop-a", "--roles", role];
        let said = portal_link(&f, &args).unwrap_err();
        assert!(said.contains("--roles"), "{said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operate_token_still_does_every_operation_of_its_tenant() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let ok = f.receiver.url("/ok");
    let scheduled = json!({"url": ok, "body": {}, "delay": "1h"});
    let scheduled = f.register("tok-checkout-a", scheduled).await;
    let dead = f.dead_letter("tok-checkout-a", None, "ops").await;
    let calls = [
        (Method::DELETE, format!("/notifications/{scheduled}"), None),
        (
            Method::POST,
            format!("/dead-letters/{dead}/replay"),
            Some(json!({"url": f.receiver.url("/elsewhere"), "schedule": ["1s"]})),
        ),
        (
            Method::POST,
            "/dead-letters/purge".to_string(),
            Some(json!({"all": true})),
        ),
        (
            Method::POST,
            "/subscriptions".to_string(),
            Some(json!({"url": ok, "topics": ["ops.*"]})),
        ),
    ];
    for (method, path, body) in calls {
        let (status, answer) = f
            .call("tok-reader-a", method.clone(), &path, body.clone())
            .await;
        assert_eq!(status, 403, "{method} {path} needs operate: {answer}");
        let (status, answer) = f.call("tok-ops-a", method.clone(), &path, body).await;
        assert!((200..300).contains(&status), "{method} {path}: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_link_of_a_tenant_no_longer_configured_is_refused() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    // Issued while shop-gone was configured, with the same secret.
    let link = signed_elsewhere(SECRET, &["shop-a", "shop-gone"], "shop-gone");
    for path in ["/me", "/endpoints", "/notifications?state=dead"] {
        let (status, answer) = f.get(&link, path).await;
        assert_eq!(status, 401, "{path}: {answer}");
    }
    let said = portal_link(&f, &["--tenant", "shop-gone"]).unwrap_err();
    assert!(
        said.contains("no tenant `shop-gone` is configured"),
        "{said}"
    );
}

/// An event of shop-a whose one notification died: a subscription that fails, published
/// to once. The event's id and the notification's.
async fn dead_event(f: &Fleet) -> (String, String) {
    let dying =
        json!({"url": f.receiver.url("/dying?fail=9"), "topics": ["revive.*"], "schedule": []});
    let (status, sub) = f
        .call("tok-ops-a", Method::POST, "/subscriptions", Some(dying))
        .await;
    assert_eq!(status, 201, "{sub}");
    let publish = json!({"topic": "revive.paid", "body": {}});
    let (status, event) = f
        .call("tok-checkout-a", Method::POST, "/events", Some(publish))
        .await;
    assert_eq!(status, 202, "{event}");
    let id = event["deliveries"][0]["notification"].as_str().unwrap();
    f.pb.wait_state(id, "dead", WAIT).await;
    (event["id"].as_str().unwrap().into(), id.into())
}

/// A resend revives a dead notification as a replay would and undoes a cancel: it needs
/// what those need. A link with `operate` (and `bulk`) but neither `replay` nor `cancel`
/// resends what was delivered and nothing dead or cancelled, one or in bulk, and an
/// event's resend leaves those as they are; `GET /me` tells which it may resend. A token
/// with the roles resends both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_revives_only_what_its_caller_may_replay_or_cancel() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let ok = f.receiver.url("/ok");
    let delivered = f
        .register("tok-checkout-a", json!({"url": ok, "body": {}}))
        .await;
    f.pb.wait_state(&delivered, "delivered", WAIT).await;
    let dead = f.dead_letter("tok-checkout-a", None, "revive").await;
    let later = json!({"url": ok, "body": {}, "delay": "1h"});
    let cancelled = f.register("tok-checkout-a", later).await;
    let path = format!("/notifications/{cancelled}");
    let (status, answer) = f.call("tok-ops-a", Method::DELETE, &path, None).await;
    assert_eq!(status, 200, "{answer}");
    let (event, event_dead) = dead_event(&f).await;
    let args = ["--tenant", "shop-a", "--roles", "read,operate,bulk"];
    let link = credential(&portal_link(&f, &args).unwrap());

    let replay = format!("/dead-letters/{dead}/replay");
    let (status, _) = f.call(&link, Method::POST, &replay, None).await;
    assert_eq!(status, 403, "the link may not replay");
    let resend = |id: &str| format!("/notifications/{id}/resend");
    for (id, role) in [(&dead, "replay"), (&cancelled, "cancel")] {
        let (status, answer) = f.call(&link, Method::POST, &resend(id), None).await;
        assert_eq!(status, 403, "{id}: {answer}");
        assert_eq!(answer["error"]["code"], "forbidden");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{role}`")), "{message}");
    }
    for state in ["dead", "cancelled"] {
        for dry_run in [true, false] {
            let bulk = json!({"state": state, "all": true, "dry_run": dry_run});
            let (status, answer) = f
                .call(&link, Method::POST, "/notifications/resend", Some(bulk))
                .await;
            assert_eq!(status, 403, "{state}: {answer}");
        }
    }
    let event_resend = format!("/events/{event}/resend");
    let (status, answer) = f.call(&link, Method::POST, &event_resend, None).await;
    assert_eq!((status, &answer["count"]), (200, &json!(0)), "{answer}");
    for (id, state) in [
        (&dead, "dead"),
        (&cancelled, "cancelled"),
        (&event_dead, "dead"),
    ] {
        let (_, now) = f.get("tok-reader-a", &format!("/notifications/{id}")).await;
        assert_eq!(now["state"], state, "left as it was: {now}");
    }
    let (_, me) = f.get(&link, "/me").await;
    assert_eq!(me["resendable"], json!(["delivered"]), "{me}");

    let (status, answer) = f.call(&link, Method::POST, &resend(&delivered), None).await;
    assert_eq!(status, 200, "a delivered one is resent as before: {answer}");
    f.pb.wait_state(&delivered, "delivered", WAIT).await;
    assert_eq!(f.receiver.requests_for(&delivered).len(), 2);

    let (_, me) = f.get("tok-ops-a", "/me").await;
    assert_eq!(
        me["resendable"],
        json!(["delivered", "dead", "cancelled"]),
        "{me}"
    );
    for id in [&dead, &cancelled] {
        let (status, answer) = f.call("tok-ops-a", Method::POST, &resend(id), None).await;
        assert_eq!(status, 200, "{answer}");
    }
    let (status, answer) = f.call("tok-ops-a", Method::POST, &event_resend, None).await;
    assert_eq!((status, &answer["count"]), (200, &json!(1)), "{answer}");
    f.pb.wait_state(&cancelled, "delivered", WAIT).await;
    f.pb.wait_state(&dead, "dead", WAIT).await;
    let (_, resent) = f
        .get("tok-reader-a", &format!("/notifications/{dead}"))
        .await;
    let counted = (&resent["replays"], &resent["resends"]);
    assert_eq!(
        counted,
        (&json!(0), &json!(1)),
        "a resend, no replay: {resent}"
    );
}

/// The `actions` of a notification's view (and of its dead letter's) to `token`.
async fn actions(f: &Fleet, token: &str, path: &str) -> Value {
    let (status, view) = f.get(token, path).await;
    assert_eq!(status, 200, "{path}: {view}");
    view["actions"].clone()
}

/// A notification's view lists what its caller may do with it now: what its lifecycle
/// takes in its state, of the routes the caller's roles open (a resend only of a state
/// the caller may resend); its dead letter's view the same. One held for its paused
/// endpoint may be cancelled and attempted now, as a scheduled one, and each action
/// listed is taken when asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_lists_the_actions_its_caller_may_take_on_it_now() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let ok = f.receiver.url("/ok");
    let delivered = f
        .register("tok-checkout-a", json!({"url": ok, "body": {}}))
        .await;
    f.pb.wait_state(&delivered, "delivered", WAIT).await;
    let dead = f.dead_letter("tok-checkout-a", None, "actions").await;
    let later = json!({"url": ok, "body": {}, "delay": "1h"});
    let later = f.register("tok-checkout-a", later).await;
    let args = ["--tenant", "shop-a", "--roles", "read,operate"];
    let operate = credential(&portal_link(&f, &args).unwrap());
    let view = |id: &str| format!("/notifications/{id}");
    let expected = [
        ("tok-ops-a", &later, json!(["cancel", "attempt_now"])),
        ("tok-ops-a", &delivered, json!(["resend"])),
        ("tok-ops-a", &dead, json!(["resend", "replay", "discard"])),
        ("tok-reader-a", &later, json!([])),
        ("tok-reader-a", &dead, json!([])),
        (&operate, &later, json!(["attempt_now"])),
        (&operate, &delivered, json!(["resend"])),
        (&operate, &dead, json!([])),
    ];
    for (token, id, want) in expected {
        assert_eq!(actions(&f, token, &view(id)).await, want, "{id} to {token}");
    }
    let dead_letter = format!("/dead-letters/{dead}");
    let want = json!(["resend", "replay", "discard"]);
    assert_eq!(actions(&f, "tok-ops-a", &dead_letter).await, want);

    let origin = f.receiver.url("/");
    let endpoint = f.pb.endpoint_listed("tok-ops-a", "", &origin).await;
    let pause = format!("/endpoints/{}/pause", endpoint["id"].as_str().unwrap());
    let (status, answer) = f.call("tok-ops-a", Method::POST, &pause, None).await;
    assert_eq!(status, 200, "{answer}");
    let (_, held) = f.get("tok-ops-a", &view(&later)).await;
    assert_eq!(held["state"], "held", "{held}");
    assert_eq!(held["actions"], json!(["cancel", "attempt_now"]), "{held}");
    let attempt_now = format!("/notifications/{later}/attempt-now");
    let (status, answer) = f.call(&operate, Method::POST, &attempt_now, None).await;
    assert_eq!(status, 200, "attempted now, as offered: {answer}");
    let (status, answer) = f
        .call("tok-ops-a", Method::DELETE, &view(&later), None)
        .await;
    assert_eq!(status, 200, "cancelled, as offered: {answer}");
    f.pb.wait_state(&later, "cancelled", WAIT).await;
    let want = json!(["resend"]);
    assert_eq!(actions(&f, "tok-ops-a", &view(&later)).await, want);
    assert_eq!(actions(&f, &operate, &view(&later)).await, json!([]));
}
