//! OpenTelemetry traces, exported over OTLP/HTTP (protobuf) when `traces.otlp_endpoint`
//! is set. A registration is a `notify` span, the child of the producer's span when
//! `POST /notify` carries a W3C `traceparent`; each attempt is an `attempt` span, the
//! child of its registration's span, whose `traceparent` the notification keeps in its
//! spec for that; each delivery carries a `traceparent` naming its attempt's span. Both
//! spans carry the notification's `id`. Off (the default), nothing is kept or sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Status, TraceContextExt, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Tracer};
use opentelemetry_sdk::Resource;
use tracing::{Level, Metadata};
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::filter::{FilterFn, Filtered};
use tracing_subscriber::{Layer as _, Registry};

use crate::config::TraceSettings;
use crate::domain::{AttemptReport, Outcome};

/// The `tracing` layer that turns the exported spans into OpenTelemetry spans.
pub type Layer = Filtered<OpenTelemetryLayer<Registry, Tracer>, FilterFn<Exported>, Registry>;
type Exported = fn(&Metadata<'_>) -> bool;

/// Whether spans are exported: read on every registration and delivery.
static ON: AtomicBool = AtomicBool::new(false);

/// The running export; `shutdown` sends what is still queued.
pub struct Export {
    provider: SdkTracerProvider,
}

impl Export {
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "traces: the last spans were not all sent");
        }
    }
}

/// The layer and the export, when an endpoint is configured. The exporter sends from
/// its own thread, so this is called before the runtime starts.
pub fn start(settings: &TraceSettings) -> anyhow::Result<Option<(Layer, Export)>> {
    let Some(endpoint) = &settings.otlp_endpoint else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| {
            anyhow::anyhow!("traces.otlp_endpoint (POSTBACK_TRACES_OTLP_ENDPOINT): {e}")
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        )
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("postback"))
        .with_location(false)
        .with_threads(false)
        .with_filter(FilterFn::new(exported as Exported));
    ON.store(true, Ordering::Relaxed);
    Ok(Some((layer, Export { provider })))
}

/// The spans exported, and the events in them from `info` up; not the rest of the logs.
fn exported(meta: &Metadata<'_>) -> bool {
    if meta.is_span() {
        matches!(meta.name(), "notify" | "attempt")
    } else {
        *meta.level() <= Level::INFO
    }
}

pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The span of one registration, the child of the producer's `traceparent` when it
/// names a valid span (otherwise the root of a new trace); its `id` is recorded later.
/// None when spans are not exported.
pub fn registration(traceparent: Option<&str>) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!("notify", id = tracing::field::Empty);
    if let Some(parent) = traceparent {
        let _ = span.set_parent(remote(parent));
    }
    span
}

/// Makes `span` the child of the span `traceparent` names (one kept in a spec).
pub fn continue_from(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(parent) = traceparent.filter(|_| enabled()) {
        let _ = span.set_parent(remote(parent));
    }
}

/// The W3C `traceparent` of `span`: what a registration keeps and a delivery carries.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let context = span.context();
    let sc = context.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// Puts how an attempt ended on its span: the response status, the outcome, and an
/// error status when it failed.
pub fn attempt_ended(span: &tracing::Span, report: &AttemptReport) {
    if !enabled() {
        return;
    }
    if let Some(status) = report.status {
        span.set_attribute("http.response.status_code", i64::from(status));
    }
    span.set_attribute("outcome", report.outcome.as_str());
    if report.outcome != Outcome::Delivered {
        let why = report
            .error
            .clone()
            .unwrap_or_else(|| report.outcome.as_str().into());
        span.set_status(Status::error(why));
    }
}

/// The context a `traceparent` value names (an invalid one names none, so the span it
/// is given to starts a trace of its own).
fn remote(traceparent: &str) -> opentelemetry::Context {
    struct One<'a>(&'a str);
    impl Extractor for One<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            (key == "traceparent").then_some(self.0)
        }
        fn keys(&self) -> Vec<&str> {
            vec!["traceparent"]
        }
    }
    TraceContextPropagator::new().extract(&One(traceparent))
}
