//! The Redis store's queue: registrations handed to the group-storing task (`enqueue`),
//! claims of the shards with work (`claim.lua`, with expired leases handed back and the
//! claims whose reply was lost released), and outcomes, deferrals and releases worked
//! out by `lifecycle` from the leased records and written by `commit.lua`; retention
//! (`trim.lua`); wake-ups.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use redis::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::commit::{commit, tenant_named, Change, Decision, Held};
use super::enqueue::Item;
use super::reply::{int_at, text_at};
use super::shard_clock::Ask;
use super::tenant_groups::TenantGroups;
use super::{script_error, store_error, RedisStore};
use crate::backoff::worth_logging;
use crate::domain::{Entry, JobId, Notification, Tenant};
use crate::lifecycle::{retention, transitions, Index, JobState, Now, TenantIndex};
use crate::store::keys::ShardKeys;
use crate::store::spec;
use crate::store::tenant_counts::{counted, counted_name};
use crate::store::{
    Claim, ClaimedJob, Deferral, Enqueued, Idempotency, IdempotencyEntry, Queue, Settled,
    Settlement, StoreError, StoreResult,
};

impl RedisStore {
    /// Retention of one shard: every tenant it holds notifications of (`tenant_names`),
    /// `retention::TENANTS_PER_CALL` a call sharing one budget (`retention::sweep_share`),
    /// each called for again while its pass deletes its whole share. How many it deleted.
    async fn trim_shard(&self, keys: &ShardKeys) -> StoreResult<usize> {
        let names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys.tenant_names())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        let mut due = Vec::with_capacity(names.len());
        for name in names {
            due.push(tenant_named("tenant_names", counted_name(&name))?);
        }
        let mut trimmed = 0;
        loop {
            let chunk: Vec<Tenant> = due
                .drain(..due.len().min(retention::TENANTS_PER_CALL))
                .collect();
            let mut groups = TenantGroups::after(keys.all().len());
            let share = retention::sweep_share(chunk.len());
            for tenant in &chunk {
                groups.retain(tenant, share);
            }
            let mut call = self.scripts.trim.key(keys.all().as_slice());
            groups.add_keys(&mut call, keys);
            groups.add_args(&mut call, &self.retention);
            let deleted: Vec<usize> = call
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(script_error("trim"))?;
            trimmed += deleted.iter().sum::<usize>();
            let again = chunk.into_iter().zip(deleted);
            due.extend(
                again
                    .filter(|(_, n)| retention::sweep_again(*n, share))
                    .map(|(t, _)| t),
            );
            if due.is_empty() {
                return Ok(trimmed);
            }
        }
    }

    /// A registration as the enqueue script takes it.
    fn item(&self, n: &Notification, idempotency: Option<&Idempotency>) -> StoreResult<Item> {
        let keys = self.keys(&n.id)?;
        Ok(Item {
            id: n.id,
            spec: spec::encode(&n.spec()),
            schedule: n.schedule.intervals_ms(),
            delay_ms: n.delay.as_millis() as u64,
            idempotency: idempotency.map(|i| IdempotencyEntry {
                name: keys.idempotency(&i.scoped()),
                ..i.entry()
            }),
            tenant: counted(&n.tenant).to_string(),
            ordering: n
                .ordering_key
                .as_ref()
                .map(|k| keys.ordering(&k.scoped(&n.tenant))),
            pending: keys.tenant_index(&n.tenant, TenantIndex::Pending),
        })
    }

    /// A registration's answer; the shard's clock learns when its earliest is due.
    fn enqueued(&self, n: &Notification, enqueued: StoreResult<Enqueued>) -> StoreResult<Enqueued> {
        if let Err(e @ StoreError::NotReplicated { .. }) = &enqueued {
            self.note_short_write(usize::from(n.id.shard()), e);
        }
        let enqueued = enqueued?;
        if let Some(due_in) = enqueued.earliest {
            self.clock.wake_in(usize::from(n.id.shard()), due_in);
        }
        Ok(enqueued)
    }

    /// Claims up to `limit` notifications of shard `shard`, and hands back those whose
    /// lease expired: what it claimed, how long until the shard's next due time or lease
    /// end, and whether it handed any back.
    async fn claim_shard(
        &self,
        shard: usize,
        limit: usize,
        (lease, ahead): (Duration, Duration),
    ) -> StoreResult<(Vec<ClaimedJob>, Option<i64>, bool)> {
        let keys = &self.shards[shard];
        let record = keys.claim_record(&crate::clock::uuid_v7().simple().to_string());
        let asked = Instant::now();
        let reply: Vec<Value> = match self
            .scripts
            .claim
            .key(keys.all().as_slice())
            .key(&record)
            .arg(limit)
            .arg(lease.as_millis() as u64)
            .arg(ahead.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                // The claim may have run without its reply reaching us.
                self.unsure_claims
                    .lock()
                    .expect("claim list")
                    .push((shard, record));
                return Err(script_error("claim")(e));
            }
        };
        let now_us = int_at(&reply, 0)?;
        let now = now_us / 1000;
        let wake = int_at(&reply, 1)?;
        let expired = int_at(&reply, 2)? as usize;
        let (ended, claimed) = reply[3..].split_at((2 * expired).min(reply.len() - 3));
        self.hand_back_expired(shard, ended, Now::from_micros(now_us))
            .await?;
        let read = |shared: &dyn spec::SharedSchedules| {
            claimed
                .chunks(4)
                .map(|c| claimed_job(c, now_us, asked, shared))
                .collect::<StoreResult<Vec<_>>>()
        };
        let claimed = self.schedules.reading(&self.conn, keys, read).await?;
        let mut jobs = Vec::with_capacity(claimed.len());
        for (job, held) in claimed {
            self.claimed
                .remember(job.id, job.lease, held, now_us, asked);
            jobs.push(job);
        }
        let wake = (wake >= 0).then(|| (wake - now).max(0));
        Ok((jobs, wake, expired > 0))
    }

    /// Hands back notifications whose lease expired (`ended`: id and state pairs from a
    /// claim's reply), due again at once (or at their due time), or cancelled when a
    /// cancel was asked for.
    async fn hand_back_expired(&self, shard: usize, ended: &[Value], now: Now) -> StoreResult<()> {
        if ended.is_empty() {
            return Ok(());
        }
        let read = |shared: &dyn spec::SharedSchedules| {
            ended
                .chunks(2)
                .map(|pair| {
                    let id = text_at(pair, 0)?;
                    Ok((id.clone(), Held::parse(&id, &pair[1], shared)?))
                })
                .collect::<StoreResult<Vec<_>>>()
        };
        let held = self
            .schedules
            .reading(&self.conn, &self.shards[shard], read)
            .await?;
        let expire = |id: &str, held: Option<Held>, now: Now| {
            let change = held.filter(|h| h.index == Index::InFlight).and_then(|h| {
                transitions::expire(&h.record, now).map(|new| Change::new(id, &h, &new))
            });
            Ok(change.map_or(Decision::Done(()), |c| Decision::Write(c, ())))
        };
        commit(
            &self.shard(shard, &self.to_primary),
            &held,
            |_| 0,
            |(id, h)| expire(id, h.clone(), now),
            |(id, _), h, now| expire(id, h, now),
        )
        .await?;
        Ok(())
    }

    /// Claims up to `limit` of the shard `ask` names, once more if it handed expired
    /// leases back (they may be due now), and tells the shard's clock what it learnt.
    async fn claim_asked(
        &self,
        ask: Ask,
        limit: usize,
        lease: Duration,
    ) -> StoreResult<Vec<ClaimedJob>> {
        let (mut jobs, mut wake, expired) = self
            .claim_shard(ask.shard, limit, (lease, ask.ahead))
            .await?;
        if expired && jobs.len() < limit {
            let more = limit - jobs.len();
            let (again, next, _) = self
                .claim_shard(ask.shard, more, (lease, ask.ahead))
                .await?;
            jobs.extend(again);
            wake = next;
        }
        let next = wake.map(|ms| Duration::from_millis(ms as u64));
        let failures = self
            .clock
            .claimed(ask, jobs.len(), jobs.len() == limit, next);
        if failures > 0 {
            tracing::info!(
                shard = ask.shard,
                failures,
                "claiming from the shard resumed"
            );
        }
        Ok(jobs)
    }

    /// A shard's claim failed: logged at the first failure and every so often while it
    /// lasts, and asked again after its backoff.
    fn shard_failed(&self, ask: Ask, e: &StoreError) {
        let failures = self.clock.failed(ask);
        if worth_logging(failures) {
            tracing::warn!(shard = ask.shard, failures, error = %e, "cannot claim from a shard; the others are claimed meanwhile");
        }
    }

    /// Hands back what claims whose reply was lost had leased (their claim record names
    /// the lease deadline and the ids), so that it is due again at once rather than when
    /// the lease ends; one whose shard does not answer is kept for the next claim.
    async fn release_unsure_claims(&self) {
        let unsure = std::mem::take(&mut *self.unsure_claims.lock().expect("claim list"));
        for (shard, record) in unsure {
            if let Err(e) = self.release_claim(shard, &record).await {
                tracing::debug!(shard, error = %e, "cannot release a claim whose reply was lost yet; trying again at the next claim");
                self.unsure_claims
                    .lock()
                    .expect("claim list")
                    .push((shard, record));
            }
        }
    }

    async fn release_claim(&self, shard: usize, record: &str) -> StoreResult<()> {
        let saved: Option<String> = redis::cmd("GET")
            .arg(record)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        let Some(saved) = saved else { return Ok(()) };
        let mut words = saved.split(' ');
        let deadline: i64 = words.next().and_then(|d| d.parse().ok()).unwrap_or(-1);
        let ids: Vec<String> = words.map(str::to_string).collect();
        // Still leased by that claim: in flight with its deadline.
        let release = |id: &String, held: Option<Held>, now: Now| {
            let change = held
                .filter(|h| h.index == Index::InFlight && h.score == deadline)
                .and_then(|h| {
                    transitions::release(&h.record, h.record.lease, now)
                        .map(|new| Change::new(id, &h, &new))
                });
            Ok(change.map_or(Decision::Done(false), |c| Decision::Write(c, true)))
        };
        let done = commit(
            &self.shard(shard, &self.to_primary),
            &ids,
            |_| 0,
            |id| Ok(Decision::Ask(id.clone())),
            release,
        )
        .await?;
        let released = done.answers.iter().filter(|&&r| r).count();
        if released > 0 {
            tracing::info!(
                released,
                "released notifications of a claim whose reply was lost"
            );
            self.clock.wake(shard);
        }
        redis::cmd("DEL")
            .arg(record)
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(store_error)
    }
}

