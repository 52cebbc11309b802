//! The sender: makes one HTTP attempt for a claimed notification and says how it went.
//! A pooled client for the instance and one for each tenant with TLS of its own, both
//! connecting through `egress` (the SSRF guard, the proxy, TLS); redirects are not
//! followed; the response is read up to a small cap; success is what the notification's
//! `SuccessRule` says (any 2xx by default); `410 Gone` gives up at once, and
//! `Retry-After` on 429 or 503 is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::{timeout_at, Instant, Instant as Deadline};

use crate::config::{DeliverySettings, TenantConfig, TenantTls};
use crate::delivery::egress::{self, Connector, Network, ProxyUrl};
use crate::delivery::signing::Signer;
use crate::delivery::ssrf::Blocked;
use crate::domain::{
    kept_headers, truncate, AttemptReport, JobId, JobSpec, Outcome, Reach, Tenant,
};
use crate::observability::traces;

/// `postback/<version>`, sent as the `User-Agent` of every delivery.
pub const USER_AGENT_VALUE: &str = concat!("postback/", env!("CARGO_PKG_VERSION"));

/// The headers every attempt of notification `id` carries, in the order they are set (a
/// producer's header replaces one of the same name set before it): user agent, content
/// type, `webhook-id`, then the producer's. Each attempt adds its own `webhook-timestamp`,
/// `webhook-signature` and `traceparent`. `GET /notifications/{id}` shows the same list.
pub fn request_headers(id: &str, spec: &JobSpec, mut put: impl FnMut(HeaderName, HeaderValue)) {
    put(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    let mut text = |name: HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            put(name, v);
        }
    };
    text(CONTENT_TYPE, &spec.content_type);
    text(HeaderName::from_static("webhook-id"), id);
    for (name, value) in &spec.headers {
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            text(name, value);
        }
    }
}

/// Sets `name` to `value` when `value` can be a header's.
fn insert_text(h: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(name, v);
    }
}

type HttpClient = Client<Connector, Full<Bytes>>;

