//! A throwaway `redis-server` for one test.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: TempDir,
    /// The append-only file's fsync policy (`always`, `everysec`), or none.
    appendfsync: Option<&'static str>,
    /// The port it also serves TLS on, requiring a client certificate, with the
    /// arguments that say so; the tests' own commands go to `port`, in clear.
    pub tls: Option<(u16, Vec<String>)>,
}

/// The arguments of a Redis serving TLS on `port` with `pki`'s server certificate,
/// requiring a client certificate its authority signed, and replicating over TLS.
pub fn tls_args(port: u16, pki: &super::tls_receiver::Pki) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    let args = [
        ("--tls-port", port.to_string()),
        ("--tls-cert-file", path(&pki.server_cert)),
        ("--tls-key-file", path(&pki.server_key)),
        ("--tls-ca-cert-file", path(&pki.ca)),
        ("--tls-auth-clients", "yes".into()),
        ("--tls-replication", "yes".into()),
    ];
    args.into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
}

fn spawn(port: u16, dir: &Path, appendfsync: Option<&str>, tls: &[String]) -> Child {
    let persistence = match appendfsync {
        Some(policy) => ["--appendonly", "yes", "--appendfsync", policy],
        None => ["--appendonly", "no", "--appendfsync", "everysec"],
    };
    Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            // A snapshot after an hour with a change: never within a test (a kill
            // loses everything, as with none), but persistence postback accepts.
            "--save",
            "3600 1",
        ])
        .args(persistence)
        .args(tls)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (see README)")
}

/// Whether the server `child` answers on `port` within 10 s, as itself (its
/// `process_id`): not when it exited because another server held the port.
fn came_up(child: &mut Child, port: u16) -> bool {
    let ours = format!("process_id:{}\r\n", child.id());
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let answered = super::eventually_blocking(Duration::from_secs(10), || {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        client.get_connection().is_ok_and(|mut c| {
            redis::cmd("INFO")
                .arg("server")
                .query::<String>(&mut c)
                .is_ok_and(|info| info.contains(&ours))
        })
    });
    answered && matches!(child.try_wait(), Ok(None))
}

impl RedisServer {
    /// Starts a server with no persistence and waits until it answers PING.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Starts a server that keeps an append-only file with this fsync policy.
    pub fn start_persistent(appendfsync: &'static str) -> Self {
        Self::start_with(Some(appendfsync))
    }

    /// Starts a server that also serves TLS (`tls_args`) on a port of its own.
    pub fn start_tls(pki: &super::tls_receiver::Pki) -> Self {
        let port = super::free_port();
        Self::start_with_tls(None, Some((port, tls_args(port, pki))))
    }

    fn start_with(appendfsync: Option<&'static str>) -> Self {
        Self::start_with_tls(appendfsync, None)
    }

    /// Starts a server on a free port (and its TLS port, if any), on another pair of them
    /// when another server took one first: a port free when chosen may be chosen by a
    /// test beside this one too.
    fn start_with_tls(
        appendfsync: Option<&'static str>,
        mut tls: Option<(u16, Vec<String>)>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..5 {
            let port = super::free_port();
            let args = tls.as_ref().map(|(_, a)| a.as_slice()).unwrap_or_default();
            let mut child = spawn(port, dir.path(), appendfsync, args);
            if came_up(&mut child, port) {
                return Self {
                    child,
                    port,
                    dir,
                    appendfsync,
                    tls,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
            if let Some((port, args)) = &mut tls {
                *port = super::free_port();
                args[1] = port.to_string();
            }
        }
        panic!("redis-server did not start on any of five free ports");
    }

    /// Starts a server replicating `primary` (over TLS when it serves TLS), and waits
    /// until it acknowledges writes.
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        // Redis waits 5 s for more replicas before a first full sync by default.
        primary.query::<()>(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("repl-diskless-sync-delay")
                .arg("0"),
        );
        // Over TLS when the primary serves it (`tls_args` names the port first).
        let tls = primary.tls.as_ref().map(|(_, args)| {
            let port = super::free_port();
            let mut args = args.clone();
            args[1] = port.to_string();
            (port, args)
        });
        let at = primary.tls.as_ref().map_or(primary.port, |(port, _)| *port);
        let replica = Self::start_with_tls(None, tls);
        replica.query::<()>(redis::cmd("REPLICAOF").arg("127.0.0.1").arg(at));
        // In sync when it acknowledges a write at once.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut c = primary.client().get_connection().unwrap();
        loop {
            let _: () = redis::cmd("SET")
                .arg("replica-probe")
                .arg(1)
                .query(&mut c)
                .unwrap();
            let _: () = redis::cmd("DEL")
                .arg("replica-probe")
                .query(&mut c)
                .unwrap();
            let acked: i64 = redis::cmd("WAIT").arg(1).arg(50).query(&mut c).unwrap();
            if acked >= 1 {
                return replica;
            }
            assert!(Instant::now() < deadline, "the replica did not sync");
        }
    }

    /// Makes a replica a primary (`REPLICAOF NO ONE`), as a failover does.
    pub fn promote(&self) {
        self.query::<()>(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
    }

    /// `INFO <section>`.
    pub fn info(&self, section: &str) -> String {
        self.query(redis::cmd("INFO").arg(section))
    }

    /// Kills the server (SIGKILL): what it had not written to disk is gone.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the server the way an operator does (SIGTERM): it flushes its append-only
    /// file and exits.
    pub fn shut_down(&mut self) {
        self.signal("-TERM");
        let _ = self.child.wait();
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing answers.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (SIGCONT), its data intact.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
    }

    /// Starts it again on the same port, from its append-only file if it keeps one.
    pub fn restart(&mut self) {
        let tls = self
            .tls
            .as_ref()
            .map(|(_, a)| a.as_slice())
            .unwrap_or_default();
        self.child = spawn(self.port, self.dir.path(), self.appendfsync, tls);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        assert!(
            came_up(&mut self.child, self.port),
            "redis-server on port {} did not start",
            self.port
        );
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its TLS URL, `rediss://127.0.0.1:<tls port>`.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port())
    }

    pub fn tls_port(&self) -> u16 {
        self.tls.as_ref().expect("a server started with TLS").0
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// Runs one command and returns its reply.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        let mut c = self.client().get_connection().unwrap();
        cmd.query(&mut c).unwrap()
    }

    /// The keys that hold notifications or anything about them: every key but those of
    /// the running instances' membership (`{postback:fleet}:…`), of the deployment's
    /// secrets (`{postback:collections}:secrets:…`) and each shard's record of the
    /// upgrades done on it (`…}:upgrades`), which an instance writes as it starts.
    pub fn notification_keys(&self) -> Vec<String> {
        let keys: Vec<String> = self.query(redis::cmd("KEYS").arg("*"));
        keys.into_iter()
            .filter(|k| !k.starts_with("{postback:fleet}:") && !k.ends_with("}:upgrades"))
            .filter(|k| !k.starts_with("{postback:collections}:secrets:"))
            .collect()
    }

    pub fn reset_stats(&self) {
        reset_stats_on(self.port);
    }

    /// Script calls answered since the last reset.
    pub fn script_calls(&self) -> u64 {
        script_calls_on(self.port)
    }
}

fn connection(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Zeroes the command counts of the Redis on `port` (`CONFIG RESETSTAT`).
pub fn reset_stats_on(port: u16) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut connection(port))
        .unwrap();
}

/// Script calls (`EVALSHA`, `EVAL`: one round trip each, whatever the script runs
/// inside) the Redis on `port` answered since the last reset.
pub fn script_calls_on(port: u16) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connection(port))
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
