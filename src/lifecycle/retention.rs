//! What retention deletes, the same on every backend: dead letters past
//! `retention.dead_max_age`, then the oldest beyond `retention.dead_max_count`, and
//! delivered or cancelled notifications past `retention.finished_max_age`, the oldest
//! first, within a budget that bounds the work of one store call. Each tenant's
//! notifications are held to its own limits (`Policy`), counted in its own indexes
//! (`TenantIndex`): one tenant's volume never deletes another's.
//!
//! The embedded and Postgres stores run a `Pass`: it names each cut (`Step`) and the
//! store deletes it and says how many went. Redis chooses inside `trim` of
//! `lua/common.lua`, atomically with the settle that calls it, from these limits and
//! budgets; the differential test holds the three stores to the same choice.

use std::collections::BTreeMap;
use std::time::Duration;

use super::Index;
use crate::domain::Tenant;

/// Most notifications one sweep call deletes from each finished index (of a shard),
/// over every tenant it retains.
pub const SWEEP_BUDGET: usize = 500;

/// Most tenants one sweep call retains, sharing its budget (`sweep_share`).
pub const TENANTS_PER_CALL: usize = 64;

/// Each tenant's share of a sweep call's budget when the call retains `tenants` of them,
/// so that a call's work stays within `SWEEP_BUDGET` however many tenants it goes over.
pub fn sweep_share(tenants: usize) -> usize {
    (SWEEP_BUDGET / tenants.max(1)).max(1)
}

/// Whether a sweep calls again for a tenant whose pass deleted `deleted` with a budget of
/// `budget`: it deleted as many as its budget, so more may be past their limits (at worst
/// one call more than needed).
pub fn sweep_again(deleted: usize, budget: usize) -> bool {
    deleted >= budget
}

/// Most notifications a settle of `settled` attempts deletes on the way: twice as many as
/// it can have finished, plus some, so that retention keeps up with a busy store without
/// a sweep.
pub fn settle_budget(settled: usize) -> usize {
    2 * settled + 16
}

/// What retention keeps, in ms and counts: dead letters' age and count, finished
/// notifications' age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub dead_max_age_ms: i64,
    pub dead_max_count: u64,
    pub finished_max_age_ms: i64,
}

impl Limits {
    /// The limits of `retention.dead_max_age`, `dead_max_count` and `finished_max_age`.
    pub fn new(dead_max_age: Duration, dead_max_count: u64, finished_max_age: Duration) -> Self {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self {
            dead_max_age_ms: ms(dead_max_age),
            dead_max_count,
            finished_max_age_ms: ms(finished_max_age),
        }
    }

    /// Each of `shards` shards' share, where each keeps its own dead letters: the count
    /// divided among them, rounded up.
    pub fn per_shard(self, shards: u32) -> Self {
        Self {
            dead_max_count: self.dead_max_count.div_ceil(u64::from(shards.max(1))),
            ..self
        }
    }

    /// The limits as the Redis scripts take them: dead max age ms, dead max count,
    /// finished max age ms.
    pub fn script_args(&self) -> [i64; 3] {
        let count = i64::try_from(self.dead_max_count).unwrap_or(i64::MAX);
        [self.dead_max_age_ms, count, self.finished_max_age_ms]
    }
}

/// Each tenant's limits: the default (`[retention]`), and those of the tenants that set
/// some of their own (`[tenants.<name>.retention]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    default: Limits,
    tenants: BTreeMap<Tenant, Limits>,
}

impl Policy {
    /// Every tenant held to `default` but those of `tenants`.
    pub fn new(default: Limits, tenants: BTreeMap<Tenant, Limits>) -> Self {
        Self { default, tenants }
    }

    /// The limits `tenant`'s notifications are held to.
    pub fn of(&self, tenant: &Tenant) -> Limits {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }

