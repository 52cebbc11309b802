//! The Redis store: notifications sharded over hash-tagged keys, time from Redis `TIME`.
//! Registration (`enqueue.lua`), claims (`claim.lua`) and retention (`trim.lua`) choose
//! by score inside Redis; every other change is worked out in Rust by `lifecycle` and
//! written by `commit.lua` where the notification is still as it was (`commit`). Scripts
//! are run with EVALSHA and a NOSCRIPT fallback.
//!
//! Each role of the port has a file: `queue.rs`, `operator.rs`, `reads.rs`, `rates.rs`,
//! `audit.rs` (the audit log's stream), `endpoints.rs` (endpoints' health records),
//! `health.rs` (fleet messaging); the pub/sub
//! subscription they share is `subscription.rs`, the fleet's membership `fleet.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::Script;
use tokio::sync::Notify;

use super::keys::{wake_channel, ShardKeys};
use super::tls::Refused;
use super::{spec, tenant_counts};
use super::{Durability, FleetMessaging, HealthListener, Store, StoreError, StoreResult};
use crate::config::{RedisTarget, Retention, StoreSettings, StoreTls};
use crate::domain::{JobId, ShardHealth, Tenant};
use crate::lifecycle::{retention, Now, HELD_OFFSET_MS, WAITING_OFFSET_MS};

mod acks;
mod audit;
mod claimed;
mod collections;
mod commit;
mod conn;
mod dial;
mod endpoints;
mod enqueue;
mod fleet;
mod health;
mod moved_keys;
mod operator;
mod page;
mod persistence;
mod queue;
mod rates;
mod reads;
mod replication;
mod reply;
mod schedules;
mod sentinel;
mod shard_clock;
mod subscription;
mod tenant_groups;
mod upgrade;

use acks::Acked;
use audit::AuditStream;
use claimed::ClaimedRecords;
use collections::CollectionKeys;
use commit::{commit, Committed, Decision, Held, Shard};
use conn::{Conn, Place};
use endpoints::EndpointKeys;
use enqueue::Enqueuer;
use fleet::Fleet;
use health::HealthChannel;
use schedules::ScheduleBook;
use shard_clock::ShardClock;

/// A script from `lua/`, with the constants of `script_constants` and the shared helpers
/// of `lua/common.lua` in front.
macro_rules! script {
    ($name:literal) => {
        Script::new(&format!(
            "{}{}{}",
            script_constants(),
            include_str!("../../lua/common.lua"),
            include_str!(concat!("../../lua/", $name, ".lua"))
        ))
    };
}

/// What the scripts must agree on with the rest of postback, written from the Rust
/// constants that decide it: the layout a spec's first line starts with, how much later
/// a notification waiting behind its ordering key or held sits in the due index, the windows of
/// the counts per tenant, and how many schedules a shard keeps once.
fn script_constants() -> String {
    format!(
        "local LAYOUT = '{}'\nlocal WAITING, HELD = {}, {}\nlocal WINDOW_MS, WINDOWS = {}, {}\n\
         local MAX_SHARED_SCHEDULES = {}\nlocal DEFAULT_TENANT = '{}'\n",
        spec::VERSION,
        WAITING_OFFSET_MS,
        HELD_OFFSET_MS,
        tenant_counts::OUTCOME_WINDOW_MS,
        tenant_counts::OUTCOME_WINDOWS,
        schedules::MAX_SHARED,
        Tenant::DEFAULT,
    )
}

struct Scripts {
    enqueue: Script,
    claim: Script,
    commit: Script,
    discard: Script,
    trim: Script,
    tenants: Script,
    index_tenants: Script,
    reserve: Script,
    endpoints: Script,
    collections: Script,
    replace_key: Script,
}

