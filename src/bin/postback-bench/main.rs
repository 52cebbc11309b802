//! `postback-bench`: the benchmark harness. Each scenario starts a fresh `redis-server`,
//! a fast in-process receiver and `postback serve`, drives traffic, and prints one
//! `RESULT` line per figure, then the median of each figure over the runs.
//!
//! `cargo run --release --bin postback-bench -- SCENARIO [--runs 3] [--n 20000]`
//! Scenarios: `burst`, `retry`, `delayed`, `fleet`, `isolation`, `ordering`, `backlog`,
//! `idle`, `overload`, `quota`, `walk`, `tenant-pages`, `retention`, `fanout`, `all`;
//! and, not in
//! `all`, `counts` (instructions, allocations, system calls and store commands per unit)
//! and `limits` (what `wrk` and a receiver cost per request, beside a registration).

use std::time::Duration;

use clap::{Parser, ValueEnum};

mod certs;
mod counts;
mod limits;
mod ordering;
mod postgres;
mod processes;
mod producer;
mod quota;
mod receiver;
mod report;
mod scenarios;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Burst,
    Retry,
    Delayed,
    Fleet,
    Isolation,
    Ordering,
    Backlog,
    Idle,
    Overload,
    Quota,
    Walk,
    TenantPages,
    Retention,
    Fanout,
    Counts,
    Limits,
    All,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    Redis,
    /// postback's embedded store (one instance).
    Embedded,
    /// A fresh Postgres, with its default durability.
    Postgres,
}

/// Benchmark postback against a real Redis and a fast local receiver.
#[derive(Parser, Clone)]
pub struct Opts {
    #[arg(value_enum)]
    scenario: Scenario,
    /// Runs of each scenario; figures are reported per run and as medians.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Notifications per scenario (retry uses at most 5,000).
    #[arg(long, default_value_t = 20_000)]
    pub n: usize,
    /// Registrations in flight at once from the producer.
    #[arg(long, default_value_t = 64)]
    pub producers: usize,
    /// burst: register through `POST /notify/batch`, this many per request, with
    /// `--producers` requests in flight (0: one per `POST /notify`).
    #[arg(long, default_value_t = 0)]
    pub batch: usize,
    /// postback's `delivery.concurrency`.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// postback's `delivery.host_concurrency`.
    #[arg(long, default_value_t = 32)]
    pub host_concurrency: usize,
    /// delayed, fleet: the delays are spread uniformly over this.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub spread: Duration,
    /// Settings a scenario gives postback besides the options' own.
    #[arg(skip)]
    pub extra_env: Vec<(String, String)>,
    /// isolation, ordering: registrations per second.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// isolation, ordering: seconds of paced traffic per phase.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// isolation: notifications to the hanging merchant.
    #[arg(long, default_value_t = 1_000)]
    pub hanging: usize,
    /// Print queue depth and scheduler lateness from `/metrics` every second.
    #[arg(long)]
    pub watch_metrics: bool,
    /// backlog, walk: the numbers of notifications pending far in the future.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub backlog: Vec<usize>,
    /// The store postback keeps its notifications in.
    #[arg(long, value_enum, default_value_t = StoreKind::Redis)]
    pub store: StoreKind,
    /// Run against a Redis Cluster of this many primaries (0: a standalone Redis).
    #[arg(long, default_value_t = 0)]
    pub cluster: usize,
    /// postback reaches its store over TLS, verifying a certificate made for the run
    /// (a standalone Redis, `rediss://`, or Postgres at `sslmode=verify-full`).
    #[arg(long)]
    pub tls: bool,
    /// Replicas of the standalone Redis (their CPU counts in Redis's figures).
    #[arg(long, default_value_t = 0)]
    pub replicas: usize,
    /// postback's `store.replica_acks`: replicas that must hold a registration before it
    /// is answered.
    #[arg(long, default_value_t = 0)]
    pub replica_acks: u32,
    /// postback instances sharing the Redis; the producer spreads registrations over them.
    #[arg(long, default_value_t = 1)]
    pub instances: usize,
    /// postback's `store.shards` (default: postback's own, 1 standalone, 12 on a cluster).
    #[arg(long)]
    pub shards: Option<u16>,
    /// overload: registrations to have accepted (all pending, due in an hour).
    #[arg(long, default_value_t = 100_000)]
    pub pending: usize,
    /// quota: the merchant's quota (postback's default).
    #[arg(long, default_value = "1000/s")]
    pub quota: String,
    /// fanout: subscriptions each event reaches.
    #[arg(long, default_value_t = 10)]
    pub subscriptions: usize,
    /// overload: requests in flight at once, beyond `server.max_concurrent_requests`.
    #[arg(long, default_value_t = 1_024)]
    pub flood: usize,
    /// counts: how postback's own work is counted, one run each.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "callgrind,strace"
    )]
    pub counters: Vec<counts::Counter>,
    /// counts: registrations delivered before counting (connections, caches, labels).
    #[arg(long, default_value_t = 100)]
    pub warmup: usize,
    /// counts: the time between two deliveries' due times, so that each is claimed,
    /// sent and settled on its own (a burst's batches follow the machine's timing).
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    pub spacing: Duration,
    /// counts: keep callgrind's dumps and strace's tables in this directory (one
    /// directory per store and counter; `callgrind_annotate` reads the dumps).
    #[arg(long)]
    pub dumps: Option<std::path::PathBuf>,
    /// limits: the peers' receiver (`../shared/peers/receiver`, built), for `wrk`'s and
    /// its own CPU per request.
    #[arg(long)]
    pub peer_receiver: Option<std::path::PathBuf>,
}

