//! Logging: `tracing` to stdout, as text or JSON lines; the level from `RUST_LOG` when
//! set, otherwise from `log.level`.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

pub fn init(settings: &LogSettings) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => {
            EnvFilter::try_new(&v).map_err(|e| anyhow::anyhow!("RUST_LOG: {e}"))?
        }
        _ => EnvFilter::try_new(&settings.level)
            .map_err(|e| anyhow::anyhow!("log.level (POSTBACK_LOG_LEVEL): {e}"))?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match settings.format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    }
    .map_err(|e| anyhow::anyhow!("logging: {e}"))
}