impl Scripts {
    fn load() -> Self {
        Self {
            enqueue: script!("enqueue"),
            claim: script!("claim"),
            commit: script!("commit"),
            discard: script!("discard"),
            trim: script!("trim"),
            tenants: script!("tenants"),
            index_tenants: script!("index_tenants"),
            reserve: Script::new(include_str!("../../lua/reserve.lua")),
            endpoints: Script::new(include_str!("../../lua/endpoints.lua")),
            collections: Script::new(include_str!("../../lua/collections.lua")),
            replace_key: Script::new(include_str!("../../lua/replace_key.lua")),
        }
    }
}

pub struct RedisStore {
    /// What its primaries keep through a restart, as found at start.
    durability: Durability,
    /// Where the connections go, and so the wake-up subscription: the server, each
    /// cluster seed in turn, or the primary the sentinels name.
    place: Place,
    next_pubsub: AtomicUsize,
    conn: Conn,
    /// Writes answered once the primary has them: the scheduler's.
    to_primary: Acked,
    /// Writes answered once `store.replica_acks` replicas have them too: registrations
    /// and operators' actions (on a connection of their own when that is more than 0).
    to_replicas: Acked,
    /// `store.replica_acks`.
    replica_acks: u32,
    /// Which shards can acknowledge writes as `replica_acks` asks (`replication.rs`).
    shard_health: Arc<ShardHealth>,
    /// Per shard, until when (ms) a write to it that came back short keeps it degraded.
    short_until: Vec<AtomicI64>,
    shards: Vec<ShardKeys>,
    wake_channel: String,
    health: HealthChannel,
    /// Told what other instances publish of endpoints' health (`FleetMessaging`).
    health_listener: RwLock<Option<HealthListener>>,
    /// Keys of rate keys' quota states start with this (`<prefix>:rate:`), within a
    /// hash tag of their own, so that each lives on its own slot of a cluster.
    rate_prefix: String,
    connect_timeout: Duration,
    /// How long a registration may take at most (`moved_keys::under_way`).
    registration_at_most: Duration,
    /// Which shards have work, so that a claim asks only those (and one more in turn).
    clock: ShardClock,
    /// The instances sharing this Redis, and which shards this one owns.
    fleet: Fleet,
    /// Told when another instance announced a change of the fleet: renew now.
    fleet_changed: Notify,
    /// The due key of each shard, which wake-up messages name, to its index.
    due_keys: HashMap<String, usize>,
    /// Claim records of claims that failed without a reply: (shard, record key).
    unsure_claims: Mutex<Vec<(usize, String)>>,
    /// The notifications this instance holds leases on, as claimed.
    claimed: ClaimedRecords,
    /// The schedules shards keep once, as this instance has read them.
    schedules: Arc<ScheduleBook>,
    /// Each tenant's retention limits, with each shard's share of the dead letters'
    /// count.
    retention: retention::Policy,
    scripts: Scripts,
    enqueuer: Enqueuer,
    audit: AuditStream,
    endpoint_keys: EndpointKeys,
    collection_keys: CollectionKeys,
}

