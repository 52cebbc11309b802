//! The sender: makes one HTTP attempt for a claimed notification and says how it went.
//! A pooled client for the instance and one for each tenant with TLS of its own; no proxy; redirects are not followed; unless private networks are
//! allowed, it connects only to public addresses (`ssrf`); the response is read up to a
//! small cap; success is what the notification's `SuccessRule` says (any 2xx by default);
//! `410 Gone` gives up at once, and `Retry-After` on 429 or 503 is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use reqwest::redirect::Policy;
use reqwest::{Method, StatusCode};

use crate::config::{DeliverySettings, TenantConfig, TenantTls};
use crate::domain::{
    kept_headers, truncate, AttemptReport, JobId, JobSpec, Outcome, Reach, Tenant,
};
use crate::signing::Signer;
use crate::ssrf::{self, Blocked};
use crate::traces;

/// `postback/<version>`, sent as the `User-Agent` of every delivery.
pub const USER_AGENT_VALUE: &str = concat!("postback/", env!("CARGO_PKG_VERSION"));

pub struct Sender {
    client: reqwest::Client,
    /// The clients of tenants with TLS of their own (a client certificate, roots).
    tenant_clients: BTreeMap<Tenant, reqwest::Client>,
    /// Tenants whose deliveries go over `https` only.
    https_only: BTreeSet<Tenant>,
    signer: Signer,
    public_only: bool,
    max_timeout: Duration,
    max_retry_after: Duration,
    /// Response bytes kept per attempt: `delivery.response_bytes`, or a tenant's own.
    response_bytes: usize,
    tenant_response_bytes: BTreeMap<Tenant, usize>,
}

