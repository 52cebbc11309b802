//! Writes answered once replicas hold them (`store.replica_acks`), or once append-only
//! files have them on disk (`store.fsync_acks`): a connection whose every command goes
//! with a `WAIT` (`WAITAOF`) behind it, in one pipeline to the primary of its keys, so
//! that the wait counts the acknowledgements of that write (Redis counts per client the
//! writes it sent before). When fewer than asked answer in time, the command's reply is
//! replaced by an error that `acks::shortfall` recognizes.
//!
//! It has a connection of its own: a `WAIT` holds up every later command of its client,
//! which must not be the claims' and the settles'. Registrations stored together (one
//! `enqueue.lua` call) share one `WAIT`.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::conn::Conn;
use crate::store::StoreError;

/// What the error of a short acknowledgement says, after which its counts follow.
const SHORT: &str = "replicas acknowledged";

/// A connection whose writes wait for `replicas` replicas (none: an ordinary connection).
#[derive(Clone)]
pub struct Acked {
    conn: Conn,
    replicas: u32,
    /// Whether the primary's (and those replicas') append-only file must have the write
    /// on disk too (`WAITAOF`).
    fsync: bool,
    timeout_ms: u64,
    /// On a cluster, the primary the writes go to: that of the slot of `on`'s key.
    route: Option<Route>,
}

impl Acked {
    /// Writes on `conn` that wait for nothing more than the primary.
    pub fn primary_only(conn: Conn) -> Self {
        Self {
            conn,
            replicas: 0,
            fsync: false,
            timeout_ms: 0,
            route: None,
        }
    }

    /// Writes on `conn` that wait up to `timeout` for `replicas` replicas, and, with
    /// `fsync`, for the append-only files of the primary and of those replicas.
    pub fn new(conn: Conn, replicas: u32, fsync: bool, timeout: Duration) -> Self {
        Self {
            conn,
            replicas,
            fsync,
            timeout_ms: timeout.as_millis() as u64,
            route: None,
        }
    }

    /// Whether its writes wait for more than the primary's memory.
    fn waits(&self) -> bool {
        self.replicas > 0 || self.fsync
    }

    /// The command that waits, and how many acknowledgements it must count.
    fn wait_command(&self) -> (Cmd, i64) {
        let mut wait = match self.fsync {
            true => redis::cmd("WAITAOF"),
            false => redis::cmd("WAIT"),
        };
        if self.fsync {
            wait.arg(1);
        }
        wait.arg(self.replicas).arg(self.timeout_ms);
        (wait, i64::from(self.replicas) + i64::from(self.fsync))
    }

    /// This connection for writes to the keys of `key`'s hash tag (a shard's), whose
    /// primary on a cluster is the one the `WAIT` must ask (none to ask when it waits for
    /// nothing: the scheduler's settles).
    pub fn on(&self, key: &str) -> Self {
        if !self.waits() {
            return self.clone();
        }
        Self {
            route: Some(Route::with_slot(Slot::for_key(key), SlotAddr::Master)),
            ..self.clone()
        }
    }

    /// `cmd` and a `WAIT` in one pipeline, sent to the primary of `on`'s key: `cmd`'s
    /// reply, or the error that says how many replicas acknowledged it.
    async fn with_wait(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let (wait, wanted) = self.wait_command();
        let mut pipe = Pipeline::with_capacity(2);
        pipe.add_command(cmd.clone()).add_command(wait);
        let replies = match &mut self.conn {
            Conn::Standalone(c) => c.req_packed_commands(&pipe, 0, 2).await?,
            Conn::Sentinel(c) => c.req_packed_commands(&pipe, 0, 2).await?,
            Conn::Cluster(c) => match &self.route {
                Some(route) => {
                    let node = SingleNodeRoutingInfo::SpecificNode(*route);
                    c.route_pipeline(pipe, 0, 2, node).await?
                }
                None => return c.req_packed_command(cmd).await,
            },
        };
        let [reply, acked] = <[Value; 2]>::try_from(replies).map_err(|_| short_reply())?;
        // A command that failed wrote nothing to wait for: its own error says more.
        if matches!(reply, Value::ServerError(_)) {
            return Ok(reply);
        }
        let acked = match self.fsync {
            // WAITAOF: [the primary's file, replicas' files].
            true => match acked {
                Value::Array(counts) => counts.iter().filter_map(int).sum(),
                _ => return Err(short_reply()),
            },
            false => int(&acked).ok_or_else(short_reply)?,
        };
        if acked >= wanted {
            return Ok(reply);
        }
        let detail = format!("{acked} {wanted}");
        Err(RedisError::from((ErrorKind::Client, SHORT, detail)))
    }
}

/// A count of a wait's reply: the primary's file counts at most once.
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn short_reply() -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        "a write and its WAIT",
        "were not answered as two replies".into(),
    ))
}

/// The store's error for `e` when it says that too few replicas acknowledged a write.
pub fn shortfall(e: &RedisError) -> Option<StoreError> {
    if e.kind() != ErrorKind::Client || !e.to_string().starts_with(SHORT) {
        return None;
    }
    let mut counts = e.detail()?.split(' ').map(str::parse::<u32>);
    match (counts.next(), counts.next()) {
        (Some(Ok(acked)), Some(Ok(wanted))) => Some(StoreError::NotReplicated { acked, wanted }),
        _ => None,
    }
}

/// Whether `cmd` loads a script (`SCRIPT LOAD`, which the script calls send when the
/// server does not know a script yet): it writes nothing for a `WAIT` to count, and one
/// behind it would fail it while replicas are missing, so that the script never ran.
fn loads_a_script(cmd: &Cmd) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(name)) if name.eq_ignore_ascii_case(b"SCRIPT"))
}

impl ConnectionLike for Acked {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if !self.waits() || loads_a_script(cmd) {
            return self.conn.req_packed_command(cmd);
        }
        Box::pin(self.with_wait(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