impl RedisStore {
    /// Connects to `target` with `shard_count` shards, retrying until
    /// `settings.connect_wait` has passed.
    pub async fn connect(
        target: &RedisTarget,
        shard_count: u16,
        settings: &StoreSettings,
        retention: impl Into<Retention>,
    ) -> anyhow::Result<Self> {
        let retention = retention.into();
        let tls = StoreTls::read(settings)?;
        let deadline = tokio::time::Instant::now() + settings.connect_wait;
        let (place, conn) = loop {
            match open(target, settings, &tls).await {
                Ok(opened) => break opened,
                Err(e) if e.is::<Refused>() => return Err(e),
                Err(e) if tokio::time::Instant::now() >= deadline => anyhow::bail!(
                    "{e} (waited {})",
                    humantime::format_duration(settings.connect_wait)
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for Redis");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        check_eviction(&mut conn.clone(), settings.allow_eviction).await?;
        let instance = format!("{:016x}", fastrand::u64(..));
        let shards: Vec<ShardKeys> = (0..shard_count)
            .map(|s| ShardKeys::new(&settings.key_prefix, s))
            .collect();
        let durability = persistence::check(&conn, &shards, settings.allow_volatile).await?;
        let scripts = Scripts::load();
        let schedules = Arc::new(ScheduleBook::default());
        let replicated = replicated_writes(&place, settings, &conn).await?;
        let to_replicas = replicated[0].clone();
        let enqueuer = Enqueuer::start(enqueue::Target {
            conn: conn.clone(),
            writes: replicated,
            script: scripts.enqueue.clone(),
            shards: shards.clone(),
            wake_channel: wake_channel(&settings.key_prefix),
            schedules: schedules.clone(),
        });
        let due_keys = shards
            .iter()
            .enumerate()
            .map(|(i, keys)| (keys.due().to_string(), i))
            .collect();
        let store = Self {
            durability,
            place,
            next_pubsub: AtomicUsize::new(0),
            to_primary: Acked::primary_only(conn.clone()),
            to_replicas,
            replica_acks: settings.replica_acks,
            shard_health: Arc::new(ShardHealth::new(shard_count)),
            short_until: (0..shard_count).map(|_| AtomicI64::new(0)).collect(),
            conn,
            shards,
            wake_channel: wake_channel(&settings.key_prefix),
            health: HealthChannel::new(&settings.key_prefix, &instance),
            health_listener: RwLock::new(None),
            rate_prefix: format!("{}:rate:", settings.key_prefix),
            connect_timeout: settings.connect_timeout,
            registration_at_most: moved_keys::registration_at_most(settings),
            clock: ShardClock::new(usize::from(shard_count)),
            fleet: Fleet::new(
                &settings.key_prefix,
                &instance,
                settings.shard_lease,
                usize::from(shard_count),
            ),
            fleet_changed: Notify::new(),
            due_keys,
            unsure_claims: Mutex::new(Vec::new()),
            claimed: ClaimedRecords::default(),
            schedules,
            retention: retention.policy().per_shard(u32::from(shard_count)),
            scripts,
            enqueuer,
            audit: AuditStream::new(&settings.key_prefix, retention.instance.audit_max_age),
            endpoint_keys: EndpointKeys::new(&settings.key_prefix),
            collection_keys: CollectionKeys::new(&settings.key_prefix),
        };
        store.upgrade().await.map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot upgrade what an earlier build stored: {e}",
                target.key()
            )
        })?;
        if store.replica_acks > 0 {
            store.note_replication(&store.replication_of_each().await);
        }
        if let Err(e) = store.check_replicas().await {
            tracing::error!(
                "store.replica_acks (POSTBACK_STORE_REPLICA_ACKS): {e}; the shard takes no new notification (one whose ordering key fixes it there is answered 503 shard_unavailable), and its replays, cancels and discards are answered 503 replica_ack_timeout, until they connect"
            );
        }
        Ok(store)
    }

    /// This instance's id among those sharing the Redis (`fleet.rs`).
    pub fn instance(&self) -> &str {
        &self.fleet.instance
    }

    fn keys(&self, id: &JobId) -> StoreResult<&ShardKeys> {
        self.shards.get(id.shard() as usize).ok_or_else(|| {
            StoreError::Corrupt(format!("{id} names a shard this instance does not have"))
        })
    }

    /// What `commit` needs of shard `shard`, writing with `writes`.
    fn shard<'a>(&'a self, shard: usize, writes: &'a Acked) -> Shard<'a> {
        Shard {
            conn: &self.conn,
            writes,
            script: &self.scripts.commit,
            keys: &self.shards[shard],
            schedules: &self.schedules,
            wake_channel: &self.wake_channel,
            retention: &self.retention,
        }
    }