pub struct Sender {
    client: HttpClient,
    /// The clients of tenants with TLS of their own (a client certificate, roots).
    tenant_clients: BTreeMap<Tenant, HttpClient>,
    /// Tenants whose deliveries go over `https` only.
    https_only: BTreeSet<Tenant>,
    signer: Signer,
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
    /// A sender with `settings`, through `proxy` if there is one, signing with `signer`,
    /// each of `tenants` with its own TLS set-up and `https` rule.
    pub fn new(
        settings: &DeliverySettings,
        route: Route<'_>,
        signer: Signer,
        tenants: &BTreeMap<Tenant, TenantConfig>,
    ) -> anyhow::Result<Self> {
        install_crypto_provider();
        let mut tenant_clients = BTreeMap::new();
        for (tenant, t) in tenants {
            if let Some(tls) = &t.tls {
                let client = client(settings, route.clone(), Some(tls))
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
            client: client(settings, route, None)?,
            tenant_clients,
            https_only,
            signer,
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
        let Some(uri) = url.and_then(|u| u.as_str().parse::<Uri>().ok()) else {
            return AttemptReport::blocked(format!("the stored URL cannot be read: {}", spec.url));
        };
        if self.https_only.contains(&spec.tenant) && !spec.url.starts_with("https:") {
            let why = format!(
                "the tenant `{}` requires https: not sent over http",
                spec.tenant
            );
            return AttemptReport::blocked(why);
        }
        let timeout = Duration::from_millis(spec.timeout_ms).min(self.max_timeout);
        let deadline = Deadline::now() + timeout;
        let client = self
            .tenant_clients
            .get(&spec.tenant)
            .unwrap_or(&self.client);
        let mut request = Request::new(Full::new(Bytes::from(spec.body.clone())));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        *request.headers_mut() = self.headers(id, spec);
        let report = match timeout_at(deadline, client.request(request)).await {
            Ok(Ok(response)) => self.judge(response, spec, deadline).await,
            Ok(Err(e)) => transport_failure(&e),
            Err(_) => AttemptReport::failure(None, timed_out(timeout), String::new()),
        };
        AttemptReport {
            duration_ms: started.elapsed().as_millis() as u64,
            ..report
        }
    }

    fn headers(&self, id: &JobId, spec: &JobSpec) -> HeaderMap {
        let id = id.to_string();
        let timestamp = crate::clock::system_now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut h = HeaderMap::with_capacity(spec.headers.len() + 6);
        h.insert(
            HeaderName::from_static("webhook-timestamp"),
            HeaderValue::from(timestamp),
        );
        if let Some(sig) = self
            .signer
            .header(&spec.tenant, &id, timestamp, spec.body.as_bytes())
        {
            insert_text(&mut h, HeaderName::from_static("webhook-signature"), &sig);
        }
        request_headers(&id, spec, |name, value| {
            h.insert(name, value);
        });
        // Exported, the attempt's own span replaces any the producer asked for.
        if let Some(traceparent) = traces::traceparent(&tracing::Span::current()) {
            insert_text(&mut h, HeaderName::from_static("traceparent"), &traceparent);
        }
        h
    }

    async fn judge(
        &self,
        mut response: Response<Incoming>,
        spec: &JobSpec,
        deadline: Deadline,
    ) -> AttemptReport {
        let status = response.status();
        let healthy = !(status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error());
        let retry_after = self.retry_after(&response);
        let headers = response.headers().iter();
        let headers = kept_headers(headers.map(|(name, value)| (name.as_str(), value.as_bytes())));
        let report = self.read_and_judge(&mut response, spec, deadline).await;
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
    fn retry_after(&self, response: &Response<Incoming>) -> Option<Duration> {
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
                .duration_since(crate::clock::system_now())
                .unwrap_or_default(),
        };
        Some(wait.min(self.max_retry_after))
    }

    async fn read_and_judge(
        &self,
        response: &mut Response<Incoming>,
        spec: &JobSpec,
        deadline: Deadline,
    ) -> AttemptReport {
        let status = response.status();
        let kept = self.response_bytes_of(&spec.tenant);
        let mut body = Vec::new();
        let mut read_error = None;
        while body.len() < kept.max(spec.success.body_bytes()) {
            match timeout_at(deadline, response.body_mut().frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Some(chunk) = frame.data_ref() {
                        body.extend_from_slice(chunk);
                    }
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    read_error = Some(format!("reading the response: {}", root_cause(&e)));
                    break;
                }
                Err(_) => {
                    read_error = Some("reading the response: the attempt's timeout passed".into());
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

/// The HTTP client of the deliveries: pooled, through `egress` (the SSRF guard unless
/// private networks are allowed, the proxy of `delivery.proxy`), with a tenant's `tls`
/// — its client certificate, its roots instead of the system's — when it has one.
/// Where deliveries go: through `proxy` if there is one, over the host's network, or
/// over a simulation's (`network`).
#[derive(Clone, Default)]
pub struct Route<'a> {
    pub proxy: Option<&'a ProxyUrl>,
    pub network: Option<Arc<dyn Network>>,
}

fn client(
    settings: &DeliverySettings,
    route: Route<'_>,
    tls: Option<&TenantTls>,
) -> anyhow::Result<HttpClient> {
    let connector = Connector::new(
        !settings.allow_private_networks,
        settings.connect_timeout,
        route.proxy.cloned(),
        egress::client_config(tls)?,
    );
    let connector = match route.network {
        Some(network) => connector.over(network),
        None => connector,
    };
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(settings.concurrency.min(64))
        .build(connector))
}

/// No response: refused by the SSRF guard (the host is not to blame), or a connection
/// error (it is).
fn transport_failure(e: &hyper_util::client::legacy::Error) -> AttemptReport {
    if let Some(blocked) = find_cause::<Blocked>(e) {
        return AttemptReport::blocked(blocked.to_string());
    }
    let what = if e.is_connect() { "connect" } else { "request" };
    AttemptReport::failure(None, format!("{what}: {}", root_cause(e)), String::new())
}

fn timed_out(timeout: Duration) -> String {
    format!("timeout after {}", humantime::format_duration(timeout))
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

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
