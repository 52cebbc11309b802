//! Redis through Sentinel: the primary is asked of the sentinels and followed through a
//! failover. `Primary` is where it is now, shared by every connection of the store: each
//! sentinel is asked which primary it names (`SENTINEL get-master-addr-by-name`), and an
//! address is taken only when a strict majority of the configured sentinels name it
//! (`quorum.rs`) and it then answers `ROLE` as a primary: nothing, no password least of
//! all, goes to an address before. With no majority the primary followed until now is
//! kept, the split logged once and shown in `postback_sentinels_agree`. They are asked
//! again when a connection meets what a primary gone or demoted gives (a dropped or
//! refused connection, a timeout, `READONLY`, `MASTERDOWN`; while none is found, after a
//! backoff of at most a second), when a sentinel announces `+switch-master` (every
//! sentinel's is subscribed to, and heard at once), and every few seconds. `Followed` is
//! one connection that follows it: a `ConnectionManager` to the primary of the moment,
//! replaced by one to the next when it moves.
//!
//! The redis crate's `sentinel` module believes the first sentinel that answers (and
//! checks the primary it names with the data nodes' credentials), says not which
//! sentinel did not answer, nor follows a primary that moves; postback asks the
//! sentinels itself. The sentinels and the data nodes are each reached over TLS when
//! their setting says so (`store.redis_sentinels_tls`, `store.redis_tls`), each checked
//! against its own name where it differs from the address (`dial.rs`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionLike;
use redis::{
    Cmd, ErrorKind, Pipeline, RedisConnectionInfo, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};
use tokio::sync::{watch, Mutex, Notify};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::dial::{Dial, Relink, Secured};
use crate::backoff::{backoff, worth_logging};
use crate::config::store_tls::{SENTINELS_SERVER_NAME, SERVER_NAME};
use crate::config::{Credentials, NodeAddress, SentinelTarget, StoreSettings, StoreTls};
use crate::observability::metrics;
use crate::store::tls::Refused;

mod quorum;

use quorum::{Agreement, Answer, Poll, Turn};

/// How often the sentinels are asked when nothing suggests that the primary moved.
const RECHECK: Duration = Duration::from_secs(5);
/// How soon after an asking that found no primary a connection's error has them asked
/// again, at most (growing from 50 ms with the failures in a row).
const MOST_PATIENT: Duration = Duration::from_secs(1);
/// How soon after an asking that found the primary a connection's error, or a
/// sentinel's announcement, has them asked again.
const LEAST_GAP: Duration = Duration::from_millis(100);
/// The setting that names the sentinels.
const SENTINELS_KEY: &str = "store.redis_sentinels (POSTBACK_STORE_REDIS_SENTINELS)";
/// The channel on which sentinels announce a new primary.
const SWITCH_CHANNEL: &str = "+switch-master";

/// The primary the sentinels name, shared by every connection that follows it; the
/// tasks that keep it up to date stop once the last copy is dropped.
#[derive(Clone)]
pub struct Primary {
    shared: Arc<Shared>,
    _following: Arc<DropGuard>,
}

struct Shared {
    sentinels: Sentinels,
    /// The primary found last, numbered.
    now: watch::Sender<Located>,
    /// Told by a connection that met an error a moved primary gives.
    suspect: Notify,
    /// Told by a sentinel's `+switch-master` (and when its subscription starts).
    switched: Notify,
}

/// The sentinels, and how to ask them.
struct Sentinels {
    target: SentinelTarget,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// TLS to the sentinels, and to the data nodes, where their settings ask for it.
    sentinels_tls: Option<Secured>,
    nodes_tls: Option<Secured>,
    /// What their certificates are checked against, for an error.
    tls: StoreTls,
    /// Whether each sentinel answered when last asked, so that a change is logged once.
    answering: Vec<AtomicBool>,
    /// Whether a strict majority of them named one primary when last asked, so that a
    /// split is logged once.
    agreement: Agreement,
}

/// A primary found, numbered so that a connection knows whether it still goes there.
#[derive(Clone)]
struct Located {
    generation: u64,
    address: String,
    dial: Dial,
}

