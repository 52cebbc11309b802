//! A throwaway `redis-server` for one test.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: TempDir,
}

fn spawn(port: u16, dir: &Path) -> Child {
    Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (see README)")
}

impl RedisServer {
    /// Starts a server with no persistence and waits until it answers PING.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = super::free_port();
        let child = spawn(port, dir.path());
        let server = Self { child, port, dir };
        server.wait_ready();
        server
    }

    /// Stops the server (its data is gone: no persistence).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
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

    /// Starts it again on the same port.
    pub fn restart_on(&mut self, port: u16) {
        self.child = spawn(port, self.dir.path());
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut c) = self.client().get_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// Runs one command and returns its reply.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        let mut c = self.client().get_connection().unwrap();
        cmd.query(&mut c).unwrap()
    }

    /// How many keys the server holds.
    pub fn dbsize(&self) -> i64 {
        self.query(&mut redis::cmd("DBSIZE"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
