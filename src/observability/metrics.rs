//! Prometheus metrics: every metric's name, labels and buckets in one place, the
//! recorder installed at start-up, and the text `GET /metrics` serves. Labels have
//! bounded values: outcomes, status classes, reasons, shard numbers, and at most
//! `MAX_HOST_LABELS` endpoints (those with an open circuit), and those only when
//! `metrics.host_labels` is on, since an endpoint names a merchant.

use std::collections::{BTreeSet, HashMap};
use std::sync::{LazyLock, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::domain::{AttemptReport, Outcome, Reach};

/// Hosts named in labels at most; the rest are only counted.
pub const MAX_HOST_LABELS: usize = 20;

const LATENESS: &str = "postback_scheduler_lateness_seconds";
const DURATION: &str = "postback_delivery_duration_seconds";
const API_REQUESTS: &str = "postback_api_requests_total";
const API_DURATION: &str = "postback_api_request_duration_seconds";
const LIST_EXAMINED: &str = "postback_list_entries_examined_total";

/// Why a claimed notification is put back without an attempt.
const DEFERRAL_REASONS: [&str; 7] = [
    "rate_limit",
    "retry_after",
    "host_busy",
    "quota_unavailable",
    "slots_busy",
    "tenant_busy",
    "circuit_open",
];
/// The store operations whose failures are counted.
const STORE_OPERATIONS: [&str; 9] = [
    "api",
    "audit",
    "claim",
    "fleet",
    "pause",
    "publish_health",
    "reserve",
    "stats",
    "trim",
];

/// Outcomes of `postback_attempts_total`: an attempt's `Outcome`, or why none was sent.
const ATTEMPT_OUTCOMES: [&str; 4] = [
    Outcome::Delivered.as_str(),
    Outcome::Failed.as_str(),
    Outcome::Gone.as_str(),
    "blocked",
];
/// Status classes of `postback_attempts_total`: `none` when no response came.
const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "none"];

/// The series written at every registration and attempt, found in the recorder once:
/// the macros hash a series' name and labels and look it up at each call.
struct Frequent {
    accepted: Counter,
    duration: Histogram,
    lateness: Histogram,
    /// `postback_attempts_total` by outcome and status class, each found at its first
    /// use, so that only the combinations that happened are shown.
    attempts: [[OnceLock<Counter>; STATUS_CLASSES.len()]; ATTEMPT_OUTCOMES.len()],
}

static FREQUENT: OnceLock<Frequent> = OnceLock::new();

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the global recorder, once per process (an instance run again in the same
/// process, as a simulation's are, shares it); the handle renders the exposition text.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _once = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(LATENESS.into()),
            &[
                0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
            ],
        )?
        .set_buckets_for_metric(
            Matcher::Full(DURATION.into()),
            &[
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ],
        )?
        .set_buckets_for_metric(
            Matcher::Full(API_DURATION.into()),
            &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
            ],
        )?
        .install_recorder()?;
    let kept = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || upkeep(kept))?;
    describe();
    start_at_zero();
    gauge!("postback_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let _ = FREQUENT.set(Frequent {
        accepted: counter!("postback_notifications_accepted_total"),
        duration: histogram!(DURATION),
        lateness: histogram!(LATENESS),
        attempts: Default::default(),
    });
    Ok(HANDLE.get_or_init(|| handle).clone())
}

/// Counters that alerts watch exist from start-up at 0, so that `increase()` sees their
/// first event and a dashboard shows 0 rather than no data.
fn start_at_zero() {
    for name in [
        "postback_notifications_accepted_total",
        "postback_dead_lettered_total",
        "postback_requests_shed_total",
        "postback_script_errors_total",
        "postback_replica_ack_timeouts_total",
        "postback_intake_refused_total",
        LIST_EXAMINED,
    ] {
        counter!(name).absolute(0);
    }
    for reason in DEFERRAL_REASONS {
        counter!("postback_deferrals_total", "reason" => reason).absolute(0);
    }
    for operation in STORE_OPERATIONS {
        counter!("postback_store_errors_total", "operation" => operation).absolute(0);
    }
    gauge!("postback_circuits_open").set(0.0);
}

/// Folds the samples histograms gathered into their buckets every few seconds. The
/// recorder otherwise keeps every sample until `/metrics` is read, so an instance nobody
/// scrapes would grow by two samples per attempt for as long as it runs.
/// Drains the histograms' buffers now and then, on a thread of its own: outside any
/// runtime an instance runs on, so that it outlives one and adds no timer to it.
fn upkeep(handle: PrometheusHandle) {
    loop {
        std::thread::sleep(Duration::from_secs(5));
        handle.run_upkeep();
    }
}

