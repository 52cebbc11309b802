//! Counts that repeat from run to run, for telling two builds apart where times move with
//! the machine: per registration (`POST /notify`, one request at a time, due in an hour)
//! and per delivery (as many registered one at a time, due `--spacing` apart so that each
//! is claimed, sent and settled on its own, counted from just before the first is due),
//! what postback did. Under callgrind: its instructions and its
//! allocations (calls to the global allocator); with strace attached for each phase: its
//! system calls. In both: the store's work, Redis commands (`commandstats`) or Postgres
//! statements (`pg_stat_statements`). A phase ends once postback's CPU time has stopped
//! moving, so that what follows an answer or a delivery (a settle) is in it; an idle
//! phase (nothing to do for `IDLE`) says how much the background adds per second.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use clap::ValueEnum;
use serde_json::{json, Value};

use crate::processes::{cpu_seconds, Backend, Postback};
use crate::producer::{Producer, Registered};
use crate::receiver::Receiver;
use crate::report::Results;
use crate::scenarios::{check_exactly_once, payment, wait_all};
use crate::{Opts, StoreKind};

/// How long the idle phase lasts.
const IDLE: Duration = Duration::from_secs(2);

/// How a run counts postback's own work.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Counter {
    /// `valgrind --tool=callgrind`: instructions and allocations.
    Callgrind,
    /// `strace -f -c` attached for each phase: system calls.
    Strace,
}

impl Counter {
    fn name(self) -> &'static str {
        match self {
            Counter::Callgrind => "callgrind",
            Counter::Strace => "strace",
        }
    }
}

/// One run per counter of `--counters`, each on a fresh store and postback.
pub async fn counts(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    for &counter in &opts.counters {
        count_with(counter, opts, r, run).await?;
    }
    Ok(())
}

async fn count_with(
    counter: Counter,
    opts: &Opts,
    r: &mut Results,
    run: usize,
) -> anyhow::Result<()> {
    let store = match opts.store {
        StoreKind::Postgres => Backend::counting_postgres(opts.tls)?,
        _ => opts.store()?,
    };
    let store_name = match opts.store {
        StoreKind::Redis => "redis",
        StoreKind::Embedded => "embedded",
        StoreKind::Postgres => "postgres",
    };
    let scenario = format!("counts_{store_name}_{}", counter.name());
    let receiver = Receiver::default();
    let addr = receiver.listen("127.0.0.1").await?;
    let scratch = tempfile::tempdir()?;
    let dumps = match &opts.dumps {
        Some(dir) => {
            let dir = dir.join(&scenario);
            std::fs::create_dir_all(&dir)?;
            dir
        }
        None => scratch.path().to_path_buf(),
    };
    let wrapper: Vec<String> = match counter {
        Counter::Callgrind => vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}/callgrind.out", dumps.display()),
            "--dump-instr=no".into(),
            "--compress-strings=no".into(),
            "--compress-pos=no".into(),
            format!("--log-file={}/valgrind.log", dumps.display()),
        ],
        Counter::Strace => Vec::new(),
    };
    let pb = Postback::start_under(&store, &opts.postback_env(), &wrapper).await?;
    let producer = Producer::new(&[pb.url.as_str()])?;
    let url = format!("http://{addr}/hook");
    let body = |i: usize, delay: &str| json!({"url": url, "body": payment(i), "delay": delay});
    let bodies = |n: usize, delay: &str| -> Vec<Value> { (0..n).map(|i| body(i, delay)).collect() };
    let phase = |name: &'static str| Phase {
        counter,
        store: &store,
        pid: pb.pid(),
        dumps: &dumps,
        scenario: &scenario,
        run,
        name,
    };

    // Warm up: connections (as many as a burst opens), caches, every metric's labels.
    deliver(
        &producer,
        &receiver,
        opts.warmup,
        Duration::ZERO,
        &body,
        None,
    )
    .await?;
    quiet(pb.pid()).await;

    let probe = phase("idle").start()?;
    tokio::time::sleep(IDLE).await;
    probe.finish(r, IDLE.as_secs_f64())?;

    let probe = phase("registration").start()?;
    producer.register_all(bodies(opts.n, "1h"), 1).await?;
    quiet(pb.pid()).await;
    probe.finish(r, opts.n as f64)?;

    receiver.reset();
    let counted = Some((phase("delivery"), &mut *r));
    let registered = deliver(&producer, &receiver, opts.n, opts.spacing, &body, counted).await?;
    check_exactly_once(&receiver, &registered, r, &scenario, run)
}

