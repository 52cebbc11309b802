//! Redis key names. Every key of a shard carries the hash tag `{<prefix>:<shard>}`, so
//! that one script touches one cluster slot, on a standalone Redis or a Redis Cluster.

use crate::domain::Tenant;
use crate::lifecycle::{Index, TenantIndex};

/// The keys of one shard, in the order every script receives them as `KEYS`.
#[derive(Debug, Clone)]
pub struct ShardKeys {
    tag: String,
    all: [String; 10],
    schedules: String,
}

impl ShardKeys {
    pub fn new(prefix: &str, shard: u16) -> Self {
        let tag = format!("{{{prefix}:{shard}}}");
        let key = |name: &str| format!("{tag}:{name}");
        Self {
            all: [
                key("due"),
                key("inflight"),
                key("dead"),
                key("jobs"),
                key("state"),
                key("history"),
                key("done"),
                key("counters"),
                key("tenants"),
                key("tenant_names"),
            ],
            schedules: key("schedules"),
            tag,
        }
    }

    /// `due`, `inflight`, `dead`, `jobs`, `state`, `history`, `done`, `counters`,
    /// `tenants`, `tenant_names`.
    pub fn all(&self) -> &[String; 10] {
        &self.all
    }

    pub fn due(&self) -> &str {
        &self.all[0]
    }

    pub fn inflight(&self) -> &str {
        &self.all[1]
    }

    pub fn dead(&self) -> &str {
        &self.all[2]
    }

    pub fn jobs(&self) -> &str {
        &self.all[3]
    }

    pub fn state(&self) -> &str {
        &self.all[4]
    }

    pub fn history(&self) -> &str {
        &self.all[5]
    }

    pub fn done(&self) -> &str {
        &self.all[6]
    }

    /// The sorted set of `index`.
    pub fn index(&self, index: Index) -> &str {
        match index {
            Index::Due => self.due(),
            Index::InFlight => self.inflight(),
            Index::Dead => self.dead(),
            Index::Done => self.done(),
        }
    }

    /// What retention deleted, by reason.
    pub fn counters(&self) -> &str {
        &self.all[7]
    }

    /// Counts per tenant other than the default one (`lua/common.lua`, `tally`).
    pub fn tenants(&self) -> &str {
        &self.all[8]
    }

    /// The tenants with notifications in the shard, whose own indexes retention goes
    /// over.
    pub fn tenant_names(&self) -> &str {
        &self.all[9]
    }

    /// `tenant`'s own `index` in the shard (`TenantIndex`). A tenant's name holds no `:`.
    pub fn tenant_index(&self, tenant: &Tenant, index: TenantIndex) -> String {
        format!("{}:t:{tenant}:{}", self.tag, index.name())
    }

    /// `tenant`'s own indexes, in the order the scripts take them: pending, dead, done.
    pub fn tenant_indexes(&self, tenant: &Tenant) -> [String; 3] {
        TenantIndex::ALL.map(|index| self.tenant_index(tenant, index))
    }

    /// The schedules the shard keeps once, which specs refer to (`redis/schedules.rs`).
    pub fn schedules(&self) -> &str {
        &self.schedules
    }

    /// The record of what one claim call leased, named by its token.
    pub fn claim_record(&self, token: &str) -> String {
        format!("{}:claim:{token}", self.tag)
    }

    /// The key remembering which notification an idempotency key created (`scoped`:
    /// `Idempotency::scoped`).
    pub fn idempotency(&self, scoped: &str) -> String {
        format!("{}:idem:{scoped}", self.tag)
    }

    /// The upgrades of what earlier builds stored that are done on this shard
    /// (`redis_store/upgrade.rs`).
    pub fn upgrades(&self) -> String {
        format!("{}:upgrades", self.tag)
    }

    /// The list of an ordering key's notifications in registration order (`scoped`:
    /// `OrderingKey::scoped`), while it has any.
    pub fn ordering(&self, scoped: &str) -> String {
        format!("{}:order:{scoped}", self.tag)
    }
}

/// The pub/sub channel on which enqueues and retries announce a new earliest due time.
pub fn wake_channel(prefix: &str) -> String {
    format!("{prefix}:wake")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_shard_shares_its_hash_tag() {
        let k = ShardKeys::new("postback", 3);
        assert!(k.all().iter().all(|key| key.starts_with("{postback:3}:")));
        assert!(k.idempotency("abc").starts_with("{postback:3}:"));
        assert!(k.schedules().starts_with("{postback:3}:"));
        let tenant = Tenant::parse("shop-a", "tenant").unwrap();
        let own = k.tenant_indexes(&tenant);
        assert!(own
            .iter()
            .all(|key| key.starts_with("{postback:3}:t:shop-a:")));
    }
}
