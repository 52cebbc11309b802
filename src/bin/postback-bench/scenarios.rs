//! The benchmark scenarios. Each starts a fresh Redis, the receiver and postback, drives
//! one kind of traffic, and reports its figures.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use postback::domain::Tenant;
use serde_json::{json, Value};

use crate::processes::{
    cpu_seconds, cpu_split, peak_rss_mib, rss_mib, Backend, Postback, WatchGuard,
};
use crate::producer::{Producer, Registered};
use crate::receiver::Receiver;
use crate::report::{percentile, Results};
use crate::Opts;

/// A run stops waiting when no delivery arrived for this long.
const STALL: Duration = Duration::from_secs(30);

/// A typical payment notification body.
pub fn payment(i: usize) -> Value {
    json!({"type": "payment.succeeded", "order": i, "amount": 1000, "currency": "usd", "customer": "cus_1"})
}

/// What one run cost: postback's and Redis's CPU, Redis commands, postback's memory
/// (CPU summed over the instances, memory of the largest); and, for a phase of it, where
/// the CPU went (`report_split`).
pub struct Meter<'a> {
    store: &'a Backend,
    pids: Vec<u32>,
    /// postback's user and system CPU seconds when the meter started.
    postback: (f64, f64),
    redis_cpu: f64,
    /// This process's CPU seconds: the producer's and the receiver's.
    harness: f64,
}

/// The user and system CPU seconds of postback's instances.
fn postback_split(pids: &[u32]) -> (f64, f64) {
    pids.iter()
        .map(|&pid| cpu_split(pid))
        .fold((0.0, 0.0), |(u, s), (pu, ps)| (u + pu, s + ps))
}

impl<'a> Meter<'a> {
    pub fn start(store: &'a Backend, instances: &[Postback]) -> anyhow::Result<Self> {
        store.reset_stats()?;
        let pids: Vec<u32> = instances.iter().map(Postback::pid).collect();
        Ok(Self {
            store,
            postback: postback_split(&pids),
            pids,
            redis_cpu: store.cpu_seconds()?,
            harness: cpu_seconds(std::process::id()),
        })
    }

    /// postback's CPU seconds since the start, user and system.
    fn postback_cpu(&self) -> (f64, f64) {
        let (user, system) = postback_split(&self.pids);
        (user - self.postback.0, system - self.postback.1)
    }

    /// Where the CPU of a phase went, per delivery (`<phase>_<part>_cpu`, µs): postback's
    /// own work (user space) and the kernel's on its behalf (its system calls, with the
    /// loopback TCP they do for the other end), the store's, and the harness's (this
    /// process: the producer and the receiver). With every process on the same cores,
    /// these say how fast the phase could be at most, were postback's own work free.
    fn report_split(
        &self,
        r: &mut Results,
        scenario: &str,
        run: usize,
        phase: &str,
        n: usize,
    ) -> anyhow::Result<()> {
        let per = |seconds: f64| seconds * 1e6 / n.max(1) as f64;
        let (user, system) = self.postback_cpu();
        let figures = [
            ("postback_user", user),
            ("postback_system", system),
            ("store", self.store.cpu_seconds()? - self.redis_cpu),
            ("harness", cpu_seconds(std::process::id()) - self.harness),
        ];
        for (whose, seconds) in figures {
            let metric = format!("{phase}_{whose}_cpu");
            r.add(scenario, run, &metric, per(seconds), "us");
        }
        Ok(())
    }

    pub fn report(
        &self,
        r: &mut Results,
        scenario: &str,
        run: usize,
        delivered: usize,
    ) -> anyhow::Result<()> {
        let n = delivered.max(1) as f64;
        if self.store.is_redis() {
            self.report_redis(r, scenario, run, n)?;
        }
        if self.store.as_postgres().is_some() {
            let cpu = self.store.cpu_seconds()? - self.redis_cpu;
            r.add(
                scenario,
                run,
                "postgres_cpu_per_delivery",
                cpu * 1e6 / n,
                "us",
            );
        }
        let (user, system) = self.postback_cpu();
        r.add(
            scenario,
            run,
            "postback_cpu_per_delivery",
            (user + system) * 1e6 / n,
            "us",
        );
        r.add(
            scenario,
            run,
            "postback_peak_rss",
            self.pids
                .iter()
                .map(|&pid| peak_rss_mib(pid))
                .fold(0.0, f64::max),
            "MiB",
        );
        Ok(())
    }

