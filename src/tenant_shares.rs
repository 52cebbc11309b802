//! Each tenant's share of the delivery slots. When more than one tenant is configured,
//! no tenant holds more than `delivery.concurrency` less `delivery.tenant_reserve` (a
//! part kept for the others, a quarter by default) at once, nor more than its own
//! `max_concurrency`: so a tenant whose hosts hang, or who sets long timeouts, cannot
//! take every slot, and the other tenants' deliveries start at once. A notification
//! takes its tenant's share when it is due, before a slot; one whose tenant has none
//! free is deferred (`tenant_busy`), so that the others behind it in the due order are
//! claimed meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::domain::Tenant;

pub struct TenantShares {
    /// Slots any one tenant may hold at once.
    cap: usize,
    /// Tenants with a `max_concurrency` of their own.
    own: BTreeMap<Tenant, usize>,
    held: Mutex<HashMap<Tenant, Arc<Semaphore>>>,
}

/// A tenant's hold on one of its slots: kept as long as the slot.
pub type Share = OwnedSemaphorePermit;

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
            cap,
            own,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// One of `tenant`'s share, if it holds fewer than it may.
    pub fn take(&self, tenant: &Tenant) -> Option<Share> {
        let share = {
            let mut held = self.held.lock().expect("tenant shares");
            let cap = self.own.get(tenant).copied().unwrap_or(self.cap);
            held.entry(tenant.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(cap)))
                .clone()
        };
        share.try_acquire_owned().ok()
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

    #[test]
    fn with_several_tenants_none_takes_the_part_kept_for_the_others() {
        let tenants = BTreeMap::from([
            (tenant("a"), None),
            (tenant("b"), Some(3)),
            (tenant("c"), Some(500)),
        ]);
        let shares = TenantShares::new(16, 25, tenants);
        let a = taken(&shares, "a");
        assert_eq!(a.len(), 12);
        assert_eq!(taken(&shares, "b").len(), 3, "its own max_concurrency");
        assert_eq!(taken(&shares, "c").len(), 12, "never more than any tenant");
        assert_eq!(taken(&shares, "unknown").len(), 12);
        assert!(
            shares.take(&tenant("a")).is_none(),
            "a's share is still held"
        );
        drop(a);
        assert!(shares.take(&tenant("a")).is_some());
    }

    #[test]
    fn a_share_comes_back_when_it_is_dropped() {
        let shares = TenantShares::new(
            4,
            50,
            BTreeMap::from([(tenant("a"), None), (tenant("b"), None)]),
        );
        let mut held = taken(&shares, "a");
        assert_eq!(held.len(), 2);
        held.pop();
        assert!(shares.take(&tenant("a")).is_some());
    }

    #[test]
    fn a_lone_tenant_may_use_every_slot() {
        let shares = TenantShares::new(8, 25, BTreeMap::from([(Tenant::default(), None)]));
        assert_eq!(taken(&shares, "default").len(), 8);
        let tiny = TenantShares::new(
            1,
            25,
            BTreeMap::from([(tenant("a"), None), (tenant("b"), None)]),
        );
        assert_eq!(taken(&tiny, "a").len(), 1, "at least one");
    }
}
