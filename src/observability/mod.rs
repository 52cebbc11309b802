//! What operators read: Prometheus metrics (`metrics`), logs (`telemetry`), OpenTelemetry
//! spans of registrations and attempts (`traces`), and the operational webhooks that tell
//! an operator and a merchant of dead letters and failing endpoints (`ops_events`).

pub(crate) mod metrics;
pub(crate) mod ops_events;
pub(crate) mod telemetry;
pub(crate) mod traces;