#[async_trait]
impl Queue for RedisStore {
    async fn enqueue(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
    ) -> StoreResult<Enqueued> {
        if let Some(earlier) = self.meet_key_where_moved_from(n, idempotency).await? {
            return Ok(earlier);
        }
        let enqueued = self.enqueuer.enqueue(self.item(n, idempotency)?).await;
        let enqueued = self.enqueued(n, enqueued);
        self.after_stored(n, idempotency, enqueued).await
    }

    /// Hands every registration to the group-storing task at once and then waits for
    /// their answers, rather than with one future each.
    async fn enqueue_many(
        &self,
        registrations: &[(&Notification, Option<&Idempotency>)],
    ) -> Vec<StoreResult<Enqueued>> {
        let mut answers = Vec::with_capacity(registrations.len());
        for (n, idempotency) in registrations {
            answers.push(
                match self.meet_key_where_moved_from(n, *idempotency).await {
                    Ok(Some(earlier)) => Err(Ok(earlier)),
                    Ok(None) => match self.item(n, *idempotency) {
                        Ok(item) => Ok(self.enqueuer.send(item).await),
                        Err(e) => Err(Err(e)),
                    },
                    Err(e) => Err(Err(e)),
                },
            );
        }
        let mut results = Vec::with_capacity(registrations.len());
        for ((n, idempotency), answer) in registrations.iter().zip(answers) {
            results.push(match answer {
                Ok(answer) => {
                    let enqueued = self.enqueued(n, answer.wait().await);
                    self.after_stored(n, *idempotency, enqueued).await
                }
                Err(known) => known,
            });
        }
        results
    }