fn describe() {
    describe_gauge!(
        "postback_store_durability",
        "1 for what the store keeps of an answered write through a restart of its server, as found at start: kind aof, rdb, none or unknown (Redis), wal (Postgres), fsync (embedded)"
    );
    describe_counter!(
        LIST_EXAMINED,
        "Notifications read by the pages of lists (GET /notifications, GET /dead-letters) to find their items: a tenant's pages read its own alone"
    );
    describe_counter!(
        "postback_notifications_accepted_total",
        "Notifications registered through POST /notify"
    );
    describe_counter!(
        "postback_intake_refused_total",
        "Registrations made with postback.notify() (Postgres) refused when taken in; each kept in postback.intake_refused"
    );
    describe_counter!(
        "postback_attempts_total",
        "Delivery attempts by outcome and response status class"
    );
    describe_histogram!(DURATION, "Duration of delivery attempts that were sent");
    describe_histogram!(
        LATENESS,
        "Time an attempt started minus the time it was due"
    );
    describe_counter!(
        "postback_deferrals_total",
        "Claimed notifications put back for later, not an attempt, by reason"
    );
    describe_counter!(
        "postback_quota_reserve_calls_total",
        "Calls to the store that reserved send times in rate keys' quotas (one per claimed batch)"
    );
    describe_counter!(
        "postback_quota_reservations_total",
        "Send times reserved in rate keys' quotas; divided by the calls, reservations per call"
    );
    describe_counter!(
        "postback_requests_shed_total",
        "API requests answered 503 overloaded because server.max_concurrent_requests were in progress"
    );
    describe_gauge!(
        "postback_queue_depth",
        "Notifications per state and shard, read from the store at scrape time"
    );
    describe_counter!(
        "postback_retention_deleted_total",
        "Notifications deleted by retention since the store was created, by reason (read from the store at scrape time)"
    );
    describe_counter!(
        "postback_dead_lettered_total",
        "Notifications that became dead letters (the last attempt failed, or 410 Gone)"
    );
    describe_counter!(
        API_REQUESTS,
        "API requests answered, by method, route (its pattern; `unmatched` for none) and status"
    );
    describe_histogram!(
        API_DURATION,
        "Time to answer an API request, by method and route"
    );
    describe_gauge!(
        "postback_circuits_open",
        "Circuits (a tenant's endpoint each) open in this instance"
    );
    describe_gauge!(
        "postback_circuit_open",
        "Per tenant and endpoint (the first 20 seen open; with metrics.host_labels): 1 while its circuit is open in this instance"
    );
    describe_counter!(
        "postback_store_errors_total",
        "Store operations that failed, by operation"
    );
    describe_counter!(
        "postback_script_errors_total",
        "Store scripts that failed (a bug, not an outage: only the request that met it fails), by script"
    );
    describe_counter!(
        "postback_replica_ack_timeouts_total",
        "Writes answered 503 replica_ack_timeout: on the primary, but not acknowledged by store.replica_acks replicas in time"
    );
    describe_gauge!(
        "postback_replicas_connected",
        "Replicas connected to the primary of each shard (Redis), at the last scrape"
    );
    describe_gauge!(
        "postback_shard_degraded",
        "1 while a shard cannot acknowledge writes as store.replica_acks asks (its primary lacks replicas, or a write came back short): it takes no new notification, and one whose ordering key fixes it there is answered 503 shard_unavailable"
    );
    describe_gauge!(
        "postback_replication_lag_bytes",
        "How far the slowest replica of each shard's primary is behind it, in bytes of the replication stream, at the last scrape"
    );
    describe_gauge!(
        "postback_store_up",
        "1 when the store answered the last scrape's read of queue depths, 0 when it did not"
    );
    describe_gauge!(
        "postback_fleet_instances",
        "Live instances sharing this instance's Redis, itself included, at its last renewal"
    );
    describe_gauge!(
        "postback_shards_owned",
        "Shards this instance owns among the fleet, and claims from"
    );
    describe_gauge!(
        "postback_sentinels_agree",
        "Through Redis Sentinel: 1 when a strict majority of the configured sentinels named one primary at the last asking, 0 when not (the primary followed until then is kept)"
    );
    describe_counter!(
        "postback_sentinel_disagreements_total",
        "Through Redis Sentinel: times the sentinels stopped agreeing on a primary (no strict majority of those configured named one)"
    );
    describe_gauge!("postback_build_info", "The running version");
}