/// Registers `n` one at a time, due `spacing` apart from an instant after the last is
/// registered (all at once for zero), and waits until they are delivered; with a
/// phase, counts it from just before that instant until postback is quiet.
async fn deliver(
    producer: &Producer,
    receiver: &Receiver,
    n: usize,
    spacing: Duration,
    body: &impl Fn(usize, &str) -> Value,
    counted: Option<(Phase<'_>, &mut Results)>,
) -> anyhow::Result<Vec<Registered>> {
    // Registering takes about as long again as a registration phase; the margin is
    // measured on a first registration.
    let sent = Instant::now();
    producer.register(&body(0, "1h")).await?;
    let margin = sent.elapsed().mul_f64(n as f64 * 1.5) + Duration::from_secs(1);
    let first_due = SystemTime::now() + margin;
    let mut registered = Vec::with_capacity(n);
    for i in 0..n {
        let due = first_due + spacing * i as u32;
        let delay = due.duration_since(SystemTime::now()).unwrap_or_default();
        registered.push(
            producer
                .register(&body(i, &format!("{}ms", delay.as_millis())))
                .await?,
        );
    }
    let start = first_due - Duration::from_millis(300);
    match start.duration_since(SystemTime::now()) {
        Ok(wait) => tokio::time::sleep(wait).await,
        Err(_) => bail!("registration overran the first due time"),
    }
    let probe = match counted {
        Some((phase, r)) => Some((phase.start()?, r)),
        None => None,
    };
    wait_all(receiver, &registered).await?;
    if let Some((probe, r)) = probe {
        quiet(probe.phase.pid).await;
        probe.finish(r, n as f64)?;
    }
    Ok(registered)
}

/// Waits until postback's CPU time has not moved for half a second (a clock tick is
/// 10 ms), or 30 s at most.
async fn quiet(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut last, mut still) = (cpu_seconds(pid), 0);
    while still < 5 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = cpu_seconds(pid);
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
}

/// One phase of a counting run.
struct Phase<'a> {
    counter: Counter,
    store: &'a Backend,
    pid: u32,
    dumps: &'a Path,
    scenario: &'a str,
    run: usize,
    name: &'static str,
}

/// A phase being counted: strace attached, or callgrind's counts zeroed, and the store's
/// counts reset.
struct Probe<'a> {
    phase: Phase<'a>,
    strace: Option<(Child, PathBuf)>,
}

impl<'a> Phase<'a> {
    fn start(self) -> anyhow::Result<Probe<'a>> {
        let strace = match self.counter {
            Counter::Callgrind => {
                callgrind_control("-z", self.pid)?;
                None
            }
            Counter::Strace => Some(attach_strace(self.pid, self.dumps, self.name)?),
        };
        reset_store(self.store)?;
        Ok(Probe {
            phase: self,
            strace,
        })
    }
}

impl Probe<'_> {
    /// Reports each count of the phase divided by `units`.
    fn finish(self, r: &mut Results, units: f64) -> anyhow::Result<()> {
        let p = &self.phase;
        let mut add = |what: &str, count: f64, unit: &str| {
            let metric = format!("{}_{what}", p.name);
            r.add(p.scenario, p.run, &metric, count / units, unit);
        };
        let (commands, statements) = store_counts(p.store)?;
        if let Some(n) = commands {
            add("redis_commands", n as f64, "cmd");
        }
        if let Some(n) = statements {
            add("postgres_statements", n as f64, "statements");
        }
        match self.strace {
            None => {
                let dump = callgrind_dump(p.pid, p.dumps)?;
                add("instructions", dump.instructions as f64, "instructions");
                add("allocations", dump.allocations as f64, "allocations");
                add("reallocations", dump.reallocations as f64, "reallocations");
            }
            Some((mut child, file)) => {
                Command::new("kill")
                    .args(["-INT", &child.id().to_string()])
                    .status()?;
                child.wait()?;
                let calls = strace_calls(&file)?;
                let total: u64 = calls.values().sum();
                add("syscalls", total as f64, "syscalls");
                let mut busiest: Vec<_> = calls.into_iter().collect();
                busiest.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
                let shown: Vec<String> = busiest
                    .iter()
                    .map(|(name, n)| format!("{name} {:.2}", *n as f64 / units))
                    .collect();
                eprintln!("{} {} syscalls: {}", p.scenario, p.name, shown.join(", "));
            }
        }
        Ok(())
    }
}

fn reset_store(store: &Backend) -> anyhow::Result<()> {
    if store.is_redis() {
        store.reset_stats()?;
    }
    if let Some(pg) = store.as_postgres() {
        pg.reset_statements()?;
    }
    Ok(())
}

