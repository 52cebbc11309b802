//! Counts per tenant, the same in every store. A store keeps, beside its indexes, a
//! table of counts for every tenant but the default one, by field:
//!
//! - `<tenant> <index>`: its notifications in each index (`due`, `inflight`, `dead`,
//!   `done`; `lifecycle::Index::name`);
//! - `<tenant> <index>@<window>`: those in `dead` and `done` by the window of their
//!   finish time (`OUTCOME_WINDOW_MS` wide, numbered from the epoch), for the last
//!   `OUTCOME_WINDOWS` windows; older ones are deleted by the retention sweep;
//! - `<tenant> <counter>`: what retention deleted of it, by reason.
//!
//! Every move between indexes adds to these (`tally`; on Redis the scripts do the same,
//! `lua/common.lua`). The default tenant, which most notifications belong to, costs
//! nothing: its counts are the store's totals less every other tenant's.

use std::collections::HashMap;

use super::{Outcomes, StateCounts, Trimmed};
use crate::domain::Tenant;
use crate::lifecycle::Index;

/// The width of the windows outcomes are counted in: five minutes.
pub const OUTCOME_WINDOW_MS: i64 = 5 * 60 * 1000;
/// How many windows back outcomes are counted per tenant (the scripts' `WINDOWS`, written
/// from this).
pub const OUTCOME_WINDOWS: i64 = 12;

/// The window `at_ms` falls in.
pub fn window_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(OUTCOME_WINDOW_MS)
}

/// How a tenant is named in the scripts' arguments: `""` for the default one, which is
/// not counted apart.
pub fn counted(tenant: &Tenant) -> &str {
    if tenant.is_default() {
        ""
    } else {
        tenant
    }
}

/// How the scripts name the tenant whose name is `name`: `""` for the default one.
pub fn counted_name(name: &str) -> &str {
    if name == Tenant::DEFAULT {
        ""
    } else {
        name
    }
}

/// The fields a move of one notification of `tenant` adds `by` to: its index, and for a
/// finished one its finish window while that is one of the last hour's. None for the
/// default tenant.
pub fn tally(
    tenant: &Tenant,
    index: Index,
    at_ms: i64,
    by: i64,
    now_ms: i64,
) -> Vec<(String, i64)> {
    if tenant.is_default() {
        return Vec::new();
    }
    let field = format!("{tenant} {}", index.name());
    let mut out = Vec::with_capacity(2);
    if matches!(index, Index::Dead | Index::Done)
        && window_of(at_ms) > window_of(now_ms) - OUTCOME_WINDOWS
    {
        out.push((format!("{field}@{}", window_of(at_ms)), by));
    }
    out.push((field, by));
    out
}

/// The field counting `tenant`'s notifications in `index`; `None` for the default
/// tenant, whose counts are the totals less every other tenant's.
pub fn field_of(tenant: &Tenant, index: Index) -> Option<String> {
    (!tenant.is_default()).then(|| format!("{tenant} {}", index.name()))
}

/// The field counting what retention deleted of `tenant` for `reason` (`dead_by_age`, …);
/// `None` for the default tenant.
pub fn trimmed_field(tenant: &Tenant, reason: &str) -> Option<String> {
    (!tenant.is_default()).then(|| format!("{tenant} {reason}"))
}

/// Whether `field` names a window older than the last hour (at `now_ms`).
pub fn is_old_window(field: &str, now_ms: i64) -> bool {
    field
        .rsplit_once('@')
        .and_then(|(_, w)| w.parse::<i64>().ok())
        .is_some_and(|w| w <= window_of(now_ms) - OUTCOME_WINDOWS)
}

/// One store's (or one shard's) table of counts, read.
#[derive(Debug, Default)]
pub struct TenantCounts(HashMap<String, i64>);

impl FromIterator<(String, i64)> for TenantCounts {
    fn from_iter<I: IntoIterator<Item = (String, i64)>>(fields: I) -> Self {
        Self(fields.into_iter().collect())
    }
}

