//! The OpenAPI document at `/openapi.json` lists every route of the API, each documented
//! route answers, and Swagger UI is served from the binary at `/docs`.

use crate::support;

use std::collections::BTreeSet;

use serde_json::Value;

/// Every route of the API contract (`docs/api.md`, whose route table must list them).
const ROUTES: &[(&str, &str)] = &[
    ("post", "/notify"),
    ("get", "/notifications/{id}"),
    ("delete", "/notifications/{id}"),
    ("get", "/notifications"),
    ("post", "/notifications/{id}/resend"),
    ("post", "/notifications/{id}/attempt-now"),
    ("post", "/notifications/resend"),
    ("get", "/dead-letters"),
    ("get", "/dead-letters/{id}"),
    ("delete", "/dead-letters/{id}"),
    ("post", "/dead-letters/{id}/replay"),
    ("post", "/notify/batch"),
    ("post", "/dead-letters/replay"),
    ("post", "/dead-letters/purge"),
    ("get", "/stats"),
    ("get", "/overview"),
    ("get", "/audit"),
    ("get", "/endpoints"),
    ("get", "/endpoints/{id}"),
    ("post", "/endpoints/{id}/pause"),
    ("post", "/endpoints/{id}/resume"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/signing-keys"),
    ("get", "/me"),
    ("post", "/portal-links"),
    ("post", "/subscriptions"),
    ("get", "/subscriptions"),
    ("get", "/subscriptions/{id}"),
    ("patch", "/subscriptions/{id}"),
    ("delete", "/subscriptions/{id}"),
    ("post", "/events"),
    ("get", "/events"),
    ("get", "/events/{id}"),
    ("get", "/topics"),
    ("post", "/events/batch"),
    ("post", "/events/{id}/resend"),
];

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            out.insert((method.clone(), path.clone()));
        }
    }
    out
}

/// The routes of `docs/api.md`'s table: rows that start with a method and a path.
fn in_the_reference() -> BTreeSet<(String, String)> {
    include_str!("../../docs/api.md")
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| {
            let (method, rest) = l.split_once(' ')?;
            let path = rest.split(['`', '?']).next()?;
            let known = ["GET", "POST", "DELETE", "PATCH", "PUT"].contains(&method);
            known.then(|| (method.to_ascii_lowercase(), path.to_string()))
        })
        .collect()
}

#[test]
fn the_api_reference_lists_every_route_and_no_other() {
    let routes: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(in_the_reference(), routes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_lists_every_route_and_each_one_answers() {
    let (_backend, _receiver, pb) = support::start_any(&[]).await;
    let resp = pb.http.get(pb.url("/openapi.json")).send().await.unwrap();
    assert_eq!(resp.status(), 200, "served without a token");
    let doc: Value = resp.json().await.unwrap();

    let expected: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented(&doc), expected);

    for (method, path) in ROUTES {
        let op = &doc["paths"][path][method];
        let public = path.ends_with("z") || ["/metrics", "/signing-keys"].contains(path);
        assert_eq!(
            op["security"].is_array(),
            !public,
            "{method} {path} security"
        );
        assert!(
            op["responses"].as_object().unwrap().len() >= 2 || public,
            "{method} {path}"
        );

        let concrete = path.replace("{id}", "ntf_0_00000000000000000000000000000000");
        let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let (status, body) = pb.request(method.clone(), &concrete, None, &[]).await;
        assert_ne!(status, 405, "{method} {path} is routed");
        assert_ne!(
            body["error"]["message"], "route not found",
            "{method} {path} is routed"
        );
    }

    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    let error = &doc["components"]["schemas"]["ErrorBody"];
    assert!(error["properties"]["error"].is_object(), "{error}");
    let registered = &doc["components"]["schemas"]["Registered"]["properties"];
    for field in ["id", "state", "next_attempt_at"] {
        assert!(registered[field].is_object(), "Registered.{field}");
    }
    let notify = &doc["components"]["schemas"]["NotifyRequest"];
    let required: Vec<&str> = notify["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, ["url", "body"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_has_its_own_descriptive_id() {
    let (_backend, _receiver, pb) = support::start_any(&[]).await;
    let (_, text) = pb.get_text("/openapi.json").await;
    let doc: Value = serde_json::from_str(&text).unwrap();
    let mut seen = BTreeSet::new();
    for (method, path) in ROUTES {
        let id = doc["paths"][path][method]["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
        assert!(seen.insert(id.to_string()), "{id} is used twice");
        // A verb, then what it acts on: `getNotification`, `replayDeadLetter`.
        let verb_end = id
            .find(|c: char| c.is_ascii_uppercase())
            .unwrap_or(id.len());
        assert!(
            verb_end > 0 && verb_end < id.len() && id.chars().all(|c| c.is_ascii_alphanumeric()),
            "{method} {path}: `{id}` is not a verb and a noun in camelCase"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swagger_ui_is_served_from_the_binary() {
    let (_backend, _receiver, pb) = support::start_any(&[]).await;
    let (status, html) = pb.get_text("/docs/").await;
    assert_eq!(status, 200);
    assert!(html.contains("swagger-ui"), "{html}");
    let (_, init) = pb.get_text("/docs/swagger-initializer.js").await;
    assert!(init.contains("/openapi.json"), "{init}");
    let bundle = pb
        .http
        .get(pb.url("/docs/swagger-ui-bundle.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(bundle.status(), 200, "assets are in the binary");
}
