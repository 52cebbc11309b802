//! What is read of the Redis store: notifications with their history, the queue's lists
//! and dead letters a page at a time (one page per shard, merged), idempotency keys, and
//! the counts.

use std::collections::HashMap;

use async_trait::async_trait;

use super::page::{self, Order, ShardPage};
use super::{store_error, RedisStore};
use crate::domain::{Entry, JobId, Tenant};
use crate::lifecycle::{Index, JobStatus, Record, TenantIndex};
use crate::store::keys::ShardKeys;
use crate::store::listing::MAX_SCAN;
use crate::store::tenant_counts::{TenantCounts, OUTCOME_WINDOW_MS};
use crate::store::{
    spec, Cursor, DeadPage, Idempotency, JobView, ListFilter, ListPage, Listed, Outcomes, Reads,
    StateCounts, Stats, StoreError, StoreResult, Trimmed, WalkCursor,
};

/// Dead letters read per round trip while filtering a page.
const SCAN_WINDOW: usize = 200;
/// One HMGET answer: a value or nothing per requested field.
type Fields = Vec<Option<String>>;

impl RedisStore {
    /// The counts per tenant of one shard (`store::tenant_counts`).
    async fn tenant_counts(&self, keys: &ShardKeys) -> StoreResult<TenantCounts> {
        let fields: HashMap<String, i64> = redis::cmd("HGETALL")
            .arg(keys.tenants())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(fields.into_iter().collect())
    }

    async fn views(&self, keys: &ShardKeys, ids: &[String]) -> StoreResult<Vec<JobView>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        type Scores = Vec<Option<f64>>;
        let (specs, states, histories, leased, due): (Fields, Fields, Fields, Scores, Scores) =
            redis::pipe()
                .cmd("HMGET")
                .arg(keys.jobs())
                .arg(ids)
                .cmd("HMGET")
                .arg(keys.state())
                .arg(ids)
                .cmd("HMGET")
                .arg(keys.history())
                .arg(ids)
                .cmd("ZMSCORE")
                .arg(keys.inflight())
                .arg(ids)
                .cmd("ZMSCORE")
                .arg(keys.due())
                .arg(ids)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
        let read = |shared: &dyn spec::SharedSchedules| {
            let mut out = Vec::with_capacity(ids.len());
            for (i, id) in ids.iter().enumerate() {
                let Some(spec) = &specs[i] else { continue };
                let record = match &states[i] {
                    Some(state) => parse_record(state)?,
                    // Never attempted: the state it has from its registration.
                    None => match spec::registration(spec, shared) {
                        Some(record) => record,
                        None => continue,
                    },
                };
                // A claim does not write the record: the in-flight index says it is in
                // flight; and the due index's score whether it waits behind its ordering
                // key.
                let record = match (leased[i], due[i]) {
                    (Some(_), _) => record.placed(Index::InFlight, 0),
                    (None, Some(score)) => record.placed(Index::Due, score as i64),
                    (None, None) => record,
                };
                out.push(job_view(
                    id,
                    spec,
                    record.status(),
                    histories[i].as_deref(),
                )?);
            }
            Ok(out)
        };
        self.schedules.reading(&self.conn, keys, read).await
    }

    /// Up to `limit` notifications of the index `key` of one shard that `keep`, in
    /// `order` after `after`, with scores in `range`, examining at most `MAX_SCAN`.
    async fn shard_page(
        &self,
        keys: &ShardKeys,
        (key, order): (&str, Order),
        range: (Option<i64>, Option<i64>),
        limit: usize,
        after: Option<&Cursor>,
        keep: &(dyn Fn(&JobView) -> bool + Sync),
    ) -> StoreResult<ShardPage> {
        let mut page = ShardPage::default();
        let mut position = after.cloned();
        let mut scanned = 0;
        loop {
            let (entries, more) = page::scan(
                &mut self.conn.clone(),
                key,
                order,
                SCAN_WINDOW,
                position.as_ref(),
                range,
            )
            .await
            .map_err(store_error)?;
            let ids: Vec<String> = entries.iter().map(|(id, _)| id.clone()).collect();
            page.examined += ids.len();
            let mut views: HashMap<String, JobView> = self
                .views(keys, &ids)
                .await?
                .into_iter()
                .map(|v| (v.id.to_string(), v))
                .collect();
            for (i, (id, at)) in entries.iter().enumerate() {
                position = id.parse().ok().map(|id| Cursor { at: *at, id });
                let found = views.remove(id).filter(|v| keep(v));
                if let (Some(at), Some(v)) = (&position, found) {
                    page.items.push((at.clone(), v));
                }
                if page.items.len() == limit {
                    let rest = more || i + 1 < entries.len();
                    page.scanned_to = position.filter(|_| rest);
                    return Ok(page);
                }
            }
            scanned += entries.len();
            if !more || scanned >= MAX_SCAN {
                page.scanned_to = position.filter(|_| more);
                return Ok(page);
            }
        }
    }
}

