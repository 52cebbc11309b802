//! The embedded store's changes, each over the tables of one write transaction: it
//! reads the record, asks `lifecycle` what the event leads to, and writes the answer
//! with its index entry (`Tables::save`). Nothing here decides a state.

use std::time::Duration;

use tokio::time::Instant;

use redb::{ReadableTable, ReadableTableMetadata};

use super::tables::{corrupt, decode, DbError, DbResult, Tables};
use crate::delivery::policy::{self, RateAsk, RateState, SendTimes};
use crate::domain::{Entry, JobId, Tenant};
use crate::lifecycle::retention::{Pass, Step};
use crate::lifecycle::{
    transitions, wakes_at, Cancelled, Index, LetGo, NewCycle, Now, Record, TenantIndex,
};
use crate::store::spec;
use crate::store::types::NewJob;
use crate::store::{
    idempotency_value, Claim, ClaimedJob, Deferral, Enqueued, Settlement, StoreError,
};

/// Stores a notification and schedules its first attempt, or answers with the earlier
/// notification of its idempotency key (refusing it when that came with another request).
pub fn enqueue(t: &mut Tables, now: Now, job: &NewJob) -> DbResult<Enqueued> {
    let id = job.id.to_string();
    if let Some(entry) = &job.idempotency {
        let key = &entry.name;
        let known = t.idempotency.get(key.as_str())?.and_then(|v| {
            let (kept, until) = v.value();
            (until > now.down()).then(|| kept.to_string())
        });
        if let Some(kept) = known {
            let (first, _) = idempotency_value(&kept);
            let mismatch = entry.mismatches(&kept);
            let status = match mismatch {
                true => None,
                false => t.record(first)?.map(|r| r.status()),
            };
            return Ok(Enqueued {
                id: parse_id(first)?,
                status,
                duplicate: true,
                mismatch,
                earliest: None,
            });
        }
        forget_key(t, key)?;
        let until = now.up() + entry.ttl_ms as i64;
        let kept = entry.kept(&job.id);
        t.idempotency.insert(key.as_str(), (kept.as_str(), until))?;
        t.idempotency_expiry.insert((until, key.as_str()), ())?;
    }
    let record = transitions::register(job.schedule.clone(), now, job.delay_ms);
    let value = spec::stored(record.created_at, job.delay_ms, &job.schedule, &job.spec);
    t.specs.insert(id.as_str(), value.as_str())?;
    let record = t.save(&id, None, &record)?;
    let first = heads(t, &id, &record)?;
    Ok(Enqueued::stored(job.id, record.status(), first))
}

/// Whether `record` is due by its time (neither waiting behind its ordering key nor
/// held) and heads the due index.
pub fn heads(t: &Tables, id: &str, record: &Record) -> DbResult<bool> {
    match record.due_at() {
        Some(at) => t.heads_due(at, id),
        None => Ok(false),
    }
}

/// Deletes an idempotency key and its expiry entry, if any.
fn forget_key(t: &mut Tables, key: &str) -> DbResult<()> {
    let old = t.idempotency.remove(key)?.map(|v| v.value().1);
    if let Some(until) = old {
        t.idempotency_expiry.remove((until, key))?;
    }
    Ok(())
}