    async fn claim(&self, limit: usize, lease: Duration, ahead: Duration) -> StoreResult<Claim> {
        self.claimed.forget_older_than(lease);
        self.release_unsure_claims().await;
        let mut claim = Claim::default();
        let asks = self.clock.to_ask(ahead);
        claim.waiting_out_failures = asks.is_empty() && self.clock.all_failing();
        for ask in asks {
            let remaining = limit.saturating_sub(claim.jobs.len());
            if remaining == 0 {
                break;
            }
            match self.claim_asked(ask, remaining, lease).await {
                Ok(jobs) => claim.jobs.extend(jobs),
                // What the shards before it gave is kept; the rest are asked next time,
                // and this one after its backoff.
                Err(e) => {
                    self.shard_failed(ask, &e);
                    // The claim fails only when every shard this instance claims is
                    // failing (none answered, or this was the last): one shard in
                    // trouble is said by its own line, and the others go on.
                    if self.clock.all_failing() {
                        return Err(e);
                    }
                    // Counted here only: a returned error is counted by the claim loop.
                    crate::observability::metrics::store_error("claim");
                    break;
                }
            }
        }
        claim.next_wake = self.clock.next_wake();
        Ok(claim)
    }

    async fn settle(&self, batch: &[Settlement]) -> StoreResult<Settled> {
        let first = |s: &Settlement| {
            Ok(match self.claimed.take(&s.id, s.lease) {
                Some((held, _)) => settled(s, &held, Now::from_millis(s.ended_at)),
                None => Decision::Ask(s.id.to_string()),
            })
        };
        let again = |s: &Settlement, held: Option<Held>, now: Now| {
            Ok(held.map_or(Decision::Done(None), |h| settled(s, &h, now)))
        };
        let done = self
            .commit_by_shard(
                &self.to_primary,
                batch,
                |s| &s.id,
                retention::settle_budget,
                first,
                again,
            )
            .await?;
        let dead = |state: &&Option<JobState>| **state == Some(JobState::Dead);
        Ok(Settled {
            dead_lettered: done.answers.iter().filter(dead).count(),
            applied: done.answers.iter().map(Option::is_some).collect(),
            earliest: done.earliest.is_some(),
            trimmed: done.trimmed,
        })
    }

