//! Portal links (`postback portal-link`): a short-lived credential for one tenant's
//! merchant, in the fragment of a link to the review page. It reads that tenant's
//! notifications and endpoints and nothing of another's, operates only when issued with
//! `operate` (its actions in the audit log as `portal:<tenant>`), never registers, and
//! stops working when it expires, when it is changed, or when the secret is rotated. On
//! every backend (`scripts/test.sh`).

use crate::support;

use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use support::tenants::{self, Fleet};
use support::WAIT;

pub(crate) const SECRET: &str = "the portal secret of these tests, 32 bytes or more";

/// Runs `postback portal-link` with the fleet's configuration and `secret`: what it
/// printed (stdout), or what it said when it failed (stderr).
pub(crate) fn portal_link(
    f: &Fleet,
    secret: Option<&str>,
    args: &[&str],
) -> Result<String, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_postback"));
    cmd.arg("portal-link")
        .args(args)
        .arg("--config")
        .arg(f.config_path())
        .env_remove("POSTBACK_SERVER_PORTAL_SECRET");
    if let Some(secret) = secret {
        cmd.env("POSTBACK_SERVER_PORTAL_SECRET", secret);
    }
    let out = cmd.output().unwrap();
    match out.status.success() {
        true => Ok(String::from_utf8(out.stdout).unwrap().trim().to_string()),
        false => Err(String::from_utf8(out.stderr).unwrap()),
    }
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

    let link = portal_link(&f, Some(SECRET), &["--tenant", "shop-a", "--ttl", "3s"]).unwrap();
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

    let operator = credential(
        &portal_link(
            &f,
            Some(SECRET),
            &["--tenant", "shop-a", "--roles", "read,operate"],
        )
        .unwrap(),
    );
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
    let rotated = credential(
        &portal_link(
            &f,
            Some("another secret of thirty-two bytes or more"),
            &["--tenant", "shop-a"],
        )
        .unwrap(),
    );
    assert_eq!(
        f.get(&rotated, "/endpoints").await.0,
        401,
        "signed with another secret"
    );
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(f.get(&reader, "/endpoints").await.0, 401, "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_link_is_refused_without_a_secret_for_an_unknown_tenant_or_too_long() {
    let f = tenants::start(&[]).await;
    let said = portal_link(&f, None, &["--tenant", "shop-a"]).unwrap_err();
    assert!(said.contains("server.portal_secret"), "{said}");
    let said = portal_link(&f, Some(SECRET), &["--tenant", "shop-z"]).unwrap_err();
    assert!(said.contains("--tenant shop-z"), "{said}");
    let said = portal_link(&f, Some(SECRET), &["--tenant", "shop-a", "--ttl", "25h"]).unwrap_err();
    assert!(said.contains("--ttl"), "{said}");
    let said = portal_link(
        &f,
        Some(SECRET),
        &["--tenant", "shop-a", "--roles", "notify"],
    )
    .unwrap_err();
    assert!(said.contains("--roles"), "{said}");
    let said = portal_link(&f, Some("too short"), &["--tenant", "shop-a"]).unwrap_err();
    assert!(said.contains("server.portal_secret"), "{said}");
    // This instance has no secret: it accepts no link, whoever signed it.
    let signed = credential(&portal_link(&f, Some(SECRET), &["--tenant", "shop-a"]).unwrap());
    assert_eq!(f.get(&signed, "/endpoints").await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_learns_its_tenant_roles_and_expiry_and_nothing_without_a_token() {
    let f = tenants::start(&[("POSTBACK_SERVER_PORTAL_SECRET", SECRET)]).await;
    let link = portal_link(&f, Some(SECRET), &["--tenant", "shop-a", "--ttl", "10m"]).unwrap();
    let (status, me) = f.get(&credential(&link), "/me").await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["actor"], "portal:shop-a");
    assert_eq!(me["tenant"], "shop-a");
    assert_eq!(me["roles"], json!(["read"]));
    assert_eq!(me["may"], json!(["lookup", "read"]));
    let expires = me["expires_at"].as_str().unwrap();
    let expires = humantime::parse_rfc3339(expires).unwrap();
    let left = expires
        .duration_since(std::time::SystemTime::now())
        .unwrap();
    assert!(
        left > Duration::from_secs(540) && left <= Duration::from_secs(600),
        "{me}"
    );

    let (_, me) = f.get("tok-ops-a", "/me").await;
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
    ];
    assert_eq!(
        me,
        json!({"actor": "ops-a", "tenant": "shop-a", "roles": ["read", "operate"], "may": may, "expires_at": null})
    );
    let (_, me) = f.get("tok-auditor", "/me").await;
    assert_eq!(me["tenant"], Value::Null, "every tenant");
    assert_eq!(me["roles"], json!(["audit"]));
    assert_eq!(me["may"], json!(["audit"]));
    assert_eq!(f.get("not-a-token", "/me").await.0, 401);
    assert_eq!(f.get("", "/me").await.0, 401);
}
