//! Where notifications are kept. The port is a trait per role (`roles.rs`: the queue,
//! operator actions, reads, rate reservations, the audit log, endpoints' health, fleet
//! messaging) over the
//! values in `types.rs`, so that the pipeline does not depend on which backend keeps the
//! data: `redis_store` (a standalone Redis, through Sentinel, or a Redis Cluster),
//! `postgres_store` (instances sharing one database) and `embedded` (one instance, on
//! local disk); in each, every change is atomic and is worked out by `lifecycle`. What every backend shares: how a spec is stored
//! (`spec`), the counts per tenant (`tenant_counts`), the queue's lists (`listing`),
//! cursors, the audit log's entries, endpoints' records and the
//! collections of documents that subscriptions and events are kept as (`collections`).

pub mod audit;
pub mod collections;
mod cursor;
mod embedded;
mod keys;
mod listing;
mod postgres_store;
mod redis_store;
mod roles;
mod spec;
mod tenant_counts;
mod tls;
mod types;

pub use self::embedded::{EmbeddedStore, MemoryDisk, FILE_NAME as EMBEDDED_FILE};
pub use self::postgres_store::{Migrated, PostgresStore};
pub use self::redis_store::RedisStore;
pub use crate::endpoints::health::{EndpointPause, EndpointRecord, EndpointTally};
pub use crate::lifecycle::{Again, Cancelled, FinishedStates, JobState, JobStatus, LetGo};
pub use audit::{
    AuditAction, AuditEntry, AuditFilter, AuditPage, AuditPosition, AuditRecord, UrlChange,
};
pub use cursor::{Cursor, WalkCursor};
pub use listing::{shown, ListPage, Listed, Paused};
pub use roles::{
    AuditLog, EndpointHealth, FleetMessaging, Intake, OperatorActions, Queue, RateReservations,
    Reads, Store,
};
pub use tenant_counts::{window_of, OUTCOME_WINDOWS, OUTCOME_WINDOW_MS};
pub use types::*;
