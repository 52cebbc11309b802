//! Each tenant's share of the delivery slots. When more than one tenant is configured,
//! no tenant holds more than `delivery.concurrency` less `delivery.tenant_reserve` (a
//! part kept for the others, a quarter by default) at once, nor more than its own
//! `max_concurrency`; and while several tenants have work (they hold slots, or asked for
//! one within the last second), each may hold at most an equal part of the slots. So a
//! tenant whose hosts hang, or who sets long timeouts, never holds every slot, and the
//! other tenants' deliveries start at once and come to an equal share as its attempts
//! end. A notification takes its tenant's share with its slot (a share counts slots
//! held, not places queued for one); one whose tenant holds all it may gives the slot
//! back and is deferred (`tenant_busy`), so that the others behind it in the due order
//! are claimed meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::domain::Tenant;

/// How long after its last ask a tenant holding no slot still counts as having work.
const ACTIVE: Duration = Duration::from_secs(1);

pub struct TenantShares {
    concurrency: usize,
    /// Slots any one tenant may hold at once.
    cap: usize,
    /// Tenants with a `max_concurrency` of their own.
    own: BTreeMap<Tenant, usize>,
    held: Arc<Mutex<HashMap<Tenant, Holding>>>,
}

/// What a tenant holds, and when it last asked.
struct Holding {
    slots: usize,
    asked: Instant,
}

/// A tenant's hold on one of its share: kept as long as the slot, given back on drop.
pub struct Share {
    held: Arc<Mutex<HashMap<Tenant, Holding>>>,
    tenant: Tenant,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.held.lock().expect("tenant shares");
        if let Some(h) = held.get_mut(&self.tenant) {
            h.slots -= 1;
        }
    }
}

impl TenantShares {
    /// Shares of `concurrency` slots among `tenants` (with their own `max_concurrency`,
    /// if any), keeping `reserve_percent` of them from any one tenant when there are
    /// several.
    pub fn new(
        concurrency: usize,
        reserve_percent: u32,
        tenants: BTreeMap<Tenant, Option<usize>>,
    ) -> Self {
        let kept = match tenants.len() {
            0 | 1 => 0,
            _ => (concurrency * reserve_percent as usize).div_ceil(100),
        };
        let cap = concurrency.saturating_sub(kept).max(1);
        let own = tenants
            .into_iter()
            .filter_map(|(t, max)| Some((t, max?.clamp(1, cap))))
            .collect();
        Self {
            concurrency,
            cap,
            own,
            held: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// One of `tenant`'s share, if it holds fewer than it may now.
    pub fn take(&self, tenant: &Tenant) -> Option<Share> {
        let now = Instant::now();
        let mut held = self.held.lock().expect("tenant shares");
        held.retain(|t, h| h.slots > 0 || now - h.asked < ACTIVE || t == tenant);
        let others = held.keys().filter(|t| *t != tenant).count();
        let equal = self.concurrency.div_ceil(others + 1);
        let own = self.own.get(tenant).copied().unwrap_or(self.cap);
        let limit = own.min(equal.max(1));
        if !held.contains_key(tenant) {
            let fresh = Holding {
                slots: 0,
                asked: now,
            };
            held.insert(tenant.clone(), fresh);
        }
        let h = held.get_mut(tenant).expect("just inserted");
        h.asked = now;
        if h.slots >= limit {
            return None;
        }
        h.slots += 1;
        Some(Share {
            held: self.held.clone(),
            tenant: tenant.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Tenant {
        Tenant::parse(name, "tenant").unwrap()
    }

    fn taken(shares: &TenantShares, name: &str) -> Vec<Share> {
        std::iter::from_fn(|| shares.take(&tenant(name)))
            .take(1000)
            .collect()
    }

    fn several() -> BTreeMap<Tenant, Option<usize>> {
        BTreeMap::from([
            (tenant("a"), None),
            (tenant("b"), Some(3)),
            (tenant("c"), Some(500)),
        ])
    }

    #[test]
    fn a_tenant_alone_with_work_keeps_the_reserve_free_for_the_others() {
        let shares = TenantShares::new(16, 25, several());
        let a = taken(&shares, "a");
        assert_eq!(a.len(), 12);
        assert!(shares.take(&tenant("a")).is_none(), "a's share is held");
        drop(a);
        assert!(shares.take(&tenant("a")).is_some(), "given back");
    }

    #[test]
    fn tenants_with_work_come_to_equal_parts() {
        let shares = TenantShares::new(16, 25, several());
        let mut a = taken(&shares, "a");
        let c = taken(&shares, "c");
        assert_eq!((a.len(), c.len()), (12, 8), "c starts at once, up to half");
        a.truncate(4);
        assert_eq!(taken(&shares, "a").len(), 4, "a comes back to half");
        let b = taken(&shares, "b");
        assert_eq!(b.len(), 3, "b's own max_concurrency");
        drop(c);
        assert_eq!(taken(&shares, "c").len(), 6, "a third each, rounded up");
    }

    #[test]
    fn a_lone_tenant_may_use_every_slot() {
        let shares = TenantShares::new(8, 25, BTreeMap::from([(Tenant::default(), None)]));
        assert_eq!(taken(&shares, "default").len(), 8);
        let tiny = TenantShares::new(1, 25, several());
        assert_eq!(taken(&tiny, "a").len(), 1, "at least one");
    }
}