impl Primary {
    /// Asks the sentinels once: the primary they name, which is then followed; or why
    /// none was found, naming the setting.
    pub async fn find(
        target: &SentinelTarget,
        settings: &StoreSettings,
        tls: &StoreTls,
    ) -> anyhow::Result<Self> {
        let secured = |on: bool, name| on.then(|| Secured::new(tls, name)).transpose();
        let sentinels = Sentinels {
            target: target.clone(),
            connect_timeout: settings.connect_timeout,
            response_timeout: settings.response_timeout,
            sentinels_tls: secured(target.sentinels_tls, tls.sentinels_server_name.as_ref())?,
            nodes_tls: secured(target.nodes_tls, tls.server_name.as_ref())?,
            tls: tls.clone(),
            answering: target
                .sentinels
                .iter()
                .map(|_| AtomicBool::new(true))
                .collect(),
            agreement: Agreement::new(),
        };
        let (address, dial) = sentinels.locate().await?;
        let shared = Arc::new(Shared {
            sentinels,
            now: watch::Sender::new(Located {
                generation: 0,
                address,
                dial,
            }),
            suspect: Notify::new(),
            switched: Notify::new(),
        });
        let stop = CancellationToken::new();
        tokio::spawn(follow(shared.clone(), stop.clone()));
        for sentinel in 0..target.sentinels.len() {
            tokio::spawn(hear_switches(shared.clone(), sentinel, stop.clone()));
        }
        Ok(Self {
            shared,
            _following: Arc::new(stop.drop_guard()),
        })
    }

    /// How to reach the primary as it is now (with the data nodes' credentials).
    pub fn dial(&self) -> Dial {
        self.shared.now.borrow().dial.clone()
    }

    /// The primary's address now, `host:port`.
    pub fn address(&self) -> String {
        self.shared.now.borrow().address.clone()
    }

    /// Returns once the primary has moved from where it is now (not where it is when
    /// first awaited).
    pub fn moved(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut now = self.shared.now.subscribe();
        async move {
            let _ = now.changed().await;
        }
    }

    /// A connection of its own that follows the primary.
    pub fn connection(&self, settings: &StoreSettings) -> Followed {
        Followed {
            primary: self.clone(),
            current: Arc::new(Mutex::new(None)),
            timeouts: (settings.connect_timeout, settings.response_timeout),
        }
    }
}

impl Sentinels {
    /// The address a strict majority of the configured sentinels name, once it answers
    /// `ROLE` as a primary, with what connects to it; or why none. Nothing goes to an
    /// address before the majority named it, the data nodes' credentials least of all.
    async fn locate(&self) -> anyhow::Result<(String, Dial)> {
        let (poll, refused) = self.poll().await;
        self.note_agreement(&poll);
        let Some(address) = poll.majority() else {
            let why = self.no_majority(&poll);
            return match refused && poll.none_answers() {
                true => Err(Refused(why.to_string()).into()),
                false => Err(why),
            };
        };
        let dial = self.node_dial(address);
        let why = match self.role(&dial).await {
            Ok(role) if role == "master" => return Ok((address.to_string(), dial)),
            Ok(role) => format!("it is a {role}"),
            Err(e) => {
                let named = dial.named("the address the sentinels name", SERVER_NAME);
                if let Some(refused) = named.and_then(|n| Refused::of(&e, &self.tls, &n)) {
                    return Err(refused.into());
                }
                e.to_string()
            }
        };
        anyhow::bail!(
            "store.redis_sentinels (POSTBACK_STORE_REDIS_SENTINELS): {address}, which the sentinels name for `{}`, does not answer as a primary: {why}",
            self.target.master_name
        )
    }

    /// Every configured sentinel's answer, and whether TLS refused any.
    async fn poll(&self) -> (Poll, bool) {
        let mut refused = false;
        let asked = self.target.sentinels.iter().map(|s| self.ask(s));
        let answers = futures_util::future::join_all(asked).await;
        let each = self.target.sentinels.iter().zip(&self.answering);
        let polled = each.zip(answers).map(|((sentinel, was), answer)| {
            self.note_answering(sentinel, was, answer.is_ok());
            let said = match answer {
                Ok(Some(address)) => Answer::Names(address),
                Ok(None) => Answer::Unknown,
                Err(e) => {
                    let named = self
                        .dial(sentinel)
                        .named(SENTINELS_KEY, SENTINELS_SERVER_NAME);
                    match named.and_then(|n| Refused::of(&e, &self.tls, &n)) {
                        Some(why) => {
                            refused = true;
                            Answer::Silent(why.to_string())
                        }
                        None => Answer::Silent(e.to_string()),
                    }
                }
            };
            (sentinel.clone(), said)
        });
        let poll = Poll::new(polled.collect());
        (poll, refused)
    }

    /// Why no majority named a primary: none answered, none knows the name, or they
    /// split (each one's answer).
    fn no_majority(&self, poll: &Poll) -> anyhow::Error {
        const KEY: &str = "store.redis_sentinels (POSTBACK_STORE_REDIS_SENTINELS)";
        let name = &self.target.master_name;
        if poll.none_answers() {
            return anyhow::anyhow!("{KEY}: no sentinel answers: {}", poll.silent());
        }
        if poll.none_names() {
            return anyhow::anyhow!(
                "store.redis_master_name (POSTBACK_STORE_REDIS_MASTER_NAME): no sentinel of store.redis_sentinels knows a primary named `{name}`"
            );
        }
        let configured = self.target.sentinels.len();
        anyhow::anyhow!("{KEY}: no strict majority of the {configured} sentinels configured names one primary for `{name}`: {poll}")
    }