    async fn defer(&self, batch: &[Deferral]) -> StoreResult<bool> {
        let defer = |d: &Deferral, held: Option<Held>, now: Now| {
            let id = d.id.to_string();
            let change = held.and_then(|h| {
                let (new, note) = d.apply(&h.record, now)?;
                let change = Change::new(&id, &h, &new);
                Some(match note {
                    Some(note) => change.with_entry(entry_json(&Entry::Note(note))),
                    None => change,
                })
            });
            Ok(change.map_or(Decision::Done(()), |c| Decision::Write(c, ())))
        };
        let first = |d: &Deferral| match self.claimed.take(&d.id, d.lease) {
            Some((held, now)) => defer(d, Some(held), now),
            None => Ok(Decision::Ask(d.id.to_string())),
        };
        let done = self
            .commit_by_shard(&self.to_primary, batch, |d| &d.id, |_| 0, first, defer)
            .await?;
        Ok(done.earliest.is_some())
    }

    async fn release(&self, leases: &[(JobId, u64)]) -> StoreResult<usize> {
        let release = |(id, lease): &(JobId, u64), held: Option<Held>, now: Now| {
            let change = held.and_then(|h| {
                transitions::release(&h.record, *lease, now).map(|new| {
                    (
                        new.state == JobState::Scheduled,
                        Change::new(&id.to_string(), &h, &new),
                    )
                })
            });
            Ok(change.map_or(Decision::Done(false), |(due, c)| Decision::Write(c, due)))
        };
        let first = |l: &(JobId, u64)| match self.claimed.take(&l.0, l.1) {
            Some((held, now)) => release(l, Some(held), now),
            None => Ok(Decision::Ask(l.0.to_string())),
        };
        let done = self
            .commit_by_shard(
                &self.to_primary,
                leases,
                |(id, _)| id,
                |_| 0,
                first,
                release,
            )
            .await?;
        Ok(done.answers.iter().filter(|&&due| due).count())
    }