    /// Each of `shards` shards' share of every tenant's limits (`Limits::per_shard`).
    pub fn per_shard(&self, shards: u32) -> Self {
        Self {
            default: self.default.per_shard(shards),
            tenants: (self.tenants.iter())
                .map(|(t, l)| (t.clone(), l.per_shard(shards)))
                .collect(),
        }
    }
}

impl From<Limits> for Policy {
    fn from(default: Limits) -> Self {
        Self::new(default, BTreeMap::new())
    }
}

/// The passes of a settle at `now_ms` that moved notifications as `moved` says (each one's
/// tenant and the index it went to): one per tenant, held to that tenant's limits, over
/// the indexes the settle moved some of its notifications into, with the budget of as
/// many settles as it had.
pub fn settle_passes<'a>(
    policy: &Policy,
    now_ms: i64,
    moved: impl IntoIterator<Item = (&'a Tenant, Option<Index>)>,
) -> Vec<(Tenant, Pass)> {
    let mut by_tenant: BTreeMap<&Tenant, (usize, bool, bool)> = BTreeMap::new();
    for (tenant, to) in moved {
        let seen = by_tenant.entry(tenant).or_default();
        seen.0 += 1;
        seen.1 |= to == Some(Index::Dead);
        seen.2 |= to == Some(Index::Done);
    }
    by_tenant
        .into_iter()
        .map(|(tenant, (settled, dead, done))| {
            let pass = Pass::settle(policy.of(tenant), now_ms, settled, (dead, done));
            (tenant.clone(), pass)
        })
        .collect()
}

/// One cut of a pass: delete up to `limit` of the oldest notifications of `index`
/// finished at or before `until`, counting each under `counter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub index: Index,
    pub until: i64,
    pub limit: usize,
    pub counter: &'static str,
}

/// What a pass asks its store to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Delete this cut, then tell the pass how many went (`Pass::deleted`).
    Delete(Cut),
    /// Count the dead letters left, then tell the pass (`Pass::counted`).
    CountDead,
    /// Nothing more this call.
    Done,
}

/// Where a pass is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    DeadByAge,
    CountDead,
    /// The oldest dead letters beyond the count, this many.
    DeadByCount(usize),
    FinishedByAge,
    Done,
}

/// One store call's retention, step by step: the dead letters past their age, then the
/// oldest beyond their count, then the finished past their age (each index only when the
/// call touched it), at most `budget` notifications from the dead letters and `budget`
/// from the finished.
#[derive(Debug, Clone)]
pub struct Pass {
    limits: Limits,
    now_ms: i64,
    budget: usize,
    dead: bool,
    finished: bool,
    stage: Stage,
    /// Deleted so far: from the dead letters alone until the pass moves on to the
    /// finished, which come last.
    deleted: usize,
}

impl Pass {
    /// A sweep's pass at `now_ms`: both indexes, `budget` each (`sweep_share`).
    pub fn sweep(limits: Limits, now_ms: i64, budget: usize) -> Self {
        Self::new(limits, now_ms, budget, (true, true))
    }

    /// The pass of a settle of `settled` attempts at `now_ms` that moved notifications
    /// into the dead letters and the finished as `touched` says: only those indexes.
    pub fn settle(limits: Limits, now_ms: i64, settled: usize, touched: (bool, bool)) -> Self {
        Self::new(limits, now_ms, settle_budget(settled), touched)
    }

    fn new(limits: Limits, now_ms: i64, budget: usize, (dead, finished): (bool, bool)) -> Self {
        let mut pass = Self {
            limits,
            now_ms,
            budget,
            dead,
            finished,
            stage: Stage::DeadByAge,
            deleted: 0,
        };
        if !dead {
            pass.stage = pass.after_dead();
        }
        pass
    }

    /// What to do next.
    pub fn next(&self) -> Step {
        match self.stage {
            Stage::DeadByAge => Step::Delete(Cut {
                index: Index::Dead,
                until: self.dead_until(),
                limit: self.budget,
                counter: "dead_by_age",
            }),
            Stage::CountDead => Step::CountDead,
            Stage::DeadByCount(limit) => Step::Delete(Cut {
                index: Index::Dead,
                until: i64::MAX,
                limit,
                counter: "dead_by_count",
            }),
            Stage::FinishedByAge => Step::Delete(Cut {
                index: Index::Done,
                until: self.now_ms.saturating_sub(self.limits.finished_max_age_ms),
                limit: self.budget,
                counter: "finished_by_age",
            }),
            Stage::Done => Step::Done,
        }
    }