#[async_trait]
impl Reads for RedisStore {
    async fn get(&self, id: &JobId) -> StoreResult<Option<JobView>> {
        let Ok(keys) = self.keys(id) else {
            return Ok(None);
        };
        Ok(self.views(keys, &[id.to_string()]).await?.pop())
    }

    async fn find_by_key(&self, tenant: &Tenant, key: &str) -> StoreResult<Option<JobView>> {
        let scoped = Idempotency::scope(key, tenant);
        for keys in &self.shards {
            let kept: Option<String> = redis::cmd("GET")
                .arg(keys.idempotency(&scoped))
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            let Some(kept) = kept else { continue };
            let (id, _) = crate::store::idempotency_value(&kept);
            let id: JobId = id
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("idempotency key names `{id}`")))?;
            // A key kept at a degraded shard may name a notification not stored (yet,
            // or ever): the one that exists is the key's.
            if let Some(view) = self.get(&id).await? {
                return Ok(Some(view));
            }
        }
        Ok(None)
    }

    async fn list(
        &self,
        listed: Listed,
        filter: &ListFilter,
        limit: usize,
        after: Option<&WalkCursor>,
    ) -> StoreResult<ListPage> {
        let walk_from = match after {
            Some(c) => c.walk_from,
            None => Listed::walk_start(self.now().await?),
        };
        let order = match listed.soonest_first() {
            true => Order::SoonestFirst,
            false => Order::NewestFirst,
        };
        let keep = |v: &JobView| listed.keeps(v, filter, walk_from);
        let own = filter
            .tenant
            .as_ref()
            .map(|_| TenantIndex::of(listed.index()));
        let range = listed.scores_in(filter, own);
        let position = after.map(|c| &c.position);
        let mut pages = Vec::with_capacity(self.shards.len());
        for keys in &self.shards {
            let index = index_key(keys, listed.index(), filter);
            pages.push(
                self.shard_page(keys, (&index, order), range, limit, position, &keep)
                    .await?,
            );
        }
        let (items, next, examined) = page::merge(pages, limit, order);
        Ok(ListPage::of_walk(items, next, walk_from, examined))
    }

    async fn dead_letters(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&Cursor>,
    ) -> StoreResult<DeadPage> {
        let mut pages = Vec::with_capacity(self.shards.len());
        let range = (filter.since, filter.until);
        for keys in &self.shards {
            let index = index_key(keys, Index::Dead, filter);
            let keep = |v: &JobView| filter.matches(v);
            pages.push(
                self.shard_page(
                    keys,
                    (&index, Order::NewestFirst),
                    range,
                    limit,
                    after,
                    &keep,
                )
                .await?,
            );
        }
        let (items, next_cursor, examined) = page::merge(pages, limit, Order::NewestFirst);
        Ok(DeadPage {
            items,
            next_cursor,
            examined,
        })
    }

    async fn stats(&self, tenant: Option<&Tenant>) -> StoreResult<Stats> {
        let mut stats = Stats::default();
        for keys in &self.shards {
            let (scheduled, in_flight, dead, finished, counters): (
                u64,
                u64,
                u64,
                u64,
                HashMap<String, u64>,
            ) = redis::pipe()
                .zcard(keys.due())
                .zcard(keys.inflight())
                .zcard(keys.dead())
                .zcard(keys.done())
                .hgetall(keys.counters())
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            let count = |name: &str| counters.get(name).copied().unwrap_or(0);
            let mut shard = StateCounts {
                scheduled,
                in_flight,
                dead,
                finished,
            };
            let mut trimmed = Trimmed {
                dead_by_age: count("dead_by_age"),
                dead_by_count: count("dead_by_count"),
                finished_by_age: count("finished_by_age"),
            };
            if let Some(tenant) = tenant {
                let tenants = self.tenant_counts(keys).await?;
                shard = tenants.counts(tenant, &shard);
                trimmed = tenants.trimmed(tenant, &trimmed);
            }
            stats.total.add(&shard);
            stats.shards.push(shard);
            stats.trimmed.add(&trimmed);
        }
        if tenant.is_none() {
            stats.replication = self.replication().await?;
        }
        Ok(stats)
    }

    async fn outcomes(
        &self,
        tenant: Option<&Tenant>,
        first_window: i64,
        windows: usize,
    ) -> StoreResult<Vec<Outcomes>> {
        let mut total = vec![Outcomes::default(); windows];
        for keys in &self.shards {
            let mut pipe = redis::pipe();
            for w in first_window..first_window + windows as i64 {
                // The last window is open-ended: times stamped by the store can be a
                // millisecond or two ahead of the caller's clock.
                let to = if w + 1 == first_window + windows as i64 {
                    "+inf".to_string()
                } else {
                    format!("({}", (w + 1) * OUTCOME_WINDOW_MS)
                };
                let from = w * OUTCOME_WINDOW_MS;
                pipe.zcount(keys.done(), from, &to)
                    .zcount(keys.dead(), from, &to);
            }
            let counts: Vec<u64> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            let tenants = match tenant {
                Some(_) => self.tenant_counts(keys).await?,
                None => TenantCounts::default(),
            };
            let windows = (first_window..).zip(counts.chunks(2));
            for (sum, (w, pair)) in total.iter_mut().zip(windows) {
                let mut shard = Outcomes {
                    finished: pair[0],
                    dead: pair[1],
                };
                if let Some(tenant) = tenant {
                    shard = tenants.outcomes(tenant, w, shard);
                }
                sum.finished += shard.finished;
                sum.dead += shard.dead;
            }
        }
        Ok(total)
    }

    /// The store answers, and some shard can take a new notification.
    async fn ping(&self) -> StoreResult<()> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        if !self.shard_health.all_degraded() {
            return Ok(());
        }
        // Every shard degraded, as last seen: look again now, so that readiness and
        // what the overview names agree the moment a replica connects.
        self.note_replication(&self.replication_of_each().await);
        self.check_replicas().await
    }
}

/// The key of the index a list of `index` with `filter` reads in the shard of `keys`: the
/// tenant's own when the filter names one, so that a tenant's list reads its own alone.
fn index_key(keys: &ShardKeys, index: Index, filter: &ListFilter) -> String {
    match &filter.tenant {
        Some(tenant) => keys.tenant_index(tenant, TenantIndex::of(index)),
        None => keys.index(index).to_string(),
    }
}

fn job_view(
    id: &str,
    spec: &str,
    status: JobStatus,
    history: Option<&str>,
) -> StoreResult<JobView> {
    let corrupt =
        |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("{what} of {id}: {e}"));
    Ok(JobView {
        id: id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("bad id `{id}`")))?,
        spec: spec::decode(spec).map_err(|e| corrupt("spec", e))?,
        status,
        history: match history {
            Some(h) => serde_json::from_str::<Vec<Entry>>(h).map_err(|e| corrupt("history", e))?,
            None => Vec::new(),
        },
    })
}

fn parse_record(state: &str) -> StoreResult<Record> {
    Record::decode(state).map_err(|e| StoreError::Corrupt(format!("state record: {e}")))
}