    async fn trim(&self) -> StoreResult<usize> {
        let mut trimmed = 0;
        for keys in &self.shards {
            trimmed += self.trim_shard(keys).await?;
        }
        Ok(trimmed)
    }

    async fn watch(&self, wake: Arc<Notify>, cancel: CancellationToken) {
        tokio::join!(
            self.subscribe(&wake, &cancel),
            self.keep_membership(&wake, &cancel),
            self.watch_replication(&cancel)
        );
    }
}

/// A claimed notification from a claim's reply (`c`: id, state record or nil, spec, its
/// score in the due index), and how it was claimed, for its settle.
fn claimed_job(
    c: &[Value],
    claimed_at_us: i64,
    asked: Instant,
    shared: &dyn spec::SharedSchedules,
) -> StoreResult<(ClaimedJob, Held)> {
    let id = text_at(c, 0)?;
    let spec = text_at(c, 2)?;
    let stored = match c.get(1) {
        Some(Value::Nil) | Some(Value::Boolean(false)) => None,
        _ => Some(text_at(c, 1)?),
    };
    let decoded =
        spec::decode(&spec).map_err(|e| StoreError::Corrupt(format!("spec of {id}: {e}")))?;
    let score = int_at(c, 3)?;
    let held = Held::claimed(&id, stored, (&spec, &decoded), score, shared)?;
    let job = ClaimedJob {
        id: id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("bad id `{id}` in due set")))?,
        lease: held.record.lease,
        attempt: held.record.attempts + 1,
        max_attempts: held.record.max_attempts,
        // Its score in the due set, which its record reads as its `next_at` too.
        due_at: score,
        claimed_at_us,
        claim_asked: asked,
        spec: decoded,
        reserved: held.record.reserved,
        probe: held.record.probe,
        deadline: held.record.deadline,
        waiting_since: held.record.waiting_since(),
        next_interval_ms: held
            .record
            .schedule
            .get(held.record.attempts as usize)
            .copied(),
    };
    Ok((job, held))
}

/// A settle of `s` worked out from `held` at `now`: written only if Redis's clock has
/// reached the attempt's end. Its answer is the new state (`None`: its lease was lost).
fn settled(s: &Settlement, held: &Held, now: Now) -> Decision<Option<JobState>> {
    let verdict = s.verdict();
    let Some(new) = transitions::settle(&held.record, s.lease, &verdict, now) else {
        return Decision::Done(None);
    };
    let ended = verdict.ended(now);
    let entry = entry_json(&Entry::Attempt(s.attempt(ended)));
    let change = Change::new(&s.id.to_string(), held, &new)
        .not_before(ended)
        .with_entry(entry);
    Decision::Write(change, Some(new.state))
}

/// A history entry as `commit.lua` adds it.
pub(super) fn entry_json(entry: &Entry) -> String {
    serde_json::to_string(entry).expect("a history entry serializes")
}
