//! The HTTP API: routes, shared state, authentication, the body size limit, and the
//! OpenAPI document generated from the handlers' annotations (`/openapi.json`, browsed at
//! `/docs`). A route is registered and documented in one step, so none goes undocumented.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{middleware, Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Notify;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

mod audit;
mod auth;
pub(crate) mod batch;
mod body;
mod browser;
mod bulk;
mod dead_letters;
mod endpoints;
mod error;
mod events;
mod events_batch;
mod fanout;
pub mod intake;
mod limits;
mod me;
mod notifications;
mod notify;
mod offload;
mod overview;
pub(crate) mod paging;
mod parse;
mod permits;
mod portal_links;
mod registration;
mod resend;
mod rules;
mod server;
mod signing_keys;
mod subscriptions;
mod ui;
mod view;

pub use error::ApiError;
pub use fanout::run as run_fanout;
pub use rules::{RegistrationRules, TenantRules};
pub use server::{serve, ServerLimits};

use crate::config::ServerSettings;
use crate::delivery::policy::Policy;
use crate::delivery::scheduler::Pipeline;
use crate::delivery::signing::Signer;
use crate::endpoints::pauses::EndpointPauses;
use crate::endpoints::tallies::EndpointTallies;
use crate::observability::metrics;
use crate::observability::ops_events::OpsEvents;
use crate::store::{Stats, Store};
use crate::tenancy::access::TokenTable;
use crate::tenancy::portal::PortalKey;
use body::BodyLimit;
use error::ErrorBody;
use view::{DegradedView, Health};

/// What every handler can reach: one shared value, so that what the router hands each
/// request (a clone) is one reference count, however many tenants' keys the signer holds.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What `AppState` shares.
pub struct Shared {
    pub store: Arc<dyn Store>,
    /// Wakes this instance's scheduler when a registration becomes the earliest due.
    pub wake: Arc<Notify>,
    /// What registrations and replays are checked against.
    pub rules: Arc<RegistrationRules>,
    /// The delivery policy, for the circuit states in `/metrics`.
    pub delivery: Arc<Policy>,
    pub metrics: PrometheusHandle,
    /// Whether the delivery pipeline runs, for `/readyz`.
    pub pipeline: Pipeline,
    /// Label open-circuit series with their endpoint (`metrics.host_labels`).
    pub host_labels: bool,
    /// `server.body_timeout`: a body not read whole by then is answered `408`.
    pub body_timeout: std::time::Duration,
    /// The SHA-256 of `server.metrics_token`: `/metrics` needs it when set.
    pub metrics_token: Option<[u8; 32]>,
    /// What signs each tenant's deliveries, for `GET /signing-keys`.
    pub signer: Signer,
    /// Seals the list routes' cursors (`paging`).
    pub cursors: Arc<paging::CursorSeal>,
    /// Told of each registration's endpoint.
    pub endpoints: Arc<EndpointTallies>,
    /// Told of each pause and resume, at once.
    pub pauses: Arc<EndpointPauses>,
    /// Tells the ops URLs of each pause and resume by hand.
    pub ops: Arc<OpsEvents>,
    /// Signs the portal links `POST /portal-links` issues, when `server.portal_secret`
    /// is set.
    pub portal: Option<Arc<PortalKey>>,
    /// What retention keeps of each tenant, for `/stats`.
    pub retention: crate::lifecycle::retention::Policy,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "postback",
        description = "Webhook notification dispatcher with tiered retries and dead-lettering. \
            Every route but the health checks, the metrics and the signing keys needs `Authorization: Bearer <token>`."
    ),
    modifiers(&BearerAuth),
    components(schemas(ErrorBody))
)]
struct ApiDoc;

/// Declares the bearer-token scheme the protected routes name.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

