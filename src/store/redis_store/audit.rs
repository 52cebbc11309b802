//! The audit log on Redis: one stream, `{<prefix>:audit}` (a hash tag of its own, so on a
//! cluster it lives on one slot whatever the shards), whose entry ids are Redis's time of
//! each entry. Each entry holds one field, `r`, the record's JSON. Adding an entry trims
//! those older than the retention (`MINID ~`, so whole stream nodes at a time).

use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;

use super::conn::Conn;
use super::{store_error, RedisStore};
use crate::store::{AuditEntry, AuditFilter, AuditLog, AuditPosition, AuditRecord, StoreResult};

pub struct AuditStream {
    key: String,
    max_age: Duration,
}

impl AuditStream {
    pub fn new(key_prefix: &str, max_age: Duration) -> Self {
        Self {
            key: format!("{{{key_prefix}:audit}}"),
            max_age,
        }
    }

    pub async fn record(&self, conn: &Conn, record: &AuditRecord) -> StoreResult<()> {
        let json = serde_json::to_string(record).expect("a record serializes");
        // This host's clock only bounds what is trimmed, which a skew of seconds does not
        // change; the entry's own time is Redis's (`*`).
        let oldest = crate::clock::system_now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(self.max_age)
            .as_millis() as u64;
        redis::cmd("XADD")
            .arg(&self.key)
            .arg("MINID")
            .arg("~")
            .arg(oldest)
            .arg("*")
            .arg("r")
            .arg(json)
            .query_async::<String>(&mut conn.clone())
            .await
            .map_err(store_error)?;
        Ok(())
    }

    /// Up to `n` entries older than `before` (or the newest), within the filter's time
    /// range, newest first.
    pub async fn read(
        &self,
        conn: &Conn,
        filter: &AuditFilter,
        before: Option<AuditPosition>,
        n: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        let end = match (before, filter.until) {
            (Some(b), _) => format!("({}", b.stream_id()),
            (None, Some(until)) => until.to_string(),
            (None, None) => "+".into(),
        };
        let start = filter.since.map_or("-".into(), |s| s.to_string());
        let reply: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(&self.key)
            .arg(end)
            .arg(start)
            .arg("COUNT")
            .arg(n)
            .query_async(&mut conn.clone())
            .await
            .map_err(store_error)?;
        reply
            .into_iter()
            .map(|(id, fields)| {
                let at = AuditPosition::parse_stream_id(&id).ok_or_else(|| {
                    crate::store::StoreError::Corrupt(format!("audit entry id `{id}`"))
                })?;
                let json = fields.get(1).map_or("", String::as_str);
                AuditEntry::decode(at, json)
            })
            .collect()
    }
}

#[async_trait]
impl AuditLog for RedisStore {
    async fn record_audit(&self, record: &AuditRecord) -> StoreResult<()> {
        self.audit.record(&self.conn, record).await
    }

    async fn audit_entries(
        &self,
        filter: &AuditFilter,
        before: Option<AuditPosition>,
        n: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        self.audit.read(&self.conn, filter, before, n).await
    }
}