    /// How many the last `Step::Delete` deleted.
    pub fn deleted(&mut self, n: usize) {
        self.deleted += n;
        self.stage = match self.stage {
            Stage::DeadByAge if self.deleted < self.budget => Stage::CountDead,
            Stage::DeadByAge | Stage::DeadByCount(_) => self.after_dead(),
            _ => Stage::Done,
        };
    }

    /// How many dead letters are left, as `Step::CountDead` asked.
    pub fn counted(&mut self, dead_left: u64) {
        let excess = dead_left.saturating_sub(self.limits.dead_max_count);
        let limit = usize::try_from(excess)
            .unwrap_or(usize::MAX)
            .min(self.budget - self.deleted);
        self.stage = match limit {
            0 => self.after_dead(),
            limit => Stage::DeadByCount(limit),
        };
    }

    fn after_dead(&self) -> Stage {
        if self.finished {
            Stage::FinishedByAge
        } else {
            Stage::Done
        }
    }

    /// How many notifications the pass deleted so far.
    pub fn total(&self) -> usize {
        self.deleted
    }

    /// Whether the pass deletes dead letters.
    pub fn touched_dead(&self) -> bool {
        self.dead
    }

    /// Dead letters finished at or before this are past their age; what is kept as long
    /// as they are (registrations refused at intake) goes with them.
    pub fn dead_until(&self) -> i64 {
        self.now_ms.saturating_sub(self.limits.dead_max_age_ms)
    }

    /// How many the pass deletes at most from each index, and of what a store forgets
    /// beside notifications.
    pub fn budget(&self) -> usize {
        self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        dead_max_age_ms: 1_000,
        dead_max_count: 2,
        finished_max_age_ms: 5_000,
    };

    /// Runs `pass` against indexes of finish times, deleting from them as each store
    /// does; the notifications deleted, in order, as (index, finish time).
    fn run(mut pass: Pass, dead: &mut Vec<i64>, done: &mut Vec<i64>) -> Vec<(Index, i64)> {
        let mut gone = Vec::new();
        loop {
            match pass.next() {
                Step::Delete(cut) => {
                    let from = if cut.index == Index::Dead {
                        &mut *dead
                    } else {
                        &mut *done
                    };
                    from.sort_unstable();
                    let n = from.iter().take_while(|&&at| at <= cut.until).count();
                    let n = n.min(cut.limit);
                    gone.extend(from.drain(..n).map(|at| (cut.index, at)));
                    pass.deleted(n);
                }
                Step::CountDead => pass.counted(dead.len() as u64),
                Step::Done => return gone,
            }
        }
    }

    #[test]
    fn a_settle_deletes_dead_letters_by_age_then_by_count_then_the_finished() {
        let (mut dead, mut done) = (vec![100, 9_000, 9_500, 9_800, 9_900], vec![1_000, 8_000]);
        let gone = run(
            Pass::settle(LIMITS, 10_000, 1, (true, true)),
            &mut dead,
            &mut done,
        );
        let want = [
            (Index::Dead, 100),
            (Index::Dead, 9_000),
            (Index::Dead, 9_500),
            (Index::Done, 1_000),
        ];
        assert_eq!(gone, want);
        assert_eq!((dead, done), (vec![9_800, 9_900], vec![8_000]));
    }

    #[test]
    fn a_settle_leaves_the_index_it_did_not_touch() {
        let (mut dead, mut done) = (vec![100, 200, 300], vec![1_000]);
        let gone = run(
            Pass::settle(LIMITS, 10_000, 1, (false, true)),
            &mut dead,
            &mut done,
        );
        assert_eq!(gone, [(Index::Done, 1_000)]);
        let gone = run(
            Pass::settle(LIMITS, 10_000, 1, (false, false)),
            &mut dead,
            &mut done,
        );
        assert_eq!(gone, []);
    }

