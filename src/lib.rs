//! postback: a webhook notification dispatcher with tiered retries and dead-lettering.
//!
//! The layout follows the path of a notification and what a reader looks for:
//!
//! - `api`: the HTTP routes a notification is registered through, and every operator's
//!   and merchant's route; guarded by `tenancy` (tokens, tenants, roles, portal links).
//! - `domain`: the types that validate on construction (ids, URLs, schedules, keys,
//!   payloads, success rules, placement on shards).
//! - `lifecycle`: the rules of a notification's life (when it is due, what an attempt
//!   leads to, when it is dead, what retention deletes), pure functions every store
//!   applies.
//! - `store`: where notifications are kept, the storage port and its four stores (Redis
//!   or a Redis Cluster, the embedded file, Postgres), each only carrying out what
//!   `lifecycle` decided.
//! - `delivery`: the path of an attempt: the scheduler claims, the policy paces, the
//!   sender signs and posts (past the SSRF guard), the settler records.
//! - `endpoints`: each endpoint's health, failing and paused, and its held
//!   notifications let go.
//! - `events`: events and subscriptions, kept as documents every store keeps.
//! - `observability`: metrics, logs, traces and the operational webhooks.
//! - `sweep`: retention of what expired; `backoff`: how a worker waits for a store that
//!   does not answer; `clock`: the wall clock and ids, which a simulation drives.
//! - `config`: every setting, read and checked; `app` wires an instance together for
//!   `postback serve`; `cli` is the command line, the operator's client of the API.
//!
//! The public modules are those the binary, the benchmark harness and the integration
//! tests use (an instance run in process with `app::App`, the store's roles, the domain
//! types, the configuration, portal links signed with a secret of a test's choosing);
//! the rest are internal.

pub(crate) mod api;
pub mod app;
pub(crate) mod backoff;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod domain;
pub mod endpoints;
pub(crate) mod events;
pub(crate) mod lifecycle;
pub mod observability;
pub mod store;
pub(crate) mod sweep;
pub mod tenancy;

/// Installs the TLS crypto provider the HTTP client uses; once per process, before any
/// delivery (`postback serve` does it; an instance run in process needs it too).
pub use delivery::sender::install_crypto_provider;
