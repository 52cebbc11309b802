//! postback: a webhook notification dispatcher with tiered retries and dead-lettering.
//!
//! A notification is registered through the API (`api`), kept by a store (`store`,
//! Redis with one Lua script per transition), claimed when due by the scheduler
//! (`scheduler`), posted by the sender (`sender`, signed by `signing`), and its outcome
//! recorded by the settler (`settler`); `retention` sweeps out what has expired. `app`
//! wires them together for `postback serve`; `cli` is the operator's client of the API.

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod domain;
pub mod lifecycle;
pub mod metrics;
pub mod policy;
pub mod retention;
pub mod scheduler;
pub mod sender;
pub mod settler;
pub mod signing;
pub mod ssrf;
pub mod store;
pub mod telemetry;
