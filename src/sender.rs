//! The sender: makes one HTTP attempt for a claimed notification and says how it went.
//! One pooled client; redirects are not followed; the response is read up to a small
//! cap; success is a 2xx status (and the expected body, when one is asked for).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};
use reqwest::redirect::Policy;

use crate::config::DeliverySettings;
use crate::domain::{JobId, JobSpec, Outcome};
use crate::signing::{signature_header, Secret};

/// `postback/<version>`, sent as the `User-Agent` of every delivery.
pub const USER_AGENT_VALUE: &str = concat!("postback/", env!("CARGO_PKG_VERSION"));

/// How one attempt went, before it is recorded.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub response: String,
}

pub struct Sender {
    client: reqwest::Client,
    secrets: Vec<Secret>,
    max_timeout: Duration,
    response_bytes: usize,
}

/// Makes rustls use the `ring` provider. Call once before any TLS client is built;
/// later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Sender {
    pub fn new(settings: &DeliverySettings, secrets: Vec<Secret>) -> anyhow::Result<Self> {
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .redirect(Policy::none())
            .connect_timeout(settings.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(settings.concurrency.min(64))
            .tcp_nodelay(true)
            .user_agent(USER_AGENT_VALUE)
            .build()?;
        Ok(Self {
            client,
            secrets,
            max_timeout: settings.max_timeout,
            response_bytes: settings.response_bytes,
        })
    }

    /// Makes one attempt. Never fails: every problem is an outcome to record.
    pub async fn send(&self, id: &JobId, spec: &JobSpec) -> AttemptReport {
        let started = Instant::now();
        let timeout = Duration::from_millis(spec.timeout_ms).min(self.max_timeout);
        let result = self
            .client
            .post(&spec.url)
            .headers(self.headers(id, spec))
            .body(spec.body.clone())
            .timeout(timeout)
            .send()
            .await;
        let report = match result {
            Ok(response) => self.judge(response, spec).await,
            Err(e) => failure(None, describe(&e, timeout), String::new()),
        };
        AttemptReport {
            duration_ms: started.elapsed().as_millis() as u64,
            ..report
        }
    }

    fn headers(&self, id: &JobId, spec: &JobSpec) -> HeaderMap {
        let id = id.to_string();
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut h = HeaderMap::with_capacity(spec.headers.len() + 5);
        let mut put = |name: HeaderName, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.insert(name, v);
            }
        };
        put(CONTENT_TYPE, &spec.content_type);
        put(USER_AGENT, USER_AGENT_VALUE);
        put(HeaderName::from_static("webhook-id"), &id);
        put(
            HeaderName::from_static("webhook-timestamp"),
            &timestamp.to_string(),
        );
        if !self.secrets.is_empty() {
            let sig = signature_header(&self.secrets, &id, timestamp, spec.body.as_bytes());
            put(HeaderName::from_static("webhook-signature"), &sig);
        }
        for (name, value) in &spec.headers {
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                put(name, value);
            }
        }
        h
    }

    async fn judge(&self, mut response: reqwest::Response, spec: &JobSpec) -> AttemptReport {
        let status = response.status();
        let mut body = Vec::new();
        let mut read_error = None;
        while body.len()
            < self
                .response_bytes
                .max(spec.expect_body.as_ref().map_or(0, |e| e.len() + 64))
        {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(e) => {
                    read_error = Some(format!("reading the response: {}", root_cause(&e)));
                    break;
                }
            }
        }
        let text = String::from_utf8_lossy(&body);
        let code = Some(status.as_u16());
        let snippet = truncate(&text, self.response_bytes);
        if let Some(err) = read_error {
            return failure(code, err, snippet);
        }
        if status.is_redirection() {
            return failure(code, "redirect not followed".into(), snippet);
        }
        if !status.is_success() {
            return failure(code, format!("HTTP {}", status.as_u16()), snippet);
        }
        if let Some(expected) = &spec.expect_body {
            if text.trim() != expected {
                return failure(code, format!("response body is not `{expected}`"), snippet);
            }
        }
        AttemptReport {
            outcome: Outcome::Delivered,
            status: code,
            error: None,
            duration_ms: 0,
            response: snippet,
        }
    }
}

fn failure(status: Option<u16>, error: String, response: String) -> AttemptReport {
    AttemptReport {
        outcome: Outcome::Failed,
        status,
        error: Some(error),
        duration_ms: 0,
        response,
    }
}

fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        format!("timeout after {}", humantime::format_duration(timeout))
    } else if e.is_connect() {
        format!("connect: {}", root_cause(e))
    } else {
        format!("request: {}", root_cause(e))
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// At most `max` bytes of `text`, cut on a character boundary.
fn truncate(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncates_on_a_character_boundary() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("ok", 10), "ok");
    }
}
