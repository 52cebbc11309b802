//! One instance as its users and operators meet it: the API and its errors, the command
//! line, its log, metrics, the overview, the OpenAPI document, hostile input, shutdown and a
//! `kill -9`. `scripts/test.sh` runs it on a standalone Redis and on the embedded store.

#[path = "../support/mod.rs"]
mod support;

mod api;
mod cli;
mod crash;
mod hostile_input;
mod logs;
mod metrics;
mod openapi;
mod overview;
mod shutdown;
