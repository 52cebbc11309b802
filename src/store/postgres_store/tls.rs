//! TLS to Postgres: one connector for every connection of the store (the pool, the
//! `LISTEN` connection, the migrations), made from `PostgresTarget` as libpq's `sslmode`
//! says (`config::postgres_tls`); what a refused connection tells an operator; and the
//! one warning at start-up when the mode protects against less than an active attacker.

use std::net::IpAddr;

use tokio_postgres::config::{Host, SslMode as WireMode};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::postgres_tls::KEY;
use crate::config::{PostgresTarget, SslMode, StoreSettings};
use crate::store::tls::{client_config, client_refused, Check, Named, Refused};

/// What every connection of the store is made with.
#[derive(Clone)]
pub struct Connection {
    pub config: tokio_postgres::Config,
    pub tls: MakeRustlsConnect,
    target: PostgresTarget,
}

impl Connection {
    /// The connection settings and TLS of `url`, with the configured timeout.
    pub fn of(url: &str, settings: &StoreSettings) -> anyhow::Result<Self> {
        let target = PostgresTarget::read(url, settings)?;
        let mut config = target.config.clone();
        config.connect_timeout(settings.connect_timeout);
        config.application_name("postback");
        config.ssl_mode(match target.mode {
            SslMode::Disable => WireMode::Disable,
            SslMode::Prefer => WireMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
        });
        let check = match target.mode {
            SslMode::VerifyFull => Check::ChainAndName,
            SslMode::VerifyCa => Check::Chain,
            _ if target.roots_given => Check::Chain,
            _ => Check::Nothing,
        };
        let tls = MakeRustlsConnect::new(client_config(&target.tls, check)?.as_ref().clone());
        Ok(Self {
            config,
            tls,
            target,
        })
    }

    /// `e` explained when TLS refused it, or the server asked for a client certificate.
    pub fn refused(&self, e: &tokio_postgres::Error) -> Option<Refused> {
        if let Some(db) = e.as_db_error() {
            let wants_certificate = db.code()
                == &tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                && db.message().contains("certificate");
            return wants_certificate
                .then(|| Refused(client_refused(&self.target.tls, db.message())));
        }
        let named = Named {
            name: self.hosts().join(","),
            from: format!("{KEY}: sslmode={}", self.target.mode.name()),
            rename: None,
        };
        Refused::of(e, &self.target.tls, &named)
    }

    /// Says once what the mode leaves open, unless every host is this machine's.
    pub fn warn_weak_mode(&self) {
        let mode = self.target.mode;
        let local = |h: &Host| match h {
            Host::Unix(_) => true,
            Host::Tcp(name) => {
                name == "localhost" || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
        };
        if mode == SslMode::VerifyFull || self.config.get_hosts().iter().all(local) {
            return;
        }
        let leaves_open = match mode {
            SslMode::Disable => "everything, the password included, crosses the network in clear",
            SslMode::Prefer if !self.target.roots_given => "TLS when the server offers it, clear when it does not, and no certificate checked: it stops a passive listener at most, nothing that can answer in the server's place",
            SslMode::Require if !self.target.roots_given => "encrypted, but no certificate checked: anything that can answer in the server's place is taken for it",
            _ => "the certificate's chain is checked but not its name: any server with a certificate of that CA is taken for this one",
        };
        tracing::warn!(
            sslmode = mode.name(),
            "{KEY}: sslmode={}: {leaves_open}; a payment platform runs sslmode=verify-full",
            mode.name()
        );
    }

    fn hosts(&self) -> Vec<String> {
        let each = self.config.get_hosts().iter().map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        });
        each.collect()
    }
}