pub fn router(state: AppState, tokens: Arc<TokenTable>, server: &ServerSettings) -> Router {
    let guard = Guard {
        limit: limits::Limit::new(server.max_concurrent_requests),
        tokens,
    };
    let protected =
        protected_routes(server).route_layer(middleware::from_fn_with_state(guard, guard_route));
    let (routes, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(protected)
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(prometheus))
        .routes(routes!(signing_keys::list))
        .split_for_parts();
    routes
        .merge(SwaggerUi::new("/docs").url("/openapi.json", doc))
        .merge(ui::routes())
        .fallback(|| async { ApiError::not_found("route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(
            BodyLimit {
                bytes: server.max_body_bytes,
                key: rules::MAX_REQUEST_KEY,
            }
            .layer(),
        )
        .layer(middleware::from_fn(frame))
        .with_state(state)
}

/// What a protected route needs before its handler runs.
#[derive(Clone)]
struct Guard {
    limit: limits::Limit,
    tokens: Arc<TokenTable>,
}

/// A place among `server.max_concurrent_requests`, held until the request is answered
/// (without one, `503 overloaded` at once, before the body is read), then a token
/// granted the route's actions (`auth::authorize`). One middleware rather than one
/// each: every layer of the router costs every request a clone of the services below
/// it and a boxed future.
async fn guard_route(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    let place = guard.limit.place();
    let authorized = place.and_then(|place| {
        auth::authorize(&guard.tokens, &mut request)?;
        Ok(place)
    });
    match authorized {
        Ok(_place) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// What every request and answer goes through, in one middleware (as `guard_route`):
/// headers larger than `limits::MAX_HEADER_BYTES` refused, every request counted by
/// method, route pattern and status, with its time (`postback_api_requests_total`,
/// `postback_api_request_duration_seconds`), a JSON answer ended with a newline
/// (`json_line`), and the headers that tell a browser how to treat it (`browser`).
async fn frame(request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().clone();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let response = match limits::check_headers(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    };
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let status = response.status().as_u16();
    metrics::api_request(method.as_str(), route, status, started.elapsed());
    let mut response = json_line(response).await;
    browser::set_security_headers(response.headers_mut());
    response
}

/// Ends every JSON answer (a route's, an error, the OpenAPI document) with a newline,
/// as a line of text does, so that `curl` leaves the next prompt on a line of its own.
/// The answers are whole in memory already; what else is answered passes as it is.
async fn json_line(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut line = Vec::with_capacity(bytes.len() + 1);
    line.extend_from_slice(&bytes);
    line.push(b'\n');
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(line))
}

/// The routes that need a bearer token, with their documentation.
fn protected_routes(server: &ServerSettings) -> OpenApiRouter<AppState> {
    // A batch may be larger than one registration.
    let batch_limit = BodyLimit {
        bytes: server.max_batch_bytes,
        key: "server.max_batch_bytes",
    };
    let batch = OpenApiRouter::new()
        .routes(routes!(batch::register_batch))
        .routes(routes!(events_batch::publish_batch))
        .layer(batch_limit.layer());
    OpenApiRouter::new()
        .merge(batch)
        .routes(routes!(notify::notify))
        .routes(routes!(notifications::list))
        .routes(routes!(notifications::show, notifications::cancel))
        .routes(routes!(resend::resend))
        .routes(routes!(resend::attempt_now))
        .routes(routes!(resend::resend_matching))
        .routes(routes!(dead_letters::list))
        .routes(routes!(dead_letters::show, dead_letters::discard))
        .routes(routes!(dead_letters::replay))
        .routes(routes!(dead_letters::replay_matching))
        .routes(routes!(dead_letters::purge))
        .routes(routes!(overview::stats))
        .routes(routes!(overview::overview))
        .routes(routes!(audit::list))
        .routes(routes!(endpoints::list))
        .routes(routes!(endpoints::show))
        .routes(routes!(endpoints::pause))
        .routes(routes!(endpoints::resume))
        .routes(routes!(me::show))
        .routes(routes!(portal_links::issue))
        .routes(routes!(subscriptions::create, subscriptions::list))
        .routes(routes!(
            subscriptions::show,
            subscriptions::update,
            subscriptions::delete
        ))
        .routes(routes!(events::publish, events::list))
        .routes(routes!(events::show))
        .routes(routes!(events::resend))
        .routes(routes!(events::topics))
}

/// Prometheus metrics: attempts, durations, scheduler lateness, queue depths per state
/// and shard, deferrals, circuits, store errors, retention. Open, unless
/// `server.metrics_token` is set: then it needs `Authorization: Bearer <metrics_token>`.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "getMetrics",
    tag = "operations",
    responses(
        (status = 200, description = "Prometheus text exposition format", content_type = "text/plain"),
        (status = 401, description = "`server.metrics_token` is set, and the request does not present it", body = ErrorBody)
    )
)]
async fn prometheus(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(expected) = &state.metrics_token {
        if !auth::presents(&headers, expected) {
            let presented = auth::presented(&headers).is_some();
            return Err(ApiError::unauthorized(presented));
        }
    }
    let stats = state.store.stats(None).await;
    metrics::store_up(stats.is_ok());
    metrics::store_durability(state.store.durability().kind.name());
    match stats {
        Ok(stats) => queue_metrics(&stats),
        Err(_) => metrics::store_error("stats"),
    }
    metrics::open_circuits(&state.delivery.open_circuits(), state.host_labels);
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    ))
}

/// Liveness: the process is up.
#[utoipa::path(get, path = "/healthz", operation_id = "getHealth", tag = "operations", responses((status = 200, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        degraded_shards: Vec::new(),
        durability: None,
    })
}

/// Readiness: the store answers, some shard can take a new notification (its primary
/// has the replicas `store.replica_acks` asks for), and the delivery pipeline runs. The
/// shards that cannot are named, and what the store keeps through a restart of its
/// server, as found at start.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "getReadiness",
    tag = "operations",
    responses(
        (status = 200, body = Health),
        (status = 503, description = "The store is unreachable (`store_unavailable`), no shard's primary has the replicas `store.replica_acks` asks for (`replicas_missing`), or the delivery pipeline has stopped (`pipeline_stopped`)", body = ErrorBody)
    )
)]
async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if !state.pipeline.is_running() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "pipeline_stopped",
            "the delivery pipeline has stopped: this instance delivers nothing",
        ));
    }
    state.store.ping().await?;
    Ok(Json(Health {
        status: "ready",
        degraded_shards: DegradedView::all(state.rules.placement.health()),
        durability: Some(state.store.durability().into()),
    }))
}

/// Queue depths per shard and what retention deleted, from the store's counts.
fn queue_metrics(stats: &Stats) {
    for (shard, s) in stats.shards.iter().enumerate() {
        let states = [
            ("scheduled", s.scheduled),
            ("in_flight", s.in_flight),
            ("dead", s.dead),
            ("finished", s.finished),
        ];
        for (state, n) in states {
            metrics::queue_depth(shard, state, n);
        }
    }
    for (shard, r) in stats.replication.iter().enumerate() {
        metrics::replication(shard, r.replicas, r.lag_bytes);
    }
    let t = &stats.trimmed;
    metrics::retention_deleted("dead_by_age", t.dead_by_age);
    metrics::retention_deleted("dead_by_count", t.dead_by_count);
    metrics::retention_deleted("finished_by_age", t.finished_by_age);
}
