//! What `deploy/` ships works against a running instance: the alert rules pass
//! `promtool` and their unit tests, the dashboard's queries are valid PromQL, the
//! exposition passes `promtool check metrics`, and every series the dashboard and the
//! rules name is one an instance serves.

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);
const ALERTS: &str = "deploy/prometheus/alerts.yml";
const DASHBOARD: &str = "deploy/grafana/postback.json";

/// Runs `promtool` with `args`, feeding it `stdin`.
fn promtool(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool on PATH (scripts/ensure-promtool.sh fetches it; scripts/test.sh runs that)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn passed(out: &Output) -> bool {
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.success()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The PromQL of every panel of the dashboard.
fn dashboard_queries() -> Vec<String> {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect()
}

/// Every `postback_…` series name in `text`.
fn series_named(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("postback_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    assert!(passed(&promtool(&["check", "rules", ALERTS], "")));
    assert!(passed(&promtool(
        &["test", "rules", "deploy/prometheus/alerts.test.yml"],
        ""
    )));
}

#[test]
fn the_dashboards_queries_are_valid_promql() {
    let queries = dashboard_queries();
    assert!(queries.len() >= 12, "{queries:?}");
    // promtool parses PromQL only in rule files, so each query becomes a recording rule;
    // Grafana's own interval variable becomes a plain duration.
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({"record": format!("dashboard:query_{i}"), "expr": q.replace("$__rate_interval", "5m")}))
        .collect();
    let file = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard-rules.json");
    std::fs::write(&path, file.to_string()).unwrap();
    assert!(passed(&promtool(
        &["check", "rules", path.to_str().unwrap()],
        ""
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_dashboard_and_the_alerts_use_is_served() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let ok = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}}))
        .await;
    let dies = pb
        .register(json!({"url": receiver.url("/f?fail=9&status=500"), "body": {}, "schedule": []}))
        .await;
    pb.wait_state(&ok, "delivered", WAIT).await;
    pb.wait_state(&dies, "dead", WAIT).await;
    let (status, exposition) = pb.get_text("/metrics").await;
    assert_eq!(status, 200);

    assert!(
        passed(&promtool(&["check", "metrics"], &exposition)),
        "promtool check metrics found problems in\n{exposition}"
    );
    let served = series_named(
        &exposition
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let used = series_named(&(dashboard_queries().join("\n") + &read(ALERTS)));
    assert!(used.len() >= 12, "{used:?}");
    let missing: Vec<_> = used.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "the dashboard or the alert rules use {missing:?}, which an instance does not serve:\n{exposition}"
    );
}

