//! The life of a notification, in one place: its record (`Record`, the one format every
//! store keeps), and every transition as a pure function of the record, the event and
//! the store's time (`transitions`). The stores execute these functions and decide
//! nothing themselves: the embedded store inside its write transaction, the Postgres
//! store inside a transaction with the rows locked; the Redis store in Rust, with
//! scripts that write the outcome only if the stored record is still the one it was
//! worked out from (and a claim and retention, which choose by score inside Redis).
//!
//! ```text
//!  register ─▶ scheduled ─claim─▶ in_flight ─settle─▶ delivered | dead | scheduled (next tier)
//!                 ▲   │              │  ├─defer / release / expire─▶ scheduled (no attempt counted)
//!                 │   │              │  ├─wait for circuit─▶ scheduled (no attempt counted) | dead (past its deadline)
//!                 │   └─cancel─▶ cancelled ◀─settle, defer, release (cancel asked for in flight)
//!       dead ─replay─┘        dead ─discard─▶ gone;  finished ─retention─▶ gone
//!   finished ─resend─▶ scheduled;  scheduled ─attempt-now─▶ scheduled (due now)
//! ```

mod record;
pub mod retention;
mod time;
pub mod transitions;

#[cfg(test)]
pub(crate) mod properties;

pub use record::{
    interval_ms, schedule_intervals, schedule_text, wakes_at, FinishedStates, Index, JobState,
    JobStatus, Record, TenantIndex, HELD_OFFSET_MS, WAITING_OFFSET_MS,
};
pub use time::Now;
pub use transitions::{Again, Cancelled, LetGo, NewCycle, Operation, Verdict};
