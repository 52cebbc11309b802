//! The machine's own limits, for ratios that do not move with its day: `wrk` (one
//! thread, 64 connections) posting to the peers' receiver (`--peer-receiver`), what a
//! request costs `wrk` (an HTTP client doing nothing else) and the receiver (axum, a JSON
//! body parsed); then `wrk` as the producer of `POST /notify` (due in an hour, so that
//! nothing is delivered meanwhile), what a registration costs postback and the store.
//! CPU is user + system, from `/proc` for the servers and from `time` for `wrk`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;

use crate::processes::{cpu_seconds, free_port, Postback, TOKEN};
use crate::receiver::Receiver;
use crate::report::Results;
use crate::scenarios::payment;
use crate::Opts;

/// How long each `wrk` run lasts.
const WRK_SECONDS: u32 = 10;

pub async fn limits(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    match &opts.peer_receiver {
        Some(receiver) => peer_receiver(receiver, dir.path(), r, run).await?,
        None => eprintln!("limits: no --peer-receiver, the receiver's request not measured"),
    }

    let store = opts.store()?;
    let hook = Receiver::default();
    let addr = hook.listen("127.0.0.1").await?;
    let pb = Postback::start(&store, &opts.postback_env()).await?;
    let body = json!({"url": format!("http://{addr}/hook"), "body": payment(1), "delay": "1h"});
    let script = post_script(
        dir.path(),
        &body.to_string(),
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    )?;
    let (pb_cpu, store_cpu) = (cpu_seconds(pb.pid()), store.cpu_seconds()?);
    let wrk = wrk(&script, &format!("{}/notify", pb.url), dir.path())?;
    if wrk.failed > 0 {
        bail!(
            "{} of {} registrations were not accepted",
            wrk.failed,
            wrk.requests
        );
    }
    let per = |seconds: f64| seconds * 1e6 / wrk.requests as f64;
    let name = "limits";
    r.add(
        name,
        run,
        "notify_per_s",
        wrk.requests as f64 / f64::from(WRK_SECONDS),
        "req/s",
    );
    let postback = per(cpu_seconds(pb.pid()) - pb_cpu);
    r.add(name, run, "notify_postback_cpu", postback, "us");
    let store_cpu = per(store.cpu_seconds()? - store_cpu);
    r.add(name, run, "notify_store_cpu", store_cpu, "us");
    r.add(name, run, "notify_wrk_cpu", per(wrk.cpu), "us");
    Ok(())
}

/// `wrk` against the peers' receiver: its CPU and the receiver's per request.
async fn peer_receiver(
    binary: &Path,
    dir: &Path,
    r: &mut Results,
    run: usize,
) -> anyhow::Result<()> {
    let port = free_port()?;
    let receiver = Command::new(binary)
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let receiver = Killed(receiver);
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get(format!("{url}/count")).send().await.is_err() {
        if Instant::now() > deadline {
            bail!("the peers' receiver did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The peers' own baseline body.
    let body = r#"{"id":"wrk","due":0,"type":"payment.succeeded","data":{"amount":1000,"currency":"usd","customer":"cus_1"}}"#;
    let script = post_script(dir, body, &[])?;
    let before = cpu_seconds(receiver.0.id());
    let wrk = wrk(&script, &format!("{url}/hook"), dir)?;
    let per = |seconds: f64| seconds * 1e6 / wrk.requests.max(1) as f64;
    let name = "limits";
    r.add(
        name,
        run,
        "receiver_per_s",
        wrk.requests as f64 / f64::from(WRK_SECONDS),
        "req/s",
    );
    r.add(name, run, "receiver_wrk_cpu", per(wrk.cpu), "us");
    r.add(
        name,
        run,
        "receiver_cpu",
        per(cpu_seconds(receiver.0.id()) - before),
        "us",
    );
    Ok(())
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `wrk` script posting `body` as JSON with `headers`.
fn post_script(
    dir: &Path,
    body: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<std::path::PathBuf> {
    let mut lua = String::from(
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n",
    );
    for (name, value) in headers {
        lua.push_str(&format!("wrk.headers[\"{name}\"] = \"{value}\"\n"));
    }
    lua.push_str(&format!("wrk.body = '{body}'\n"));
    let file = dir.join(format!("post-{}.lua", fastrand::u32(..)));
    std::fs::write(&file, lua)?;
    Ok(file)
}

/// What one `wrk` run did and cost.
struct Wrk {
    requests: u64,
    /// Answers other than 2xx or 3xx.
    failed: u64,
    /// `wrk`'s own CPU seconds.
    cpu: f64,
}

/// `wrk -t1 -c64` posting with `script` to `url` for `WRK_SECONDS`, under `time`.
fn wrk(script: &Path, url: &str, dir: &Path) -> anyhow::Result<Wrk> {
    let times = dir.join("wrk-time");
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%U %S", "-o"])
        .arg(&times)
        .args(["wrk", "-t1", "-c64", &format!("-d{WRK_SECONDS}s"), "-s"])
        .arg(script)
        .arg(url)
        .output()
        .context("wrk and /usr/bin/time must be installed")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    let number = |line: &str, at: usize| -> u64 {
        line.split([' ', ','])
            .filter(|f| !f.is_empty())
            .nth(at)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut result = Wrk {
        requests: 0,
        failed: 0,
        cpu: 0.0,
    };
    for line in text.lines().map(str::trim) {
        if line.contains(" requests in ") {
            result.requests = number(line, 0);
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            result.failed += number(rest, 0);
        }
    }
    let cpu = std::fs::read_to_string(&times)?;
    result.cpu = cpu
        .split_whitespace()
        .filter_map(|s| s.parse::<f64>().ok())
        .sum();
    if result.requests == 0 {
        bail!("wrk made no requests: {text}");
    }
    Ok(result)
}
