//! Delivery: the path of an attempt, from the claim to its recorded outcome. The
//! scheduler (`scheduler`) claims what is due and holds each claimed notification until
//! it may go: when it is due and when its rate key's quota allows (`reservations`), under
//! the delivery policy (`policy`: quotas, per-host limits, circuits), in one of the
//! instance's delivery slots (`slots`), of which no tenant takes every one
//! (`tenant_shares`). The sender (`sender`) signs the request (`signing`) and posts it
//! over a connection `egress` opens (past the SSRF guard, `ssrf`, through a proxy if one
//! is set); the settler (`settler`) records the outcome in batches.

pub(crate) mod egress;
pub mod policy;
pub(crate) mod reservations;
pub(crate) mod scheduler;
pub(crate) mod sender;
pub(crate) mod settler;
pub(crate) mod signing;
pub(crate) mod slots;
pub mod ssrf;
pub(crate) mod tenant_shares;
