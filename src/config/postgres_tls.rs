//! `PostgresTarget`: `store.postgres_url` read as libpq reads it, TLS included. libpq's
//! `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`), `sslrootcert`,
//! `sslcert` and `sslkey` are taken out of the URL (or the `key=value` string) and read
//! here, since `tokio_postgres` knows only the first three modes and none of the files;
//! the rest goes to `tokio_postgres` as written. The files are read once, at start-up:
//! the URL's, or else `store.tls_ca_file` and `store.tls_cert_file`/`_key_file`.
//!
//! The modes mean what they mean to libpq: `prefer` (libpq's default, and so postback's)
//! encrypts when the server offers TLS and goes on in clear when it does not, checking no
//! certificate; `require` insists on TLS and checks no certificate; both check the chain,
//! as `verify-ca` does, when roots are given. `verify-ca` checks that the certificate
//! chains to the roots, `verify-full` that it also names the host connected to.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use percent_encoding::percent_decode_str;

use super::store_tls::{Identity, Roots, StoreTls, CA_FILE, CERT_FILE, KEY_FILE};
use super::StoreSettings;

pub const KEY: &str = "store.postgres_url (POSTBACK_STORE_POSTGRES_URL)";
const URL_ROOTS: &str = "store.postgres_url's sslrootcert";
const URL_CERT: &str = "store.postgres_url's sslcert";
const URL_KEY: &str = "store.postgres_url's sslkey";

/// libpq's `sslmode`, as postback takes it (`allow`, which tries clear first, is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> anyhow::Result<Self> {
        Ok(match text {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            "allow" => bail!("{KEY}: sslmode=allow (clear first) is not supported; use prefer, or better require, verify-ca or verify-full"),
            other => bail!("{KEY}: sslmode={other} is none of disable, prefer, require, verify-ca, verify-full"),
        })
    }

    /// As the URL writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// The database postback connects to, and how it speaks TLS to it.
#[derive(Debug, Clone)]
pub struct PostgresTarget {
    /// The URL's connection settings but TLS's.
    pub config: tokio_postgres::Config,
    pub mode: SslMode,
    /// Whether roots were given (the URL's `sslrootcert`, or `store.tls_ca_file`): then
    /// `prefer` and `require` check the chain too, as libpq's do.
    pub roots_given: bool,
    /// What the server's certificate is checked against, and the client certificate.
    pub tls: StoreTls,
}

/// The TLS parameters of a URL, as written.
#[derive(Default)]
struct Written {
    mode: Option<String>,
    rootcert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

impl PostgresTarget {
    /// `url` (a `postgres://` URL or a libpq `key=value` string) with the TLS keys of
    /// `settings`; the files read and checked. Errors name the key, never a password.
    pub fn read(url: &str, settings: &StoreSettings) -> anyhow::Result<Self> {
        let (rest, written) = split(url)?;
        let config: tokio_postgres::Config = rest
            .parse()
            .with_context(|| format!("{KEY}: not a Postgres URL"))?;
        let system = written.rootcert.as_deref() == Some("system");
        let mode = match &written.mode {
            Some(mode) => SslMode::parse(mode)?,
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if system && mode < SslMode::VerifyFull {
            bail!(
                "{KEY}: sslrootcert=system asks for sslmode=verify-full, as libpq does (it is {})",
                mode.name()
            );
        }
        let roots = roots(written.rootcert.as_deref(), settings)?;
        let roots_given = roots.is_some();
        let identity = identity(&written, settings)?;
        let tls = StoreTls {
            roots: roots.unwrap_or(Roots::System),
            identity,
            ..StoreTls::default()
        };
        Ok(Self {
            config,
            mode,
            roots_given,
            tls,
        })
    }
}

/// The roots: the URL's `sslrootcert` (`system`: the system's), or `store.tls_ca_file`;
/// none when neither is given.
fn roots(written: Option<&str>, s: &StoreSettings) -> anyhow::Result<Option<Roots>> {
    Ok(match (written, &s.tls_ca_file) {
        (Some(_), Some(_)) => {
            bail!("{CA_FILE}: set it or the sslrootcert of store.postgres_url, not both")
        }
        (Some("system"), None) => Some(Roots::System),
        (Some(path), None) => Some(Roots::file(Path::new(path), URL_ROOTS)?),
        (None, Some(path)) => Some(Roots::file(path, CA_FILE)?),
        (None, None) => None,
    })
}

/// The client certificate: the URL's `sslcert` and `sslkey`, or `store.tls_cert_file`
/// and `_key_file`.
fn identity(written: &Written, s: &StoreSettings) -> anyhow::Result<Option<Identity>> {
    let url = (written.cert.as_deref(), written.key.as_deref());
    let settings = (s.tls_cert_file.as_deref(), s.tls_key_file.as_deref());
    let files = match (url, settings) {
        ((None, None), (None, None)) => return Ok(None),
        ((Some(cert), Some(key)), (None, None)) => (
            (PathBuf::from(cert), URL_CERT),
            (PathBuf::from(key), URL_KEY),
        ),
        ((None, None), (Some(cert), Some(key))) => (
            (cert.to_path_buf(), CERT_FILE),
            (key.to_path_buf(), KEY_FILE),
        ),
        ((Some(_), None), _) => bail!("{KEY}: sslcert needs sslkey"),
        ((None, Some(_)), _) => bail!("{KEY}: sslkey needs sslcert"),
        ((None, None), (Some(_), None)) => bail!("{KEY_FILE}: required with store.tls_cert_file"),
        ((None, None), (None, Some(_))) => bail!("{CERT_FILE}: required with store.tls_key_file"),
        _ => bail!("{CERT_FILE}: set it or the sslcert and sslkey of store.postgres_url, not both"),
    };
    let ((cert, cert_setting), (key, key_setting)) = files;
    Identity::files((&cert, cert_setting), (&key, key_setting)).map(Some)
}

/// The TLS keys to read here, taken out of a URL's query or a `key=value` string.
const TAKEN: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// `url` without its TLS keys, and what they were.
fn split(url: &str) -> anyhow::Result<(String, Written)> {
    let mut written = Written::default();
    let mut take = |key: &str, value: String| match key {
        "sslmode" => written.mode = Some(value),
        "sslrootcert" => written.rootcert = Some(value),
        "sslcert" => written.cert = Some(value),
        _ => written.key = Some(value),
    };
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let rest = match is_url {
        true => split_query(url, &mut take)?,
        false => split_key_values(url, &mut take)?,
    };
    Ok((rest, written))
}

/// A URL without the `TAKEN` parameters of its query, each handed to `take` decoded.
fn split_query(url: &str, take: &mut impl FnMut(&str, String)) -> anyhow::Result<String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(url.to_string());
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |t: &str| percent_decode_str(t).decode_utf8().map(|d| d.into_owned());
        let name = decode(name).map_err(|_| anyhow!("{KEY}: a parameter's name is not UTF-8"))?;
        match TAKEN.contains(&name.as_str()) {
            true => take(
                &name,
                decode(value).map_err(|_| anyhow!("{KEY}: {name} is not UTF-8"))?,
            ),
            false => kept.push(pair),
        }
    }
    Ok(match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", kept.join("&")),
    })
}