/// Makes rustls use the `ring` provider. Call once before any TLS client is built;
/// later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Sender {
    /// A sender with `settings`, signing with `signer`, each of `tenants` with its own
    /// TLS set-up and `https` rule.
    pub fn new(
        settings: &DeliverySettings,
        signer: Signer,
        tenants: &BTreeMap<Tenant, TenantConfig>,
    ) -> anyhow::Result<Self> {
        install_crypto_provider();
        let mut tenant_clients = BTreeMap::new();
        for (tenant, t) in tenants {
            if let Some(tls) = &t.tls {
                let client = client(settings, Some(tls))
                    .map_err(|e| anyhow::anyhow!("tenants.{tenant}: its TLS set-up: {e}"))?;
                tenant_clients.insert(tenant.clone(), client);
            }
        }
        let https_only = tenants
            .iter()
            .filter(|(_, t)| t.require_https)
            .map(|(tenant, _)| tenant.clone())
            .collect();
        Ok(Self {
            client: client(settings, None)?,
            tenant_clients,
            https_only,
            signer,
            public_only: !settings.allow_private_networks,
            max_timeout: settings.max_timeout,
            max_retry_after: settings.max_retry_after,
            response_bytes: settings.response_bytes,
            tenant_response_bytes: tenants
                .iter()
                .filter_map(|(tenant, t)| Some((tenant.clone(), t.response_bytes?)))
                .collect(),
        })
    }

    /// Makes one attempt to `url`, the spec's URL as read for the delivery's target (`None`
    /// if it cannot be read). Never fails: every problem is an outcome to record.
    pub async fn send(&self, id: &JobId, spec: &JobSpec, url: Option<&url::Url>) -> AttemptReport {
        let started = Instant::now();
        let Some(url) = url else {
            return AttemptReport::blocked(format!("the stored URL cannot be read: {}", spec.url));
        };
        if let Some(blocked) = self.blocked_literal(url) {
            return AttemptReport::blocked(blocked.to_string());
        }
        if self.https_only.contains(&spec.tenant) && !spec.url.starts_with("https:") {
            let why = format!(
                "the tenant `{}` requires https: not sent over http",
                spec.tenant
            );
            return AttemptReport::blocked(why);
        }
        let timeout = Duration::from_millis(spec.timeout_ms).min(self.max_timeout);
        let client = self
            .tenant_clients
            .get(&spec.tenant)
            .unwrap_or(&self.client);
        let mut request = reqwest::Request::new(Method::POST, url.clone());
        *request.headers_mut() = self.headers(id, spec);
        *request.body_mut() = Some(spec.body.clone().into());
        *request.timeout_mut() = Some(timeout);
        let result = client.execute(request).await;
        let report = match result {
            Ok(response) => self.judge(response, spec).await,
            Err(e) => transport_failure(&e, timeout),
        };
        AttemptReport {
            duration_ms: started.elapsed().as_millis() as u64,
            ..report
        }
    }

    /// A callback whose host is a literal internal address, while the guard is on. (Host
    /// names are checked by the resolver.)
    fn blocked_literal(&self, url: &url::Url) -> Option<Blocked> {
        if !self.public_only {
            return None;
        }
        let ip: IpAddr = match url.host()? {
            url::Host::Ipv4(ip) => ip.into(),
            url::Host::Ipv6(ip) => ip.into(),
            url::Host::Domain(_) => return None,
        };
        (!ssrf::is_public(ip)).then(|| Blocked::new(&ip.to_string(), &[ip]))
    }

    fn headers(&self, id: &JobId, spec: &JobSpec) -> HeaderMap {
        let id = id.to_string();
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut h = HeaderMap::with_capacity(spec.headers.len() + 5);
        h.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        h.insert(
            HeaderName::from_static("webhook-timestamp"),
            HeaderValue::from(timestamp),
        );
        let mut put = |name: HeaderName, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.insert(name, v);
            }
        };
        put(CONTENT_TYPE, &spec.content_type);
        put(HeaderName::from_static("webhook-id"), &id);
        if let Some(sig) = self
            .signer
            .header(&spec.tenant, &id, timestamp, spec.body.as_bytes())
        {
            put(HeaderName::from_static("webhook-signature"), &sig);
        }
        for (name, value) in &spec.headers {
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                put(name, value);
            }
        }
        // Exported, the attempt's own span replaces any the producer asked for.
        if let Some(traceparent) = traces::traceparent(&tracing::Span::current()) {
            put(HeaderName::from_static("traceparent"), &traceparent);
        }
        h
    }

    async fn judge(&self, mut response: reqwest::Response, spec: &JobSpec) -> AttemptReport {
        let status = response.status();
        let healthy = !(status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error());
        let retry_after = self.retry_after(&response);
        let headers = response.headers().iter();
        let headers = kept_headers(headers.map(|(name, value)| (name.as_str(), value.as_bytes())));
        let report = self.read_and_judge(&mut response, spec).await;
        AttemptReport {
            reach: Reach::Sent { healthy },
            retry_after,
            headers,
            ..report
        }
    }

    fn response_bytes_of(&self, tenant: &Tenant) -> usize {
        let own = self.tenant_response_bytes.get(tenant);
        own.copied().unwrap_or(self.response_bytes)
    }

    /// The wait a 429 or 503 asks for, in seconds or as an HTTP date, capped.
    fn retry_after(&self, response: &reqwest::Response) -> Option<Duration> {
        if !matches!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        ) {
            return None;
        }
        let raw = response.headers().get(RETRY_AFTER)?.to_str().ok()?.trim();
        let wait = match raw.parse::<u64>() {
            Ok(secs) => Duration::from_secs(secs),
            Err(_) => httpdate::parse_http_date(raw)
                .ok()?
                .duration_since(SystemTime::now())
                .unwrap_or_default(),
        };
        Some(wait.min(self.max_retry_after))
    }

    async fn read_and_judge(
        &self,
        response: &mut reqwest::Response,
        spec: &JobSpec,
    ) -> AttemptReport {
        let status = response.status();
        let kept = self.response_bytes_of(&spec.tenant);
        let mut body = Vec::new();
        let mut read_error = None;
        while body.len() < kept.max(spec.success.body_bytes()) {
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
        let snippet = truncate(&text, kept);
        if let Some(err) = read_error {
            return AttemptReport::failure(code, err, snippet);
        }
        if status.is_redirection() {
            return AttemptReport::failure(code, "redirect not followed".into(), snippet);
        }
        if status == StatusCode::GONE {
            return AttemptReport {
                outcome: Outcome::Gone,
                ..AttemptReport::failure(code, "HTTP 410: gone for good".into(), snippet)
            };
        }
        if !spec.success.accepts_status(status.as_u16()) {
            return AttemptReport::failure(code, format!("HTTP {}", status.as_u16()), snippet);
        }
        if let Some(why) = spec.success.refuses_body(&text) {
            return AttemptReport::failure(code, why, snippet);
        }
        AttemptReport {
            outcome: Outcome::Delivered,
            error: None,
            ..AttemptReport::failure(code, String::new(), snippet)
        }
    }
}

/// The HTTP client of the deliveries: no proxy, no redirects, the SSRF guard unless
/// private networks are allowed; with a tenant's `tls`, its client certificate and its
/// roots instead of the system's.
fn client(settings: &DeliverySettings, tls: Option<&TenantTls>) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder();
    if !settings.allow_private_networks {
        builder = builder.dns_resolver(ssrf::PublicOnlyResolver);
    }
    if let Some(pem) = tls.and_then(|t| t.identity.as_deref()) {
        builder = builder.identity(reqwest::Identity::from_pem(pem)?);
    }
    if let Some(pem) = tls.and_then(|t| t.roots.as_deref()) {
        builder = builder.tls_certs_only(reqwest::Certificate::from_pem_bundle(pem)?);
    }
    Ok(builder
        .no_proxy()
        .redirect(Policy::none())
        .connect_timeout(settings.connect_timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(settings.concurrency.min(64))
        .tcp_nodelay(true)
        .user_agent(USER_AGENT_VALUE)
        .build()?)
}

/// No response: refused by the SSRF guard (the host is not to blame), or a connection
/// error or timeout (it is).
fn transport_failure(e: &reqwest::Error, timeout: Duration) -> AttemptReport {
    if let Some(blocked) = find_cause::<Blocked>(e) {
        return AttemptReport::blocked(blocked.to_string());
    }
    AttemptReport::failure(None, describe(e, timeout), String::new())
}

fn find_cause<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(found) = c.downcast_ref::<T>() {
            return Some(found);
        }
        cause = c.source();
    }
    None
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