/// Hands back up to `limit` expired leases, then leases up to `limit` notifications due
/// by `now + ahead_ms` until `now + lease_ms`, with how long until the next due
/// notification or lease end.
pub fn claim(
    t: &mut Tables,
    now: Now,
    limit: usize,
    (lease_ms, ahead_ms): (i64, i64),
    asked: Instant,
) -> DbResult<Claim> {
    let now_ms = now.down();
    hand_back(t, first_until(&t.inflight, now_ms, limit)?, now)?;
    let mut jobs = Vec::new();
    for (due_at, id) in first_until(&t.due, now_ms + ahead_ms, limit)? {
        let spec = t.specs.get(id.as_str())?.map(|v| v.value().to_string());
        let old = t.record(&id)?;
        let claimed = old
            .as_ref()
            .and_then(|r| transitions::claim(r, now_ms + lease_ms));
        let (Some(new), Some(spec)) = (claimed, spec) else {
            t.due.remove((due_at, id.as_str()))?;
            continue;
        };
        t.save(&id, old.as_ref(), &new)?;
        jobs.push(ClaimedJob {
            id: parse_id(&id)?,
            lease: new.lease,
            attempt: new.attempts + 1,
            max_attempts: new.max_attempts,
            due_at,
            claimed_at_us: now.micros(),
            claim_asked: asked,
            spec: spec::decode(&spec).map_err(corrupt)?,
            reserved: new.reserved,
            probe: new.probe,
            deadline: new.deadline,
            waiting_since: new.waiting_since(),
            next_interval_ms: new.schedule.get(new.attempts as usize).copied(),
        });
    }
    let head = |table: &redb::Table<(i64, &'static str), ()>| -> DbResult<Option<i64>> {
        let first = table.first()?.map(|(k, _)| k.value().0);
        Ok(first.filter(|at| wakes_at(*at)))
    };
    let wake = match (head(&t.due)?, head(&t.inflight)?) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Claim {
        jobs,
        next_wake: wake.map(|at| Duration::from_millis((at - now_ms).max(0) as u64)),
        ..Claim::default()
    })
}

/// Up to `limit` entries of an index at or before `until`, oldest first.
/// Hands back the leases of `entries` of the in-flight index (`transitions::expire`).
fn hand_back(t: &mut Tables, entries: Vec<(i64, String)>, now: Now) -> DbResult<()> {
    for (until, id) in entries {
        let old = t.record(&id)?;
        match old.as_ref().and_then(|old| transitions::expire(old, now)) {
            Some(new) => drop(t.save(&id, old.as_ref(), &new)?),
            None => drop(t.inflight.remove((until, id.as_str()))?),
        }
    }
    Ok(())
}

/// In-flight entries handed back per batch as a store opens.
const TAKE_BACK_BATCH: usize = 1_000;

/// Hands back every lease, however long it has yet to run: as a store opens, no other
/// process holds one (the file is locked while open), so what a crash left in flight is
/// due again at once rather than when its lease would end. How many.
pub fn take_back_leases(t: &mut Tables, now: Now) -> DbResult<usize> {
    let mut taken = 0;
    loop {
        let batch = first_until(&t.inflight, i64::MAX, TAKE_BACK_BATCH)?;
        if batch.is_empty() {
            return Ok(taken);
        }
        taken += batch.len();
        hand_back(t, batch, now)?;
    }
}

