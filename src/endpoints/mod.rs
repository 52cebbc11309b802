//! Endpoints (a tenant's callback origins) and their health: what each instance sees of
//! them (`tallies`: registrations and attempts, added up every second), what the fleet
//! saw and what it decides (`health`: the record the store keeps, and the one arithmetic
//! that tells an endpoint failing and pauses it), and which are paused, as this instance
//! holds their notifications and lets them go again (`pauses`); what a circuit this
//! instance closed held back, let go (`circuits`).

pub(crate) mod circuits;
pub mod health;
pub(crate) mod pauses;
pub(crate) mod tallies;
