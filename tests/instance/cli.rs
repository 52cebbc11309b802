//! The operator CLI against a running postback: register, look up, review the dead
//! letters, replay one with a new URL, purge by filter; tables by default, JSON with
//! `--json`, and one clear line with exit code 1 when something is wrong.

use crate::support;

use std::process::{Command, Output};

use serde_json::Value;
use support::instance::TOKEN;
use support::Postback;

use support::WAIT;

fn cli(pb: &Postback, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(args)
        .env_clear()
        .env("POSTBACK_API_URL", pb.url(""))
        .env("POSTBACK_API_TOKEN", TOKEN)
        .output()
        .unwrap()
}

/// Runs and asserts success; returns stdout.
fn ok(pb: &Postback, args: &[&str]) -> String {
    let out = cli(pb, args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
    stdout
}

/// `notify --url URL --body {}` with `more` arguments; the id it printed.
fn notify(pb: &Postback, url: &str, more: &[&str]) -> String {
    let mut args = vec!["notify", "--url", url, "--body", "{}"];
    args.extend_from_slice(more);
    json(pb, &args)["id"].as_str().unwrap().to_string()
}

fn json(pb: &Postback, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    serde_json::from_str(&ok(pb, &args)).unwrap()
}

/// What a replay or a resend of one notification prints: what it is now, not its history.
const SUMMARY: [&str; 5] = ["id", "state", "attempts", "url", "next_attempt_at"];

/// The keys of the `key: value` lines of `shown`, and the start of any other line.
fn keys(shown: &str) -> Vec<&str> {
    let lines = shown.lines().filter(|l| !l.is_empty());
    lines.map(|l| l.split(':').next().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_dead_letter_fixes_its_url_and_resends_it() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let down = receiver.url("/down?fail=99");
    let registered = json(
        &pb,
        &[
            "notify",
            "--url",
            &down,
            "--body",
            r#"{"order": 7}"#,
            "--schedule",
            "100ms",
            "--topic",
            "payment.succeeded",
            "--header",
            "X-Shop: 42",
        ],
    );
    let id = registered["id"].as_str().unwrap().to_string();
    pb.wait_state(&id, "dead", WAIT).await;
    let first = &receiver.requests_for(&id)[0];
    assert_eq!(
        first.body.as_ref(),
        br#"{"order": 7}"#,
        "the body as written"
    );
    assert_eq!(first.header("x-shop").as_deref(), Some("42"));

    let table = ok(&pb, &["dlq", "list", "--topic", "payment.succeeded"]);
    let row = table.lines().find(|l| l.contains(&id)).expect(&table);
    assert!(
        row.contains("HTTP 500") && row.contains("payment.succeeded"),
        "{table}"
    );
    assert!(
        table.lines().next().unwrap().contains("LAST FAILURE"),
        "{table}"
    );
    assert_eq!(
        ok(&pb, &["dlq", "list", "--topic", "other"]).trim(),
        "no dead letters"
    );

    let shown = ok(&pb, &["dlq", "show", &id]);
    assert!(
        shown.contains("body (application/json):\n{\n  \"order\": 7\n}\n"),
        "{shown}"
    );
    let attempts = shown
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2', '3']) && l.contains(" 500 "))
        .count();
    assert_eq!(attempts, 2, "two attempts in the history:\n{shown}");

    let fixed = receiver.url("/fixed");
    let replayed = ok(&pb, &["dlq", "replay", &id, "--url", &fixed]);
    assert!(replayed.contains(&fixed), "{replayed}");
    assert_eq!(keys(&replayed), SUMMARY, "{replayed}");
    pb.wait_state(&id, "delivered", WAIT).await;
    let status = json(&pb, &["status", &id]);
    assert_eq!(
        (status["state"].as_str(), status["replays"].as_u64()),
        (Some("delivered"), Some(1))
    );
    assert!(ok(&pb, &["status", &id]).contains("state:            delivered"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_dlq_show_give_the_history_by_cycle_with_counts_that_agree() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = support::dead_one(&pb, &receiver).await;
    let down = pb.notification(&id).await["url"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&pb, &["dlq", "replay", &id]);
    pb.wait_state(&id, "dead", WAIT).await;

    let shown = ok(&pb, &["dlq", "show", &id]);
    assert!(
        shown.contains("attempts:     2 of 2 in this cycle; 4 in all"),
        "{shown}"
    );
    let registered = format!(", to {down}: 2 attempts");
    let cycles: Vec<&str> = shown.lines().filter(|l| cycle_line(l)).collect();
    assert_eq!(cycles.len(), 2, "{shown}");
    assert!(
        cycles[0].starts_with("Registered, ") && cycles[0].ends_with(&registered),
        "{shown}"
    );
    assert!(cycles[1].starts_with("Replay 1, "), "{shown}");
    let rows = |text: &str| {
        text.lines()
            .filter(|l| l.trim_start().starts_with(['1', '2']) && l.contains(" 500 "))
            .count()
    };
    assert_eq!(rows(&shown), 4, "two attempts in each cycle:\n{shown}");

    let fixed = receiver.url("/fixed");
    ok(&pb, &["dlq", "replay", &id, "--url", &fixed]);
    pb.wait_state(&id, "delivered", WAIT).await;
    let status = ok(&pb, &["status", &id]);
    assert!(
        status.contains("attempts:         1 of 2 in this cycle; 5 in all"),
        "{status}"
    );
    let last = status.lines().rfind(|l| cycle_line(l));
    assert!(
        last.is_some_and(
            |l| l.starts_with("Replay 2, ") && l.ends_with(&format!(", to {fixed}: 1 attempt"))
        ),
        "the attempt after the replay went to the new URL:\n{status}"
    );
    assert!(
        status.contains("response headers of the last attempt (Replay 2, "),
        "{status}"
    );
    assert!(status.contains("replays:          2\n"), "{status}");
    assert!(status.contains("resends:          0\n"), "{status}");
}

/// Whether a line of `status` or `dlq show` heads a cycle: `Registered, …`, `Replay 1, …`.
fn cycle_line(line: &str) -> bool {
    ["Registered, ", "Replay ", "Resend ", "Sent again "]
        .iter()
        .any(|start| line.starts_with(start))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_and_purge_by_filter_report_their_counts() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let mut ids = Vec::new();
    for topic in ["a", "a", "b"] {
        let url = receiver.url("/down?fail=99");
        let answer = json(
            &pb,
            &[
                "notify",
                "--url",
                &url,
                "--body-text",
                "hi",
                "--schedule",
                "100ms",
                "--topic",
                topic,
            ],
        );
        ids.push(answer["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        pb.wait_state(id, "dead", WAIT).await;
    }

    let out = ok(&pb, &["dlq", "replay", "--topic", "b", "--delay", "1h"]);
    assert_eq!(out.trim(), "replayed 1 dead letters");
    assert_eq!(pb.notification(&ids[2]).await["state"], "scheduled");
    assert_eq!(json(&pb, &["dlq", "purge", "--topic", "a"])["count"], 2);
    assert_eq!(json(&pb, &["stats"])["dead"], 0);
    assert!(ok(&pb, &["stats"]).contains("scheduled  1"));
    assert_eq!(json(&pb, &["stats", "--tenant", "default"])["scheduled"], 1);
    assert_eq!(json(&pb, &["stats", "--tenant", "shop-z"])["scheduled"], 0);
    assert_eq!(pb.get(&format!("/notifications/{}", ids[0])).await.0, 404);
}

/// The id of the endpoint at `url`'s origin, once the instance has told the store of it.
async fn endpoint_id(pb: &Postback, url: &str) -> String {
    let found = pb.endpoint_listed(support::instance::TOKEN, "", url).await;
    found["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_resends_a_delivered_one_counts_a_bulk_resend_and_hurries_a_pending_one() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let sent = notify(&pb, &receiver.url("/ok"), &["--topic", "t"]);
    pb.wait_state(&sent, "delivered", WAIT).await;

    let out = ok(&pb, &["resend", &sent]);
    assert!(out.contains(&sent), "{out}");
    assert_eq!(keys(&out), SUMMARY, "as `dlq replay` says it: {out}");
    pb.wait_state(&sent, "delivered", WAIT).await;
    assert_eq!(receiver.requests_for(&sent).len(), 2);

    let args = [
        "resend",
        "--state",
        "delivered",
        "--topic",
        "t",
        "--dry-run",
    ];
    assert_eq!(ok(&pb, &args).trim(), "would resend 1 notifications");
    assert_eq!(
        receiver.requests_for(&sent).len(),
        2,
        "a dry run sends nothing"
    );
    let endpoint = endpoint_id(&pb, &receiver.url("")).await;
    let args = ["resend", "--state", "delivered", "--endpoint", &endpoint];
    assert_eq!(
        ok(&pb, &[&args[..], &["--dry-run"]].concat()).trim(),
        "would resend 1 notifications"
    );

    let later = notify(&pb, &receiver.url("/ok"), &["--delay", "1h"]);
    assert_eq!(json(&pb, &["attempt-now", &later])["id"], later.as_str());
    pb.wait_state(&later, "delivered", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_clear_line_and_exit_code_one() {
    let (_backend, _receiver, pb) = support::start_any(&[]).await;
    let cases: [(&[&str], &str); 5] = [
        (
            &["status", "ntf_0_00000000000000000000000000000000"],
            "404 not_found",
        ),
        (&["dlq", "purge"], "or --all to purge every dead letter"),
        (&["dlq", "replay"], "or --all to replay every dead letter"),
        (
            &["notify", "--url", "ftp://x", "--body", "{}"],
            "422 invalid_field",
        ),
        (
            &["notify", "--url", "http://x", "--body", "not json"],
            "--body is not JSON",
        ),
    ];
    for (args, expected) in cases {
        let out = cli(&pb, args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr.starts_with("postback: ") && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    }

    let out = Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(["stats", "--token", "wrong"])
        .env("POSTBACK_API_URL", pb.url(""))
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("401 unauthorized") && stderr.contains("POSTBACK_API_TOKEN"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(["stats", "--api-url", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("cannot reach the postback API at http://127.0.0.1:1"),
        "{stderr}"
    );
}

/// `--api-url`, `--token` and `--json` before the subcommand, as after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_options_go_before_or_after_the_subcommand() {
    let (_backend, _receiver, pb) = support::start_any(&[]).await;
    let url = pb.url("");
    let before = [
        "--api-url",
        url.as_str(),
        "--token",
        TOKEN,
        "--json",
        "stats",
    ];
    let after = [
        "stats",
        "--api-url",
        url.as_str(),
        "--token",
        TOKEN,
        "--json",
    ];
    for args in [before, after] {
        let out = Command::new(env!("CARGO_BIN_EXE_postback"))
            .args(args)
            .env_clear()
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(stats["scheduled"], 0, "{args:?}: {stats}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_token_works_once_configured_and_its_actions_are_audited() {
    let made = Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(["token", "new", "--name", "night-ops", "--tenant", "*"])
        .args(["--roles", "read,operate,audit"])
        .output()
        .unwrap();
    assert!(made.status.success());
    let token = String::from_utf8(made.stdout).unwrap().trim().to_string();
    let lines = String::from_utf8(made.stderr).unwrap();
    assert!(
        token.starts_with("pbk_") && !lines.contains(&token),
        "shown once: {lines}"
    );
    let config: String = lines
        .lines()
        .skip_while(|l| !l.starts_with("[tokens."))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postback.toml");
    std::fs::write(&path, config).unwrap();

    let (_backend, receiver, pb) =
        support::start_any(&[("POSTBACK_CONFIG", path.to_str().unwrap())]).await;
    let id = pb
        .register(serde_json::json!({"url": receiver.url("/x"), "body": {}, "delay": "1h"}))
        .await;
    let as_night_ops = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_postback"))
            .args(args)
            .env_clear()
            .env("POSTBACK_API_URL", pb.url(""))
            .env("POSTBACK_API_TOKEN", &token)
            .output()
            .unwrap()
    };
    assert!(as_night_ops(&["cancel", &id]).status.success());
    let refused = as_night_ops(&["notify", "--url", "http://127.0.0.1:9/", "--body", "{}"]);
    assert!(!refused.status.success(), "no notify role");
    assert!(String::from_utf8(refused.stderr)
        .unwrap()
        .contains("notify"));

    let audit = as_night_ops(&["audit"]);
    let table = String::from_utf8(audit.stdout).unwrap();
    assert!(audit.status.success(), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains("cancel"))
        .expect("a cancel row");
    assert!(
        row.contains("night-ops") && row.contains(&id) && row.contains("default"),
        "{table}"
    );

    let bad = Command::new(env!("CARGO_BIN_EXE_postback"))
        .args([
            "token", "new", "--name", "x", "--tenant", "*", "--roles", "root",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_the_output_without_a_panic() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = pb
        .register(serde_json::json!({"url": receiver.url("/x"), "body": {}, "delay": "1h"}))
        .await;
    for _ in 0..5 {
        // As `postback status ID | head -0`: the reader is gone before anything is written.
        let mut child = Command::new(env!("CARGO_BIN_EXE_postback"))
            .args(["status", &id])
            .env_clear()
            .env("POSTBACK_API_URL", pb.url(""))
            .env("POSTBACK_API_TOKEN", TOKEN)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(
            matches!(out.status.code(), Some(0) | None),
            "{:?}: {stderr}",
            out.status
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_came_from_outside_cannot_drive_the_terminal() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let title = "\u{1b}]0;pwned\u{7}\u{1b}[2J";
    let id = pb
        .register(serde_json::json!({
            "url": receiver.url("/x?fail=9"),
            "body": format!("order=1&note={title}"),
            "schedule": [],
        }))
        .await;
    pb.wait_state(&id, "dead", WAIT).await;
    for args in [
        vec!["dlq", "show", &id],
        vec!["dlq", "list"],
        vec!["status", &id],
    ] {
        let shown = ok(&pb, &args);
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "{args:?}: {shown:?}"
        );
    }
    assert!(ok(&pb, &["dlq", "show", &id]).contains("\\u{1b}]0;pwned"));
}

/// What would show as something it is not: a right-to-left override (what follows it
/// reads backwards), a zero-width space, a tag character and a C1 control (CSI).
const DISGUISED: &str = "paid\u{202E}gnp.exe\u{200B}\u{E0041}\u{9B}2J";

/// Asserts that `shown` holds none of `DISGUISED`'s invisible characters.
fn none_raw(args: &[&str], shown: &str) {
    let raw = ['\u{202E}', '\u{200B}', '\u{E0041}', '\u{9B}'];
    assert!(!shown.contains(raw), "{args:?}: {shown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invisible_characters_stored_are_printed_escaped_in_tables_and_json() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = pb
        .register(serde_json::json!({
            "url": receiver.url("/x?fail=9"),
            "body": {"note": DISGUISED},
            "schedule": [],
        }))
        .await;
    pb.wait_state(&id, "dead", WAIT).await;
    let subscription = serde_json::json!({
        "url": receiver.url("/s"), "topics": ["a.b"], "description": DISGUISED,
    });
    let (status, created) = pb
        .request(
            reqwest::Method::POST,
            "/subscriptions",
            Some(subscription),
            &[],
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let sub = created["id"].as_str().unwrap();
    for args in [
        vec!["dlq", "show", &id],
        vec!["subscriptions", "list"],
        vec!["subscriptions", "show", sub],
    ] {
        let shown = ok(&pb, &args);
        none_raw(&args, &shown);
        assert!(shown.contains("paid\\u{202e}gnp.exe"), "{args:?}: {shown}");
        let mut with_json = args.clone();
        with_json.push("--json");
        let shown = ok(&pb, &with_json);
        none_raw(&with_json, &shown);
        let answer: Value = serde_json::from_str(&shown).unwrap();
        assert!(
            answer.to_string().contains(DISGUISED),
            "the same JSON: {shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_browses_a_state_and_status_finds_a_notification_by_its_key() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/orders");
    let more = [
        "--delay",
        "1h",
        "--topic",
        "order.paid",
        "--idempotency-key",
        "order-1001",
    ];
    let keyed = notify(&pb, &url, &more);
    let delivered = notify(&pb, &url, &[]);
    pb.wait_state(&delivered, "delivered", WAIT).await;

    let table = ok(&pb, &["list", "--state", "scheduled"]);
    assert!(
        table.trim_start().starts_with("ID"),
        "a header line: {table}"
    );
    assert!(
        table.contains(&keyed) && table.contains("order.paid"),
        "{table}"
    );
    assert!(!table.contains(&delivered), "{table}");
    let listed = json(&pb, &["list", "--state", "delivered", "--limit", "5"]);
    assert_eq!(listed["items"][0]["id"], delivered.as_str());
    let found = json(&pb, &["list", "--key", "order-1001"]);
    assert_eq!(found["items"][0]["id"], keyed.as_str());

    let status = ok(&pb, &["status", "--key", "order-1001"]);
    assert!(
        status.contains(&keyed) && status.contains("scheduled"),
        "{status}"
    );
    assert_eq!(
        json(&pb, &["status", "--key", "order-1001"])["id"],
        keyed.as_str()
    );
    let out = cli(&pb, &["status", "--key", "order-9999"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("order-9999"), "{stderr}");
    let out = cli(&pb, &["status"]);
    assert_eq!(out.status.code(), Some(2), "an id or --key is needed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_key_says_so_and_a_body_mismatch_says_why() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/answers-ok");
    let args = [
        "notify",
        "--url",
        &url,
        "--body",
        "{}",
        "--expect-body",
        "success",
        "--schedule",
        "100ms",
        "--idempotency-key",
        "order-77",
    ];
    let first = cli(&pb, &args);
    assert!(first.status.success());
    assert!(
        first.stderr.is_empty(),
        "the first registration is not a repeat"
    );
    let again = cli(&pb, &args);
    assert!(again.status.success());
    let stderr = String::from_utf8(again.stderr).unwrap();
    assert!(
        stderr.contains("Idempotency-Key was used before"),
        "{stderr}"
    );
    let id_of = |out: Vec<u8>| {
        let text = String::from_utf8(out).unwrap();
        text.lines()
            .next()
            .unwrap()
            .trim_start_matches("id:")
            .trim()
            .to_string()
    };
    let id = id_of(first.stdout);
    assert_eq!(id, id_of(again.stdout), "the same notification");
    pb.wait_state(&id, "dead", WAIT).await;
    let table = ok(&pb, &["dlq", "list"]);
    assert!(
        table.contains("HTTP 200: response body is not `success`"),
        "{table}"
    );
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [
        ("bash", "_postback()"),
        ("zsh", "#compdef postback"),
        ("fish", "complete -c postback"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_postback"))
            .args(["completions", shell])
            .output()
            .unwrap();
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{shell}");
        assert!(
            script.contains(marker) && script.contains("dlq"),
            "{shell}: {script}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(["completions", "cmd.exe"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walk_through_receiver_answers_and_fails_where_asked() {
    let (_backend, _receiver, pb) = support::start_any(&[]).await;
    let port = support::free_port();
    let mut receiving = Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(["receive", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        support::eventually(WAIT, || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await,
        "the receiver never listened"
    );
    let base = format!("http://127.0.0.1:{port}");
    let up = |path: &str| format!("{base}{path}");
    let delivered = pb
        .register(serde_json::json!({"url": up("/orders/42"), "body": {"order": 42}}))
        .await;
    let dead = pb
        .register(
            serde_json::json!({"url": up("/fail/orders/43"), "body": {}, "schedule": ["100ms"]}),
        )
        .await;
    pb.wait_state(&delivered, "delivered", WAIT).await;
    pb.wait_state(&dead, "dead", WAIT).await;
    receiving.kill().unwrap();
    let out = receiving.wait_with_output().unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(
        printed.contains(&format!(
            "200 POST /orders/42 webhook-id={delivered} {{\"order\":42}}"
        )),
        "{printed}"
    );
    assert_eq!(
        printed
            .matches(&format!("503 POST /fail/orders/43 webhook-id={dead}"))
            .count(),
        2,
        "{printed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_notifications_is_registered_line_by_line() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("settlement.jsonl");
    let good = |n: u32| {
        format!(
            r#"{{"url":"{}","body":{{"order":{n}}},"idempotency_key":"order-{n}"}}"#,
            receiver.url(&format!("/o/{n}"))
        )
    };
    std::fs::write(
        &file,
        format!(
            "{}\n\n{}\n{{\"url\":\"ftp://x\",\"body\":{{}}}}\n",
            good(1),
            good(2)
        ),
    )
    .unwrap();
    let path = file.to_str().unwrap();

    let out = cli(&pb, &["notify", "--batch", path]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "one line was refused: {stdout}{stderr}"
    );
    assert!(stderr.contains("registered 2, refused 1"), "{stderr}");
    assert!(
        stdout.contains("LINE") && stdout.contains("invalid_field"),
        "{stdout}"
    );
    assert!(receiver.wait_for(2, WAIT).await);
    assert_eq!(
        receiver.requests()[0].body.len() + receiver.requests()[1].body.len(),
        22
    );

    // Again, as JSON: the same ids for the same keys; the line numbers of the file.
    let out = cli(&pb, &["notify", "--batch", path, "--json"]);
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = answer["items"].as_array().unwrap();
    assert_eq!(
        items
            .iter()
            .map(|i| i["line"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 3, 4]
    );
    assert_eq!(items[0]["idempotent_replayed"], true);
    assert_eq!(items[2]["error"]["field"], "url");
    assert_eq!(receiver.count(), 2, "nothing registered twice");

    let out = cli(&pb, &["notify", "--batch", path, "--url", "http://x"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--batch takes no fields of its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_ordering_key_the_profile_and_the_success_rule() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/paid");
    let more = [
        "--ordering-key",
        "order-9",
        "--profile",
        "alipay",
        "--delay",
        "1h",
    ];
    let first = notify(&pb, &url, &more);
    let rule = r#"{"status":[200,204],"json_pointer":"/code","json_equals":"SUCCESS"}"#;
    let second = notify(&pb, &url, &["--ordering-key", "order-9", "--success", rule]);
    let head = ok(&pb, &["status", &first]);
    assert!(head.contains("ordering_key:     order-9"), "{head}");
    assert!(head.contains("waiting:          false"), "{head}");
    assert!(head.contains("profile:          alipay"), "{head}");
    assert!(
        head.contains("success:          2xx and body `success`"),
        "{head}"
    );
    let behind = ok(&pb, &["status", &second]);
    assert!(behind.contains("waiting:          true"), "{behind}");
    assert!(
        behind.contains(r#"success:          200|204 and JSON `/code` = "SUCCESS""#),
        "{behind}"
    );
    let plain = notify(&pb, &url, &["--delay", "1h"]);
    let plain = ok(&pb, &["status", &plain]);
    assert!(
        !plain.contains("waiting:") && !plain.contains("success:"),
        "{plain}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_lists_the_failing_one_and_shows_its_last_failure() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let dead = notify(
        &pb,
        &receiver.url("/down?fail=99"),
        &["--schedule", "100ms"],
    );
    pb.wait_state(&dead, "dead", WAIT).await;
    let origin = receiver.url("/").trim_end_matches('/').to_string();

    let listed = support::eventually(WAIT, || async {
        let page = json(&pb, &["endpoints", "--state", "failing"]);
        page["items"][0]["consecutive_failures"] == 2
    });
    assert!(
        listed.await,
        "the failing endpoint is listed with its two failures"
    );
    let out = ok(&pb, &["endpoints", "--state", "failing"]);
    assert!(out.contains(&origin) && out.contains("failing"), "{out}");
    assert!(out.contains("0/2 ok (0.0%)"), "{out}");
    assert!(ok(&pb, &["endpoints", "--state", "healthy"]).contains("no endpoints"));

    let id = json(&pb, &["endpoints"])["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = ok(&pb, &["endpoints", &id]);
    assert!(out.contains("consecutive_failures: 2"), "{out}");
    assert!(
        out.contains("last_failure:") && out.contains("Z HTTP 500\n"),
        "{out}"
    );

    let out = ok(&pb, &["endpoints", &id, "--pause"]);
    let line = |key: &str| out.lines().find(|l| l.starts_with(key)).unwrap_or("");
    assert!(line("state:").ends_with(" paused"), "{out}");
    assert!(line("paused:").contains(" since "), "{out}");
    let held = notify(
        &pb,
        &receiver.url("/down?fail=99"),
        &["--schedule", "100ms"],
    );
    pb.wait_state(&held, "held", WAIT).await;
    let listed = json(&pb, &["endpoints", "--state", "paused"]);
    assert_eq!(listed["items"][0]["id"], id.as_str(), "{listed}");
    let out = ok(&pb, &["endpoints", &id]);
    let shown = out.lines().find(|l| l.starts_with("notifications:"));
    assert!(
        shown.is_some_and(
            |l| l.ends_with(" 0 pending, 1 held (endpoint paused), 0 held back (circuit open)")
        ),
        "{out}"
    );
    let out = ok(&pb, &["endpoints", &id, "--resume"]);
    let state = out.lines().find(|l| l.starts_with("state:")).unwrap_or("");
    assert!(state.ends_with(" failing"), "{out}");
    pb.wait_state(&held, "dead", WAIT).await;
}

/// The line of the table under `circuits:` in `shown` that names `path`, its cells.
fn circuit_line<'a>(shown: &'a str, path: &str) -> Vec<&'a str> {
    let under = shown.lines().skip_while(|l| *l != "circuits:").skip(1);
    let line = under
        .take_while(|l| !l.is_empty())
        .find(|l| l.contains(path));
    line.unwrap_or_else(|| panic!("no circuit of {path}: {shown}"))
        .split_whitespace()
        .collect()
}

/// An open circuit shows where an operator looks: `endpoints` lists it under its
/// endpoint, `endpoints ID` with what it holds back, apart from what a pause holds, and
/// `list --state held_back` lists those; once it closes, both say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_show_each_circuit_and_list_reaches_what_it_holds_back() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "3"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "1h"),
    ])
    .await;
    receiver.set_down(true);
    let url = receiver.url("/shop/hook");
    for _ in 0..3 {
        let opener = serde_json::json!({"url": url, "body": {}, "schedule": []});
        let id = pb.register(opener).await;
        pb.wait_state(&id, "dead", WAIT).await;
    }
    let held = notify(&pb, &url, &["--schedule", "1h"]);
    let seen = support::eventually(WAIT, || async {
        pb.notification(&held).await["held_back_since"].is_string()
    });
    assert!(seen.await, "held back by the open circuit");

    let id = endpoint_id(&pb, &receiver.url("")).await;
    let listed = support::eventually(WAIT, || async {
        ok(&pb, &["endpoints"]).contains("circuits:")
    });
    assert!(
        listed.await,
        "the circuit is listed once its record is written"
    );
    let out = ok(&pb, &["endpoints"]);
    let line = circuit_line(&out, "/shop/hook");
    assert_eq!(
        (line[0], line[1], line[2]),
        (id.as_str(), "/shop/hook", "open"),
        "{out}"
    );
    assert!(
        line[3].ends_with('Z') && line[4].ends_with('Z'),
        "open since, next probe: {out}"
    );
    assert_eq!(line[5], "-", "not closed: {out}");

    let out = ok(&pb, &["endpoints", &id]);
    let backlog = out.lines().find(|l| l.starts_with("notifications:"));
    assert!(
        backlog.is_some_and(
            |l| l.ends_with(" 0 pending, 0 held (endpoint paused), 1 held back (circuit open)")
        ),
        "{out}"
    );
    let line = circuit_line(&out, "/shop/hook");
    assert_eq!(
        (line[0], line[1], line[4]),
        ("/shop/hook", "open", "1"),
        "{out}"
    );

    let out = ok(&pb, &["list", "--state", "held_back"]);
    assert!(out.contains(&held) && out.contains("held_back"), "{out}");
    assert!(ok(&pb, &["list", "--state", "held"]).contains("no held notifications"));
    let help = ok(&pb, &["list", "--help"]);
    assert!(help.contains("held_back"), "{help}");

    receiver.set_down(false);
    ok(&pb, &["attempt-now", &held]);
    pb.wait_state(&held, "delivered", WAIT).await;
    let closed = support::eventually(WAIT, || async {
        let out = ok(&pb, &["endpoints", &id]);
        circuit_line(&out, "/shop/hook")[1] == "closed"
    });
    assert!(
        closed.await,
        "the circuit closed once its probe was delivered"
    );
    let out = ok(&pb, &["endpoints", &id]);
    let line = circuit_line(&out, "/shop/hook");
    assert_eq!((line[2], line[3], line[4]), ("-", "-", "0"), "{out}");
    assert!(line[5].ends_with('Z'), "closed at: {out}");
    assert!(ok(&pb, &["list", "--state", "held_back"]).contains("no held_back notifications"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_subscribes_a_url_publishes_an_event_and_follows_it() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/orders");
    let sub = json(
        &pb,
        &[
            "subscriptions",
            "create",
            "--url",
            &url,
            "--topics",
            "payment.*,refund.created",
            "--description",
            "orders",
            "--settings",
            r#"{"schedule": ["100ms"]}"#,
        ],
    );
    let sub_id = sub["id"].as_str().unwrap().to_string();
    assert_eq!(
        sub["topics"],
        serde_json::json!(["payment.*", "refund.created"]),
        "{sub}"
    );
    assert_eq!(sub["settings"]["schedule"], serde_json::json!(["100ms"]));
    let table = ok(&pb, &["subscriptions", "list"]);
    assert!(
        table.contains(&sub_id) && table.contains("payment.*,refund.created"),
        "{table}"
    );

    let event = json(
        &pb,
        &[
            "events",
            "publish",
            "--topic",
            "payment.succeeded",
            "--body",
            r#"{"order": 8}"#,
            "--idempotency-key",
            "o-8",
        ],
    );
    let event_id = event["id"].as_str().unwrap().to_string();
    let publish = [
        "events",
        "publish",
        "--topic",
        "payment.succeeded",
        "--body",
        r#"{"order": 8}"#,
        "--idempotency-key",
        "o-8",
    ];
    let again = cli(&pb, &publish);
    let said = String::from_utf8(again.stderr).unwrap();
    assert!(
        said.contains("this Idempotency-Key was used before: nothing new was published")
            && said.contains("the event it published")
            && !said.contains("notification"),
        "{said}"
    );
    let notification = event["deliveries"][0]["notification"]
        .as_str()
        .unwrap()
        .to_string();
    pb.wait_state(&notification, "delivered", WAIT).await;
    let shown = ok(&pb, &["events", "show", &event_id]);
    assert!(
        shown.contains(&notification) && shown.contains("delivered"),
        "{shown}"
    );
    let listed = ok(&pb, &["events", "list", "--topic", "payment.succeeded"]);
    assert!(listed.contains(&event_id), "{listed}");
    let topics = ok(&pb, &["topics"]);
    assert!(
        topics.contains(&format!(
            "example of payment.succeeded ({event_id}):\n{{\n  \"order\": 8\n}}"
        )),
        "{topics}"
    );

    let resent = ok(
        &pb,
        &["events", "resend", &event_id, "--subscription", &sub_id],
    );
    assert!(resent.contains("resent 1 notifications"), "{resent}");
    let updated = json(&pb, &["subscriptions", "update", &sub_id, "--disable"]);
    assert_eq!(updated["enabled"], false);
    let deleted = ok(&pb, &["subscriptions", "delete", &sub_id]);
    assert!(deleted.contains(&sub_id), "{deleted}");
    let out = cli(&pb, &["subscriptions", "show", &sub_id]);
    assert!(!out.status.success());
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("404 not_found"), "{said}");
    assert!(receiver.wait_for(2, WAIT).await, "sent, then resent");
}

/// The command a message names, between backticks, starting with `start`.
fn hinted<'a>(said: &'a str, start: &str) -> &'a str {
    let from = said.find(&format!("`{start}")).expect(said) + 1;
    let len = said[from..].find('`').expect(said);
    &said[from..from + len]
}

/// Runs `command` as a shell would, with `postback` this build's binary.
fn run_as_written(command: &str) -> Output {
    let command = command.replacen("postback", env!("CARGO_BIN_EXE_postback"), 1);
    Command::new("sh").args(["-c", &command]).output().unwrap()
}

#[test]
fn the_first_error_of_a_fresh_install_hints_at_a_command_that_works() {
    let dir = tempfile::tempdir().unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_postback"))
        .arg("serve")
        .current_dir(dir.path())
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8(refused.stderr).unwrap();
    let hint = hinted(&said, "postback token new");
    let made = run_as_written(hint);
    let (token, lines) = (
        String::from_utf8(made.stdout).unwrap(),
        String::from_utf8(made.stderr).unwrap(),
    );
    assert!(made.status.success(), "`{hint}`: {lines}");
    assert!(
        token.starts_with("pbk_") && lines.contains("[tokens."),
        "{lines}"
    );
    for args in [
        &["token", "new", "ci", "--tenant", "*", "--roles", "read"][..],
        &[
            "token", "new", "--name", "ci", "--tenant", "*", "--roles", "read",
        ],
    ] {
        let made = Command::new(env!("CARGO_BIN_EXE_postback"))
            .args(args)
            .output()
            .unwrap();
        let lines = String::from_utf8(made.stderr).unwrap();
        assert!(made.status.success(), "{args:?}: {lines}");
        assert!(lines.contains("[tokens.ci]"), "{lines}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_list_names_its_state_and_what_the_others_hold() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    for _ in 0..3 {
        let id = notify(&pb, &receiver.url("/ok"), &[]);
        pb.wait_state(&id, "delivered", WAIT).await;
    }
    let said = ok(&pb, &["list"]);
    assert!(said.starts_with("no scheduled notifications\n"), "{said}");
    assert!(
        said.contains("3 delivered or cancelled") && said.contains("--state delivered"),
        "{said}"
    );
    let said = ok(&pb, &["list", "--state", "dead"]);
    assert_eq!(said.trim(), "no dead notifications");
    let said = ok(&pb, &["list", "--topic", "nothing.here"]);
    assert_eq!(said.trim(), "no scheduled notifications match");
    let help = ok(&pb, &["list", "--help"]);
    assert!(help.contains("held"), "{help}");
}

/// A body as a payment system may write one: an integer past 2^64, a decimal with a
/// trailing zero, an exponent, negative zeros, an escape, keys out of order.
const AWKWARD: &str = r#"{"id":12345678901234567890123,"amount":10.10,"e":1E+2,"z":-0,"b":{"y":[1.0,-0.0],"a":"caf\u00e9"}}"#;

/// JSON text without the whitespace between its tokens: all a layout may change.
fn squeezed(text: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
    for c in text.chars() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => in_string = !in_string,
            (false, _, c) if c.is_whitespace() => continue,
            _ => {}
        }
        out.push(c);
    }
    out
}

/// The lines of `shown` under the line `heading`, up to the next blank one.
fn block(shown: &str, heading: &str) -> String {
    let mut lines = shown.lines().skip_while(|l| *l != heading).skip(1);
    let under: Vec<&str> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
    assert!(!under.is_empty(), "no `{heading}` block: {shown}");
    under.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_that_shows_a_body_shows_it_as_stored() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let down = receiver.url("/down?fail=99");
    let args = [
        "notify",
        "--url",
        &down,
        "--body",
        AWKWARD,
        "--schedule",
        "100ms",
    ];
    let id = json(&pb, &args)["id"].as_str().unwrap().to_string();
    pb.wait_state(&id, "dead", WAIT).await;
    let shows: [(&[&str], &str); 2] = [
        (&["status", &id], "/request/body"),
        (&["dlq", "show", &id], "/body"),
    ];
    for (args, field) in shows {
        let shown = ok(&pb, args);
        let body = block(&shown, "body (application/json):");
        assert_eq!(squeezed(&body), AWKWARD, "{args:?}: {shown}");
        assert!(
            body.contains("\n  \"amount\": 10.10,\n"),
            "laid out: {body}"
        );
        let answer = json(&pb, args);
        assert_eq!(
            answer.pointer(field),
            Some(&Value::from(AWKWARD)),
            "{args:?}"
        );
    }

    let publish = [
        "events",
        "publish",
        "--topic",
        "payment.exact",
        "--body",
        AWKWARD,
    ];
    let published = ok(&pb, &[&publish[..], &["--json"]].concat());
    assert!(
        squeezed(&published).contains(&format!(r#""body":{AWKWARD}"#)),
        "{published}"
    );
    let event: Value = serde_json::from_str(&published).unwrap();
    let event = event["id"].as_str().unwrap();
    let shown = ok(&pb, &["events", "show", event]);
    let body = block(&shown, "body (application/json):");
    assert_eq!(squeezed(&body), AWKWARD, "{shown}");
    let answer = ok(&pb, &["events", "show", event, "--json"]);
    assert!(
        squeezed(&answer).contains(&format!(r#""body":{AWKWARD}"#)),
        "{answer}"
    );

    let shown = ok(&pb, &["topics"]);
    let example = block(&shown, &format!("example of payment.exact ({event}):"));
    assert_eq!(squeezed(&example), AWKWARD, "{shown}");
    let answer = ok(&pb, &["topics", "--json"]);
    assert!(
        squeezed(&answer).contains(&format!(r#""example":{AWKWARD}"#)),
        "{answer}"
    );
}
