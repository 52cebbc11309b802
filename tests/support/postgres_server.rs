//! A throwaway Postgres for one test: a copy of an initialised data directory in a
//! temporary directory, `postgres` on a free port of loopback (or serving TLS only, to
//! clients with a certificate, with `start_tls`). As root, `initdb` and
//! `postgres` run as the `postgres` user (they refuse root).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tempfile::TempDir;

pub struct PostgresServer {
    child: Option<Child>,
    pub port: u16,
    dir: TempDir,
    /// With `start_tls`: the settings that serve TLS, and take connections over TCP only
    /// so and only from a client with a certificate its authority signed. The tests' own
    /// commands then go through the Unix socket.
    tls: Vec<String>,
}

/// The directory of `initdb`, `postgres` and `pg_isready`: `POSTBACK_TEST_PG_BIN`, or the
/// newest of Debian's `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("POSTBACK_TEST_PG_BIN") {
        return dir.into();
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("Postgres must be installed (scripts/ensure-postgres.sh)")
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|bin| bin.join("postgres").exists())
        .collect();
    versions.sort_by_key(|p| {
        let version = p.parent().and_then(|v| v.file_name()).unwrap_or_default();
        version.to_string_lossy().parse::<u32>().unwrap_or(0)
    });
    versions
        .pop()
        .expect("no /usr/lib/postgresql/<version>/bin/postgres")
}

/// The uid and gid of the `postgres` user when running as root, to run the server as.
fn server_user() -> Option<(u32, u32)> {
    let me = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&me.stdout).trim() != "0" {
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

fn command(program: &Path, user: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(program);
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd
}

/// A data directory as `initdb` leaves it, made once and copied for each server: `initdb`
/// costs a second or more of CPU, and the suite starts a server per test. It is kept in
/// the target directory per Postgres version, made under a name of this process's own
/// and renamed into place, so that test processes running side by side never see half
/// of one; within a process, once.
fn template() -> PathBuf {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(make_template).clone()
}

fn make_template() -> PathBuf {
    let bin = bin_dir();
    let version = bin.parent().and_then(|v| v.file_name()).unwrap_or_default();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let template = root.join(format!("postgres-{}-template", version.to_string_lossy()));
    if template.exists() {
        return template;
    }
    let making = root.join(format!("postgres-template-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&making);
    std::fs::create_dir_all(&making).unwrap();
    let user = server_user();
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&making, Some(uid), Some(gid)).unwrap();
    }
    let status = command(&bin.join("initdb"), user)
        .args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
            "-D",
        ])
        .arg(making.join("data"))
        .status()
        .expect("initdb must be installed (scripts/ensure-postgres.sh)");
    assert!(status.success(), "initdb failed");
    // Another process may have put its own in place meanwhile: either will do.
    if std::fs::rename(&making, &template).is_err() {
        let _ = std::fs::remove_dir_all(&making);
    }
    template
}

impl PostgresServer {
    /// A new cluster, started, answering on a free port.
    pub fn start() -> Self {
        let mut server = Self::initialised();
        server.run_on_a_free_port();
        server
    }

    /// A new cluster with `ssl = on` (`pki`'s server certificate) and `hostssl` lines
    /// only, which require a client certificate `pki`'s authority signed.
    pub fn start_tls(pki: &super::tls_receiver::Pki) -> Self {
        let mut server = Self::initialised();
        let data = server.dir.path().join("data");
        // The server reads its key only when it is its user's alone.
        let key = data.join("server.key");
        std::fs::copy(&pki.server_key, &key).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        if let Some((uid, gid)) = server_user() {
            std::os::unix::fs::chown(&key, Some(uid), Some(gid)).unwrap();
        }
        let hba = data.join("pg_hba_tls.conf");
        std::fs::write(
            &hba,
            "local all all trust\nhostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n",
        )
        .unwrap();
        let setting = |k: &str, v: &Path| ["-c".to_string(), format!("{k}={}", v.display())];
        server.tls = [
            ["-c".to_string(), "ssl=on".to_string()],
            setting("ssl_cert_file", &pki.server_cert),
            setting("ssl_key_file", &key),
            setting("ssl_ca_file", &pki.ca),
            setting("hba_file", &hba),
        ]
        .concat();
        server.run_on_a_free_port();
        server
    }

    fn initialised() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("cp")
            .arg("-a")
            .arg(template().join("data"))
            .arg(dir.path().join("data"))
            .status()
            .unwrap();
        assert!(
            status.success(),
            "copying the initialised data directory failed"
        );
        if let Some((uid, gid)) = server_user() {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        Self {
            child: None,
            port: super::free_port(),
            dir,
            tls: Vec::new(),
        }
    }