/// What this instance's last fleet renewal said: live instances, and shards it owns.
pub fn fleet(instances: usize, owned: usize) {
    gauge!("postback_fleet_instances").set(instances as f64);
    gauge!("postback_shards_owned").set(owned as f64);
}

pub fn accepted() {
    if let Some(f) = FREQUENT.get() {
        f.accepted.increment(1);
    }
}

/// An attempt that was made (or refused by the SSRF guard), and how long it took when it
/// was sent.
pub fn attempt(report: &AttemptReport) {
    let Some(f) = FREQUENT.get() else {
        return;
    };
    let outcome = match report.reach {
        Reach::Blocked => 3,
        Reach::Sent { .. } => match report.outcome {
            Outcome::Delivered => 0,
            Outcome::Failed => 1,
            Outcome::Gone => 2,
        },
    };
    let class = report
        .status
        .map_or(5, |s| (s / 100).clamp(1, 5) as usize - 1);
    let attempts = f.attempts[outcome][class].get_or_init(|| {
        let (outcome, class) = (ATTEMPT_OUTCOMES[outcome], STATUS_CLASSES[class]);
        counter!("postback_attempts_total", "outcome" => outcome, "status_class" => class)
    });
    attempts.increment(1);
    if matches!(report.reach, Reach::Sent { .. }) {
        f.duration.record(report.duration_ms as f64 / 1000.0);
    }
}

pub fn lateness(late: Duration) {
    if let Some(f) = FREQUENT.get() {
        f.lateness.record(late.as_secs_f64());
    }
}

/// A claimed notification put back for later: one of `DEFERRAL_REASONS`.
pub fn deferred(reason: &'static str) {
    counter!("postback_deferrals_total", "reason" => reason).increment(1);
}

/// One call to the store that reserved `n` send times in rate keys' quotas.
pub fn reserved(n: usize) {
    counter!("postback_quota_reserve_calls_total").increment(1);
    counter!("postback_quota_reservations_total").increment(n as u64);
}

/// One API request answered: `route` is the matched pattern (`/notifications/{id}`), so
/// the labels stay bounded whatever the paths.
pub fn api_request(method: &str, route: &str, status: u16, took: Duration) {
    if HANDLE.get().is_none() {
        // No recorder: nothing counts it (as with `Frequent`'s), and what the macros
        // would find is a no-op, not to be kept.
        return;
    }
    let seconds = took.as_secs_f64();
    let routes = API_SERIES.read().unwrap_or_else(PoisonError::into_inner);
    let known = routes
        .get(route)
        .and_then(|methods| ApiSeries::of(methods, method));
    if known.is_some_and(|series| series.record(status, seconds)) {
        return;
    }
    drop(routes);
    let mut routes = API_SERIES.write().unwrap_or_else(PoisonError::into_inner);
    let methods = routes.entry(route.into()).or_default();
    let at = match methods.iter().position(|s| &*s.method == method) {
        Some(at) => at,
        None => {
            let (m, r) = (method.to_string(), route.to_string());
            methods.push(ApiSeries {
                method: method.into(),
                duration: histogram!(API_DURATION, "method" => m, "route" => r),
                statuses: Vec::new(),
            });
            methods.len() - 1
        }
    };
    let series = &mut methods[at];
    if !series.statuses.iter().any(|(s, _)| *s == status) {
        let (m, r) = (method.to_string(), route.to_string());
        let requests =
            counter!(API_REQUESTS, "method" => m, "route" => r, "status" => status.to_string());
        series.statuses.push((status, requests));
    }
    series.record(status, seconds);
}

/// The API's series of one route and method, found in the recorder at their first
/// request (by route pattern, in `API_SERIES`) as `Frequent`'s are, so that a request
/// builds no labels and looks none up in the recorder.
struct ApiSeries {
    method: Box<str>,
    duration: Histogram,
    /// `postback_api_requests_total` by status.
    statuses: Vec<(u16, Counter)>,
}

impl ApiSeries {
    fn of<'a>(methods: &'a [ApiSeries], method: &str) -> Option<&'a ApiSeries> {
        methods.iter().find(|s| &*s.method == method)
    }

    /// Records a request answered `status`, if that status has its counter yet.
    fn record(&self, status: u16, seconds: f64) -> bool {
        let Some((_, requests)) = self.statuses.iter().find(|(s, _)| *s == status) else {
            return false;
        };
        requests.increment(1);
        self.duration.record(seconds);
        true
    }
}

