//! A primary, two replicas and three sentinels watching them (`redis-server --sentinel`:
//! quorum 2, a primary not answering for 1 s thought down, so that a killed primary is
//! replaced within a few seconds), each a real process on a free port in a temporary
//! directory; and a sentinel that lies, watching a Redis of its own under the same name.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use super::tls_receiver::Pki;
use super::RedisServer;

/// The name the sentinels know the primary by (`store.redis_master_name`'s default).
pub const MASTER_NAME: &str = "mymaster";

/// The data nodes' user (`store.redis_username`) once `SentinelGroup::require_password`.
pub const USER: &str = "postback";
/// Its password (`store.redis_password`).
pub const PASSWORD: &str = "data-node-secret";

/// Whether `server` listens on `port`, in clear or over TLS.
fn serves(server: &RedisServer, port: u16) -> bool {
    server.port == port || server.tls.as_ref().is_some_and(|(p, _)| *p == port)
}

/// A sentinel process.
struct Sentinel {
    child: Child,
    port: u16,
    /// The port it serves TLS on, if it does.
    tls_port: Option<u16>,
    _dir: TempDir,
}

pub struct SentinelGroup {
    /// The primary the group started with, then its replicas.
    servers: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

impl SentinelGroup {
    /// Starts the servers and the sentinels, and waits until every sentinel knows both
    /// replicas and the other two sentinels (without which it cannot fail over).
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// The same, every server and sentinel also serving TLS with `pki`'s certificate
    /// and requiring a client's; the servers replicate, and the sentinels watch them,
    /// over TLS.
    pub fn start_tls(pki: &Pki) -> Self {
        Self::start_with(Some(pki))
    }

    fn start_with(pki: Option<&Pki>) -> Self {
        let primary = match pki {
            Some(pki) => RedisServer::start_tls(pki),
            None => RedisServer::start(),
        };
        let replicas = [
            RedisServer::start_replica_of(&primary),
            RedisServer::start_replica_of(&primary),
        ];
        let mut servers = vec![primary];
        for replica in replicas {
            // A replica promoted syncs the other at once, as the primary does.
            replica.query::<()>(
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("repl-diskless-sync-delay")
                    .arg("0"),
            );
            servers.push(replica);
        }
        let watched = servers[0].tls.as_ref().map_or(servers[0].port, |(p, _)| *p);
        let sentinels = (0..3).map(|_| Sentinel::start(watched, pki)).collect();
        let group = Self { servers, sentinels };
        group.wait_until(
            Duration::from_secs(20),
            "the sentinels to know each other",
            |g| {
                g.sentinels.iter().all(|s| {
                    let master = s.master();
                    master.get("num-slaves").map(String::as_str) == Some("2")
                        && master.get("num-other-sentinels").map(String::as_str) == Some("2")
                })
            },
        );
        group
    }

    /// The sentinels' addresses, as `store.redis_sentinels` takes them.
    pub fn addresses(&self) -> String {
        let each: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        each.join(",")
    }

    /// The sentinels' TLS addresses, as `store.redis_sentinels` takes them.
    pub fn tls_addresses(&self) -> String {
        let each: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.tls_port.expect("sentinels serving TLS")))
            .collect();
        each.join(",")
    }

    /// The address of the `index`-th sentinel, `host:port`.
    pub fn sentinel_address(&self, index: usize) -> String {
        format!("127.0.0.1:{}", self.sentinels[index].port)
    }

    /// Stops the `index`-th sentinel (SIGKILL).
    pub fn stop_sentinel(&mut self, index: usize) {
        self.sentinels[index].stop();
    }

    /// Gives every server the user `USER` with the password `PASSWORD` (an ACL is not
    /// replicated: each server its own, so that a replica promoted knows it too). The
    /// sentinels and the replicas go on as the default user, without one.
    pub fn require_password(&self) {
        for server in &self.servers {
            server.query::<()>(&mut acl_user(&format!(">{PASSWORD}")));
        }
    }

    /// The port of the primary the first sentinel that answers names.
    pub fn primary_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(|s| s.primary_port())
            .expect("a sentinel names a primary")
    }

    /// The server on `port` (its own, or its TLS port).
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| serves(s, port))
            .expect("a server of the group")
    }

    /// Kills the current primary (SIGKILL); its port.
    pub fn kill_primary(&mut self) -> u16 {
        let port = self.primary_port();
        let primary = self.servers.iter_mut().find(|s| serves(s, port)).unwrap();
        primary.stop();
        port
    }

    /// Has the sentinels fail over without a failure (`SENTINEL FAILOVER`, as an operator
    /// does before maintenance): the primary is demoted to a replica of the one promoted.
    pub fn fail_over_by_hand(&self) {
        let asked: Option<String> =
            self.sentinels[0].query(redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME));
        assert_eq!(asked.as_deref(), Some("OK"));
    }

    /// Waits until every sentinel names a primary other than the one on `old`, that
    /// primary says it is one, and the other replica replicates it; its port.
    pub fn wait_failover(&self, old: u16) -> u16 {
        self.wait_until(Duration::from_secs(30), "the sentinels to fail over", |g| {
            let named: Vec<Option<u16>> = g.sentinels.iter().map(Sentinel::primary_port).collect();
            let Some(Some(new)) = named.first().copied() else {
                return false;
            };
            if new == old || named.iter().any(|p| *p != Some(new)) {
                return false;
            }
            let replication = g.server(new).info("replication");
            let replicas = replication.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("connected_slaves:")?
                    .parse::<u32>()
                    .ok()
            });
            replication.contains("role:master") && replicas >= Some(1)
        });
        self.primary_port()
    }

    fn wait_until(&self, timeout: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let done = super::eventually_blocking(timeout, || done(self));
        assert!(done, "waited {timeout:?} for {what}");
    }
}

