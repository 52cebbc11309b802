//! Portal links (`postback portal-link`, `POST /portal-links`): a short-lived credential
//! for one tenant's merchant, in the fragment of a link to the review page, issued by
//! the running instance to an operator (never to a link). It reads that tenant's
//! notifications and endpoints and nothing of another's, operates only when issued with
//! `operate` (its actions in the audit log as `portal:<tenant>`), never registers, and
//! stops working when it expires, when it is changed, or when the secret is rotated. On
//! every backend (`scripts/test.sh`).

use crate::support;

use std::process::Command;
use std::time::{Duration, SystemTime};

use postback::domain::Tenant;
use postback::tenancy::portal::PortalKey;
use reqwest::Method;
use serde_json::{json, Value};
use support::tenants::{self, Fleet};
use support::WAIT;

pub(crate) const SECRET: &str = "the portal secret of these tests, 32 bytes or more";

/// The token `portal_link` asks with: every tenant, `read` and `operate`.
const OPERATOR: &str = "tok-ops";

/// Runs `postback portal-link` against the fleet's instance as an operator: what it
/// printed (stdout), or what it said when it failed (stderr).
pub(crate) fn portal_link(f: &Fleet, args: &[&str]) -> Result<String, String> {
    portal_link_as(f, OPERATOR, args)
}

/// `portal_link` with the token `token`.
pub(crate) fn portal_link_as(f: &Fleet, token: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_postback"))
        .arg("portal-link")
        .args(args)
        .env_clear()
        .env("POSTBACK_API_URL", f.pb.url(""))
        .env("POSTBACK_API_TOKEN", token)
        .output()
        .unwrap();
    match out.status.success() {
        true => Ok(String::from_utf8(out.stdout).unwrap().trim().to_string()),
        false => Err(String::from_utf8(out.stderr).unwrap()),
    }
}

/// A link of `tenant` signed with `secret` for `tenants`, as an instance configured so
/// would issue it: for a secret or tenants the fleet's instance does not have.
pub(crate) fn signed_elsewhere(secret: &str, tenants: &[&str], tenant: &str) -> String {
    let tenants: Vec<Tenant> = tenants
        .iter()
        .map(|t| Tenant::parse(t, "tenant").unwrap())
        .collect();
    let key = PortalKey::new(secret, &tenants);
    let tenant = Tenant::parse(tenant, "tenant").unwrap();
    let hour = Duration::from_secs(3600);
    key.issue(&tenant, &[], hour, SystemTime::now()).unwrap()
}