/// Each route pattern's `ApiSeries`, one per method.
static API_SERIES: LazyLock<RwLock<HashMap<Box<str>, Vec<ApiSeries>>>> =
    LazyLock::new(Default::default);

/// Notifications that became dead letters (their last attempt failed, or `410 Gone`).
pub fn dead_lettered(n: usize) {
    counter!("postback_dead_lettered_total").increment(n as u64);
}

/// Registrations made in a producer's transaction that postback's rules refused.
pub fn intake_refused(n: usize) {
    counter!("postback_intake_refused_total").increment(n as u64);
}

pub fn request_shed() {
    counter!("postback_requests_shed_total").increment(1);
}

/// A page of a list read `n` notifications to find its items.
pub fn list_examined(n: usize) {
    counter!(LIST_EXAMINED).increment(n as u64);
}

pub fn store_error(operation: &'static str) {
    counter!("postback_store_errors_total", "operation" => operation).increment(1);
}

/// The replicas of shard `shard`'s primary, and how far the slowest is behind.
pub fn replication(shard: usize, replicas: u32, lag_bytes: u64) {
    let shard = shard.to_string();
    gauge!("postback_replicas_connected", "shard" => shard.clone()).set(f64::from(replicas));
    gauge!("postback_replication_lag_bytes", "shard" => shard).set(lag_bytes as f64);
}

/// Whether shard `shard` is degraded (`ShardHealth`).
pub fn shard_degraded(shard: usize, degraded: bool) {
    gauge!("postback_shard_degraded", "shard" => shard.to_string())
        .set(f64::from(u8::from(degraded)));
}

/// A write that its replicas did not acknowledge in time (`store.replica_acks`).
pub fn replica_ack_timeout() {
    counter!("postback_replica_ack_timeouts_total").increment(1);
}

/// A store script that failed (`StoreError::Script`): a bug, never an outage.
pub fn script_error(script: &'static str) {
    counter!("postback_script_errors_total", "script" => script).increment(1);
}

/// The circuits open now (`Target::circuit`, `<tenant> <endpoint>`): a total and, when
/// `labels` is on, one series per tenant and endpoint for the first `MAX_HOST_LABELS`
/// ever seen open (1 while open, 0 after), so that the number of series stays bounded.
pub fn open_circuits(open: &[String], labels: bool) {
    static LABELLED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    gauge!("postback_circuits_open").set(open.len() as f64);
    if !labels {
        return;
    }
    let mut labelled = LABELLED.lock().expect("endpoint labels");
    for endpoint in open {
        if labelled.len() < MAX_HOST_LABELS {
            labelled.insert(endpoint.clone());
        }
    }
    for circuit in labelled.iter() {
        let state = if open.contains(circuit) { 1.0 } else { 0.0 };
        let (tenant, endpoint) = circuit.split_once(' ').unwrap_or(("", circuit));
        let labels = [
            ("tenant", tenant.to_string()),
            ("endpoint", endpoint.to_string()),
        ];
        gauge!("postback_circuit_open", &labels).set(state);
    }
}

/// What an asking of the sentinels found: whether a strict majority of the configured
/// ones named one primary, and whether that began a disagreement.
pub fn sentinels_asked(agree: bool, disagreement_began: bool) {
    gauge!("postback_sentinels_agree").set(f64::from(u8::from(agree)));
    counter!("postback_sentinel_disagreements_total").increment(u64::from(disagreement_began));
}

/// What the store keeps of an answered write through a restart of its server, as found
/// at start (`aof`, `rdb`, `none`, `unknown`, `wal`, `fsync`): 1 for that kind.
pub fn store_durability(kind: &'static str) {
    gauge!("postback_store_durability", "kind" => kind).set(1.0);
}

/// Whether the store answered the scrape's read.
pub fn store_up(up: bool) {
    gauge!("postback_store_up").set(if up { 1.0 } else { 0.0 });
}

/// How many notifications of `shard` are in `state`.
pub fn queue_depth(shard: usize, state: &'static str, n: u64) {
    gauge!("postback_queue_depth", "state" => state, "shard" => shard.to_string()).set(n as f64);
}

/// How many notifications retention deleted for `reason`, since the store was created.
pub fn retention_deleted(reason: &'static str, n: u64) {
    counter!("postback_retention_deleted_total", "reason" => reason).absolute(n);
}