    /// Starts the server on a free port, another when a server beside it took the one
    /// chosen first (each test asks for a free port, then binds it).
    fn run_on_a_free_port(&mut self) {
        for _ in 0..5 {
            if self.try_run() {
                return;
            }
            self.port = super::free_port();
        }
        panic!("postgres did not start on any of five free ports");
    }

    /// Starts the server on its directory and waits until it accepts connections.
    fn run(&mut self) {
        assert!(
            self.try_run(),
            "postgres did not start on port {}",
            self.port
        );
    }

    /// Starts the server on its directory and port; whether it accepts connections
    /// within 20 s as itself (its data directory), not having exited because another
    /// server holds the port.
    fn try_run(&mut self) -> bool {
        let (bin, user) = (bin_dir(), server_user());
        let child = command(&bin.join("postgres"), user)
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=300",
            ])
            // The tests kill processes, not machines: what a process wrote, the kernel
            // keeps, so a commit is as durable as the tests can tell without fsync.
            .args(["-c", "fsync=off"])
            .args(&self.tls)
            .spawn()
            .expect("postgres must be installed (scripts/ensure-postgres.sh)");
        self.child = Some(child);
        let data = self.dir.path().join("data").display().to_string();
        let exited = |server: &mut Self| {
            let child = server.child.as_mut().expect("started");
            matches!(child.try_wait(), Ok(Some(_)))
        };
        let ready = super::eventually_blocking(Duration::from_secs(20), || {
            exited(self)
                || Command::new(bin.join("pg_isready"))
                    .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                    .status()
                    .is_ok_and(|s| s.success())
                    && self
                        .psql_as("postgres", "SHOW data_directory")
                        .is_ok_and(|dir| dir.trim() == data)
        });
        if ready && !exited(self) {
            return true;
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        false
    }

    /// Runs `sql` with `psql` as the superuser; what it printed (unaligned, no headers).
    pub fn psql(&self, sql: &str) -> String {
        self.psql_as("postgres", sql)
            .unwrap_or_else(|error| panic!("psql: {sql}: {error}"))
    }

    /// Runs `sql` (statements separated by `;`, in one session) with `psql` as `role`:
    /// what it printed, or what it said on stderr when a statement failed.
    pub fn psql_as(&self, role: &str, sql: &str) -> Result<String, String> {
        let port = self.port.to_string();
        let socket = self.dir.path().display().to_string();
        let host = match self.tls.is_empty() {
            true => "127.0.0.1",
            false => socket.as_str(),
        };
        let out = Command::new(bin_dir().join("psql"))
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h", host])
            .args(["-p", &port, "-U", role, "-d", "postgres", "-c", sql])
            .output()
            .expect("psql");
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).to_string()),
            false => Err(String::from_utf8_lossy(&out.stderr).to_string()),
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Its URL at `sslmode=verify-full` with `pki`'s authority and client certificate,
    /// by the name its certificate carries.
    pub fn verified_url(&self, pki: &super::tls_receiver::Pki) -> String {
        let (ca, cert, key) = (
            pki.ca.display(),
            pki.client_cert.display(),
            pki.client_key.display(),
        );
        format!(
            "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}",
            self.port
        )
    }

    /// Stops the server at once (`kill -9`: what it has committed survives).
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let backends = children(child.id());
        let _ = child.kill();
        let _ = child.wait();
        // Its backends notice the postmaster is gone and exit; until then the port and
        // the data directory's lock are taken.
        let gone = super::eventually_blocking(Duration::from_secs(10), || {
            !backends.iter().any(|pid| running(*pid))
        });
        assert!(gone, "postgres's backends did not exit");
        let _ = std::fs::remove_file(self.dir.path().join("data/postmaster.pid"));
    }

    /// Starts it again on the same port and data.
    pub fn restart(&mut self) {
        self.run();
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Fast shutdown: backends are ended and shared memory released.
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let ended = super::eventually_blocking(Duration::from_secs(10), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if ended {
                return;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let entries = std::fs::read_dir("/proc").expect("/proc");
    let pids = entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    pids.filter(|child| status_of(*child).is_some_and(|(_, parent)| parent == pid))
        .collect()
}

/// Whether `pid` runs (it exists and is not a zombie).
fn running(pid: u32) -> bool {
    status_of(pid).is_some_and(|(state, _)| state != 'Z')
}

/// A process's state and parent, from `/proc/<pid>/stat`.
fn status_of(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut after_name = stat.rsplit_once(')')?.1.split_whitespace();
    let state = after_name.next()?.chars().next()?;
    Some((state, after_name.next()?.parse().ok()?))
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}
