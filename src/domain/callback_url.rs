//! `CallbackUrl`: where a notification is delivered. Only absolute `http` and `https`
//! URLs with a host are accepted, and, unless private networks are allowed, no literal
//! internal address (a host name is checked when it is resolved, at send time).

use std::fmt;

use url::{Host, Url};

use super::FieldError;
use crate::delivery::ssrf;

/// Which destinations a callback may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destinations {
    /// Public addresses only (the SSRF guard is on).
    PublicOnly,
    /// Any address, internal ones included (`delivery.allow_private_networks`).
    Any,
}

impl Destinations {
    /// What `delivery.allow_private_networks` allows.
    pub fn of(allow_private_networks: bool) -> Self {
        if allow_private_networks {
            Self::Any
        } else {
            Self::PublicOnly
        }
    }
}

const MAX_LEN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackUrl(Url);

impl CallbackUrl {
    /// Validates `raw`; errors are reported against the field `url`.
    pub fn parse(raw: &str, allowed: Destinations) -> Result<Self, FieldError> {
        let fail = |msg: &str| FieldError::new("url", msg);
        if raw.len() > MAX_LEN {
            return Err(fail(&format!("must be at most {MAX_LEN} characters")));
        }
        // The URL parser would quietly percent-encode or drop these; a callback that
        // contains them is a producer's bug, not an address.
        if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(fail("must not contain spaces or control characters"));
        }
        if !raw.contains("://") {
            return Err(fail(
                "must be a whole URL, starting with http:// or https://",
            ));
        }
        let url = Url::parse(raw).map_err(|e| fail(&format!("not a valid URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(fail("scheme must be http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(fail("must name a host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(fail(
                "must not carry credentials (user:password@); send them in `headers`",
            ));
        }
        let literal = match url.host() {
            Some(Host::Ipv4(ip)) => Some(ip.into()),
            Some(Host::Ipv6(ip)) => Some(ip.into()),
            _ => None,
        };
        if let Some(ip) = literal.filter(|ip| !ssrf::is_public(*ip)) {
            if allowed == Destinations::PublicOnly {
                return Err(fail(&format!(
                    "{ip} is a private or internal address; callbacks go to public addresses \
                     only, unless the instance allows private networks \
                     ({})",
                    ssrf::ALLOW_PRIVATE
                )));
            }
        }
        Ok(Self(url))
    }

    /// The host, used as the default rate-limit key.
    pub fn host(&self) -> &str {
        self.0.host_str().unwrap_or_default()
    }

    /// The URL as parsed.
    pub fn as_url(&self) -> &Url {
        &self.0
    }

    /// Whether it is `https`.
    pub fn is_https(&self) -> bool {
        self.0.scheme() == "https"
    }
}

impl fmt::Display for CallbackUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https() {
        for ok in [
            "http://example.com/cb",
            "https://pay.example.com:8443/n?x=1",
        ] {
            assert!(
                CallbackUrl::parse(ok, Destinations::PublicOnly).is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn rejects_other_schemes_and_garbage() {
        for bad in [
            "ftp://example.com",
            "file:///etc/passwd",
            "example.com",
            "",
            "http://",
            "mailto:a@b.c",
            "http://e.com/a\u{0}",
            " http://e.com/",
            "http://e.com/a b",
            "http://e.com/\ttab",
        ] {
            let err = CallbackUrl::parse(bad, Destinations::Any).unwrap_err();
            assert_eq!(err.field, "url", "{bad}");
        }
        for without_scheme in ["example.com/cb", "127.0.0.1:9000/cb", "localhost:9000/cb"] {
            let err = CallbackUrl::parse(without_scheme, Destinations::Any).unwrap_err();
            assert_eq!(
                err.to_string(),
                "url: must be a whole URL, starting with http:// or https://"
            );
        }
        let long = format!("http://e.com/{}", "a".repeat(3000));
        assert!(CallbackUrl::parse(&long, Destinations::Any).is_err());
    }

    #[test]
    fn literal_internal_addresses_need_private_networks_allowed() {
        for internal in [
            "http://127.0.0.1/cb",
            "http://0x7f.1/cb",
            "http://[::ffff:169.254.169.254]/",
            "http://10.0.0.1:8080/",
        ] {
            let err = CallbackUrl::parse(internal, Destinations::PublicOnly).unwrap_err();
            assert!(err.to_string().contains("private"), "{internal}: {err}");
            assert!(CallbackUrl::parse(internal, Destinations::Any).is_ok());
        }
        assert!(CallbackUrl::parse("http://localhost/", Destinations::PublicOnly).is_ok());
    }
}
