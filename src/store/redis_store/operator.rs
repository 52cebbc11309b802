//! What operators do on the Redis store: cancel, replay (one with a new spec or
//! schedule, or many), resend, attempt now and discard, each worked out by `lifecycle`
//! and written by `commit.lua` (discard by `discard.lua`).

use std::time::Duration;

use async_trait::async_trait;

use super::commit::{tenant_named, Change, Decision, Held};
use super::queue::entry_json;
use super::tenant_groups::TenantGroups;
use super::{script_error, store_error, RedisStore};
use crate::domain::{Entry, JobId, JobSpec, Schedule, Tenant};
use crate::lifecycle::{
    transitions, Again, Cancelled, JobStatus, LetGo, NewCycle, Now, WAITING_OFFSET_MS,
};
use crate::store::keys::ShardKeys;
use crate::store::{spec, OperatorActions, StoreResult};

impl RedisStore {
    /// Works out and writes one operator's change to the notification `id`, as `decide`
    /// says from how it is; the answer, `None` when it does not exist.
    async fn change_one<A>(
        &self,
        id: &JobId,
        decide: impl Fn(&JobId, Option<Held>, Now) -> StoreResult<Decision<A>>,
    ) -> StoreResult<Option<A>> {
        if self.keys(id).is_err() {
            return Ok(None);
        }
        let done = self
            .commit_by_shard(
                &self.to_replicas,
                &[*id],
                |id| id,
                |_| 0,
                |id| Ok(Decision::Ask(id.to_string())),
                decide,
            )
            .await?;
        Ok(done.answers.into_iter().next())
    }

    /// Sends each of `ids` that `which` takes back again, with a new spec (meta line and
    /// body) or schedule when given: its new status, or `None` when it is not taken back.
    async fn again_ids(
        &self,
        which: Again,
        ids: &[JobId],
        spec: Option<&JobSpec>,
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<Vec<Option<JobStatus>>> {
        let schedule = schedule.map(Schedule::intervals_ms);
        let cycle = NewCycle {
            which,
            delay_ms: delay.as_millis() as u64,
            schedule: schedule.as_deref(),
            url: spec.map(|s| s.url.as_str()),
        };
        let spec = spec.map(spec::encode);
        let spec = spec.as_deref();
        let replay = |id: &JobId, held: Option<Held>, now: Now| {
            let replayed = held.and_then(|h| {
                let (new, note) = transitions::again(&h.record, &cycle, now)?;
                let mut change = Change::new(&id.to_string(), &h, &new)
                    .with_entry(entry_json(&Entry::Note(note)));
                if let Some(encoded) = spec {
                    let value = spec::stored(new.created_at, 0, &new.schedule, encoded);
                    change = change.with_spec(value);
                }
                Some((change, new.status()))
            });
            Ok(match replayed {
                Some((change, status)) => Decision::Write(change, Some(status)),
                None => Decision::Done(None),
            })
        };
        let done = self
            .commit_by_shard(
                &self.to_replicas,
                ids,
                |id| id,
                |_| 0,
                |id| Ok(Decision::Ask(id.to_string())),
                replay,
            )
            .await?;
        Ok(done.answers)
    }
}

#[async_trait]
impl OperatorActions for RedisStore {
    async fn cancel(&self, id: &JobId) -> StoreResult<Cancelled> {
        let cancel = |id: &JobId, held: Option<Held>, now: Now| {
            let Some(h) = held else {
                return Ok(Decision::Done(Cancelled::NotFound));
            };
            Ok(match transitions::cancel(&h.record, now) {
                (answer, Some(new)) => {
                    Decision::Write(Change::new(&id.to_string(), &h, &new), answer)
                }
                (answer, None) => Decision::Done(answer),
            })
        };
        let answer = self.change_one(id, cancel).await?;
        Ok(answer.unwrap_or(Cancelled::NotFound))
    }

    async fn replay(
        &self,
        id: &JobId,
        spec: Option<&JobSpec>,
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<Option<JobStatus>> {
        if self.keys(id).is_err() {
            return Ok(None);
        }
        let done = self
            .again_ids(Again::Replay, &[*id], spec, schedule, delay)
            .await?;
        let Some(mut status) = done.into_iter().next().flatten() else {
            return Ok(None);
        };
        // Whether it waits behind others of its ordering key, `commit.lua` decided: its
        // score in the due index says (none if it was claimed meanwhile: not waiting).
        let keys = self.keys(id)?;
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(keys.due())
            .arg(id.to_string())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        status.waiting = score.is_some_and(|s| s as i64 >= WAITING_OFFSET_MS);
        Ok(Some(status))
    }

    async fn send_again(
        &self,
        which: Again,
        ids: &[JobId],
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<usize> {
        let done = self.again_ids(which, ids, None, schedule, delay).await?;
        Ok(done.iter().filter(|status| status.is_some()).count())
    }

    async fn attempt_now(&self, id: &JobId, how: LetGo) -> StoreResult<bool> {
        let now_due = |id: &JobId, held: Option<Held>, now: Now| {
            let moved = held.and_then(|h| {
                let new = transitions::attempt_now(&h.record, now, how)?;
                Some(Change::new(&id.to_string(), &h, &new))
            });
            Ok(match moved {
                Some(change) => Decision::Write(change, true),
                None => Decision::Done(false),
            })
        };
        Ok(self.change_one(id, now_due).await?.unwrap_or(false))
    }

    async fn discard(&self, ids: &[JobId]) -> StoreResult<usize> {
        let mut discarded = 0;
        for (shard, mine) in self.by_shard(ids, |id| id) {
            let keys = &self.shards[shard];
            let ids: Vec<String> = mine.iter().map(|(_, id)| id.to_string()).collect();
            let tenants = self.tenants_of(keys, &ids).await?;
            let mut groups = TenantGroups::after(keys.all().len());
            let named: Vec<(usize, &String)> = (tenants.iter().zip(&ids))
                .filter_map(|(tenant, id)| Some((groups.of(tenant.as_ref()?), id)))
                .collect();
            let mut call = self.scripts.discard.key(keys.all().as_slice());
            groups.add_keys(&mut call, keys);
            groups.add_args(&mut call, &self.retention);
            for (group, id) in named {
                call.arg(id).arg(group);
            }
            let mut writes = self.to_replicas.on(keys.due());
            let n: usize = call
                .invoke_async(&mut writes)
                .await
                .map_err(script_error("discard"))?;
            discarded += n;
        }
        Ok(discarded)
    }
}

impl RedisStore {
    /// The tenant of each of `ids` in the shard of `keys` (`None` for one not stored),
    /// as `tenants.lua` reads it off its spec.
    pub(super) async fn tenants_of(
        &self,
        keys: &ShardKeys,
        ids: &[String],
    ) -> StoreResult<Vec<Option<Tenant>>> {
        let mut call = self.scripts.tenants.key(keys.all().as_slice());
        call.arg(ids);
        let names: Vec<Option<String>> = call
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(script_error("tenants"))?;
        (ids.iter().zip(names))
            .map(|(id, name)| name.map(|n| tenant_named(id, &n)).transpose())
            .collect()
    }
}
