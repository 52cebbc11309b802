//! Certificates for a store reached over TLS in a benchmark (`--tls`): a CA of the run's
//! own and a server certificate it signs for `127.0.0.1` and `localhost`, made with the
//! `openssl` command in a temporary directory, readable by the `postgres` user where the
//! harness runs as root (Postgres refuses a key another user owns).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::postgres::server_user;

pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub fn make() -> anyhow::Result<Self> {
        let certs = Self {
            dir: tempfile::tempdir()?,
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        certs.openssl(
            &[
                "req",
                "-x509",
                "-days",
                "2",
                "-subj",
                "/CN=postback-bench CA",
            ],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.crt"],
        )?;
        certs.openssl(
            &["req", "-subj", "/CN=127.0.0.1"],
            &ec,
            &["-keyout", "server.key", "-out", "server.csr"],
        )?;
        std::fs::write(
            certs.path("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )?;
        certs.openssl(
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
            ],
            &["-CAkey", "ca.key", "-CAcreateserial", "-extfile", "san.ext"],
            &["-out", "server.crt"],
        )?;
        std::fs::set_permissions(
            certs.path("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )?;
        if let Some((uid, gid)) = server_user() {
            for file in ["", "server.key", "server.crt", "ca.crt"] {
                std::os::unix::fs::chown(certs.path(file), Some(uid), Some(gid))?;
            }
        }
        Ok(certs)
    }

    fn openssl(&self, a: &[&str], b: &[&str], c: &[&str]) -> anyhow::Result<()> {
        let status = Command::new("openssl")
            .args(a.iter().chain(b).chain(c))
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("openssl must be installed for --tls")?;
        if !status.success() {
            bail!("openssl {} failed", a.join(" "));
        }
        Ok(())
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The CA postback checks the server's certificate against.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// The server's certificate chain and key.
    pub fn server(&self) -> (PathBuf, PathBuf) {
        (self.path("server.crt"), self.path("server.key"))
    }
}
