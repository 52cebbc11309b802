//! What `deploy/` ships works against a running instance: the alert rules pass
//! `promtool` and their unit tests, the dashboard's queries are valid PromQL, the
//! exposition passes `promtool check metrics`, and every series the dashboard and the
//! rules name is one an instance serves; the Kubernetes manifests' configuration passes
//! `postback config check` and their probes, port, grace period and selectors fit it.

use crate::support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use support::WAIT;
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

const KUBERNETES: &str = "deploy/kubernetes";

fn manifest(file: &str) -> Value {
    serde_norway::from_str(&read(&format!("{KUBERNETES}/{file}")))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// `postback config check` of the manifests' file with the Secret's variables, as their
/// init container runs it: the effective configuration.
fn checked_configuration(secret: &Value) -> toml::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_postback"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["config", "check", "--config"])
        .arg(format!("{KUBERNETES}/postback.toml"))
        .env_clear();
    for (k, v) in secret["stringData"].as_object().unwrap() {
        cmd.env(k, v.as_str().unwrap());
    }
    let out = cmd.output().unwrap();
    assert!(
        passed(&out),
        "config check refused the manifests' configuration"
    );
    toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap()
}

#[test]
fn the_kubernetes_manifests_fit_the_configuration_they_check() {
    let kustomization = manifest("kustomization.yaml");
    let resources: Vec<Value> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| manifest(f.as_str().unwrap()))
        .collect();
    let of_kind = |kind: &str| {
        resources
            .iter()
            .find(|r| r["kind"] == kind)
            .unwrap_or_else(|| panic!("a {kind} in {KUBERNETES}"))
    };
    let (deployment, secret) = (of_kind("Deployment"), of_kind("Secret"));
    let config = checked_configuration(secret);
    let generated = &kustomization["configMapGenerator"][0];
    assert_eq!(generated["files"][0], "postback.toml");

    let pod = &deployment["spec"]["template"]["spec"];
    let (init, server) = (&pod["initContainers"][0], &pod["containers"][0]);
    let mount = |c: &Value| {
        c["volumeMounts"][0]["mountPath"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let file = format!("{}/postback.toml", mount(server));
    assert_eq!(init["args"], json!(["config", "check", "--config", file]));
    assert_eq!(server["args"], json!(["serve", "--config", file]));
    assert_eq!(mount(init), mount(server));
    assert_eq!(pod["volumes"][0]["configMap"]["name"], generated["name"]);
    for c in [init, server] {
        assert_eq!(
            c["envFrom"][0]["secretRef"]["name"],
            secret["metadata"]["name"]
        );
    }

    let listen: std::net::SocketAddr = config["server"]["listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        listen.ip().is_unspecified(),
        "reachable from the kubelet and the Service"
    );
    assert_eq!(server["ports"][0]["containerPort"], listen.port());
    assert_eq!(server["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(server["livenessProbe"]["httpGet"]["path"], "/healthz");

    let grace =
        humantime::parse_duration(config["delivery"]["shutdown_grace"].as_str().unwrap()).unwrap();
    let pause = server["lifecycle"]["preStop"]["exec"]["command"][1]
        .as_str()
        .unwrap();
    let needed = grace.as_secs() + pause.parse::<u64>().unwrap();
    let given = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(given > needed, "terminationGracePeriodSeconds {given} must exceed shutdown_grace and the preStop pause ({needed} s)");
    assert!(server["resources"]["requests"]["memory"].is_string());
    assert!(server["resources"]["limits"]["memory"].is_string());

    let pods = &deployment["spec"]["template"]["metadata"]["labels"];
    for selector in [
        &deployment["spec"]["selector"]["matchLabels"],
        &of_kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        &of_kind("Service")["spec"]["selector"],
    ] {
        for (k, v) in selector.as_object().unwrap() {
            assert_eq!(&pods[k], v, "{k} selects the pods");
        }
    }
}
