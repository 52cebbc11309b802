//! The processes a benchmark runs against: a fresh `redis-server` (or a Redis Cluster of
//! several) on free ports in a temporary directory, and `postback serve` as child
//! processes; and what they cost, read from `/proc` and Redis `INFO`.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use postback::config::RedisTarget;
use postback::store::{EmbeddedStore, PostgresStore, RedisStore, Store};

use crate::certs::Certs;
use crate::postgres::PostgresServer;

pub const TOKEN: &str = "bench-token";

pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// CPU seconds (user + system) a process has used so far.
pub fn cpu_seconds(pid: u32) -> f64 {
    let (user, system) = cpu_split(pid);
    user + system
}

/// CPU seconds a process has used so far in user space and in the kernel on its behalf
/// (its system calls, with the loopback TCP they do for the other end).
pub fn cpu_split(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let seconds = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
            / clock_ticks()
    };
    (seconds(11), seconds(12))
}

/// Clock ticks per second (`getconf CLK_TCK`, nearly always 100).
pub fn clock_ticks() -> f64 {
    static HZ: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The peak resident set of a process, in MiB.
pub fn peak_rss_mib(pid: u32) -> f64 {
    memory_mib(pid, "VmHWM:")
}

/// The resident set of a process now, in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    memory_mib(pid, "VmRSS:")
}

fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The store postback runs on in one scenario: a fresh standalone `redis-server`, a
/// Redis Cluster of several (each on a free port in a temporary directory), or the
/// embedded store in a temporary directory. Redis figures are the sums over its nodes;
/// the embedded store has none (its work is in postback's own CPU).
pub struct Backend {
    nodes: Vec<(Child, u16)>,
    /// With `--tls` (a standalone Redis): the certificates, and the TLS port postback is
    /// given; the harness's own commands use the node's port in clear.
    tls: Option<(Certs, u16)>,
    cluster: bool,
    embedded: bool,
    postgres: Option<PostgresServer>,
    dir: tempfile::TempDir,
}

