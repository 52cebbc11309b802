//! What runs around the pipeline, each on the store it is about: start-up and
//! configuration, a Redis Cluster and shard ownership, replicas' acknowledgements and
//! failovers (behind an address a failover moves, through Sentinel, on a cluster), Redis
//! outages, overload, upgrades of stored data, the embedded store's file, the Redis, embedded
//! and Postgres stores compared (`differential`), the SSRF guard, traces, the deployment
//! files, and how the suite itself waits (`waits`).

#[path = "../support/mod.rs"]
mod support;

mod app;
mod cluster;
mod degraded;
mod deploy;
mod differential;
mod docs;
mod edges;
mod embedded;
mod lying_sentinel;
mod outage;
mod overload;
mod postgres;
mod replication;
mod sentinel;
mod shard_ownership;
mod ssrf;
mod startup;
mod tls;
mod traces;
mod upgrade;
mod waits;
