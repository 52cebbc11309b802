//! `postback serve` as a child process, and a small API client for it.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::{RedisCluster, RedisServer};

pub const TOKEN: &str = "test-token";

/// How long `Postback::refused_start` waits for the instance to give up.
const REFUSAL_WAIT: Duration = Duration::from_secs(30);

pub struct Postback {
    child: Child,
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
    pub http: reqwest::Client,
}

impl Postback {
    /// Starts an instance on `redis` with test-friendly settings plus `env`, and waits
    /// until its API answers.
    pub async fn start(redis: &RedisServer, env: &[(&str, &str)]) -> Self {
        Self::start_on(("POSTBACK_STORE_REDIS_URL", &redis.url()), env).await
    }

    /// Starts an instance on a Redis Cluster, with `env`.
    pub async fn start_on_cluster(cluster: &RedisCluster, env: &[(&str, &str)]) -> Self {
        Self::start_on(("POSTBACK_STORE_CLUSTER_URLS", &cluster.urls()), env).await
    }

    /// Starts an instance on the primary `group`'s sentinels name, with `env`.
    pub async fn start_on_sentinels(group: &super::SentinelGroup, env: &[(&str, &str)]) -> Self {
        Self::start_on(("POSTBACK_STORE_REDIS_SENTINELS", &group.addresses()), env).await
    }

    /// Starts an instance on the Postgres `pg`, with `env`.
    pub async fn start_on_postgres(pg: &super::PostgresServer, env: &[(&str, &str)]) -> Self {
        Self::start_on(("POSTBACK_STORE_POSTGRES_URL", &pg.url()), env).await
    }

    /// Starts an instance on the embedded store in `dir`, with `env`.
    pub async fn start_embedded(dir: &std::path::Path, env: &[(&str, &str)]) -> Self {
        Self::start_on(("POSTBACK_STORE_DATA_DIR", dir.to_str().unwrap()), env).await
    }

    /// Starts an instance whose store is named by the `(variable, value)` pair.
    pub async fn start_on(store: (&str, &str), env: &[(&str, &str)]) -> Self {
        let mut cmd = Self::command();
        cmd.env(store.0, store.1);
        Self::spawn(cmd, env).await
    }

    /// Starts an instance whose store `store`'s variables name, with `env`.
    pub async fn start_in_env(store: &[(String, String)], env: &[(&str, &str)]) -> Self {
        let mut cmd = Self::command();
        cmd.envs(store.iter().map(|(k, v)| (k, v)));
        Self::spawn(cmd, env).await
    }

    /// Starts an instance with no store configured, in the directory `cwd`.
    pub async fn start_in(cwd: &std::path::Path, env: &[(&str, &str)]) -> Self {
        let mut cmd = Self::command();
        cmd.current_dir(cwd);
        Self::spawn(cmd, env).await
    }