impl Backend {
    /// A standalone Redis, with `replicas` replicas of it (each a node of the figures),
    /// once they are in sync and acknowledge at once.
    pub fn start_redis(replicas: usize, tls: bool) -> anyhow::Result<Self> {
        let mut redis = Self::start_nodes(1 + replicas, false)?;
        if tls {
            redis.tls = Some(tls_port(redis.nodes[0].1)?);
        }
        let primary = redis.nodes[0].1;
        for (_, port) in &redis.nodes[1..] {
            redis_command(*port, &["REPLICAOF", "127.0.0.1", &primary.to_string()])?;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for (_, port) in &redis.nodes[1..] {
            while redis_info(*port, "replication")?.get("master_link_status")
                != Some(&"up".to_string())
            {
                if Instant::now() > deadline {
                    bail!("the replica on port {port} did not sync");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if replicas > 0 {
            // A replica answers WAIT slowly for about a second after it first syncs.
            std::thread::sleep(Duration::from_secs(2));
        }
        Ok(redis)
    }

    pub fn embedded() -> anyhow::Result<Self> {
        Ok(Self {
            nodes: Vec::new(),
            tls: None,
            cluster: false,
            embedded: true,
            postgres: None,
            dir: tempfile::tempdir()?,
        })
    }

    /// A fresh Postgres of its own.
    pub fn postgres(tls: bool) -> anyhow::Result<Self> {
        Self::with_postgres(PostgresServer::start(tls)?)
    }

    /// A fresh Postgres that counts the statements it runs.
    pub fn counting_postgres(tls: bool) -> anyhow::Result<Self> {
        Self::with_postgres(PostgresServer::start_counting(tls)?)
    }

    fn with_postgres(server: PostgresServer) -> anyhow::Result<Self> {
        Ok(Self {
            nodes: Vec::new(),
            tls: None,
            cluster: false,
            embedded: false,
            postgres: Some(server),
            dir: tempfile::tempdir()?,
        })
    }

    pub fn is_redis(&self) -> bool {
        !self.embedded && self.postgres.is_none()
    }

    /// The Postgres it is, if it is one.
    pub fn as_postgres(&self) -> Option<&PostgresServer> {
        self.postgres.as_ref()
    }

    /// The embedded store's directory.
    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The store itself, for filling it without the API (postback must not be running
    /// on the embedded store meanwhile).
    pub async fn open(&self) -> anyhow::Result<Box<dyn Store>> {
        if self.embedded {
            let retention = Default::default();
            return Ok(Box::new(EmbeddedStore::open(&self.data_dir(), &retention)?));
        }
        if let Some(pg) = &self.postgres {
            let (settings, retention) = (Default::default(), Default::default());
            return Ok(Box::new(
                PostgresStore::connect(&pg.url(), &settings, &retention).await?,
            ));
        }
        let store =
            RedisStore::connect(&self.target(), 1, &Default::default(), &Default::default())
                .await?;
        Ok(Box::new(store))
    }

    /// A cluster of `primaries` primaries (no replicas), slots spread evenly.
    pub fn start_cluster(primaries: usize) -> anyhow::Result<Self> {
        let redis = Self::start_nodes(primaries, true)?;
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(redis.nodes.iter().map(|(_, p)| format!("127.0.0.1:{p}")))
            .arg("--cluster-yes")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !created.success() {
            bail!("redis-cli --cluster create failed");
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for (_, port) in &redis.nodes {
            while !cluster_ok(*port)? {
                if Instant::now() > deadline {
                    bail!("the cluster did not become ok");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(redis)
    }

    fn start_nodes(count: usize, cluster: bool) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut nodes = Vec::new();
        for _ in 0..count {
            let port = free_port()?;
            let node_dir = dir.path().join(port.to_string());
            std::fs::create_dir(&node_dir)?;
            let mut cmd = Command::new("redis-server");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                // A snapshot after an hour: none within a run, but persistence postback
                // accepts (a Redis that persists nothing is refused).
                .args(["--save", "3600 1", "--appendonly", "no"])
                .args(["--maxmemory-policy", "noeviction"])
                .arg("--dir")
                .arg(&node_dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if cluster {
                cmd.args(["--cluster-enabled", "yes"]);
            }
            let child = cmd
                .spawn()
                .context("redis-server must be installed (scripts/ensure-redis.sh)")?;
            nodes.push((child, port));
        }
        let redis = Self {
            nodes,
            tls: None,
            cluster,
            embedded: false,
            postgres: None,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for (_, port) in &redis.nodes {
            while redis_info(*port, "server").is_err() {
                if Instant::now() > deadline {
                    bail!("redis-server on port {port} did not start");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(redis)
    }

    /// Where postback keeps its notifications, for the store and for the environment:
    /// a cluster's nodes, or a standalone Redis's primary (the first node).
    pub fn target(&self) -> RedisTarget {
        let urls = self.urls();
        if self.cluster {
            RedisTarget::Cluster(urls)
        } else {
            RedisTarget::Standalone(urls[0].clone())
        }
    }

    /// Each node's URL.
    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(_, p)| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The environment variables that point postback at this store.
    pub fn store_env(&self) -> Vec<(String, String)> {
        let var = |k: &str, v: String| vec![(k.to_string(), v)];
        if self.embedded {
            return var(
                "POSTBACK_STORE_DATA_DIR",
                self.data_dir().display().to_string(),
            );
        }
        if let Some(pg) = &self.postgres {
            return var("POSTBACK_STORE_POSTGRES_URL", pg.postback_url());
        }
        if let Some((certs, port)) = &self.tls {
            let mut env = var(
                "POSTBACK_STORE_REDIS_URL",
                format!("rediss://127.0.0.1:{port}"),
            );
            env.extend(var(
                "POSTBACK_STORE_TLS_CA_FILE",
                certs.ca().display().to_string(),
            ));
            return env;
        }
        let urls = self.urls();
        match self.cluster {
            true => var("POSTBACK_STORE_CLUSTER_URLS", urls.join(",")),
            false => var("POSTBACK_STORE_REDIS_URL", urls[0].clone()),
        }
    }

    /// One `INFO` section of every node.
    pub fn info(&self, section: &str) -> anyhow::Result<Vec<HashMap<String, String>>> {
        self.nodes
            .iter()
            .map(|(_, port)| redis_info(*port, section))
            .collect()
    }

    /// A figure of one `INFO` section, summed over the nodes.
    fn sum(
        &self,
        section: &str,
        figure: impl Fn(&HashMap<String, String>) -> f64,
    ) -> anyhow::Result<f64> {
        Ok(self.info(section)?.iter().map(figure).sum())
    }

    /// The store's CPU seconds so far: Redis's (user + system, main thread and
    /// children), or Postgres's.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        if let Some(pg) = &self.postgres {
            return Ok(pg.cpu_seconds());
        }
        self.sum("cpu", |info| {
            let get = |k: &str| {
                info.get(k)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            get("used_cpu_user") + get("used_cpu_sys")
        })
    }

    /// Redis commands processed since start (or since the last `CONFIG RESETSTAT`); none
    /// on another store.
    pub fn commands(&self) -> anyhow::Result<u64> {
        if !self.is_redis() {
            return Ok(0);
        }
        let total = self.sum("commandstats", |info| {
            info.values()
                .filter_map(|v| v.strip_prefix("calls="))
                .filter_map(|v| v.split(',').next()?.parse::<u64>().ok())
                .sum::<u64>() as f64
        })?;
        Ok(total as u64)
    }

    /// The bytes the store holds: Redis's `used_memory`, the embedded store's file, or
    /// the schema `postback` on Postgres.
    pub fn used_memory(&self) -> anyhow::Result<u64> {
        if let Some(pg) = &self.postgres {
            return pg.schema_bytes();
        }
        if self.embedded {
            let file = self.data_dir().join(postback::store::EMBEDDED_FILE);
            return Ok(std::fs::metadata(file).map_or(0, |m| m.len()));
        }
        let total = self.sum("memory", |info| {
            info.get("used_memory")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        })?;
        Ok(total as u64)
    }

    pub fn reset_stats(&self) -> anyhow::Result<()> {
        for (_, port) in &self.nodes {
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query::<()>(&mut node(*port)?)?;
        }
        Ok(())
    }
}

fn node(port: u16) -> anyhow::Result<redis::Connection> {
    Ok(redis::Client::open(format!("redis://127.0.0.1:{port}"))?.get_connection()?)
}

/// One `INFO` section of the node on `port`, as key → value.
fn redis_info(port: u16, section: &str) -> anyhow::Result<HashMap<String, String>> {
    let text: String = redis::cmd("INFO").arg(section).query(&mut node(port)?)?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect())
}

fn redis_command(port: u16, args: &[&str]) -> anyhow::Result<()> {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    Ok(cmd.query(&mut node(port)?)?)
}

/// Makes the node on `port` listen for TLS on a port of its own too, with certificates
/// made for the run: `CONFIG SET` of its `tls-*` settings, clients not asked for one.
fn tls_port(port: u16) -> anyhow::Result<(Certs, u16)> {
    let certs = Certs::make()?;
    let (cert, key) = certs.server();
    let tls = free_port()?;
    let (ca, cert, key) = (certs.ca(), cert, key);
    redis_command(
        port,
        &[
            "CONFIG",
            "SET",
            "tls-cert-file",
            &cert.display().to_string(),
            "tls-key-file",
            &key.display().to_string(),
            "tls-ca-cert-file",
            &ca.display().to_string(),
            "tls-auth-clients",
            "no",
            "tls-port",
            &tls.to_string(),
        ],
    )?;
    Ok((certs, tls))
}

fn cluster_ok(port: u16) -> anyhow::Result<bool> {
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut node(port)?)?;
    Ok(info.contains("cluster_state:ok"))
}

impl Drop for Backend {
    fn drop(&mut self) {
        for (child, _) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `postback serve` as a child process.
pub struct Postback {
    child: Child,
    pub url: String,
}

impl Postback {
    pub async fn start(store: &Backend, env: &[(String, String)]) -> anyhow::Result<Self> {
        Self::start_under(store, env, &[]).await
    }

    /// As `start`, with `postback` run by `wrapper` (a program and its arguments, such as
    /// `valgrind --tool=callgrind`) when it is not empty: the process is the wrapper's,
    /// and it is given more time to start.
    pub async fn start_under(
        store: &Backend,
        env: &[(String, String)],
        wrapper: &[String],
    ) -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(binary()?);
                cmd
            }
            None => Command::new(binary()?),
        };
        cmd.arg("serve")
            .env("POSTBACK_SERVER_LISTEN", format!("127.0.0.1:{port}"))
            .env("POSTBACK_SERVER_API_TOKENS", TOKEN)
            .envs(store.store_env())
            .env("POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS", "true")
            .env("POSTBACK_DELIVERY_RATE_LIMIT", "unlimited")
            // The peers have no circuit breaker, and the retry scenario's receiver fails
            // every notification's first attempts on purpose: a breaker would rightly open.
            .env("POSTBACK_DELIVERY_BREAKER_FAILURES", "0")
            .env("POSTBACK_LOG_LEVEL", "warn")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().context("starting postback")?;
        let pb = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let client = reqwest::Client::new();
        let patience = if wrapper.is_empty() { 20 } else { 300 };
        let deadline = Instant::now() + Duration::from_secs(patience);
        while client
            .get(format!("{}/readyz", pb.url))
            .send()
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                bail!("postback did not start");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(pb)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Prints, every second until dropped, what `/metrics` says of the queue and of the
    /// scheduler's lateness, so that one can watch them move during a run.
    pub fn watch_metrics(&self) -> WatchGuard {
        let url = format!("{}/metrics", self.url);
        let task = tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Ok(response) = client.get(&url).send().await else {
                    continue;
                };
                let text = response.text().await.unwrap_or_default();
                let series = [
                    (
                        "scheduled",
                        r#"postback_queue_depth{state="scheduled",shard="0"}"#,
                    ),
                    (
                        "in_flight",
                        r#"postback_queue_depth{state="in_flight",shard="0"}"#,
                    ),
                    (
                        "finished",
                        r#"postback_queue_depth{state="finished",shard="0"}"#,
                    ),
                    (
                        "lateness_count",
                        "postback_scheduler_lateness_seconds_count",
                    ),
                    ("lateness_sum_s", "postback_scheduler_lateness_seconds_sum"),
                ];
                let line: Vec<String> = series
                    .iter()
                    .map(|(name, s)| format!("{name}={}", metric_value(&text, s)))
                    .collect();
                eprintln!("METRICS {}", line.join(" "));
            }
        });
        WatchGuard(task)
    }
}

/// Stops the metrics watcher when dropped.
pub struct WatchGuard(tokio::task::JoinHandle<()>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The value of `series` in the Prometheus text `text`, `-` when it is not there.
pub fn metric_value(text: &str, series: &str) -> String {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or("-")
        .to_string()
}

impl Drop for Postback {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `postback` binary beside this one, built first when run through cargo.
fn binary() -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name("postback");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let release = path.parent().is_some_and(|d| d.ends_with("release"));
        let mut build = Command::new(cargo);
        build.args(["build", "--bin", "postback"]);
        if release {
            build.arg("--release");
        }
        if !build.status()?.success() || !path.exists() {
            bail!("cannot find or build {}", path.display());
        }
    }
    Ok(path)
}
