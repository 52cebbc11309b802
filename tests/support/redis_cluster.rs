//! A throwaway Redis Cluster for one test: `redis-server` processes in cluster mode on
//! free ports, joined by `redis-cli --cluster create`, optionally with one replica per
//! primary so that a primary can be killed and its replica take over, and optionally
//! serving TLS too, the nodes speaking it among themselves.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use super::tls_receiver::Pki;

/// One cluster for every test of the process that asks for it, started at the first ask;
/// its nodes are stopped by a watchdog once the process has gone (a `static` is never
/// dropped). Each test keeps its keys apart under a key prefix of its own.
pub fn shared() -> &'static RedisCluster {
    static SHARED: std::sync::OnceLock<RedisCluster> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let cluster = RedisCluster::start(3, 0);
        cluster.stop_when_gone(std::process::id());
        cluster
    })
}

pub struct RedisCluster {
    nodes: Vec<(u16, Child)>,
    /// Each node's TLS port, in the order of `nodes`, when they serve TLS.
    tls_ports: Vec<u16>,
    _dir: TempDir,
}

impl RedisCluster {
    /// Starts `primaries` primaries with `replicas` replicas each, and waits until every
    /// node says the cluster is ok. Tests start clusters side by side, so a port picked
    /// as free may be taken a moment later; a start that fails is retried on new ports.
    pub fn start(primaries: usize, replicas: usize) -> Self {
        Self::start_with(primaries, replicas, None)
    }

    /// The same, each node also serving TLS with `pki`'s certificate (requiring a
    /// client's) and the nodes speaking TLS among themselves (`tls-cluster yes`): a
    /// client over TLS is told the nodes' TLS ports.
    pub fn start_tls(primaries: usize, replicas: usize, pki: &Pki) -> Self {
        Self::start_with(primaries, replicas, Some(pki))
    }

    fn start_with(primaries: usize, replicas: usize, pki: Option<&Pki>) -> Self {
        let mut failures = Vec::new();
        for _ in 0..3 {
            match Self::try_start(primaries, replicas, pki) {
                Ok(cluster) => return cluster,
                Err(e) => failures.push(e),
            }
        }
        panic!("the test cluster did not start: {failures:?}");
    }

    fn try_start(primaries: usize, replicas: usize, pki: Option<&Pki>) -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        let ports = cluster_ports(primaries * (1 + replicas));
        let tls_ports: Vec<u16> = match pki {
            Some(_) => ports.iter().map(|_| super::free_port()).collect(),
            None => Vec::new(),
        };
        let nodes: Vec<(u16, Child)> = ports
            .into_iter()
            .enumerate()
            .map(|(n, port)| {
                let tls = match pki {
                    Some(pki) => {
                        let mut args = super::redis_server::tls_args(tls_ports[n], pki);
                        args.extend(["--tls-cluster".into(), "yes".into()]);
                        args
                    }
                    None => Vec::new(),
                };
                let node_dir = dir.path().join(port.to_string());
                std::fs::create_dir(&node_dir).unwrap();
                let child = Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                    // A replica takes over however long since it last heard its primary:
                    // on a loaded test machine that can exceed the default's bound, and
                    // then no replica ever does.
                    .args(["--cluster-replica-validity-factor", "0"])
                    .args(["--save", "3600 1", "--appendonly", "no"])
                    .args(&tls)
                    .arg("--dir")
                    .arg(&node_dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server must be installed (see README)");
                (port, child)
            })
            .collect();
        let cluster = Self {
            nodes,
            tls_ports,
            _dir: dir,
        };
        for (port, _) in &cluster.nodes {
            cluster.wait(*port, |c| redis::cmd("PING").query::<String>(c).is_ok())?;
        }
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(cluster.nodes.iter().map(|(p, _)| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if !created.success() {
            return Err("redis-cli --cluster create failed".into());
        }
        for (port, _) in &cluster.nodes {
            cluster.wait(*port, |c| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(c)
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
            })?;
        }
        Ok(cluster)
    }

    fn wait(
        &self,
        port: u16,
        ready: impl Fn(&mut redis::Connection) -> bool,
    ) -> Result<(), String> {
        let is_ready = super::eventually_blocking(Duration::from_secs(20), || {
            node(port).get_connection().is_ok_and(|mut c| ready(&mut c))
        });
        match is_ready {
            true => Ok(()),
            false => Err(format!("cluster node {port} did not become ready")),
        }
    }

    /// Has the nodes stopped once the process `pid` has gone, by a shell that looks for it
    /// every second.
    fn stop_when_gone(&self, pid: u32) {
        let nodes: Vec<String> = self.nodes.iter().map(|(_, c)| c.id().to_string()).collect();
        let watch = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; kill {}",
            nodes.join(" ")
        );
        let mut watchdog = Command::new("sh")
            .args(["-c", &watch])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh");
        std::thread::spawn(move || watchdog.wait());
    }