impl Sentinel {
    /// Starts a sentinel watching the primary on `primary` (over TLS with `pki`, which
    /// it then serves too), and waits until it answers.
    fn start(primary: u16, pki: Option<&Pki>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = super::free_port();
        let tls_port = pki.map(|_| super::free_port());
        let tls = match (pki, tls_port) {
            (Some(pki), Some(tls_port)) => {
                let args = super::redis_server::tls_args(tls_port, pki);
                let lines = args
                    .chunks(2)
                    .map(|kv| format!("{} {}\n", &kv[0][2..], kv[1]));
                lines.collect::<String>()
            }
            _ => String::new(),
        };
        std::fs::write(
            config_path(&dir),
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n{tls}\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 2000\n\
                 sentinel parallel-syncs {MASTER_NAME} 2\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let config = config_path(&dir);
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/ensure-redis.sh)");
        let sentinel = Self {
            child,
            port,
            tls_port,
            _dir: dir,
        };
        let up = super::eventually_blocking(Duration::from_secs(10), || {
            sentinel.query::<String>(&mut redis::cmd("PING")).is_some()
        });
        assert!(up, "sentinel on {port} did not start");
        sentinel
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> Option<T> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port)).ok()?;
        let mut c = client.get_connection().ok()?;
        cmd.query(&mut c).ok()
    }

    /// What it says of the primary (`SENTINEL MASTER`).
    fn master(&self) -> HashMap<String, String> {
        self.query(redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME))
            .unwrap_or_default()
    }

    /// The port of the primary it names.
    fn primary_port(&self) -> Option<u16> {
        let mut asked = redis::cmd("SENTINEL");
        asked.arg("GET-MASTER-ADDR-BY-NAME").arg(MASTER_NAME);
        let (_, port): (String, u16) = self.query(&mut asked)?;
        Some(port)
    }
}

fn config_path(dir: &TempDir) -> std::path::PathBuf {
    dir.path().join("sentinel.conf")
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `ACL SETUSER` of `USER` with `password` (`>secret`, or `nopass` for any), allowed
/// every key, channel and command.
fn acl_user(password: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(USER)
        .arg("on")
        .arg(password)
        .arg("~*")
        .arg("&*")
        .arg("+@all");
    cmd
}

/// A sentinel that names another primary than the group's under the same name: a real
/// sentinel watching a Redis of its own (an attacker's, with data of its own), whose user
/// `USER` takes any password, as a server that wants to hear one does.
pub struct LyingSentinel {
    /// The attacker's Redis, which the sentinel names.
    pub server: RedisServer,
    sentinel: Sentinel,
}

impl LyingSentinel {
    pub fn start() -> Self {
        let server = RedisServer::start();
        server.query::<()>(&mut acl_user("nopass"));
        server.query::<()>(redis::cmd("SET").arg("attacker:data").arg("planted"));
        let sentinel = Sentinel::start(server.port, None);
        Self { server, sentinel }
    }

    /// The sentinel's address, `host:port`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.sentinel.port)
    }

    /// The attacker's Redis's address, which the sentinel names.
    pub fn named(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }

    /// What the attacker's Redis counted of the commands that carry a password (`AUTH`,
    /// and `HELLO`, which can), from `INFO commandstats`: none unless a client gave one.
    pub fn passwords_heard(&self) -> Vec<String> {
        let stats = self.server.info("commandstats");
        let heard = stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_auth") || l.starts_with("cmdstat_hello"));
        heard.map(String::from).collect()
    }

    /// The keys of postback's in the attacker's Redis.
    pub fn postback_keys(&self) -> Vec<String> {
        self.server.query(redis::cmd("KEYS").arg("*postback*"))
    }
}