fn first_until(
    index: &redb::Table<(i64, &'static str), ()>,
    until: i64,
    limit: usize,
) -> DbResult<Vec<(i64, String)>> {
    let mut out = Vec::new();
    let entries = match until.checked_add(1) {
        Some(after) => index.range(..(after, ""))?,
        None => index.range::<(i64, &str)>(..)?,
    };
    for entry in entries.take(limit) {
        let key = entry?.0;
        let (at, id) = key.value();
        out.push((at, id.to_string()));
    }
    Ok(out)
}

/// Applies `step` to the record of `id` and saves what it returns. The new record;
/// `None` when there is no record or the step changed nothing.
fn apply(
    t: &mut Tables,
    id: &str,
    step: impl FnOnce(&Record) -> Option<Record>,
) -> DbResult<Option<Record>> {
    let Some(old) = t.record(id)? else {
        return Ok(None);
    };
    let Some(new) = step(&old) else {
        return Ok(None);
    };
    Ok(Some(t.save(id, Some(&old), &new)?))
}

/// Records one attempt and moves the notification on. Its new record; `None` when the
/// lease was no longer current and nothing changed.
pub fn settle(t: &mut Tables, now: Now, s: &Settlement) -> DbResult<Option<Record>> {
    let id = s.id.to_string();
    let verdict = s.verdict();
    let Some(new) = apply(t, &id, |r| transitions::settle(r, s.lease, &verdict, now))? else {
        return Ok(None);
    };
    let attempt = Entry::Attempt(s.attempt(verdict.ended(now)));
    append_history(t, &id, attempt)?;
    Ok(Some(new))
}

fn append_history(t: &mut Tables, id: &str, entry: Entry) -> DbResult<()> {
    let mut history: Vec<Entry> = match t.history.get(id)? {
        Some(raw) => decode(raw.value())?,
        None => Vec::new(),
    };
    history.push(entry);
    let encoded = serde_json::to_string(&history).map_err(super::tables::corrupt)?;
    t.history.insert(id, encoded.as_str())?;
    Ok(())
}

/// Applies `step` to the record of `id`, saves what it returns and adds the note it
/// returns to the history. The new record; `None` when there is no record or the step
/// changed nothing.
fn apply_noted(
    t: &mut Tables,
    id: &str,
    step: impl FnOnce(&Record) -> Option<(Record, Option<crate::domain::Note>)>,
) -> DbResult<Option<Record>> {
    let mut note = None;
    let new = apply(t, id, |r| {
        let (new, noted) = step(r)?;
        note = noted;
        Some(new)
    })?;
    if let Some(note) = note {
        append_history(t, id, Entry::Note(note))?;
    }
    Ok(new)
}

/// Hands a leased notification back to the due set after its delay, without counting an
/// attempt (cancelled instead when a cancel was asked for; dead when its circuit held it
/// back past its deadline). Its new record; `None` when the lease was no longer current.
pub fn defer(t: &mut Tables, now: Now, d: &Deferral) -> DbResult<Option<Record>> {
    apply_noted(t, &d.id.to_string(), |r| d.apply(r, now))
}

/// Hands a leased notification back, due at once (or when it was due, if that is
/// later). Its new record; `None` when the lease was no longer current.
pub fn release(t: &mut Tables, now: Now, id: &JobId, lease: u64) -> DbResult<Option<Record>> {
    apply(t, &id.to_string(), |r| transitions::release(r, lease, now))
}

/// Cancels a scheduled notification at once, or one in flight after its attempt.
pub fn cancel(t: &mut Tables, now: Now, id: &JobId) -> DbResult<Cancelled> {
    let mut answer = Cancelled::NotFound;
    apply(t, &id.to_string(), |r| {
        let (said, new) = transitions::cancel(r, now);
        answer = said;
        new
    })?;
    Ok(answer)
}

/// Schedules a finished notification that `cycle.which` takes back again from a fresh
/// attempt count, with a new spec (meta line and body) or schedule (intervals in ms)
/// when given, its history noting the new cycle. Its new record; `None` when it is not
/// taken back.
pub fn again(
    t: &mut Tables,
    now: Now,
    id: &JobId,
    spec: Option<&str>,
    cycle: &NewCycle,
) -> DbResult<Option<Record>> {
    let key = id.to_string();
    let again = apply_noted(t, &key, |r| {
        transitions::again(r, cycle, now).map(|(r, note)| (r, Some(note)))
    })?;
    if let (Some(encoded), Some(r)) = (spec, &again) {
        let value = spec::stored(r.created_at, 0, &r.schedule, encoded);
        t.specs.insert(key.as_str(), value.as_str())?;
    }
    Ok(again)
}

/// Makes a scheduled notification due now. Its new record; `None` when it is not
/// scheduled.
pub fn attempt_now(t: &mut Tables, now: Now, id: &JobId, how: LetGo) -> DbResult<Option<Record>> {
    apply(t, &id.to_string(), |r| {
        transitions::attempt_now(r, now, how)
    })
}

/// Deletes a dead letter. Whether it was one.
pub fn discard(t: &mut Tables, id: &JobId) -> DbResult<bool> {
    let key = id.to_string();
    let Some(r) = t.record(&key)?.filter(transitions::discardable) else {
        return Ok(false);
    };
    if let Some((index, at)) = r.position() {
        if let Some(tenant) = t.unindex(index, at, &key)? {
            t.tally(&tenant, index, at, -1)?;
        }
    }
    t.forget(&key)?;
    Ok(true)
}

/// Retention of `tenant`'s notifications: runs `pass` (`lifecycle::retention`) over the
/// tenant's own indexes, deleting each cut it names with its records, counting each by
/// reason. How many notifications it deleted.
pub fn apply_retention(t: &mut Tables, tenant: &Tenant, pass: &mut Pass) -> DbResult<usize> {
    loop {
        match pass.next() {
            Step::Delete(cut) => {
                let own = t.tenant_index(TenantIndex::of(cut.index));
                let oldest = first_of_tenant(own, tenant, cut.until, cut.limit)?;
                pass.deleted(drop_all(t, oldest, cut.index, cut.counter)?);
            }
            Step::CountDead => pass.counted(t.dead_of(tenant)?),
            Step::Done => break,
        }
    }
    Ok(pass.total())
}

/// Forgets up to `budget` idempotency keys whose time ended by `now_ms`.
pub fn forget_keys(t: &mut Tables, now_ms: i64, budget: usize) -> DbResult<()> {
    for (until, key) in first_until(&t.idempotency_expiry, now_ms, budget)? {
        t.idempotency_expiry.remove((until, key.as_str()))?;
        t.idempotency.remove(key.as_str())?;
    }
    Ok(())
}

/// The oldest (up to `limit`) entries of `tenant` in one of its indexes with times at or
/// before `until`.
fn first_of_tenant(
    index: &redb::Table<(&'static str, i64, &'static str), ()>,
    tenant: &Tenant,
    until: i64,
    limit: usize,
) -> DbResult<Vec<(i64, String)>> {
    let name = tenant.as_str();
    let mut out = Vec::new();
    for entry in index
        .range((name, i64::MIN, "")..=(name, until, "\u{10FFFF}"))?
        .take(limit)
    {
        let key = entry?.0;
        let (_, at, id) = key.value();
        out.push((at, id.to_string()));
    }
    Ok(out)
}

/// Deletes the notifications of `entries` (read from a tenant's own `index`) with their
/// records, counting them under `counter`. Only one `index` still holds is deleted and
/// counted: an entry of the tenant's index that no longer matches (kept by a build that
/// knew no tenant indexes) is dropped alone. How many it deleted.
fn drop_all(
    t: &mut Tables,
    entries: Vec<(i64, String)>,
    index: Index,
    counter: &str,
) -> DbResult<usize> {
    let mut gone = 0;
    for (at, id) in &entries {
        let Some(tenant) = t.unindex(index, *at, id)? else {
            continue;
        };
        let counted = match t.tenants.is_empty()? {
            true => Tenant::default(),
            false => tenant,
        };
        t.tally(&counted, index, *at, -1)?;
        t.tally_trimmed(&counted, counter)?;
        t.forget(id)?;
        gone += 1;
    }
    if gone > 0 {
        t.count(counter, gone as u64)?;
    }
    Ok(gone)
}

fn parse_id(raw: &str) -> DbResult<JobId> {
    raw.parse()
        .map_err(|_| DbError::corrupted(format!("bad id `{raw}` in the embedded store")))
}

/// A storage error as the store reports it.
pub fn store_error(e: DbError) -> StoreError {
    match *e.0 {
        redb::Error::Corrupted(m) => StoreError::Corrupt(m),
        e => StoreError::Unavailable(e.to_string()),
    }
}

/// Reserves send times in each ask's rate key (`policy::reserve`), keeping each key's
/// state only while it matters.
pub fn reserve(t: &mut Tables, now: Now, asks: &[RateAsk]) -> DbResult<Vec<SendTimes>> {
    let now_us = now.micros();
    let mut out = Vec::with_capacity(asks.len());
    for ask in asks {
        let key = ask.key.as_str();
        let state = t.rates.get(key)?.map(|v| v.value());
        let state = state.map_or_else(RateState::default, |(tat_us, paused_until_us)| RateState {
            tat_us,
            paused_until_us,
        });
        let (new, slots) = policy::reserve(state, now_us, ask);
        if new.matters_until() > now_us {
            t.rates.insert(key, (new.tat_us, new.paused_until_us))?;
        } else {
            t.rates.remove(key)?;
        }
        out.push(slots);
    }
    Ok(out)
}