/// A libpq `key=value` string without the `TAKEN` keys, each handed to `take` unquoted.
fn split_key_values(text: &str, take: &mut impl FnMut(&str, String)) -> anyhow::Result<String> {
    let mut kept = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let key_len = rest
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(rest.len());
        let key = &rest[..key_len];
        let after = rest[key_len..].trim_start();
        let after = after
            .strip_prefix('=')
            .ok_or_else(|| anyhow!("{KEY}: not a Postgres URL: `{key}` has no value"))?
            .trim_start();
        let (value, used) = value(after).ok_or_else(|| {
            anyhow!("{KEY}: not a Postgres URL: the value of `{key}` is not closed")
        })?;
        match TAKEN.contains(&key) {
            true => take(key, value),
            false => kept.push(format!("{key}={}", &after[..used])),
        }
        rest = after[used..].trim_start();
    }
    Ok(kept.join(" "))
}

/// The value `text` starts with, unquoted and unescaped, and how many bytes it took:
/// `'quoted'` or up to the next white space, `\` escaping the next character.
fn value(text: &str) -> Option<(String, usize)> {
    let quoted = text.starts_with('\'');
    let mut value = String::new();
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => value.push(chars.next()?.1),
            '\'' if quoted => return Some((value, i + 1)),
            c if c.is_whitespace() && !quoted => return Some((value, i)),
            c => value.push(c),
        }
    }
    (!quoted).then_some((value, text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_ok(url: &str) -> (String, Option<String>, Option<String>) {
        let (rest, w) = split(url).unwrap();
        (rest, w.mode, w.rootcert)
    }

    #[test]
    fn the_tls_keys_are_taken_out_of_either_form() {
        let (rest, mode, root) = split_ok(
            "postgres://pb:pw@db:5432/pb?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        );
        assert_eq!(rest, "postgres://pb:pw@db:5432/pb?application_name=x");
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/etc/ca.pem"));
        let (rest, mode, root) =
            split_ok("host=db sslmode = verify-ca sslrootcert='/etc/my ca.pem' password='a b'");
        assert_eq!(rest, "host=db password='a b'");
        assert_eq!(mode.as_deref(), Some("verify-ca"));
        assert_eq!(root.as_deref(), Some("/etc/my ca.pem"));
        assert_eq!(split_ok("postgres://db/pb").0, "postgres://db/pb");
    }

    #[test]
    fn the_mode_is_libpqs_prefer_unless_given_and_allow_is_refused() {
        let read = |url: &str| PostgresTarget::read(url, &StoreSettings::default());
        assert_eq!(read("postgres://db/pb").unwrap().mode, SslMode::Prefer);
        assert_eq!(
            read("host=db sslmode=verify-full").unwrap().mode,
            SslMode::VerifyFull
        );
        let system = read("postgres://db/pb?sslrootcert=system").unwrap();
        assert_eq!(system.mode, SslMode::VerifyFull);
        for bad in [
            "postgres://db/pb?sslmode=allow",
            "postgres://db/pb?sslmode=bogus",
            "postgres://db/pb?sslrootcert=system&sslmode=require",
            "postgres://db/pb?sslcert=/c.pem",
            "postgres://db/pb?sslrootcert=/nonexistent/ca.pem",
        ] {
            let err = read(bad).unwrap_err().to_string();
            assert!(err.contains("store.postgres_url"), "{bad}: {err}");
        }
    }
}