    /// Commits `requests`, grouped by the shard of their id (`id`), and gathers the
    /// answers in their order; wakes this instance's scheduler for a shard with a new
    /// earliest due notification.
    async fn commit_by_shard<T, A>(
        &self,
        writes: &Acked,
        requests: &[T],
        id: impl Fn(&T) -> &JobId,
        budget: impl Fn(usize) -> usize + Copy + Sync,
        first: impl Fn(&T) -> StoreResult<Decision<A>>,
        again: impl Fn(&T, Option<Held>, Now) -> StoreResult<Decision<A>>,
    ) -> StoreResult<Committed<A>> {
        let mut answers: Vec<Option<A>> = requests.iter().map(|_| None).collect();
        let (mut earliest, mut trimmed) = (None, 0);
        for (shard, mine) in self.by_shard(requests, id) {
            let (at, mine): (Vec<usize>, Vec<&T>) = mine.into_iter().unzip();
            let done = commit(
                &self.shard(shard, writes),
                &mine,
                budget,
                |r| first(r),
                |r, held, now| again(r, held, now),
            )
            .await?;
            if let Some(due_in) = done.earliest {
                self.clock.wake_in(shard, due_in);
            }
            earliest = earliest.into_iter().chain(done.earliest).min();
            trimmed += done.trimmed;
            for (k, answer) in at.into_iter().zip(done.answers) {
                answers[k] = Some(answer);
            }
        }
        Ok(Committed {
            answers: answers
                .into_iter()
                .map(|a| {
                    a.ok_or_else(|| {
                        StoreError::Corrupt("an id names no shard of this instance".into())
                    })
                })
                .collect::<StoreResult<_>>()?,
            earliest,
            trimmed,
        })
    }

    /// `items` grouped by the shard of their id, each with its position in `items`,
    /// leaving out shards with none.
    fn by_shard<'a, T>(
        &self,
        items: &'a [T],
        id: impl Fn(&T) -> &JobId,
    ) -> Vec<(usize, Vec<(usize, &'a T)>)> {
        (0..self.shards.len())
            .map(|shard| {
                let mine = items
                    .iter()
                    .enumerate()
                    .filter(|(_, item)| id(item).shard() as usize == shard)
                    .collect::<Vec<_>>();
                (shard, mine)
            })
            .filter(|(_, mine)| !mine.is_empty())
            .collect()
    }
}

impl Store for RedisStore {
    fn fleet(&self) -> Option<&dyn FleetMessaging> {
        Some(self)
    }

    fn shard_health(&self) -> Option<Arc<ShardHealth>> {
        Some(self.shard_health.clone())
    }

    fn durability(&self) -> Durability {
        self.durability.clone()
    }
}

impl RedisStore {
    /// Redis's clock, the one its scripts stamp changes with.
    async fn now(&self) -> StoreResult<Now> {
        let (s, us): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(Now::from_micros(s * 1_000_000 + us))
    }
}

/// `store.fsync_acks` needs `WAITAOF` (Redis 7.2 or later, Valkey 8) and the
/// append-only file on.
async fn check_waitaof(conn: &mut Conn) -> anyhow::Result<()> {
    const KEY: &str = "store.fsync_acks (POSTBACK_STORE_FSYNC_ACKS)";
    let known: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query_async(conn)
        .await?;
    if known.first().is_none_or(|c| *c == redis::Value::Nil) {
        let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim();
        anyhow::bail!("{KEY}: this Redis ({version}) has no WAITAOF; it needs Redis 7.2 or later, or Valkey 8")
    }
    let appendonly: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query_async(conn)
        .await;
    if let Ok(pair) = appendonly {
        if pair.get(1).map(String::as_str) == Some("no") {
            anyhow::bail!("{KEY}: Redis keeps no append-only file (appendonly no), so nothing would be fsynced");
        }
    }
    Ok(())
}

