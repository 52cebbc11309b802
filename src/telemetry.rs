//! Logging and traces: `tracing` to stdout, as text or JSON lines, the level from
//! `RUST_LOG` when set, otherwise from `log.level`, in colour only on a terminal and
//! without `NO_COLOR` (a file, systemd or `docker logs` gets plain text); and, when
//! `traces.otlp_endpoint` is set, OpenTelemetry spans (`crate::traces`), whatever the
//! log level.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, LogSettings, TraceSettings};
use crate::traces::{self, Export};

/// Installs the global subscriber; the trace export, when there is one, to shut down
/// after the runtime so that its last spans are sent.
pub fn init(log: &LogSettings, traces: &TraceSettings) -> anyhow::Result<Option<Export>> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => {
            EnvFilter::try_new(&v).map_err(|e| anyhow::anyhow!("RUST_LOG: {e}"))?
        }
        _ => EnvFilter::try_new(&log.level)
            .map_err(|e| anyhow::anyhow!("log.level (POSTBACK_LOG_LEVEL): {e}"))?,
    };
    let (spans, export) = traces::start(traces)?.unzip();
    let colour = std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let lines = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_ansi(colour);
    let registry = tracing_subscriber::registry().with(spans);
    match log.format {
        LogFormat::Json => registry
            .with(lines.json().flatten_event(true).with_filter(filter))
            .try_init(),
        LogFormat::Text => registry.with(lines.with_filter(filter)).try_init(),
    }
    .map_err(|e| anyhow::anyhow!("logging: {e}"))?;
    Ok(export)
}