    /// Logs and counts a split as it begins (not at each asking while it lasts), and
    /// its end.
    fn note_agreement(&self, poll: &Poll) {
        let agreed = poll.majority();
        let turn = self.agreement.note(agreed.is_some());
        metrics::sentinels_asked(agreed.is_some(), turn == Some(Turn::Split));
        match (turn, agreed) {
            (Some(Turn::Split), _) => tracing::warn!(
                split = %poll,
                "the sentinels do not agree on a primary: no strict majority of the {} configured names one; the primary followed until now is kept",
                self.target.sentinels.len()
            ),
            (Some(Turn::Agreed), Some(primary)) => {
                tracing::info!(%primary, "the sentinels agree on a primary again")
            }
            _ => {}
        }
    }

    /// Logs a sentinel that stopped answering, or answers again.
    fn note_answering(&self, sentinel: &NodeAddress, was: &AtomicBool, answers: bool) {
        match (was.swap(answers, Ordering::Relaxed), answers) {
            (true, false) => {
                tracing::warn!(%sentinel, "store.redis_sentinels: sentinel {sentinel} does not answer")
            }
            (false, true) => {
                tracing::info!(%sentinel, "store.redis_sentinels: sentinel {sentinel} answers again")
            }
            _ => {}
        }
    }

    /// The primary `sentinel` names, if it knows the name.
    async fn ask(&self, sentinel: &NodeAddress) -> RedisResult<Option<NodeAddress>> {
        let mut conn = self.dial(sentinel).multiplexed().await?;
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.target.master_name)
            .query_async(&mut conn)
            .await?;
        Ok(named.map(|(host, port)| NodeAddress { host, port }))
    }

    /// How to reach `sentinel`, with the sentinels' credentials.
    fn dial(&self, sentinel: &NodeAddress) -> Dial {
        let auth = settings_of(&self.target.sentinel_auth, 0);
        let at = (sentinel.host.as_str(), sentinel.port);
        Dial::node(at, self.sentinels_tls.as_ref(), auth, self.timeouts())
    }

    /// How to reach the data node at `address`, with the data nodes' credentials.
    fn node_dial(&self, address: &NodeAddress) -> Dial {
        let auth = settings_of(&self.target.node_auth, i64::from(self.target.db));
        let at = (address.host.as_str(), address.port);
        Dial::node(at, self.nodes_tls.as_ref(), auth, self.timeouts())
    }

    /// The first word of `ROLE` at `dial`: `master`, `slave` or `sentinel`.
    async fn role(&self, dial: &Dial) -> RedisResult<String> {
        let mut conn = dial.multiplexed().await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
        let first = role.into_iter().next().unwrap_or(Value::Nil);
        redis::from_redis_value(first).map_err(Into::into)
    }

    fn timeouts(&self) -> (Duration, Duration) {
        (self.connect_timeout, self.response_timeout)
    }
}

impl Shared {
    /// Takes the primary `locate` found, if it is another.
    fn moved_to(&self, (address, dial): (String, Dial)) {
        self.now.send_if_modified(|now| {
            if now.address == address {
                return false;
            }
            tracing::warn!(from = %now.address, to = %address, "the primary moved; following it");
            *now = Located {
                generation: now.generation + 1,
                address,
                dial,
            };
            true
        });
    }
}

/// A connection's user, password and database.
fn settings_of(auth: &Credentials, db: i64) -> RedisConnectionInfo {
    let mut settings = RedisConnectionInfo::default().set_db(db);
    if let Some(user) = &auth.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &auth.password {
        settings = settings.set_password(password);
    }
    settings
}

/// Asks the sentinels again whenever there is reason to, until `stop`.
async fn follow(shared: Arc<Shared>, stop: CancellationToken) {
    let mut failures = 0u32;
    loop {
        let asked = Instant::now();
        let earliest = match failures {
            0 => LEAST_GAP,
            n => backoff(n).min(MOST_PATIENT),
        };
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            // However often sentinels announce a switch, the sentinels are asked at
            // most once per `LEAST_GAP`: an announcement only says to ask them.
            _ = async {
                shared.switched.notified().await;
                tokio::time::sleep_until(asked + LEAST_GAP).await;
            } => {}
            _ = async {
                tokio::time::sleep_until(asked + earliest).await;
                shared.suspect.notified().await;
            } => {}
            _ = tokio::time::sleep_until(asked + RECHECK) => {}
        }
        match shared.sentinels.locate().await {
            Ok(found) => {
                failures = 0;
                shared.moved_to(found);
            }
            Err(e) => {
                failures += 1;
                // A split is logged once, as it begins (`note_agreement`).
                if !shared.sentinels.agreement.split() && worth_logging(failures) {
                    tracing::warn!(error = %e, failures, "cannot find the primary through the sentinels");
                }
            }
        }
    }
}