/// The credential of a printed link.
pub(crate) fn credential(link: &str) -> String {
    let (_, token) = link.split_once("/ui#token=").expect(link);
    token.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_link_reads_its_tenant_only_operates_if_asked_and_expires() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let url = f.receiver.url("/ok");
    let mine = f
        .register("tok-checkout-a", json!({"url": url, "body": {}}))
        .await;
    let theirs = f
        .register("tok-all-b", json!({"url": url, "body": {}}))
        .await;
    for id in [&mine, &theirs] {
        f.pb.wait_state(id, "delivered", WAIT).await;
    }

    let link = portal_link(&f, &["--tenant", "shop-a", "--ttl", "3s"]).unwrap();
    assert!(link.starts_with("http://127.0.0.1:"), "{link}");
    let reader = credential(&link);
    assert_eq!(
        f.get(&reader, &format!("/notifications/{mine}")).await.0,
        200
    );
    let (status, _) = f.get(&reader, &format!("/notifications/{theirs}")).await;
    assert_eq!(status, 404, "another tenant's is not found");
    // Endpoints' records are written every second: once shop-a's is, only it is listed.
    let listed = support::eventually(WAIT, || async {
        let (status, listed) = f.get(&reader, "/endpoints").await;
        assert_eq!(status, 200, "{listed}");
        let items = listed["items"].as_array().unwrap().clone();
        assert!(items.iter().all(|e| e["tenant"] == "shop-a"), "{listed}");
        !items.is_empty()
    });
    assert!(listed.await, "shop-a's endpoint is listed");
    let body = json!({"url": url, "body": {}});
    let (status, _) = f.call(&reader, Method::POST, "/notify", Some(body)).await;
    assert_eq!(status, 403, "a portal link never registers");
    let resend = format!("/notifications/{mine}/resend");
    let (status, _) = f.call(&reader, Method::POST, &resend, None).await;
    assert_eq!(status, 403, "read only unless issued with operate");

    let operator =
        credential(&portal_link(&f, &["--tenant", "shop-a", "--roles", "read,operate"]).unwrap());
    let (status, answer) = f.call(&operator, Method::POST, &resend, None).await;
    assert!((200..300).contains(&status), "{status} {answer}");
    let other = format!("/notifications/{theirs}/resend");
    assert_eq!(f.call(&operator, Method::POST, &other, None).await.0, 404);
    let (_, audit) = f.get("tok-audit-a", "/audit?action=resend").await;
    assert_eq!(audit["items"][0]["actor"], "portal:shop-a", "{audit}");

    let mut changed = reader.clone();
    changed.pop();
    changed.push(if reader.ends_with('A') { 'B' } else { 'A' });
    assert_eq!(f.get(&changed, "/endpoints").await.0, 401);
    let rotated = signed_elsewhere(
        "another secret of thirty-two bytes or more",
        &["shop-a"],
        "shop-a",
    );
    assert_eq!(
        f.get(&rotated, "/endpoints").await.0,
        401,
        "signed with another secret"
    );
    let expired = support::eventually(WAIT, || async {
        f.get(&reader, "/endpoints").await.0 == 401
    });
    assert!(expired.await, "the link expires");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_secret_no_link_is_issued_and_the_answer_gives_the_line_to_add() {
    let f = tenants::start(&[]).await;
    let said = portal_link(&f, &["--tenant", "shop-a"]).unwrap_err();
    assert!(
        said.starts_with("postback: 409 portal_links_off: ")
            && said.contains("server.portal_secret is not set")
            && said.contains("[server]")
            && said.contains("portal_secret = \""),
        "{said}"
    );
    // This instance has no secret: it accepts no link, whoever signed it.
    let signed = signed_elsewhere(SECRET, &["shop-a"], "shop-a");
    assert_eq!(f.get(&signed, "/endpoints").await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_issues_links_of_its_own_tenants_and_a_link_issues_none() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let issue = |token: &'static str, body: Value| {
        let f = &f;
        async move {
            f.call(token, Method::POST, "/portal-links", Some(body))
                .await
        }
    };
    let shop_a = json!({"tenant": "shop-a", "roles": ["operate"], "ttl": "10m"});
    for (token, why) in [("", "no token"), ("not-a-token", "an unknown token")] {
        assert_eq!(issue(token, shop_a.clone()).await.0, 401, "{why}");
    }
    for token in [
        "tok-reader-a",
        "tok-checkout-a",
        "tok-audit-a",
        "tok-producer",
    ] {
        let (status, answer) = issue(token, shop_a.clone()).await;
        assert_eq!(status, 403, "{token}: {answer}");
        let said = answer["error"]["message"].as_str().unwrap();
        assert!(said.contains("`operate` role"), "{token}: {said}");
    }
    let (status, answer) = issue("tok-ops-a", json!({"tenant": "shop-b"})).await;
    assert_eq!(status, 403, "another tenant's: {answer}");

    let (status, link) = issue("tok-ops-a", shop_a.clone()).await;
    assert_eq!(status, 201, "{link}");
    assert_eq!(link["tenant"], "shop-a");
    assert_eq!(link["roles"], json!(["read", "operate"]));
    let issued = link["credential"].as_str().unwrap().to_string();
    assert_eq!(link["path"], format!("/ui#token={issued}"));
    let (status, own) = issue("tok-ops-a", json!({})).await;
    assert_eq!((status, &own["tenant"]), (201, &json!("shop-a")), "{own}");

    // A link with every role issues none, for its tenant or any other.
    let every = "operate,cancel,replay,redirect,reschedule,discard,bulk,subscriptions";
    let args = ["--tenant", "shop-a", "--roles", every];
    let every = credential(&portal_link(&f, &args).unwrap());
    for body in [shop_a.clone(), json!({}), json!({"tenant": "shop-b"})] {
        let (status, answer) = f
            .call(&every, Method::POST, "/portal-links", Some(body))
            .await;
        assert_eq!(status, 403, "{answer}");
        let said = answer["error"]["message"].as_str().unwrap();
        assert!(said.contains("may not call this route"), "{said}");
    }
    let said = portal_link_as(&f, &every, &["--tenant", "shop-a"]).unwrap_err();
    assert!(said.contains("403 forbidden"), "{said}");

    let (_, audit) = f
        .get("tok-audit-a", "/audit?action=issue_portal_link")
        .await;
    let entry = &audit["items"][0];
    assert_eq!(entry["actor"], "ops", "{audit}");
    let roles = "read,operate,cancel,replay,redirect,reschedule,discard,bulk,subscriptions";
    assert_eq!(entry["filter"]["roles"], roles, "{audit}");
    assert!(!audit.to_string().contains(&issued), "never the credential");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_asked_for_an_unknown_tenant_too_long_or_with_unknown_roles_is_refused() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let said = portal_link(&f, &["--tenant", "shop-z"]).unwrap_err();
    assert!(
        said.contains(
            "no tenant `shop-z` is configured (configured: default, shop-a, shop-b, shop-c)"
        ) && said.contains("add a [tenants.shop-z] section")
            && said.contains("(field `tenant`)"),
        "{said}"
    );
    let said = portal_link(&f, &["--tenant", "shop-a", "--ttl", "25h"]).unwrap_err();
    assert!(said.contains("(field `ttl`)"), "{said}");
    let said = portal_link(&f, &["--tenant", "shop-a", "--ttl", "soon"]).unwrap_err();
    assert!(said.contains("`soon` is not a duration"), "{said}");
    let said = portal_link(&f, &["--tenant", "shop-a", "--roles", "notify"]).unwrap_err();
    assert!(said.contains("--roles"), "{said}");
    let body = json!({"tenant": "shop-a", "roles": ["audit"]});
    let (status, answer) = f
        .call("tok-ops", Method::POST, "/portal-links", Some(body))
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["field"], "roles");
    let (status, answer) = f
        .call("tok-ops", Method::POST, "/portal-links", Some(json!({})))
        .await;
    assert_eq!((status, &answer["error"]["field"]), (422, &json!("tenant")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_learns_its_tenant_roles_and_expiry_and_nothing_without_a_token() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let link = portal_link(&f, &["--tenant", "shop-a", "--ttl", "10m"]).unwrap();
    let (status, me) = f.get(&credential(&link), "/me").await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["actor"], "portal:shop-a");
    assert_eq!(me["tenant"], "shop-a");
    assert_eq!(me["roles"], json!(["read"]));
    assert_eq!(me["may"], json!(["lookup", "read"]));
    assert_eq!(me["resendable"], json!([]), "{me}");
    let routes =
        |me: &Value| -> Vec<String> { serde_json::from_value(me["routes"].clone()).unwrap() };
    let open = routes(&me);
    assert!(open.contains(&"GET /dead-letters".to_string()), "{me}");
    assert!(
        !open.contains(&"POST /dead-letters/{id}/replay".to_string()),
        "{me}"
    );
    let expires = me["expires_at"].as_str().unwrap();
    let expires = humantime::parse_rfc3339(expires).unwrap();
    let left = expires
        .duration_since(std::time::SystemTime::now())
        .unwrap();
    assert!(
        left > Duration::from_secs(540) && left <= Duration::from_secs(600),
        "{me}"
    );

    let (_, mut me) = f.get("tok-ops-a", "/me").await;
    let open = routes(&me);
    assert!(
        open.contains(&"POST /dead-letters/replay".to_string()),
        "{me}"
    );
    assert!(!open.contains(&"GET /audit".to_string()), "{me}");
    me.as_object_mut().unwrap().remove("routes");
    let may = [
        "lookup",
        "read",
        "resend",
        "pause",
        "cancel",
        "replay",
        "redirect",
        "reschedule",
        "discard",
        "bulk",
        "subscriptions",
        "issue_link",
    ];
    let resendable = ["delivered", "dead", "cancelled"];
    // What each role grants: a token's operate is every operator action.
    let grants = json!({"read": ["lookup", "read"], "operate": may[2..]});
    assert_eq!(
        me,
        json!({"actor": "ops-a", "tenant": "shop-a", "roles": ["read", "operate"], "may": may,
               "grants": grants, "resendable": resendable, "expires_at": null})
    );
    let (_, me) = f.get("tok-auditor", "/me").await;
    assert_eq!(me["tenant"], Value::Null, "every tenant");
    assert_eq!(me["roles"], json!(["audit"]));
    assert_eq!(me["may"], json!(["audit"]));
    assert_eq!(f.get("not-a-token", "/me").await.0, 401);
    assert_eq!(f.get("", "/me").await.0, 401);
}