    #[test]
    fn the_budget_bounds_each_index_and_a_full_sweep_calls_again() {
        let mut dead: Vec<i64> = (0..600).collect();
        let mut done: Vec<i64> = (0..10).collect();
        let gone = run(
            Pass::sweep(LIMITS, 1_000_000, SWEEP_BUDGET),
            &mut dead,
            &mut done,
        );
        assert_eq!((gone.len(), dead.len(), done.len()), (510, 100, 0));
        assert!(sweep_again(gone.len(), SWEEP_BUDGET));
        assert!(!sweep_again(SWEEP_BUDGET - 1, SWEEP_BUDGET));
        let limits = Limits {
            dead_max_count: 5,
            ..LIMITS
        };
        let mut dead: Vec<i64> = (999_000..999_600).collect();
        let gone = run(
            Pass::sweep(limits, 1_000_000, SWEEP_BUDGET),
            &mut dead,
            &mut Vec::new(),
        );
        assert_eq!(gone.len(), SWEEP_BUDGET);
        assert_eq!(dead.len(), 100, "beyond the count, within the budget");
    }

    #[test]
    fn a_tenant_is_held_to_its_own_limits_and_the_rest_to_the_default() {
        let strict = Limits {
            dead_max_count: 1,
            ..LIMITS
        };
        let shop = Tenant::parse("shop-a", "tenant").unwrap();
        let policy = Policy::new(LIMITS, BTreeMap::from([(shop.clone(), strict)]));
        assert_eq!(policy.of(&shop), strict);
        assert_eq!(policy.of(&Tenant::default()), LIMITS);
        assert_eq!(policy.per_shard(2).of(&shop).dead_max_count, 1);
        assert_eq!(policy.per_shard(2).of(&Tenant::default()).dead_max_count, 1);
    }

    #[test]
    fn a_settle_runs_a_pass_per_tenant_over_what_it_moved_of_that_tenant() {
        let (a, b) = (
            Tenant::parse("shop-a", "tenant").unwrap(),
            Tenant::parse("shop-b", "tenant").unwrap(),
        );
        let strict = Limits {
            dead_max_count: 1,
            ..LIMITS
        };
        let policy = Policy::new(LIMITS, BTreeMap::from([(b.clone(), strict)]));
        let moved = [
            (&a, Some(Index::Dead)),
            (&a, Some(Index::Due)),
            (&b, Some(Index::Done)),
        ];
        let passes = settle_passes(&policy, 10_000, moved);
        let want_a = Pass::settle(LIMITS, 10_000, 2, (true, false));
        let want_b = Pass::settle(strict, 10_000, 1, (false, true));
        assert_eq!(passes.len(), 2);
        assert_eq!(passes[0].0, a);
        assert_eq!(format!("{:?}", passes[0].1), format!("{want_a:?}"));
        assert_eq!(passes[1].0, b);
        assert_eq!(format!("{:?}", passes[1].1), format!("{want_b:?}"));
    }

    #[test]
    fn a_sweep_call_shares_one_budget_among_its_tenants() {
        assert_eq!(sweep_share(1), SWEEP_BUDGET);
        assert!(sweep_share(TENANTS_PER_CALL) * TENANTS_PER_CALL <= SWEEP_BUDGET);
        assert_eq!(sweep_share(10_000), 1);
        assert_eq!(sweep_share(0), SWEEP_BUDGET);
    }

    #[test]
    fn the_count_is_each_shards_share_rounded_up() {
        let limits = Limits::new(Duration::from_secs(1), 10, Duration::from_secs(5));
        assert_eq!(limits.per_shard(3).dead_max_count, 4);
        assert_eq!(limits.per_shard(3).script_args(), [1_000, 4, 5_000]);
    }
}
