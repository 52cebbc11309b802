//! `Now`: the store's clock, read once per transition (Redis `TIME`, or the embedded
//! store's host clock), and how it is rounded: up where a due time is computed from it,
//! so that nothing is early; down where it is compared with due times or stamps a finish.

/// A reading of the store's clock, in µs since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Now(i64);

impl Now {
    pub fn from_micros(us: i64) -> Self {
        Self(us)
    }

    /// A reading of `ms` (the caller's reckoning of the store's clock, in ms).
    pub fn from_millis(ms: i64) -> Self {
        Self(ms.saturating_mul(1000))
    }

    /// The host's clock (`clock::now_us`): the embedded store's.
    pub fn read() -> Self {
        Self(crate::clock::now_us())
    }

    /// In ms, rounded up: for due times computed from it.
    pub fn up(self) -> i64 {
        self.0.saturating_add(999).div_euclid(1000)
    }

    /// In ms, rounded down: for comparing with due times.
    pub fn down(self) -> i64 {
        self.0.div_euclid(1000)
    }

    pub fn micros(self) -> i64 {
        self.0
    }
}