/// Commands the instance sent Redis since the reset (the harness's own `INFO`,
/// `CONFIG RESETSTAT` and connection setup left out), or statements it ran on
/// Postgres; each store's breakdown on stderr.
fn store_counts(store: &Backend) -> anyhow::Result<(Option<u64>, Option<u64>)> {
    if store.is_redis() {
        let harness = [
            "cmdstat_info",
            "cmdstat_config|resetstat",
            "cmdstat_client|setinfo",
        ];
        let mut total = 0;
        let mut each = Vec::new();
        for (key, value) in store.info("commandstats")?.into_iter().flatten() {
            let calls = value
                .strip_prefix("calls=")
                .and_then(|v| v.split(',').next()?.parse::<u64>().ok());
            if let (Some(calls), false) = (calls, harness.contains(&key.as_str())) {
                total += calls;
                each.push(format!("{} {calls}", key.trim_start_matches("cmdstat_")));
            }
        }
        eprintln!("redis commands: {}", each.join(", "));
        return Ok((Some(total), None));
    }
    if let Some(pg) = store.as_postgres() {
        let (total, each) = pg.statements()?;
        for (calls, query) in each.iter().take(12) {
            let short: String = query.chars().take(140).collect();
            eprintln!("postgres statements: {calls} {short}");
        }
        return Ok((None, Some(total)));
    }
    Ok((None, None))
}

fn callgrind_control(action: &str, pid: u32) -> anyhow::Result<()> {
    let status = Command::new("callgrind_control")
        .args([action, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("callgrind_control (valgrind) must be installed")?;
    if !status.success() {
        bail!("callgrind_control {action} {pid} failed");
    }
    Ok(())
}

/// What one callgrind dump counted.
struct Dump {
    instructions: u64,
    /// Calls to the global allocator's `alloc` and `alloc_zeroed` (mimalloc's).
    allocations: u64,
    reallocations: u64,
}

/// Dumps callgrind's counts since the last zeroing, and reads them.
fn callgrind_dump(pid: u32, dir: &Path) -> anyhow::Result<Dump> {
    let before = dump_files(dir)?;
    callgrind_control("-d", pid)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let fresh: Vec<PathBuf> = dump_files(dir)?
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if let Some(file) = fresh.first() {
            let text = std::fs::read_to_string(file)?;
            if text.contains("\ntotals:") {
                return Ok(parse_callgrind(&text));
            }
        }
        if Instant::now() > deadline {
            bail!("callgrind wrote no dump in {}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn dump_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| Some(e.ok()?.path()))
        .collect())
}

/// The total instructions of a dump, and the calls it counted to the allocator every
/// Rust allocation goes through (mimalloc's `mi_malloc_aligned`, ...).
fn parse_callgrind(text: &str) -> Dump {
    let mut dump = Dump {
        instructions: 0,
        allocations: 0,
        reallocations: 0,
    };
    let mut callee = "";
    for line in text.lines() {
        if let Some(total) = line.strip_prefix("totals:") {
            dump.instructions = total.trim().parse().unwrap_or(0);
        } else if let Some(name) = line.strip_prefix("cfn=") {
            callee = name;
        } else if let Some(calls) = line.strip_prefix("calls=") {
            let count: u64 = calls
                .split_whitespace()
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            match callee {
                "mi_malloc_aligned" | "mi_zalloc_aligned" => dump.allocations += count,
                "mi_realloc_aligned" => dump.reallocations += count,
                _ => {}
            }
        }
    }
    dump
}

/// `strace -f -c` attached to every thread of `pid`, once each is traced.
fn attach_strace(pid: u32, dir: &Path, phase: &str) -> anyhow::Result<(Child, PathBuf)> {
    let file = dir.join(format!("strace-{phase}"));
    let child = Command::new("strace")
        .args(["-f", "-c", "-qq", "-o"])
        .arg(&file)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("strace must be installed")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !every_thread_traced(pid)? {
        if Instant::now() > deadline {
            bail!("strace did not attach to {pid}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((child, file))
}

fn every_thread_traced(pid: u32) -> anyhow::Result<bool> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let status = std::fs::read_to_string(task?.path().join("status")).unwrap_or_default();
        let tracer = status
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .map(str::trim);
        if matches!(tracer, None | Some("0")) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Calls by system call from `strace -c`'s table.
fn strace_calls(file: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let text = std::fs::read_to_string(file)?;
    let mut calls = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // % time, seconds, usecs/call, calls, [errors,] syscall
        if fields.len() < 5 || fields[0].parse::<f64>().is_err() {
            continue;
        }
        let name = fields[fields.len() - 1];
        if name == "total" {
            continue;
        }
        if let Ok(n) = fields[3].parse::<u64>() {
            calls.insert(name.to_string(), n);
        }
    }
    Ok(calls)
}