    /// The seed URLs, comma-separated, for `POSTBACK_STORE_CLUSTER_URLS`.
    pub fn urls(&self) -> String {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|(p, _)| format!("redis://127.0.0.1:{p}"))
            .collect();
        urls.join(",")
    }

    /// The seed URLs over TLS, comma-separated, for `POSTBACK_STORE_CLUSTER_URLS`.
    pub fn tls_urls(&self) -> String {
        let urls: Vec<String> = self
            .tls_ports
            .iter()
            .map(|p| format!("rediss://127.0.0.1:{p}"))
            .collect();
        urls.join(",")
    }

    /// The port of the primary that holds `key`'s slot now, as a node other than
    /// `asking_not` sees it.
    pub fn primary_of(&self, key: &str, asking_not: u16) -> u16 {
        let (port, _) = self.nodes.iter().find(|(p, _)| *p != asking_not).unwrap();
        let mut c = node(*port).get_connection().unwrap();
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut c)
            .unwrap();
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).unwrap();
        for range in slots {
            let redis::Value::Array(parts) = range else {
                continue;
            };
            let n = |i: usize| match &parts[i] {
                redis::Value::Int(n) => *n,
                _ => -1,
            };
            if n(0) <= slot && slot <= n(1) {
                let redis::Value::Array(primary) = &parts[2] else {
                    break;
                };
                if let redis::Value::Int(port) = primary[1] {
                    return port as u16;
                }
            }
        }
        panic!("no primary holds {key}");
    }

    /// Kills (SIGKILL) the node on `port`.
    pub fn kill(&mut self, port: u16) {
        let (_, child) = self.nodes.iter_mut().find(|(p, _)| *p == port).unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits until a replica has taken over `key`'s slot from the killed `primary`.
    pub fn wait_failover(&self, key: &str, primary: u16) {
        let taken_over = super::eventually_blocking(Duration::from_secs(30), || {
            self.primary_of(key, primary) != primary
        });
        assert!(taken_over, "no replica took over from {primary}");
    }

    /// Resets every node's command counts (`CONFIG RESETSTAT`).
    pub fn reset_stats(&self) {
        for (port, _) in &self.nodes {
            super::redis_server::reset_stats_on(*port);
        }
    }

    /// Script calls all nodes answered since the last reset.
    pub fn script_calls(&self) -> u64 {
        self.nodes
            .iter()
            .map(|(port, _)| super::redis_server::script_calls_on(*port))
            .sum()
    }

    /// Makes every primary wait until its replicas have what it has (`WAIT`).
    pub fn sync_replicas(&self) {
        for (port, _) in &self.nodes {
            let mut c = node(*port).get_connection().unwrap();
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).unwrap();
            if matches!(&role[0], redis::Value::BulkString(r) if r == b"master") {
                let _: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut c).unwrap();
            }
        }
    }
}

/// `n` free ports whose cluster bus ports (10,000 higher) are free too and within
/// range, none of them another's port or bus port: each is released before its node
/// binds it, so the system may hand the same one out again meanwhile.
fn cluster_ports(n: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::with_capacity(n);
    while ports.len() < n {
        let port = super::free_port();
        if port > 55_535 {
            continue;
        }
        let bus = port + 10_000;
        let taken = ports
            .iter()
            .any(|&p| [p, p + 10_000].contains(&port) || p == bus);
        if !taken && std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok() {
            ports.push(port);
        }
    }
    ports
}

fn node(port: u16) -> redis::Client {
    redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap()
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
