//! postback: a webhook notification dispatcher with tiered retries and dead-lettering.
//!
//! A notification is registered through the API (`api`, which `access` guards: tokens,
//! their tenants and roles; `portal` issues and checks merchants' short-lived links) and kept by a store (`store`:
//! Redis, a Redis Cluster, or an embedded file). The rules of its life (when it is due,
//! what an attempt leads to, when it is dead) are pure functions in `lifecycle`, which
//! every store applies. The scheduler (`scheduler`) claims it when due, under the
//! delivery policy (`policy`: quotas, per-host limits, circuits), and holds it to one of
//! the instance's delivery slots (`slots`), of which no tenant takes every one
//! (`tenant_shares`); the sender (`sender`, signed by `signing`) posts it over a
//! connection `egress` opens (guarded by `ssrf`, through a proxy if one is set), and the
//! settler (`settler`) records
//! the outcome; when the store does not answer, each waits as `backoff` says.
//! What attempts show of each endpoint's health is added up per instance
//! (`endpoint_tallies`) and kept by the store. `sweep` deletes what retention has expired; `metrics`, `telemetry` (logs) and `traces`
//! (OpenTelemetry spans of registrations and attempts) are what operators read. `app` wires them together for `postback serve`; `cli` is the
//! command line, the operator's client of the API.
//!
//! The public modules are those the binary, the benchmark harness and the integration
//! tests use (an instance run in process with `app::App`, the store's roles, the domain
//! types, the configuration, portal links signed with a secret of a test's choosing);
//! the rest are internal.

pub(crate) mod access;
pub(crate) mod api;
pub mod app;
pub(crate) mod backoff;
pub mod cli;
pub mod clock;
pub mod config;
pub mod domain;
pub(crate) mod egress;
pub(crate) mod endpoint_pauses;
pub(crate) mod endpoint_tallies;
pub(crate) mod events;
pub(crate) mod lifecycle;
pub(crate) mod metrics;
pub(crate) mod ops_events;
pub mod policy;
pub mod portal;
pub(crate) mod reservations;
pub(crate) mod scheduler;
pub(crate) mod sender;
pub(crate) mod settler;
pub(crate) mod signing;
pub(crate) mod slots;
pub mod ssrf;
pub mod store;
pub(crate) mod sweep;
pub(crate) mod telemetry;
pub(crate) mod tenant_shares;
pub(crate) mod traces;

/// Installs the TLS crypto provider the HTTP client uses; once per process, before any
/// delivery (`postback serve` does it; an instance run in process needs it too).
pub use sender::install_crypto_provider;
