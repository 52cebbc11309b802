//! The conformance suite: what a user sees of the pipeline (delivery, retries, dead
//! letters, cancels, resends, the delivery policy, leases, tenants, audit, lists, batches,
//! ordering keys, success rules, signing, tenants' TLS, tenants kept apart), the same on
//! every store. `scripts/test.sh` runs it on a standalone Redis, a Redis Cluster
//! (`POSTBACK_TEST_BACKEND=cluster`), the embedded store
//! (`POSTBACK_TEST_BACKEND=embedded`) and Postgres (`POSTBACK_TEST_BACKEND=postgres`), and
//! the part of it that walks every path of a store (registration, claims, settles,
//! retries, dead letters, replays, cancels, lists, leases, retention, ordering keys,
//! batches, the audit log, endpoints' pauses: `delivery`, `dead_letters`, `cancel`,
//! `browse`, `lease`, `retention`, `ordering`, `batch`, `audit`, `pauses`, `resend`)
//! over TLS with a client certificate, on a standalone Redis
//! (`POSTBACK_TEST_BACKEND=redis-tls`) and on Postgres at `sslmode=verify-full`
//! (`POSTBACK_TEST_BACKEND=postgres-tls`).

#[path = "../support/mod.rs"]
mod support;

mod audit;
mod batch;
mod browse;
mod cancel;
mod circuits;
mod cycles;
mod dead_letters;
mod delivery;
mod egress_proxy;
mod endpoints;
mod events;
mod failing_endpoints;
mod fleet_policy;
mod holds;
mod hostile_tenants;
mod lease;
mod ops_events;
mod ordering;
mod pauses;
mod policy;
mod portal;
mod portal_roles;
mod producer_bytes;
mod resend;
mod responses;
mod retention;
mod signing_keys;
mod success_rules;
mod tenant_tls;
mod tenant_volume;
mod tenants;
