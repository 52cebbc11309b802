//! The audit log on Redis: one stream, `{<prefix>:audit}` (a hash tag of its own, so on a
//! cluster it lives on one slot whatever the shards), whose entry ids are Redis's time of
//! each entry, and one per tenant beside it, `{<prefix>:audit}:t:<tenant>`, with the
//! entries about that tenant, which its auditors read (so that another tenant's actions
//! never push theirs out of a page). Each entry holds one field, `r`, the record's JSON.
//! An entry is added to both in one transaction; adding one trims those older than the
//! retention (`MINID ~`, so whole stream nodes at a time).

use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;

use super::conn::Conn;
use super::{store_error, RedisStore};
use crate::domain::Tenant;
use crate::store::{AuditEntry, AuditFilter, AuditLog, AuditPosition, AuditRecord, StoreResult};

/// The upgrade's name in the audit log's `upgrades` set.
const TENANT_STREAMS: &str = "tenant-streams";
/// Entries an upgrade reads per round trip.
const UPGRADE_CHUNK: usize = 500;

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
        let oldest = self.oldest_kept();
        let mut streams = vec![self.key.clone()];
        streams.extend(record.tenant.as_ref().map(|t| self.of_tenant(t)));
        let mut add = redis::pipe();
        add.atomic();
        for stream in &streams {
            add.cmd("XADD")
                .arg(stream)
                .arg("MINID")
                .arg("~")
                .arg(oldest)
                .arg("*")
                .arg("r")
                .arg(&json)
                .ignore();
        }
        add.query_async::<()>(&mut conn.clone())
            .await
            .map_err(store_error)?;
        Ok(())
    }

    /// Copies, once (marked in `{<prefix>:audit}:upgrades`), the entries an earlier build
    /// wrote, which kept no stream per tenant, into their tenants' streams, each under its
    /// own id, oldest first. How many it copied.
    pub async fn upgrade(&self, conn: &Conn) -> StoreResult<usize> {
        let marks = format!("{}:upgrades", self.key);
        let done: bool = redis::cmd("SISMEMBER")
            .arg(&marks)
            .arg(TENANT_STREAMS)
            .query_async(&mut conn.clone())
            .await
            .map_err(store_error)?;
        if done {
            return Ok(0);
        }
        let (mut from, mut copied) = ("-".to_string(), 0);
        loop {
            let chunk: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                .arg(&self.key)
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(UPGRADE_CHUNK)
                .query_async(&mut conn.clone())
                .await
                .map_err(store_error)?;
            for (id, fields) in &chunk {
                let json = fields.get(1).map_or("", String::as_str);
                let record = serde_json::from_str::<AuditRecord>(json).ok();
                let Some(tenant) = record.and_then(|r| r.tenant) else {
                    continue;
                };
                let copy = redis::cmd("XADD")
                    .arg(self.of_tenant(&tenant))
                    .arg(id)
                    .arg("r")
                    .arg(json)
                    .query_async::<String>(&mut conn.clone())
                    .await;
                match copy {
                    Ok(_) => copied += 1,
                    // An entry of an instance of this build came first: the stream has
                    // every entry about the tenant from then on.
                    Err(e) if e.to_string().contains("equal or smaller") => {}
                    Err(e) => return Err(store_error(e)),
                }
            }
            match chunk.last() {
                Some((last, _)) if chunk.len() == UPGRADE_CHUNK => from = format!("({last}"),
                _ => break,
            }
        }
        redis::cmd("SADD")
            .arg(&marks)
            .arg(TENANT_STREAMS)
            .query_async::<()>(&mut conn.clone())
            .await
            .map_err(store_error)?;
        Ok(copied)
    }

    /// The time (ms) of the oldest entry the retention keeps. This host's clock only bounds
    /// what is trimmed and read, which a skew of seconds does not change; an entry's own
    /// time is Redis's (`*`).
    fn oldest_kept(&self) -> i64 {
        let now = crate::clock::system_now().duration_since(UNIX_EPOCH);
        let oldest = now.unwrap_or_default().saturating_sub(self.max_age);
        i64::try_from(oldest.as_millis()).unwrap_or(i64::MAX)
    }

    /// The stream of the entries about `tenant`.
    fn of_tenant(&self, tenant: &Tenant) -> String {
        format!("{}:t:{tenant}", self.key)
    }

    /// Up to `n` entries older than `before` (or the newest), within the filter's time
    /// range, newest first: of the filter's tenant alone when it names one.
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
        // A stream is trimmed only as entries are added to it: one that has had none for
        // a while (a quiet tenant's) is read from the retention's start.
        let start = filter
            .since
            .unwrap_or(0)
            .max(self.oldest_kept())
            .to_string();
        let stream = match &filter.tenant {
            Some(tenant) => self.of_tenant(tenant),
            None => self.key.clone(),
        };
        let reply: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(stream)
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