impl TenantCounts {
    /// `tenant`'s part of `total`, counted under `name`: its own count, or for the
    /// default tenant what the others leave. Never below zero, whatever is stored.
    fn share(&self, tenant: &Tenant, name: &str, total: u64) -> u64 {
        if !tenant.is_default() {
            let own = self.0.get(&format!("{tenant} {name}")).copied();
            return own.unwrap_or(0).max(0) as u64;
        }
        let others: i64 = self
            .0
            .iter()
            .filter(|(field, _)| field.split_once(' ').is_some_and(|(_, n)| n == name))
            .map(|(_, n)| (*n).max(0))
            .sum();
        total.saturating_sub(others as u64)
    }

    /// `tenant`'s dead letters, of `total` in the same store or shard.
    pub fn dead(&self, tenant: &Tenant, total: u64) -> u64 {
        self.share(tenant, Index::Dead.name(), total)
    }

    /// `tenant`'s counts by state, of the `total` counts of the same store or shard.
    pub fn counts(&self, tenant: &Tenant, total: &StateCounts) -> StateCounts {
        StateCounts {
            scheduled: self.share(tenant, Index::Due.name(), total.scheduled),
            in_flight: self.share(tenant, Index::InFlight.name(), total.in_flight),
            dead: self.share(tenant, Index::Dead.name(), total.dead),
            finished: self.share(tenant, Index::Done.name(), total.finished),
        }
    }

    /// What retention deleted of `tenant`, of `total`.
    pub fn trimmed(&self, tenant: &Tenant, total: &Trimmed) -> Trimmed {
        Trimmed {
            dead_by_age: self.share(tenant, "dead_by_age", total.dead_by_age),
            dead_by_count: self.share(tenant, "dead_by_count", total.dead_by_count),
            finished_by_age: self.share(tenant, "finished_by_age", total.finished_by_age),
        }
    }

    /// What of `tenant` finished in `window`, of `total`.
    pub fn outcomes(&self, tenant: &Tenant, window: i64, total: Outcomes) -> Outcomes {
        let done = format!("{}@{window}", Index::Done.name());
        let dead = format!("{}@{window}", Index::Dead.name());
        Outcomes {
            finished: self.share(tenant, &done, total.finished),
            dead: self.share(tenant, &dead, total.dead),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Tenant {
        Tenant::parse(name, "tenant").unwrap()
    }

    #[test]
    fn the_default_tenant_has_what_the_others_leave() {
        let now = 100 * OUTCOME_WINDOW_MS + 7;
        let mut fields: Vec<(String, i64)> = Vec::new();
        fields.extend(tally(&tenant("a"), Index::Done, now, 1, now));
        fields.extend(tally(&tenant("a"), Index::Due, 0, 2, now));
        fields.extend(tally(&tenant("b"), Index::Due, 0, 1, now));
        fields.extend(tally(&Tenant::default(), Index::Due, 0, 5, now));
        let counts: TenantCounts = fields.into_iter().collect();
        let total = StateCounts {
            scheduled: 10,
            in_flight: 0,
            dead: 0,
            finished: 4,
        };
        let of = |t: &Tenant| counts.counts(t, &total);
        assert_eq!(
            (of(&tenant("a")).scheduled, of(&tenant("a")).finished),
            (2, 1)
        );
        assert_eq!(of(&tenant("b")).scheduled, 1);
        assert_eq!(of(&Tenant::default()).scheduled, 7);
        assert_eq!(of(&tenant("c")), StateCounts::default());
        let window = window_of(now);
        let total = Outcomes {
            finished: 4,
            dead: 0,
        };
        assert_eq!(counts.outcomes(&tenant("a"), window, total).finished, 1);
        assert_eq!(
            counts.outcomes(&Tenant::default(), window, total).finished,
            3
        );
    }

    #[test]
    fn only_the_last_hours_windows_are_counted_and_kept() {
        let now = 1_000 * OUTCOME_WINDOW_MS;
        let hour_ago = now - OUTCOME_WINDOWS * OUTCOME_WINDOW_MS;
        assert_eq!(tally(&tenant("a"), Index::Dead, hour_ago, 1, now).len(), 1);
        assert_eq!(
            tally(
                &tenant("a"),
                Index::Dead,
                hour_ago + OUTCOME_WINDOW_MS,
                1,
                now
            )
            .len(),
            2
        );
        assert!(is_old_window(
            &format!("a dead@{}", window_of(hour_ago)),
            now
        ));
        assert!(!is_old_window(&format!("a dead@{}", window_of(now)), now));
        assert!(!is_old_window("a dead", now));
    }
}