    /// `postback serve` with nothing in its environment but `PATH`.
    pub fn command() -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_postback"));
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        cmd
    }

    /// Runs `postback serve` with a token, a free port, a 1 s wait for Redis and `env`,
    /// expecting it to refuse to start: asserts that it exits 1 (an instance that runs
    /// on is stopped after `REFUSAL_WAIT`, and fails the assertion), and returns all it
    /// printed (its log lines on stdout, then stderr).
    pub fn refused_start(env: &[(&str, &str)]) -> String {
        let mut cmd = Self::command();
        cmd.env("POSTBACK_SERVER_API_TOKENS", TOKEN)
            .env(
                "POSTBACK_SERVER_LISTEN",
                format!("127.0.0.1:{}", super::free_port()),
            )
            .env("POSTBACK_STORE_CONNECT_WAIT", "1s");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let dir = tempfile::tempdir().unwrap();
        let printed = ["stdout", "stderr"].map(|name| dir.path().join(name));
        let mut child = cmd
            .stdout(std::fs::File::create(&printed[0]).unwrap())
            .stderr(std::fs::File::create(&printed[1]).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let exited =
            super::eventually_blocking(REFUSAL_WAIT, || matches!(child.try_wait(), Ok(Some(_))));
        if !exited {
            let _ = child.kill();
        }
        let status = child.wait().unwrap();
        let said = printed.map(|p| std::fs::read_to_string(p).unwrap_or_default());
        let said = said.concat();
        assert!(
            exited,
            "refused to start within {REFUSAL_WAIT:?}; said: {said}"
        );
        assert_eq!(status.code(), Some(1), "exits 1; said: {said}");
        said
    }

    /// Starts `cmd` with test-friendly settings plus `env`, and waits until its API
    /// answers. A port that another test's server took meanwhile (each asks for a free
    /// one, then binds it) is given up for another.
    async fn spawn(cmd: Command, env: &[(&str, &str)]) -> Self {
        let mut cmd = cmd;
        for _ in 0..3 {
            let pb = Self::spawn_on(&mut cmd, env, super::free_port()).await;
            let lost_port = pb.logs().contains("in use");
            if !lost_port {
                return pb;
            }
        }
        panic!("postback found no free port");
    }

    async fn spawn_on(cmd: &mut Command, env: &[(&str, &str)], port: u16) -> Self {
        postback::install_crypto_provider();
        remember_panics();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("postback.log");
        cmd.env("RUST_LOG", "postback=debug,info")
            .env("POSTBACK_SERVER_LISTEN", format!("127.0.0.1:{port}"))
            .env("POSTBACK_SERVER_API_TOKENS", TOKEN)
            .env("POSTBACK_DELIVERY_MAX_IDLE_SLEEP", "500ms")
            .env("POSTBACK_DELIVERY_SHUTDOWN_GRACE", "5s")
            // Receivers listen on loopback; the SSRF tests turn this off again.
            .env("POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS", "true")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let mut pb = Self {
            child,
            port,
            log,
            _dir: dir,
            http: reqwest::Client::new(),
        };
        // Its own answer, not that of whatever else listens on the port.
        let up = super::eventually(Duration::from_secs(15), || async {
            let answer = pb.http.get(pb.url("/healthz")).send().await;
            let health = match answer {
                Ok(r) => r.json::<Value>().await.unwrap_or_default(),
                Err(_) => Value::Null,
            };
            health["status"] == "ok" || pb.logs().contains("in use")
        })
        .await;
        let running = matches!(pb.child.try_wait(), Ok(None));
        assert!(
            up && running || pb.logs().contains("in use"),
            "postback did not start:\n{}",
            pb.logs()
        );
        pb
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `POST /notify` with the test token; returns the status and the JSON answer.
    pub async fn notify(&self, body: Value) -> (u16, Value) {
        self.notify_with(body, &[]).await
    }

    pub async fn notify_with(&self, body: Value, headers: &[(&str, &str)]) -> (u16, Value) {
        self.request(reqwest::Method::POST, "/notify", Some(body), headers)
            .await
    }

    /// Any request with the test token; returns the status and the JSON answer (null
    /// when there is none).
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        self.request_as(TOKEN, method, path, body, headers).await
    }

    /// Any request with `token`; returns the status and the JSON answer (null when there
    /// is none).
    pub async fn request_as(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// A request with `token` whose body is `raw`, sent as written (`application/json`):
    /// the status, the answer as JSON (null when there is none) and its headers.
    pub async fn request_raw(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        raw: &str,
        headers: &[(&str, &str)],
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let mut req = self
            .http
            .request(method, self.url(path))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(raw.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let (status, answered) = (resp.status().as_u16(), resp.headers().clone());
        (status, resp.json().await.unwrap_or(Value::Null), answered)
    }

    /// Registers and asserts `202`; returns the id.
    pub async fn register(&self, body: Value) -> String {
        let (status, answer) = self.notify(body).await;
        assert_eq!(status, 202, "{answer}");
        answer["id"].as_str().unwrap().to_string()
    }

    /// The status of `GET path` without a token (health routes).
    pub async fn status_without_token(&self, path: &str) -> u16 {
        match self.http.get(self.url(path)).send().await {
            Ok(r) => r.status().as_u16(),
            Err(_) => 0,
        }
    }

    /// `GET path` without a token (health, metrics, documentation): the status and the
    /// body as text.
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let resp = self.http.get(self.url(path)).send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    /// Registers `items` with one `POST /notify/batch` that must be accepted whole: the
    /// ids, in order.
    pub async fn register_batch(&self, items: Vec<Value>) -> Vec<String> {
        let n = items.len();
        let body = json!({ "items": items });
        let (status, answer) = self
            .request(reqwest::Method::POST, "/notify/batch", Some(body), &[])
            .await;
        assert_eq!(status, 200, "{answer}");
        let ids: Vec<String> = super::item_ids(&answer)
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(ids.len(), n, "every item accepted: {answer}");
        ids
    }

    /// The value of one series on `GET /metrics` (its name and labels as written there),
    /// `None` when it is not served.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (_, text) = self.get_text("/metrics").await;
        super::metric_value(&text, series)
    }

    /// `GET path` with the test token.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.request(reqwest::Method::GET, path, None, &[]).await
    }

    pub async fn notification(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/notifications/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Registers one attempt of `tenant`'s at `url` and waits for it to be delivered or
    /// dead; returns it.
    pub async fn attempted_once(&self, tenant: &str, url: &str) -> Value {
        let body = json!({"url": url, "body": {"t": tenant}, "tenant": tenant, "schedule": []});
        let id = self.register(body).await;
        super::eventually(super::WAIT, || async {
            let state = self.notification(&id).await["state"].clone();
            state == "delivered" || state == "dead"
        })
        .await;
        self.notification(&id).await
    }

    /// The endpoints `token` lists at `/endpoints{query}`, once they include the one at
    /// `origin` and `ready` accepts it: the instances tell the store what they saw every
    /// second, so an endpoint is listed a moment after its attempts.
    pub async fn endpoints_once(
        &self,
        token: &str,
        query: &str,
        origin: &str,
        ready: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let path = format!("/endpoints{query}");
        let origin = origin.trim_end_matches('/');
        let listed = super::found(super::WAIT, || async {
            let (status, page) = self
                .request_as(token, reqwest::Method::GET, &path, None, &[])
                .await;
            assert_eq!(status, 200, "{page}");
            let items = page["items"].as_array().cloned().unwrap_or_default();
            let found = items.iter().any(|e| e["url"] == origin && ready(e));
            found.then_some(items)
        })
        .await;
        match listed {
            Some(items) => items,
            None => {
                let (_, page) = self
                    .request_as(token, reqwest::Method::GET, &path, None, &[])
                    .await;
                panic!("{origin} not listed at {path}: {page}")
            }
        }
    }

    /// The endpoint at `origin` that `token` lists at `/endpoints{query}`, once listed.
    pub async fn endpoint_listed(&self, token: &str, query: &str, origin: &str) -> Value {
        let origin = origin.trim_end_matches('/');
        let items = self.endpoints_once(token, query, origin, |_| true).await;
        items.into_iter().find(|e| e["url"] == origin).unwrap()
    }

    /// Waits until the notification reaches `state`; returns it.
    pub async fn wait_state(&self, id: &str, state: &str, timeout: Duration) -> Value {
        let reached = super::found(timeout, || async {
            let seen = self.notification(id).await;
            (seen["state"] == state).then_some(seen)
        });
        match reached.await {
            Some(seen) => seen,
            None => panic!(
                "{id} never reached {state}; last seen {}\n{}",
                self.notification(id).await,
                self.logs()
            ),
        }
    }

    /// Waits until nothing is scheduled or in flight, of any tenant: from then on no
    /// attempt can start, so what a receiver got is all it gets.
    pub async fn wait_quiet(&self) {
        let quiet = super::eventually(super::LONG_WAIT, || async {
            let (status, stats) = self.get("/stats").await;
            status == 200 && stats["scheduled"] == 0 && stats["in_flight"] == 0
        });
        assert!(
            quiet.await,
            "never quiet; last seen {}\n{}",
            self.get("/stats").await.1,
            self.logs()
        );
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        self.child.wait().unwrap()
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to the process.
    pub fn signal(&self, signal: &str) {
        Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Postback {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- postback log (port {}) ---\n{}", self.port, self.logs());
            let reason = LAST_PANIC.with(|p| p.borrow().clone());
            eprintln!("--- the test failed above: {reason} ---");
        }
    }
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Keeps each thread's last panic message, so that an instance dropped while its test
/// fails can repeat why after its log: a failure's reason then ends the output, which is
/// all a long run keeps.
fn remember_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let shown = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let at = info.location().map(|l| l.to_string()).unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let first_lines: Vec<&str> = message.lines().take(20).collect();
            LAST_PANIC.with(|p| *p.borrow_mut() = format!("{at}: {}", first_lines.join("\n")));
            shown(info);
        }));
    });
}