impl Opts {
    /// The settings every scenario gives postback.
    pub fn postback_env(&self) -> Vec<(String, String)> {
        let shards = self
            .shards
            .map(|n| ("POSTBACK_STORE_SHARDS".into(), n.to_string()));
        let mut env = vec![
            (
                "POSTBACK_DELIVERY_CONCURRENCY".into(),
                self.concurrency.to_string(),
            ),
            (
                "POSTBACK_DELIVERY_HOST_CONCURRENCY".into(),
                self.host_concurrency.to_string(),
            ),
        ];
        env.extend(shards);
        env.extend(self.extra_env.iter().cloned());
        if self.replica_acks > 0 {
            env.push((
                "POSTBACK_STORE_REPLICA_ACKS".into(),
                self.replica_acks.to_string(),
            ));
        }
        env
    }

    /// A fresh store: the embedded one with `--store embedded`, a cluster with
    /// `--cluster`, otherwise a standalone Redis.
    pub fn store(&self) -> anyhow::Result<processes::Backend> {
        match (self.store, self.cluster) {
            (StoreKind::Embedded, _) | (StoreKind::Redis, 1..) if self.tls => {
                anyhow::bail!("--tls is for a standalone Redis or Postgres")
            }
            (StoreKind::Embedded, _) => processes::Backend::embedded(),
            (StoreKind::Postgres, _) => processes::Backend::postgres(self.tls),
            (StoreKind::Redis, 0) => processes::Backend::start_redis(self.replicas, self.tls),
            (StoreKind::Redis, primaries) => processes::Backend::start_cluster(primaries),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    postback::install_crypto_provider();
    let mut results = report::Results::default();
    for run in 1..=opts.runs {
        for scenario in [
            Scenario::Burst,
            Scenario::Retry,
            Scenario::Delayed,
            Scenario::Fleet,
            Scenario::Isolation,
            Scenario::Ordering,
            Scenario::Backlog,
            Scenario::Idle,
            Scenario::Overload,
            Scenario::Quota,
            Scenario::Walk,
            Scenario::TenantPages,
            Scenario::Retention,
            Scenario::Fanout,
            Scenario::Counts,
            Scenario::Limits,
        ] {
            let in_all = opts.scenario == Scenario::All
                && !matches!(scenario, Scenario::Counts | Scenario::Limits);
            if opts.scenario != scenario && !in_all {
                continue;
            }
            let r = &mut results;
            match scenario {
                Scenario::Burst => scenarios::burst(&opts, r, run).await?,
                Scenario::Retry => scenarios::retry(&opts, r, run).await?,
                Scenario::Delayed => scenarios::delayed(&opts, r, run).await?,
                Scenario::Fleet => scenarios::fleet(&opts, r, run).await?,
                Scenario::Isolation => scenarios::isolation(&opts, r, run).await?,
                Scenario::Ordering => ordering::ordering(&opts, r, run).await?,
                Scenario::Backlog => scenarios::backlog(&opts, r, run).await?,
                Scenario::Idle => scenarios::idle(&opts, r, run).await?,
                Scenario::Overload => scenarios::overload(&opts, r, run).await?,
                Scenario::Quota => quota::quota(&opts, r, run).await?,
                Scenario::Walk => scenarios::walk(&opts, r, run).await?,
                Scenario::TenantPages => scenarios::tenant_pages(&opts, r, run).await?,
                Scenario::Retention => scenarios::retention(&opts, r, run).await?,
                Scenario::Fanout => scenarios::fanout(&opts, r, run).await?,
                Scenario::Counts => counts::counts(&opts, r, run).await?,
                Scenario::Limits => limits::limits(&opts, r, run).await?,
                Scenario::All => unreachable!("expanded above"),
            }
        }
    }
    results.print_medians();
    Ok(())
}
