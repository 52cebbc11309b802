//! Logging and traces: `tracing` to stdout, as text or JSON lines, the level from
//! `RUST_LOG` when set, otherwise from `log.level`, in colour only on a terminal and
//! without `NO_COLOR` (a file, systemd or `docker logs` gets plain text); and, when
//! `traces.otlp_endpoint` is set, OpenTelemetry spans (`crate::observability::traces`), whatever the
//! log level. A text line is its message, then its fields as `name=value`, every value
//! written one way (`Fields`): bare, or quoted with escapes when it holds a space, a
//! control character or nothing.

use std::fmt;
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, LogSettings, TraceSettings};
use crate::observability::traces::{self, Export};

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
        LogFormat::Text => registry
            .with(lines.fmt_fields(Fields).with_filter(filter))
            .try_init(),
    }
    .map_err(|e| anyhow::anyhow!("logging: {e}"))?;
    Ok(export)
}

/// How a text line writes an event's or a span's fields: the message first, then
/// `name=value` for each other field, a value bare unless it must be quoted.
struct Fields;

impl<'w> MakeVisitor<Writer<'w>> for Fields {
    type Visitor = FieldsVisitor<'w>;

    fn make_visitor(&self, writer: Writer<'w>) -> Self::Visitor {
        FieldsVisitor {
            writer,
            message: String::new(),
            fields: String::new(),
        }
    }
}

/// The fields of one event or span, gathered, then written message first.
struct FieldsVisitor<'w> {
    writer: Writer<'w>,
    message: String,
    fields: String,
}

impl Visit for FieldsVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, &format!("{value:?}"));
    }
}

impl FieldsVisitor<'_> {
    fn record(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
            return;
        }
        if !self.fields.is_empty() {
            self.fields.push(' ');
        }
        self.fields.push_str(field.name());
        self.fields.push('=');
        self.fields.push_str(&written(value));
    }
}

/// A value as a line writes it: bare, or in quotes with Rust's escapes when it is empty
/// or holds a space or a control character (so that a line stays one line, and a value
/// one word).
fn written(value: &str) -> std::borrow::Cow<'_, str> {
    let quote = value.is_empty() || value.chars().any(|c| c.is_whitespace() || c.is_control());
    match quote {
        true => format!("{value:?}").into(),
        false => value.into(),
    }
}

impl VisitOutput<fmt::Result> for FieldsVisitor<'_> {
    fn finish(mut self) -> fmt::Result {
        let gap = match self.message.is_empty() || self.fields.is_empty() {
            true => "",
            false => " ",
        };
        write!(self.writer, "{}{gap}{}", self.message, self.fields)
    }
}

impl VisitFmt for FieldsVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_quoted_only_when_it_holds_a_space_or_nothing() {
        assert_eq!(written("default"), "default");
        assert_eq!(written(r#"{"host":"a"}"#), r#"{"host":"a"}"#);
        assert_eq!(written("HTTP 503"), r#""HTTP 503""#);
        assert_eq!(written(""), r#""""#);
        assert_eq!(written("a\nb\u{1b}"), r#""a\nb\u{1b}""#);
    }
}