    /// What the deliveries cost Redis.
    fn report_redis(
        &self,
        r: &mut Results,
        scenario: &str,
        run: usize,
        n: f64,
    ) -> anyhow::Result<()> {
        let redis_cpu = self.store.cpu_seconds()? - self.redis_cpu;
        r.add(
            scenario,
            run,
            "redis_cpu_per_delivery",
            redis_cpu * 1e6 / n,
            "us",
        );
        r.add(
            scenario,
            run,
            "redis_commands_per_delivery",
            self.store.commands()? as f64 / n,
            "cmd",
        );
        if std::env::var_os("BENCH_COMMANDSTATS").is_some() {
            for (k, v) in self.store.info("commandstats")?.into_iter().flatten() {
                eprintln!("{scenario} {k} {v}");
            }
        }
        Ok(())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `later - earlier` in ms, negative when `later` is earlier.
pub fn ms_between(earlier: SystemTime, later: SystemTime) -> f64 {
    match later.duration_since(earlier) {
        Ok(d) => ms(d),
        Err(e) => -ms(e.duration()),
    }
}

/// What a scenario runs against: a fresh Redis (or cluster), the receiver on 127.0.0.1,
/// `--instances` postbacks on them (the first printing its metrics each second with
/// `--watch-metrics`), and a producer spreading registrations over them.
pub struct Rig {
    _watch: Option<WatchGuard>,
    producer: Producer,
    instances: Vec<Postback>,
    receiver: Receiver,
    addr: SocketAddr,
    store: Backend,
}

impl Rig {
    pub async fn start(opts: &Opts) -> anyhow::Result<Self> {
        let store = opts.store()?;
        let receiver = Receiver::default();
        let addr = receiver.listen("127.0.0.1").await?;
        let mut instances = Vec::new();
        for _ in 0..opts.instances.max(1) {
            instances.push(Postback::start(&store, &opts.postback_env()).await?);
        }
        let urls: Vec<&str> = instances.iter().map(|pb| pb.url.as_str()).collect();
        Ok(Self {
            _watch: opts.watch_metrics.then(|| instances[0].watch_metrics()),
            producer: Producer::new(&urls)?,
            instances,
            receiver,
            addr,
            store,
        })
    }

    pub fn parts(&self) -> (&Backend, &Receiver, SocketAddr, &[Postback], &Producer) {
        (
            &self.store,
            &self.receiver,
            self.addr,
            &self.instances,
            &self.producer,
        )
    }
}

/// N registrations as fast as the producer can (one per request, or `--batch` per
/// request), receiver always 200: enqueue rate, each request's time to its answer (p99)
/// and end-to-end throughput; then N more all due at one instant: delivery-only
/// throughput. Reported as `burst_batch` with `--batch` above 1.
pub async fn burst(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let name = if opts.batch > 1 {
        "burst_batch"
    } else {
        "burst"
    };
    let rig = Rig::start(opts).await?;
    let (store, receiver, addr, pb, producer) = rig.parts();
    let url = format!("http://{addr}/hook");

    let meter = Meter::start(store, pb)?;
    let bodies = (0..opts.n)
        .map(|i| json!({"url": url, "body": payment(i)}))
        .collect();
    let start = SystemTime::now();
    let (registered, took) = producer
        .register_in_batches(bodies, opts.producers, opts.batch)
        .await?;
    r.add(
        name,
        run,
        "enqueue_rate",
        opts.n as f64 / took.as_secs_f64(),
        "notifications/s",
    );
    let answered: Vec<f64> = registered
        .iter()
        .map(|reg| ms_between(reg.sent, reg.answered))
        .collect();
    let p99 = crate::report::percentile(&answered, 99.0);
    r.add(name, run, "registration_p99", p99, "ms");
    let last = wait_all(receiver, &registered).await?;
    r.add(
        name,
        run,
        "e2e_throughput",
        opts.n as f64 / (ms_between(start, last) / 1000.0),
        "notifications/s",
    );
    check_exactly_once(receiver, &registered, r, name, run)?;
    meter.report(r, name, run, opts.n)?;
    meter.report_split(r, name, run, "e2e", opts.n)?;

    // Every one due at the same instant, far enough ahead for the registration to finish.
    receiver.reset();
    let margin = took.mul_f64(1.5) + Duration::from_secs(2);
    let due = SystemTime::now() + margin;
    let bodies = (0..opts.n).map(|i| json!({"url": url, "body": payment(i), "delay": format!("{}ms", ms(margin) as u64)})).collect();
    let (registered, _) = producer
        .register_in_batches(bodies, opts.producers, opts.batch)
        .await?;
    let first_due = registered.iter().map(|x| x.due).min().unwrap_or(due);
    if SystemTime::now() > first_due {
        bail!("registration overran the common due time");
    }
    let phase = Meter::start(store, pb)?;
    let last = wait_all(receiver, &registered).await?;
    r.add(
        name,
        run,
        "delivery_only_throughput",
        opts.n as f64 / (ms_between(first_due, last) / 1000.0),
        "notifications/s",
    );
    phase.report_split(r, name, run, "delivery_only", opts.n)
}

/// The receiver fails the first two requests of each notification; tiers 1s, 2s, 4s:
/// every one delivered once, and how late each retry came.
pub async fn retry(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let n = opts.n.min(5_000);
    let rig = Rig::start(opts).await?;
    let (store, receiver, addr, pb, producer) = rig.parts();
    let meter = Meter::start(store, pb)?;
    let schedule = [1000.0, 2000.0, 4000.0];
    let bodies = (0..n)
        .map(|i| json!({"url": format!("http://{addr}/hook?fail=2"), "body": payment(i), "schedule": ["1s", "2s", "4s"]}))
        .collect();
    let (registered, _) = producer.register_all(bodies, opts.producers).await?;
    wait_all(receiver, &registered).await?;
    check_exactly_once(receiver, &registered, r, "retry", run)?;
    let log = receiver.snapshot();
    let mut lateness = Vec::new();
    for x in &registered {
        let arrivals = &log[&x.id].arrivals;
        for k in 1..arrivals.len() {
            lateness.push(ms_between(arrivals[k - 1].0, arrivals[k].0) - schedule[k - 1]);
        }
    }
    for (name, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0)] {
        let metric = format!("retry_lateness_{name}");
        r.add("retry", run, &metric, percentile(&lateness, p), "ms");
    }
    r.add(
        "retry",
        run,
        "retry_early",
        lateness.iter().filter(|l| **l < 0.0).count() as f64,
        "retries",
    );
    meter.report(r, "retry", run, n)?;
    Ok(())
}

/// N notifications with delays spread uniformly over `spread`: how late each first
/// attempt came after its due time (1,000 falling due per second by default).
pub async fn delayed(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    delayed_as("delayed", opts, r, run).await
}

/// The (shards, instances) of each `fleet` case: shards at one instance, then instances
/// on the cluster default of 12 shards.
const FLEET: [(u16, usize); 6] = [(1, 1), (12, 1), (48, 1), (12, 3), (12, 4), (12, 10)];

/// The delayed scenario (a fixed rate of `n` over `spread`) over several shard counts
/// and instance counts, each as its own scenario `fleet_<shards>s_<instances>i`: what
/// shards and instances cost Redis per delivery, on one machine.
pub async fn fleet(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    for (shards, instances) in FLEET {
        let case = Opts {
            shards: Some(shards),
            instances,
            ..opts.clone()
        };
        delayed_as(&format!("fleet_{shards}s_{instances}i"), &case, r, run).await?;
    }
    Ok(())
}

async fn delayed_as(name: &str, opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let rig = Rig::start(opts).await?;
    let (store, receiver, addr, pb, producer) = rig.parts();
    let meter = Meter::start(store, pb)?;
    let spread = opts.spread.as_millis() as u64;
    let bodies = (0..opts.n)
        .map(|i| json!({"url": format!("http://{addr}/hook"), "body": payment(i), "delay": format!("{}ms", fastrand::u64(0..spread))}))
        .collect();
    let (registered, _) = producer.register_all(bodies, opts.producers).await?;
    let (at_registered, delivered_then) = (store.commands()?, receiver.snapshot().len());
    wait_all(receiver, &registered).await?;
    check_exactly_once(receiver, &registered, r, name, run)?;
    // The delivery side alone (claims, settles): what the store ran once every
    // notification was registered, per notification delivered since.
    r.add(
        name,
        run,
        "redis_commands_per_delivery_after_registration",
        (store.commands()? - at_registered) as f64
            / (registered.len() - delivered_then).max(1) as f64,
        "cmd",
    );
    let log = receiver.snapshot();
    let lateness: Vec<f64> = registered
        .iter()
        .filter_map(|x| Some(ms_between(x.due, log.get(&x.id)?.delivered_at()?)))
        .collect();
    r.add(name, run, "lateness_p50", percentile(&lateness, 50.0), "ms");
    r.add(name, run, "lateness_p99", percentile(&lateness, 99.0), "ms");
    r.add(
        name,
        run,
        "lateness_max",
        percentile(&lateness, 100.0),
        "ms",
    );
    r.add(
        name,
        run,
        "early",
        lateness.iter().filter(|l| **l < 0.0).count() as f64,
        "notifications",
    );
    meter.report(r, name, run, opts.n)?;
    Ok(())
}

/// A healthy merchant's latency (registration to arrival) at a steady rate, alone and
/// then beside a merchant whose endpoint hangs past the timeout.
pub async fn isolation(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let rig = Rig::start(opts).await?;
    let (_, receiver, healthy, _, producer) = rig.parts();
    let hanging = receiver.listen("127.0.0.2").await?;

    // Warm up connections and caches, then measure.
    paced_latencies(producer, receiver, healthy, opts).await?;
    let alone = paced_latencies(producer, receiver, healthy, opts).await?;
    let hang = format!("http://{hanging}/hang?sleep_ms=60000");
    let bodies = (0..opts.hanging)
        .map(|i| json!({"url": hang, "body": payment(i), "timeout": "10s", "schedule": ["1m"]}))
        .collect();
    let (hanging_ids, _) = producer.register_all(bodies, opts.producers).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = receiver.snapshot();
    let hung = hanging_ids
        .iter()
        .filter(|x| log.contains_key(&x.id))
        .count();
    let beside = paced_latencies(producer, receiver, healthy, opts).await?;

    r.add(
        "isolation",
        run,
        "hanging_requests_in_flight",
        hung as f64,
        "requests",
    );
    for (label, lat) in [("alone", &alone), ("beside_hanging", &beside)] {
        r.add(
            "isolation",
            run,
            &format!("healthy_p50_{label}"),
            percentile(lat, 50.0),
            "ms",
        );
        r.add(
            "isolation",
            run,
            &format!("healthy_p99_{label}"),
            percentile(lat, 99.0),
            "ms",
        );
    }
    for p in [50.0, 99.0] {
        let ratio = percentile(&beside, p) / percentile(&alone, p);
        r.add("isolation", run, &format!("healthy_p{p}_ratio"), ratio, "x");
    }
    Ok(())
}

/// Registers healthy notifications at `opts.rate` per second for `opts.seconds`, waits
/// for them, and returns each one's latency from registration to arrival, in ms.
async fn paced_latencies(
    producer: &Producer,
    receiver: &Receiver,
    addr: SocketAddr,
    opts: &Opts,
) -> anyhow::Result<Vec<f64>> {
    let url = format!("http://{addr}/ok");
    let body = |i| json!({"url": url, "body": payment(i)});
    let registered = paced(producer, receiver, opts, body).await?;
    latencies(receiver, &registered)
}

/// Registers `body(i)` at `opts.rate` per second for `opts.seconds`, and waits until
/// every one was delivered.
pub async fn paced(
    producer: &Producer,
    receiver: &Receiver,
    opts: &Opts,
    body: impl Fn(usize) -> Value,
) -> anyhow::Result<Vec<Registered>> {
    let count = (opts.rate * opts.seconds) as usize;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / opts.rate));
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        tick.tick().await;
        let (producer, body) = (producer.clone(), body(i));
        tasks.push(tokio::spawn(async move { producer.register(&body).await }));
    }
    let mut registered = Vec::with_capacity(count);
    for t in tasks {
        registered.push(t.await??);
    }
    wait_all(receiver, &registered).await?;
    Ok(registered)
}

