//! `Attempt`: the record of one delivery attempt, as kept in a notification's history.

use serde::{Deserialize, Serialize};

/// How an attempt ended, as far as the schedule is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The callback accepted the notification; no more attempts.
    Delivered,
    /// The callback failed; retry at the next tier, or dead-letter when none is left.
    Failed,
    /// The callback said it is gone for good (410): dead-letter at once.
    Gone,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Failed => "failed",
            Outcome::Gone => "gone",
        }
    }
}

/// One entry of the attempt history. `at` is when the attempt started (ms since the
/// epoch, Redis time); `status` is `None` and `error` says why when no response came.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub at: i64,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub response: String,
}
