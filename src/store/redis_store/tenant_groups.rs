//! The tenants a script call changes, as the scripts take them (`lua/common.lua`,
//! `read_groups`): each tenant's own indexes in `KEYS`, three consecutive keys from its
//! pending one, and in `ARGV` the index of that key, its name as the counts per tenant
//! know it, its retention budget in the call and its limits.

use std::collections::HashMap;

use redis::ScriptInvocation;

use crate::domain::Tenant;
use crate::lifecycle::retention::Policy;
use crate::store::keys::ShardKeys;
use crate::store::tenant_counts::counted;

/// The tenants of one script call, in the order they were first named.
pub struct TenantGroups {
    /// The index in `KEYS` of the first group's first key (1-based, as in Lua).
    first_key: usize,
    /// Each tenant, with its retention budget in the call.
    tenants: Vec<(Tenant, usize)>,
    place: HashMap<Tenant, usize>,
}

impl TenantGroups {
    /// Groups whose keys follow the first `keys_before` keys of the call.
    pub fn after(keys_before: usize) -> Self {
        Self {
            first_key: keys_before + 1,
            tenants: Vec::new(),
            place: HashMap::new(),
        }
    }

    /// The index in `KEYS` of `tenant`'s group (its pending key), which is added if the
    /// call names it for the first time.
    pub fn of(&mut self, tenant: &Tenant) -> usize {
        let next = self.tenants.len();
        let n = *self.place.entry(tenant.clone()).or_insert_with(|| {
            self.tenants.push((tenant.clone(), 0));
            next
        });
        self.first_key + 3 * n
    }

    /// Gives `tenant`'s group a retention budget in the call (0: none).
    pub fn retain(&mut self, tenant: &Tenant, budget: usize) {
        self.of(tenant);
        if let Some((_, kept)) = self.tenants.iter_mut().find(|(t, _)| t == tenant) {
            *kept = budget;
        }
    }

    /// How many keys the groups take.
    pub fn key_count(&self) -> usize {
        3 * self.tenants.len()
    }

    /// Adds the groups' keys to `call`, which must have the keys before them already.
    pub fn add_keys(&self, call: &mut ScriptInvocation, keys: &ShardKeys) {
        for (tenant, _) in &self.tenants {
            for key in keys.tenant_indexes(tenant) {
                call.key(key);
            }
        }
    }

    /// Adds the groups' arguments to `call` (their number, then each one's values), each
    /// tenant's limits from `policy`.
    pub fn add_args(&self, call: &mut ScriptInvocation, policy: &Policy) {
        call.arg(self.tenants.len());
        for (k, (tenant, budget)) in self.tenants.iter().enumerate() {
            call.arg(self.first_key + 3 * k)
                .arg(counted(tenant))
                .arg(*budget)
                .arg(&policy.of(tenant).script_args()[..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_named_twice_has_one_group_of_three_keys() {
        let (a, b) = (
            Tenant::parse("shop-a", "tenant").unwrap(),
            Tenant::parse("shop-b", "tenant").unwrap(),
        );
        let mut groups = TenantGroups::after(10);
        assert_eq!(groups.of(&a), 11);
        assert_eq!(groups.of(&b), 14);
        assert_eq!(groups.of(&a), 11);
        groups.retain(&b, 7);
        assert_eq!(groups.key_count(), 6);
        assert_eq!(groups.tenants, [(a, 0), (b, 7)]);
    }
}