/// Keeps a subscription to `+switch-master` on the `index`-th sentinel, until `stop`:
/// on every one, so that the first to switch is heard (the one that led the failover
/// announces it last).
async fn hear_switches(shared: Arc<Shared>, index: usize, stop: CancellationToken) {
    let sentinel = &shared.sentinels.target.sentinels[index];
    let mut failures = 0u32;
    loop {
        match listen(&shared, sentinel, &stop).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                tracing::debug!(%sentinel, error = %e, "cannot hear the sentinel's +switch-master");
            }
        }
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff(failures)) => {}
        }
    }
}

/// Subscribes to `sentinel`'s `+switch-master` and tells `switched` of each for this
/// primary (and once subscribed, for what was missed), until the connection drops.
async fn listen(
    shared: &Shared,
    sentinel: &NodeAddress,
    stop: &CancellationToken,
) -> RedisResult<()> {
    let dial = shared.sentinels.dial(sentinel);
    let connecting = dial.pubsub();
    let mut pubsub = tokio::time::timeout(shared.sentinels.connect_timeout, connecting)
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting to a sentinel")
        })??;
    pubsub.subscribe(SWITCH_CHANNEL).await?;
    shared.switched.notify_one();
    let mine = format!("{} ", shared.sentinels.target.master_name);
    let mut messages = pubsub.on_message();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return Ok(()),
            message = messages.next() => match message {
                Some(m) => {
                    let text: String = m.get_payload().unwrap_or_default();
                    if text.starts_with(&mine) {
                        shared.switched.notify_one();
                    }
                }
                None => return Ok(()),
            },
        }
    }
}

/// One connection to the primary of the moment: a `Relink` to where the primary is now,
/// replaced when it moves (on the first command after), shared by the connection's
/// clones. An error a moved primary gives makes the sentinels be asked.
#[derive(Clone)]
pub struct Followed {
    primary: Primary,
    current: Arc<Mutex<Option<(u64, Relink)>>>,
    /// Its connect and response timeouts.
    timeouts: (Duration, Duration),
}

impl Followed {
    /// The connection to the primary as it is now, a new one if it moved.
    async fn link(&self) -> Relink {
        let mut current = self.current.lock().await;
        let now = self.primary.shared.now.borrow().clone();
        if let Some((generation, link)) = &*current {
            if *generation == now.generation {
                return link.clone();
            }
        }
        let (connect, respond) = self.timeouts;
        let link = now.dial.with_timeouts(connect, respond).relink();
        *current = Some((now.generation, link.clone()));
        link
    }

    /// Asks the sentinels again when `e` says the primary may have moved.
    fn heard(&self, e: &RedisError) {
        let server = match e.kind() {
            ErrorKind::Server(kind) => Some(kind),
            _ => None,
        };
        let lost = e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal();
        if lost || demoted(server) {
            self.primary.shared.suspect.notify_one();
        }
    }

    /// Asks the sentinels again when a reply among `replies` says the primary may have
    /// moved.
    fn heard_replies(&self, replies: &[Value]) {
        let moved = replies
            .iter()
            .any(|r| matches!(r, Value::ServerError(e) if demoted(e.kind())));
        if moved {
            self.primary.shared.suspect.notify_one();
        }
    }
}

/// Whether a server's error says that it is no primary: `READONLY` (a replica now) or
/// `MASTERDOWN` (a replica cut off from its primary).
fn demoted(kind: Option<ServerErrorKind>) -> bool {
    matches!(
        kind,
        Some(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    )
}

impl ConnectionLike for Followed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.link().await.req_packed_command(cmd).await;
            match &reply {
                Ok(value) => self.heard_replies(std::slice::from_ref(value)),
                Err(e) => self.heard(e),
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut link = self.link().await;
            let replies = link.req_packed_commands(pipeline, offset, count).await;
            match &replies {
                Ok(values) => self.heard_replies(values),
                Err(e) => self.heard(e),
            }
            replies
        })
    }

    fn get_db(&self) -> i64 {
        i64::from(self.primary.shared.sentinels.target.db)
    }
}
