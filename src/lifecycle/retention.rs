//! How much retention deletes per store call, the same on every backend: dead letters
//! past `retention.dead_max_age` or beyond `retention.dead_max_count`, and delivered or
//! cancelled notifications past `retention.finished_max_age`. Which ones is chosen by
//! score inside the store (the oldest first); these budgets bound the work of one call.

/// Most notifications one sweep call deletes from each finished index (of a shard); a
/// call that deletes this many is followed by another.
pub const SWEEP_BUDGET: usize = 500;

/// Most notifications a settle of `settled` attempts deletes on the way: twice as many as
/// it can have finished, plus some, so that retention keeps up with a busy store without
/// a sweep.
pub fn settle_budget(settled: usize) -> usize {
    2 * settled + 16
}
