//! A fresh Postgres for a benchmark: `initdb` in a temporary directory and `postgres` on
//! a free port, with Postgres's own defaults (fsync and synchronous commit on: a `202`
//! is on disk); as root, run as the `postgres` user. What it costs: CPU from `/proc`
//! (the postmaster with what it reaped, and its live backends), and the size of the
//! schema `postback`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::certs::Certs;
use crate::processes::{clock_ticks, free_port};

pub struct PostgresServer {
    child: Child,
    port: u16,
    /// With `--tls`: postback reaches it over TLS at `verify-full` (the harness's own
    /// queries stay in clear).
    certs: Option<Certs>,
    _dir: tempfile::TempDir,
}

/// The newest of Debian's `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .context("Postgres must be installed (scripts/ensure-postgres.sh)")?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|bin| bin.join("postgres").exists())
        .collect();
    versions.sort_by_key(|p| {
        let version = p.parent().and_then(|v| v.file_name()).unwrap_or_default();
        version.to_string_lossy().parse::<u32>().unwrap_or(0)
    });
    versions
        .pop()
        .context("no /usr/lib/postgresql/<version>/bin/postgres")
}

/// The `postgres` user's uid and gid when running as root.
pub fn server_user() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id(&["-u"])? != 0 {
        return None;
    }
    Some((id(&["-u", "postgres"])?, id(&["-g", "postgres"])?))
}

fn command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    if let Some((uid, gid)) = server_user() {
        cmd.uid(uid).gid(gid);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd
}

impl PostgresServer {
    pub fn start(tls: bool) -> anyhow::Result<Self> {
        Self::start_with(&[], tls)
    }

    /// A fresh Postgres that counts every statement it runs (`pg_stat_statements`,
    /// loaded at start; `statements`).
    pub fn start_counting(tls: bool) -> anyhow::Result<Self> {
        let server = Self::start_with(
            &[
                "shared_preload_libraries=pg_stat_statements",
                "pg_stat_statements.track=all",
            ],
            tls,
        )?;
        server.query("CREATE EXTENSION pg_stat_statements")?;
        Ok(server)
    }

    /// A fresh Postgres with `settings` (`name=value`) beside the benchmark's own, with
    /// TLS on when `tls`.
    fn start_with(settings: &[&str], tls: bool) -> anyhow::Result<Self> {
        let certs = tls.then(Certs::make).transpose()?;
        let tls_settings = certs.as_ref().map(|c| {
            let (cert, key) = c.server();
            vec![
                "ssl=on".to_string(),
                format!("ssl_cert_file={}", cert.display()),
                format!("ssl_key_file={}", key.display()),
            ]
        });
        let bin = bin_dir()?;
        let dir = tempfile::tempdir()?;
        if let Some((uid, gid)) = server_user() {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let data = dir.path().join("data");
        let made = command(&bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "-D"])
            .arg(&data)
            .status()?;
        if !made.success() {
            bail!("initdb failed");
        }
        let port = free_port()?;
        let child = command(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=200",
            ])
            .args(settings.iter().flat_map(|s| ["-c", s]))
            .args(tls_settings.iter().flatten().flat_map(|s| ["-c", s]))
            .spawn()?;
        let server = Self {
            child,
            port,
            certs,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while server.query("SELECT 1").is_err() {
            if Instant::now() > deadline {
                bail!("postgres did not start on port {port}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL postback is given: over TLS, checked as a payment platform would
    /// (`verify-full` against the run's CA), with `--tls`.
    pub fn postback_url(&self) -> String {
        match &self.certs {
            Some(c) => format!(
                "{}?sslmode=verify-full&sslrootcert={}",
                self.url(),
                c.ca().display()
            ),
            None => self.url(),
        }
    }

    /// The one value `sql` returns, as text.
    fn query(&self, sql: &str) -> anyhow::Result<String> {
        let out = Command::new(bin_dir()?.join("psql"))
            .args(["-X", "-A", "-t", "-q", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &self.port.to_string(), "-d", "postgres", "-c", sql])
            .output()?;
        if !out.status.success() {
            bail!("psql: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// CPU seconds the server used so far: the postmaster with the backends it reaped,
    /// and its live backends.
    pub fn cpu_seconds(&self) -> f64 {
        let postmaster = self.child.id();
        let mut ticks = stat_ticks(postmaster, &[11, 12, 13, 14]);
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
                continue;
            };
            if parent(pid) == Some(postmaster) {
                ticks += stat_ticks(pid, &[11, 12]);
            }
        }
        ticks / clock_ticks()
    }

    /// Statements run since the last `reset_statements`, by any client but this one's
    /// counting queries, and the busiest of them (calls, then the statement).
    pub fn statements(&self) -> anyhow::Result<(u64, Vec<(u64, String)>)> {
        let sql = "SELECT calls || ' ' || regexp_replace(query, '\\s+', ' ', 'g')
                   FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'
                   ORDER BY calls DESC";
        let rows: Vec<(u64, String)> = self
            .query(sql)?
            .lines()
            .filter_map(|l| {
                let (calls, query) = l.split_once(' ')?;
                Some((calls.parse().ok()?, query.to_string()))
            })
            .collect();
        Ok((rows.iter().map(|(calls, _)| calls).sum(), rows))
    }

    pub fn reset_statements(&self) -> anyhow::Result<()> {
        self.query("SELECT pg_stat_statements_reset()").map(drop)
    }

    /// The bytes of the schema `postback`'s tables with their indexes and TOAST.
    pub fn schema_bytes(&self) -> anyhow::Result<u64> {
        let sql = "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'postback' AND c.relkind = 'r'";
        Ok(self.query(sql)?.parse()?)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Fast shutdown: backends ended, shared memory released.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// The sum of fields `at` (after the command name) of `/proc/<pid>/stat`.
fn stat_ticks(pid: u32, at: &[usize]) -> f64 {
    let fields = stat_fields(pid);
    at.iter()
        .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
        .sum()
}

fn parent(pid: u32) -> Option<u32> {
    stat_fields(pid).get(1)?.parse().ok()
}

fn stat_fields(pid: u32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace().map(str::to_string).collect()
}