/// Refuses a Redis whose `maxmemory-policy` may evict keys, unless allowed: an evicted key
/// is a lost notification. A Redis that hides `CONFIG` (some managed services) is
/// trusted, with a warning.
async fn check_eviction(conn: &mut Conn, allowed: bool) -> anyhow::Result<()> {
    let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    let policy = match reply {
        Ok(pair) => pair.get(1).cloned().unwrap_or_default(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read Redis's maxmemory-policy; make sure it is noeviction");
            return Ok(());
        }
    };
    if policy == "noeviction" || policy.is_empty() {
        return Ok(());
    }
    if allowed {
        tracing::warn!(%policy, "Redis's maxmemory-policy may evict keys, and with them notifications (store.allow_eviction is on)");
        return Ok(());
    }
    anyhow::bail!(
        "Redis's maxmemory-policy is {policy}, which may evict keys and so lose notifications; \
         set it to noeviction, or set store.allow_eviction (POSTBACK_STORE_ALLOW_EVICTION=true) to start anyway"
    )
}

/// How a call of the script `script` failed. An error the script itself answered (a Lua
/// error, or a refusal of its arguments) is a bug, not an outage: logged with the script's
/// name and counted, it fails the request that met it and is not tried again. Anything
/// else is `store_error`'s.
fn script_error(script: &'static str) -> impl Fn(redis::RedisError) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind};
    move |e| match e.kind() {
        ErrorKind::Server(ServerErrorKind::ResponseError) => bug(script, e),
        _ if e.code() == Some("WRONGTYPE") => bug(script, e),
        _ => store_error(e),
    }
}

/// Where `target` is, and a first connection to it; `Refused` when TLS refused it.
async fn open(
    target: &RedisTarget,
    settings: &StoreSettings,
    tls: &StoreTls,
) -> anyhow::Result<(Place, Conn)> {
    let place = Place::find(target, settings, tls).await?;
    let conn = Conn::open(&place, settings).await.map_err(|e| {
        let refused = place.named().and_then(|n| Refused::of(&e, tls, &n));
        match refused {
            Some(refused) => anyhow::Error::new(refused),
            None => anyhow::anyhow!("{}: {} is unreachable: {e}", target.key(), place.describe()),
        }
    })?;
    Ok((place, conn))
}

/// Connections that registrations wait for replicas on, each storing one group at a
/// time, when `store.replica_acks` asks for replicas.
const WAITING_WRITERS: usize = 4;

/// The connections of writes that wait for `store.replica_acks` replicas: of their own,
/// since a `WAIT` holds up the commands behind it on its connection, and several, so that
/// groups of registrations are stored while others wait; or `conn` when they wait for
/// none.
async fn replicated_writes(
    place: &Place,
    settings: &StoreSettings,
    conn: &Conn,
) -> anyhow::Result<Vec<Acked>> {
    if settings.replica_acks == 0 && !settings.fsync_acks {
        return Ok(vec![Acked::primary_only(conn.clone())]);
    }
    if settings.fsync_acks {
        check_waitaof(&mut conn.clone()).await?;
    }
    let waiting = StoreSettings {
        response_timeout: settings.response_timeout + settings.replica_ack_timeout,
        ..settings.clone()
    };
    let mut writers = Vec::with_capacity(WAITING_WRITERS);
    for _ in 0..WAITING_WRITERS {
        let own = Conn::open(place, &waiting).await?;
        let (replicas, timeout) = (settings.replica_acks, settings.replica_ack_timeout);
        writers.push(Acked::new(own, replicas, settings.fsync_acks, timeout));
    }
    Ok(writers)
}

/// A script's own failure: logged with its name, counted, and never retried.
fn bug(script: &'static str, e: redis::RedisError) -> StoreError {
    crate::observability::metrics::script_error(script);
    tracing::error!(script, error = %e, "a store script failed");
    StoreError::Script {
        script,
        message: e.to_string(),
    }
}

fn store_error(e: redis::RedisError) -> StoreError {
    use redis::ErrorKind;
    if let Some(short) = acks::shortfall(&e) {
        return short;
    }
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreError::Corrupt(e.to_string()),
        _ => StoreError::Unavailable(e.to_string()),
    }
}
