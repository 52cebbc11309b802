//! `Notification`: a validated request to deliver one webhook, and `JobSpec`, the form
//! in which the store keeps it and hands it to the sender.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    CallbackUrl, ExtraHeaders, JobId, OrderingKey, Payload, Schedule, SuccessRule, Tenant,
};

/// A notification ready to be stored: every field already validated.
#[derive(Debug, Clone)]
pub struct Notification {
    pub id: JobId,
    pub url: CallbackUrl,
    pub payload: Payload,
    pub headers: ExtraHeaders,
    pub schedule: Schedule,
    pub delay: Duration,
    pub timeout: Duration,
    /// What counts as delivered (from `expect_body`, `success` or the profile).
    pub success: SuccessRule,
    /// The configured profile it was registered with, for readers.
    pub profile: Option<String>,
    pub topic: Option<String>,
    pub rate_key: String,
    pub tenant: Tenant,
    /// Attempted after every earlier notification of this key (within the tenant) is
    /// delivered, dead or cancelled.
    pub ordering_key: Option<OrderingKey>,
    /// The W3C `traceparent` of its registration's span, when traces are exported: its
    /// attempts' spans are that span's children.
    pub traceparent: Option<String>,
}

impl Notification {
    /// What the sender needs to make an attempt.
    pub fn spec(&self) -> JobSpec {
        let (body, content_type) = self.payload.clone().into_parts();
        JobSpec {
            url: self.url.to_string(),
            body,
            content_type: content_type.to_string(),
            headers: self.headers.pairs().to_vec(),
            timeout_ms: self.timeout.as_millis() as u64,
            success: self.success.clone(),
            profile: self.profile.clone(),
            topic: self.topic.clone(),
            rate_key: self.rate_key.clone(),
            traceparent: self.traceparent.clone(),
            ordering_key: self.ordering_key.clone(),
            tenant: self.tenant.clone(),
        }
    }
}

/// The stored, immutable part of a notification. Empty optional fields are left out of
/// the stored JSON (every pending notification carries it in Redis).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    pub url: String,
    pub body: String,
    pub content_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    pub timeout_ms: u64,
    #[serde(default, skip_serializing_if = "SuccessRule::is_default")]
    pub success: SuccessRule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    pub rate_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_key: Option<OrderingKey>,
    #[serde(default, skip_serializing_if = "Tenant::is_default")]
    pub tenant: Tenant,
}

impl JobSpec {
    /// Its rate key as a key of its tenant, which names its quota and pauses.
    pub fn quota_key(&self) -> String {
        self.tenant.rate_key(&self.rate_key)
    }

    /// Its ordering key as stores name the key's queue (`OrderingKey::scoped`).
    pub fn ordering(&self) -> Option<String> {
        self.ordering_key.as_ref().map(|k| k.scoped(&self.tenant))
    }

    /// The callback URL's host (empty if the stored URL cannot be read). Every claim
    /// asks (it is the default rate key), so the usual form is read off the text.
    pub fn host(&self) -> String {
        plain_host(&self.url).map_or_else(|| self.target().host, str::to_string)
    }

    /// Where a delivery goes, from one reading of the URL (empty if the stored URL cannot
    /// be read).
    pub fn target(&self) -> Target {
        let Ok(url) = url::Url::parse(&self.url) else {
            return Target::default();
        };
        let host = url.host_str().unwrap_or_default().to_string();
        let endpoint = match url.port_or_known_default() {
            Some(port) => format!("{}://{host}:{port}{}", url.scheme(), url.path()),
            None => format!("{}://{host}{}", url.scheme(), url.path()),
        };
        Target {
            host_key: format!("{} {host}", self.tenant),
            circuit: format!("{} {endpoint}", self.tenant),
            host,
            endpoint,
            url: Some(url),
        }
    }
}

/// The host of `http(s)://host[:port]/…` whose host is a lowercase name or an IPv4
/// address (no user info, no IPv6), as `url` writes such URLs out (`CallbackUrl`), which
/// is what `url` would read; `None` for any other form, to be parsed.
fn plain_host(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority
        .split_once(':')
        .map_or(authority, |(host, _)| host);
    let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-';
    (!host.is_empty() && !authority.contains('@') && host.bytes().all(plain)).then_some(host)
}

/// Where a delivery goes: its host and its endpoint (scheme, host, port and path,
/// without the query; two merchants on one host are two endpoints), the URL read once
/// for the sender, and what the delivery policy keeps per tenant for them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub endpoint: String,
    /// `<tenant> <host>`: what per-host slots and slowness are counted under, so that
    /// one tenant's attempts at a host never fill another tenant's slots there.
    pub host_key: String,
    /// `<tenant> <endpoint>`: what a circuit is kept for, so that one tenant's failures
    /// (or the timeouts it sets) never open another tenant's circuit.
    pub circuit: String,
    pub url: Option<url::Url>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_read_off_a_stored_url_is_the_one_url_reads() {
        let sent = [
            "http://merchant.example.com/hook",
            "https://Merchant.Example.COM:8443/a/b?x=1#f",
            "http://127.0.0.1:9000",
            "http://127.1/",
            "http://0x7f.0.0.1/",
            "https://user:pw@merchant.example.com/hook",
            "http://[::1]:8080/hook",
            "https://bücher.example/",
            "http://example.com.?q=1",
            "https://a-b.example:443/",
            "http://exa%6dple.com/",
            "HTTP://EXAMPLE.COM",
        ];
        for raw in sent {
            let stored = url::Url::parse(raw).unwrap().to_string();
            let spec = JobSpec {
                url: stored.clone(),
                ..spec()
            };
            let read = url::Url::parse(&stored).unwrap();
            assert_eq!(
                spec.host(),
                read.host_str().unwrap(),
                "{raw} stored as {stored}"
            );
        }
        let unreadable = JobSpec {
            url: "not a url".into(),
            ..spec()
        };
        assert_eq!(unreadable.host(), "");
    }

    fn spec() -> JobSpec {
        JobSpec {
            url: String::new(),
            body: String::new(),
            content_type: "application/json".into(),
            headers: Vec::new(),
            timeout_ms: 10_000,
            success: SuccessRule::default(),
            profile: None,
            topic: None,
            rate_key: String::new(),
            traceparent: None,
            ordering_key: None,
            tenant: Tenant::default(),
        }
    }
}