/// Each registration's latency to its delivery, in ms, in order.
pub fn latencies(receiver: &Receiver, registered: &[Registered]) -> anyhow::Result<Vec<f64>> {
    let log = receiver.snapshot();
    registered
        .iter()
        .map(|x| {
            let at = log.get(&x.id).and_then(|d| d.delivered_at());
            Ok(ms_between(x.sent, at.context("delivered")?))
        })
        .collect()
}

/// Waits until every registration was delivered; the time of the last delivery.
pub async fn wait_all(
    receiver: &Receiver,
    registered: &[Registered],
) -> anyhow::Result<SystemTime> {
    let mut pending: HashSet<&str> = registered.iter().map(|x| x.id.as_str()).collect();
    let (total, mut seen, mut last) = (pending.len(), 0, None);
    let mut progress = (0, std::time::Instant::now());
    loop {
        let news = receiver.delivered_since(seen);
        seen += news.len();
        for (id, at) in &news {
            if pending.remove(id.as_str()) {
                last = last.max(Some(*at));
            }
        }
        let delivered = total - pending.len();
        if pending.is_empty() {
            return last.context("nothing registered");
        }
        if delivered > progress.0 {
            progress = (delivered, std::time::Instant::now());
        } else if progress.1.elapsed() > STALL {
            bail!("stalled: {delivered} of {total} delivered");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reports duplicates (requests after a 2xx), which must be 0.
pub fn check_exactly_once(
    receiver: &Receiver,
    registered: &[Registered],
    r: &mut Results,
    scenario: &str,
    run: usize,
) -> anyhow::Result<()> {
    let log = receiver.snapshot();
    let duplicates: usize = registered
        .iter()
        .filter_map(|x| log.get(&x.id))
        .map(|d| d.duplicates())
        .sum();
    r.add(scenario, run, "duplicates", duplicates as f64, "requests");
    Ok(())
}

/// The cost of claiming and settling with a backlog pending far in the future: for each
/// backlog size, Redis memory per pending notification, then a burst delivered beside it
/// and what each delivery cost Redis.
pub async fn backlog(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    for &pending in &opts.backlog {
        let store = opts.store()?;
        let receiver = Receiver::default();
        let addr = receiver.listen("127.0.0.1").await?;
        let before = store.used_memory()?;
        let body_bytes = fill(&store, pending).await?;
        let per_pending = store.used_memory()?.saturating_sub(before) as f64 / pending as f64;
        let scenario = format!("backlog_{pending}");
        let what = match (store.is_redis(), store.as_postgres()) {
            (true, _) => "redis",
            (false, Some(_)) => "postgres",
            (false, None) => "file",
        };
        r.add(
            &scenario,
            run,
            &format!("{what}_bytes_per_pending"),
            per_pending,
            "bytes",
        );
        r.add(
            &scenario,
            run,
            &format!("{what}_bytes_per_pending_over_body"),
            per_pending - body_bytes,
            "bytes",
        );

        let pb = Postback::start(&store, &opts.postback_env()).await?;
        let _watch = opts.watch_metrics.then(|| pb.watch_metrics());
        let producer = Producer::new(&[pb.url.as_str()])?;
        let n = opts.n.min(5_000);
        let bodies = (0..n)
            .map(|i| json!({"url": format!("http://{addr}/hook"), "body": payment(i)}))
            .collect();
        let meter = Meter::start(&store, std::slice::from_ref(&pb))?;
        let (registered, _) = producer.register_all(bodies, opts.producers).await?;
        wait_all(&receiver, &registered).await?;
        meter.report(r, &scenario, run, n)?;
    }
    Ok(())
}

/// Registers `pending` notifications due in a day straight through the store (faster
/// than the API, the same scripts); their mean body size, in bytes (bodies grow with
/// the digits of their order number).
async fn fill(backend: &Backend, pending: usize) -> anyhow::Result<f64> {
    fill_for(
        backend,
        pending,
        &Default::default(),
        Duration::from_secs(24 * 3600),
    )
    .await
}

/// As `fill`: `pending` notifications of `tenant`, each due after `delay`.
async fn fill_for(
    backend: &Backend,
    pending: usize,
    tenant: &postback::domain::Tenant,
    delay: Duration,
) -> anyhow::Result<f64> {
    use futures_util::stream::{self, StreamExt};
    use postback::domain::{
        CallbackUrl, Destinations, ExtraHeaders, JobId, Notification, Payload, Schedule,
    };

    let store = backend.open().await?;
    let url = CallbackUrl::parse("http://merchant.example.com/hook", Destinations::Any)?;
    let schedule = Schedule::parse(&["15s", "3m", "10m", "30m", "30m", "1h", "2h", "6h", "15h"])?;
    let body_bytes = (0..pending)
        .map(|i| payment(i).to_string().len())
        .sum::<usize>() as f64
        / pending.max(1) as f64;
    let results: Vec<anyhow::Result<()>> = stream::iter(0..pending)
        .map(|i| {
            let n = Notification {
                id: JobId::new(0),
                url: url.clone(),
                payload: Payload::json(&payment(i)),
                headers: ExtraHeaders::default(),
                schedule: schedule.clone(),
                delay,
                timeout: Duration::from_secs(10),
                success: Default::default(),
                profile: None,
                topic: Some("payment.succeeded".into()),
                rate_key: "merchant.example.com".into(),
                tenant: tenant.clone(),
                traceparent: None,
                ordering_key: None,
            };
            let store = &*store;
            async move { store.enqueue(&n, None).await.map(drop).map_err(Into::into) }
        })
        .buffer_unordered(128)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<()>>()?;
    Ok(body_bytes)
}

/// What an idle instance costs Redis: commands per second over thirty seconds, a multiple
/// of both default idle periods (a renewal every 3 s, an idle claim every 5 s), so that
/// where the window starts does not count one more or one fewer of either.
pub async fn idle(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let store = opts.store()?;
    if !store.is_redis() {
        eprintln!("idle counts Redis commands: nothing to count on another store");
        return Ok(());
    }
    let pb = Postback::start(&store, &opts.postback_env()).await?;
    let _watch = opts.watch_metrics.then(|| pb.watch_metrics());
    tokio::time::sleep(Duration::from_secs(2)).await;
    store.reset_stats()?;
    let window = Duration::from_secs(30);
    tokio::time::sleep(window).await;
    r.add(
        "idle",
        run,
        "redis_commands_per_second",
        store.commands()? as f64 / window.as_secs_f64(),
        "cmd/s",
    );
    drop(pb);
    Ok(())
}

/// A producer pushing as hard as `--flood` requests in flight allow until `--pending`
/// registrations (due in an hour) are accepted: the accept rate, the share shed with
/// `503 overloaded`, and postback's memory before, at its peak while accepting, and
/// after, holding nothing but with all of them pending in Redis.
pub async fn overload(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    let rig = Rig::start(opts).await?;
    let (_, _, addr, instances, producer) = rig.parts();
    let pb = &instances[0];
    let rss_before = rss_mib(pb.pid());
    let (accepted, shed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let started = SystemTime::now();
    let flood = (0..opts.flood).map(|task| {
        let (accepted, shed) = (&accepted, &shed);
        async move {
            let body =
                json!({"url": format!("http://{addr}/hook"), "body": payment(task), "delay": "1h"});
            while accepted.load(Relaxed) < opts.pending {
                match producer.status_of(&body).await? {
                    202 => accepted.fetch_add(1, Relaxed),
                    503 => shed.fetch_add(1, Relaxed),
                    other => bail!("POST /notify answered {other}"),
                };
            }
            anyhow::Ok(())
        }
    });
    futures_util::future::try_join_all(flood).await?;
    let took = started.elapsed()?.as_secs_f64();
    let (accepted, shed) = (accepted.into_inner(), shed.into_inner());
    r.add(
        "overload",
        run,
        "accepted_per_second",
        accepted as f64 / took,
        "req/s",
    );
    r.add(
        "overload",
        run,
        "shed_share",
        shed as f64 / (accepted + shed) as f64,
        "ratio",
    );
    r.add("overload", run, "postback_rss_before", rss_before, "MiB");
    r.add(
        "overload",
        run,
        "postback_peak_rss",
        peak_rss_mib(pb.pid()),
        "MiB",
    );
    r.add(
        "overload",
        run,
        "postback_rss_with_all_pending",
        rss_mib(pb.pid()),
        "MiB",
    );
    Ok(())
}

/// Walks a list of the queue with many pending: for each `--backlog` size, that many
/// notifications due in a day are stored, and the `scheduled` list is read from its
/// start through `--n` items (at most 10,000) in pages of 500. The walk's time, and
/// the slowest page's, beside the same walk over the smallest backlog.
pub async fn walk(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    for &pending in &opts.backlog {
        let store = opts.store()?;
        fill(&store, pending).await?;
        let pb = Postback::start(&store, &opts.postback_env()).await?;
        let client = reqwest::Client::new();
        let wanted = opts.n.min(10_000).min(pending);
        let (mut walked, mut cursor, mut slowest) = (0, None::<String>, 0.0f64);
        let started = SystemTime::now();
        while walked < wanted {
            let mut url = format!("{}/notifications?state=scheduled&limit=500", pb.url);
            if let Some(c) = &cursor {
                url += &format!("&cursor={c}");
            }
            let asked = SystemTime::now();
            let page: Value = client
                .get(&url)
                .bearer_auth(crate::processes::TOKEN)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            slowest = slowest.max(asked.elapsed()?.as_secs_f64() * 1000.0);
            walked += page["items"].as_array().context("no items")?.len();
            cursor = page["next_cursor"].as_str().map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        let took = started.elapsed()?.as_secs_f64() * 1000.0;
        let scenario = format!("walk_{pending}");
        r.add(&scenario, run, &format!("walk_{walked}_ms"), took, "ms");
        r.add(&scenario, run, "slowest_page_ms", slowest, "ms");
    }
    Ok(())
}

/// One tenant's first page among another's volume: for each `--backlog` size (and none),
/// that many of shop-a's notifications pending far ahead and one of shop-b's after them;
/// then shop-b's first page of scheduled notifications, the notifications it read
/// (`postback_list_entries_examined_total`) and how long it took.
pub async fn tenant_pages(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let (shop_a, shop_b) = (
        Tenant::parse("shop-a", "tenant")?,
        Tenant::parse("shop-b", "tenant")?,
    );
    for &pending in [0].iter().chain(&opts.backlog) {
        let store = opts.store()?;
        fill_for(&store, pending, &shop_a, Duration::from_secs(24 * 3600)).await?;
        fill_for(&store, 1, &shop_b, Duration::from_secs(48 * 3600)).await?;
        let pb = Postback::start(&store, &opts.postback_env()).await?;
        let client = reqwest::Client::new();
        let examined = || async {
            let text = client
                .get(format!("{}/metrics", pb.url))
                .send()
                .await?
                .text()
                .await?;
            let value =
                crate::processes::metric_value(&text, "postback_list_entries_examined_total");
            anyhow::Ok(value.parse::<f64>().unwrap_or(0.0))
        };
        let before = examined().await?;
        let asked = SystemTime::now();
        let page: Value = client
            .get(format!(
                "{}/notifications?state=scheduled&tenant=shop-b",
                pb.url
            ))
            .bearer_auth(crate::processes::TOKEN)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let took = asked.elapsed()?.as_secs_f64() * 1000.0;
        let items = page["items"].as_array().context("no items")?.len();
        let scenario = format!("tenant_pages_{pending}");
        r.add(&scenario, run, "first_page_items", items as f64, "");
        r.add(
            &scenario,
            run,
            "first_page_examined",
            examined().await? - before,
            "",
        );
        r.add(&scenario, run, "first_page_ms", took, "ms");
    }
    Ok(())
}

/// A long steady run with retention on: `--rate` registrations per second for
/// `--seconds`, each delivered at once, with delivered ones deleted a minute after they
/// finish (`retention.finished_max_age` 60s, swept every 10 s). The store's size after
/// the first two minutes (the table full of a minute's finished notifications) and at the
/// end: with retention keeping up and the database reusing what it deleted, the two are
/// alike however long the run.
pub async fn retention(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let mut opts = opts.clone();
    opts.extra_env = vec![
        ("POSTBACK_RETENTION_FINISHED_MAX_AGE".into(), "60s".into()),
        ("POSTBACK_RETENTION_SWEEP_INTERVAL".into(), "10s".into()),
    ];
    let rig = Rig::start(&opts).await?;
    let (store, receiver, addr, _, producer) = rig.parts();
    let started = std::time::Instant::now();
    let sample = async {
        let mut at_two_minutes = None;
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let bytes = store.used_memory()?;
            eprintln!(
                "retention: {:>4} s, {bytes} bytes",
                started.elapsed().as_secs()
            );
            if at_two_minutes.is_none() && started.elapsed() >= Duration::from_secs(120) {
                at_two_minutes = Some(bytes);
            }
            if started.elapsed().as_secs_f64() >= opts.seconds {
                return anyhow::Ok((at_two_minutes.unwrap_or(bytes), bytes));
            }
        }
    };
    let traffic = paced(
        producer,
        receiver,
        &opts,
        |i| json!({"url": format!("http://{addr}/hook"), "body": payment(i)}),
    );
    let (registered, sizes) = tokio::join!(traffic, sample);
    let (early, end) = sizes?;
    r.add("retention", run, "store_bytes_at_2m", early as f64, "bytes");
    r.add("retention", run, "store_bytes_at_end", end as f64, "bytes");
    r.add(
        "retention",
        run,
        "store_bytes_end_over_2m",
        end as f64 / early.max(1) as f64,
        "x",
    );
    r.add(
        "retention",
        run,
        "delivered",
        registered?.len() as f64,
        "notifications",
    );
    Ok(())
}

/// Publish once, deliver to many: `--n` deliveries as `--n / --subscriptions` events,
/// each reaching `--subscriptions` subscriptions, beside (on a fresh store) a burst of as
/// many single notifications through `POST /notify` to the same URLs, both with
/// `--producers` requests in flight; deliveries per second of each, end to end, and
/// their ratio.
pub async fn fanout(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let subscriptions = opts.subscriptions.max(1);
    let events = (opts.n / subscriptions).max(1);
    let single = single_burst(opts, r, run, subscriptions, events).await?;

    let rig = Rig::start(opts).await?;
    let (store, receiver, addr, pb, producer) = rig.parts();
    for i in 0..subscriptions {
        let sub = json!({"url": format!("http://{addr}/hook/{i}"), "topics": ["payment.*"]});
        producer.call("/subscriptions", &sub, 201).await?;
    }
    let meter = Meter::start(store, pb)?;
    let published = (0..events)
        .map(|i| json!({"topic": "payment.succeeded", "body": payment(i)}))
        .collect();
    let start = SystemTime::now();
    let (registered, took) = producer.publish_all(published, opts.producers).await?;
    let deliveries = events * subscriptions;
    if registered.len() != deliveries {
        bail!(
            "{events} events made {} notifications, not {deliveries}",
            registered.len()
        );
    }
    r.add(
        "fanout",
        run,
        "publish_rate",
        events as f64 / took.as_secs_f64(),
        "events/s",
    );
    let last = wait_all(receiver, &registered).await?;
    let fanned = deliveries as f64 / (ms_between(start, last) / 1000.0);
    r.add("fanout", run, "e2e_throughput", fanned, "deliveries/s");
    r.add("fanout", run, "vs_single", fanned / single, "ratio");
    check_exactly_once(receiver, &registered, r, "fanout", run)?;
    meter.report(r, "fanout", run, deliveries)
}

/// `events` single notifications to each of `urls` URLs through `POST /notify`, on a
/// rig of their own: deliveries per second, end to end.
async fn single_burst(
    opts: &Opts,
    r: &mut Results,
    run: usize,
    urls: usize,
    events: usize,
) -> anyhow::Result<f64> {
    let rig = Rig::start(opts).await?;
    let (_, receiver, addr, _, producer) = rig.parts();
    let bodies = (0..events)
        .flat_map(|i| {
            (0..urls).map(move |u| {
                json!({"url": format!("http://{addr}/hook/{u}"), "body": payment(i), "topic": "payment.succeeded"})
            })
        })
        .collect();
    let start = SystemTime::now();
    let (registered, _) = producer.register_all(bodies, opts.producers).await?;
    let last = wait_all(receiver, &registered).await?;
    let single = (events * urls) as f64 / (ms_between(start, last) / 1000.0);
    r.add(
        "fanout",
        run,
        "single_e2e_throughput",
        single,
        "deliveries/s",
    );
    check_exactly_once(receiver, &registered, r, "fanout_single", run)?;
    Ok(single)
}
