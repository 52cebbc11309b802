//! The embedded store's state transitions, each a function over the tables of one write
//! transaction. They follow the same rules as the Redis store's scripts in `lua/`, one
//! for one (`enqueue` as enqueue.lua, `claim` as claim.lua, and so on).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redb::{ReadableTable, ReadableTableMetadata};

use super::tables::{decode, DbError, DbResult, Index, Record, Tables};
use crate::domain::{Attempt, JobId, JobSpec, Outcome};
use crate::store::{
    Cancelled, Claim, ClaimedJob, Deferral, Enqueued, JobState, JobStatus, Settlement, StoreError,
};

/// The store's clock, read once per transition, in µs since the epoch.
#[derive(Debug, Clone, Copy)]
pub struct Now(i64);

impl Now {
    pub fn read() -> Self {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self(since.as_micros() as i64)
    }

    /// In ms, rounded up: for due times computed from it, so that nothing is early.
    pub fn up(self) -> i64 {
        (self.0 + 999) / 1000
    }

    /// In ms, rounded down: for comparing with due times.
    pub fn down(self) -> i64 {
        self.0 / 1000
    }

    pub fn micros(self) -> i64 {
        self.0
    }
}

/// A registration, ready to store.
pub struct NewJob {
    pub id: JobId,
    pub spec: String,
    /// Retry intervals in ms.
    pub schedule: Vec<u64>,
    pub delay_ms: u64,
    /// The idempotency key and how long it is remembered, in ms.
    pub idempotency: Option<(String, u64)>,
}

/// Retention limits: dead letters' age and count, finished notifications' age.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub dead_max_age_ms: i64,
    pub dead_max_count: u64,
    pub finished_max_age_ms: i64,
}

/// Stores a notification and schedules its first attempt, or answers with the earlier
/// notification of its idempotency key.
pub fn enqueue(t: &mut Tables, now: Now, job: &NewJob) -> DbResult<Enqueued> {
    let now_ms = now.up();
    let id = job.id.to_string();
    if let Some((key, ttl)) = &job.idempotency {
        let known = t.idempotency.get(key.as_str())?.and_then(|v| {
            let (id, until) = v.value();
            (until > now.down()).then(|| id.to_string())
        });
        if let Some(first) = known {
            let status = t.record(&first)?.map(|r| r.status);
            return Ok(Enqueued {
                id: parse_id(&first)?,
                status,
                duplicate: true,
                earliest: false,
            });
        }
        forget_key(t, key)?;
        let until = now_ms + *ttl as i64;
        t.idempotency.insert(key.as_str(), (id.as_str(), until))?;
        t.idempotency_expiry.insert((until, key.as_str()), ())?;
    }
    let record = Record {
        status: JobStatus {
            state: JobState::Scheduled,
            attempts: 0,
            max_attempts: job.schedule.len() as u32 + 1,
            created_at: now_ms,
            next_at: Some(now_ms + job.delay_ms as i64),
            finished_at: None,
            replays: 0,
            cancel_requested: false,
        },
        schedule: job.schedule.clone(),
        lease: 0,
        lease_until: None,
    };
    t.specs.insert(id.as_str(), job.spec.as_str())?;
    t.save(&id, None, &record)?;
    let earliest = t.heads_due(now_ms + job.delay_ms as i64, &id)?;
    Ok(Enqueued {
        id: job.id,
        status: Some(record.status),
        duplicate: false,
        earliest,
    })
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
    for (until, id) in first_until(&t.inflight, now_ms, limit)? {
        let Some(old) = t.record(&id)? else {
            t.inflight.remove((until, id.as_str()))?;
            continue;
        };
        let mut r = old.clone();
        let at = due_again(&r, now_ms);
        hand_back(&mut r, now_ms, at);
        t.save(&id, Some(&old), &r)?;
    }
    let mut jobs = Vec::new();
    for (due_at, id) in first_until(&t.due, now_ms + ahead_ms, limit)? {
        let spec = t.specs.get(id.as_str())?.map(|v| v.value().to_string());
        let (Some(old), Some(spec)) = (t.record(&id)?, spec) else {
            t.due.remove((due_at, id.as_str()))?;
            continue;
        };
        let spec: JobSpec = decode(&spec)?;
        let mut r = old.clone();
        r.status.state = JobState::InFlight;
        r.lease += 1;
        r.lease_until = Some(now_ms + lease_ms);
        t.save(&id, Some(&old), &r)?;
        jobs.push(ClaimedJob {
            id: parse_id(&id)?,
            lease: r.lease,
            attempt: r.status.attempts + 1,
            due_at,
            claimed_at_us: now.micros(),
            claim_asked: asked,
            spec,
            claimed_record: None,
        });
    }
    let head = |table: &redb::Table<(i64, &'static str), ()>| -> DbResult<Option<i64>> {
        Ok(table.first()?.map(|(k, _)| k.value().0))
    };
    let wake = match (head(&t.due)?, head(&t.inflight)?) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Claim {
        jobs,
        next_wake: wake.map(|at| Duration::from_millis((at - now_ms).max(0) as u64)),
    })
}

/// Up to `limit` entries of an index at or before `until`, oldest first.
fn first_until(
    index: &redb::Table<(i64, &'static str), ()>,
    until: i64,
    limit: usize,
) -> DbResult<Vec<(i64, String)>> {
    let mut out = Vec::new();
    for entry in index.range(..(until + 1, ""))?.take(limit) {
        let key = entry?.0;
        let (at, id) = key.value();
        out.push((at, id.to_string()));
    }
    Ok(out)
}

/// When a notification handed back is due again: when it was due, or now if that has
/// passed (a claim may take it before it is due).
fn due_again(r: &Record, now_ms: i64) -> i64 {
    r.status.next_at.map_or(now_ms, |due| due.max(now_ms))
}

/// Takes back an attempt never made or never completed, without counting it: cancelled
/// when a cancel was asked for meanwhile, otherwise due at `at`. True when due again.
fn hand_back(r: &mut Record, now_ms: i64, at: i64) -> bool {
    r.lease_until = None;
    if r.status.cancel_requested {
        finish(r, JobState::Cancelled, now_ms);
        return false;
    }
    schedule_at(r, at);
    true
}

fn finish(r: &mut Record, state: JobState, at: i64) {
    r.status.state = state;
    r.status.next_at = None;
    r.status.finished_at = Some(at);
    r.lease_until = None;
}

fn schedule_at(r: &mut Record, at: i64) {
    r.status.state = JobState::Scheduled;
    r.status.next_at = Some(at);
    r.lease_until = None;
}

/// The record of `id` while `lease` is still the current lease of its attempt.
fn held(t: &Tables, id: &JobId, lease: u64) -> DbResult<Option<Record>> {
    Ok(t.record(&id.to_string())?
        .filter(|r| r.status.state == JobState::InFlight && r.lease == lease))
}

/// Records one attempt and moves the notification on. Its new record; `None` when the
/// lease was no longer current and nothing changed.
pub fn settle(t: &mut Tables, now: Now, s: &Settlement) -> DbResult<Option<Record>> {
    let Some(old) = held(t, &s.id, s.lease)? else {
        return Ok(None);
    };
    let id = s.id.to_string();
    let ended = s.ended_at.min(now.up());
    append_history(t, &id, s, ended)?;
    let mut r = old.clone();
    r.status.attempts += 1;
    if s.outcome == Outcome::Delivered {
        finish(&mut r, JobState::Delivered, ended);
    } else if r.status.cancel_requested {
        finish(&mut r, JobState::Cancelled, ended);
    } else if s.outcome == Outcome::Gone || r.status.attempts >= r.status.max_attempts {
        finish(&mut r, JobState::Dead, ended);
    } else {
        let at = ended + next_wait(&r, s);
        schedule_at(&mut r, at);
    }
    t.save(&id, Some(&old), &r)?;
    Ok(Some(r))
}

/// The wait after failed attempt number `attempts`: its interval, stretched by the
/// jitter, and at least the receiver's `Retry-After`.
fn next_wait(r: &Record, s: &Settlement) -> i64 {
    let n = r.status.attempts as usize;
    s.wait_after(r.schedule.get(n - 1).copied().unwrap_or(0))
}

fn append_history(t: &mut Tables, id: &str, s: &Settlement, ended: i64) -> DbResult<()> {
    let mut history: Vec<Attempt> = match t.history.get(id)? {
        Some(raw) => decode(raw.value())?,
        None => Vec::new(),
    };
    history.push(Attempt {
        at: ended - s.duration_ms as i64,
        status: s.status,
        error: s.error.clone(),
        duration_ms: s.duration_ms,
        response: s.response.clone(),
    });
    let encoded = serde_json::to_string(&history).map_err(super::tables::corrupt)?;
    t.history.insert(id, encoded.as_str())?;
    Ok(())
}

/// Hands a leased notification back to the due set after its delay, without counting an
/// attempt (cancelled instead when a cancel was asked for). Its new record; `None` when
/// the lease was no longer current.
pub fn defer(t: &mut Tables, now: Now, d: &Deferral) -> DbResult<Option<Record>> {
    let Some(old) = held(t, &d.id, d.lease)? else {
        return Ok(None);
    };
    let mut r = old.clone();
    hand_back(&mut r, now.down(), now.up() + d.delay.as_millis() as i64);
    t.save(&d.id.to_string(), Some(&old), &r)?;
    Ok(Some(r))
}

/// Hands a leased notification back, due at once (or when it was due, if that is
/// later). Whether it is due again.
pub fn release(t: &mut Tables, now: Now, id: &JobId, lease: u64) -> DbResult<bool> {
    let Some(old) = held(t, id, lease)? else {
        return Ok(false);
    };
    let mut r = old.clone();
    let now_ms = now.down();
    let due = hand_back(&mut r, now_ms, due_again(&old, now_ms));
    t.save(&id.to_string(), Some(&old), &r)?;
    Ok(due)
}

/// Cancels a scheduled notification at once, or one in flight after its attempt.
pub fn cancel(t: &mut Tables, now: Now, id: &JobId) -> DbResult<Cancelled> {
    let key = id.to_string();
    let Some(old) = t.record(&key)? else {
        return Ok(Cancelled::NotFound);
    };
    let mut r = old.clone();
    let answer = match old.status.state {
        JobState::Scheduled => {
            finish(&mut r, JobState::Cancelled, now.down());
            Cancelled::Done
        }
        JobState::InFlight => {
            r.status.cancel_requested = true;
            Cancelled::AfterAttempt
        }
        JobState::Cancelled => return Ok(Cancelled::Done),
        state => return Ok(Cancelled::Finished(state)),
    };
    t.save(&key, Some(&old), &r)?;
    Ok(answer)
}

/// Schedules a dead letter again from a fresh attempt count, with a new spec (JSON) or
/// schedule (intervals in ms) when given. Its new status; `None` when it is not dead.
pub fn replay(
    t: &mut Tables,
    now: Now,
    id: &JobId,
    spec: Option<&str>,
    schedule: Option<&[u64]>,
    delay_ms: u64,
) -> DbResult<Option<JobStatus>> {
    let key = id.to_string();
    let Some(old) = t.record(&key)?.filter(|r| r.status.state == JobState::Dead) else {
        return Ok(None);
    };
    if let Some(spec) = spec {
        t.specs.insert(key.as_str(), spec)?;
    }
    let mut r = old.clone();
    if let Some(schedule) = schedule {
        r.schedule = schedule.to_vec();
    }
    r.status.max_attempts = r.schedule.len() as u32 + 1;
    r.status.attempts = 0;
    r.status.replays += 1;
    r.status.finished_at = None;
    schedule_at(&mut r, now.up() + delay_ms as i64);
    t.save(&key, Some(&old), &r)?;
    Ok(Some(r.status))
}

/// Deletes a dead letter. Whether it was one.
pub fn discard(t: &mut Tables, id: &JobId) -> DbResult<bool> {
    let key = id.to_string();
    let Some(r) = t.record(&key)?.filter(|r| r.status.state == JobState::Dead) else {
        return Ok(false);
    };
    if let Some(at) = r.status.finished_at {
        t.dead.remove((at, key.as_str()))?;
    }
    t.forget(&key)?;
    Ok(true)
}

/// Retention: deletes up to `budget` dead letters past their age, then the oldest beyond
/// their count, and up to `budget` finished notifications past their age (each when its
/// flag says so), counting each by reason; then up to `budget` forgotten idempotency
/// keys. How many notifications it deleted.
pub fn apply_retention(
    t: &mut Tables,
    now: Now,
    limits: &Retention,
    budget: usize,
    (dead, finished): (bool, bool),
) -> DbResult<usize> {
    let now_ms = now.down();
    let mut n = 0;
    if dead {
        let old = first_until(&t.dead, now_ms - limits.dead_max_age_ms, budget)?;
        n += drop_all(t, old, Index::Dead, "dead_by_age")?;
        let excess = t.dead.len()?.saturating_sub(limits.dead_max_count) as usize;
        let oldest = first_until(&t.dead, i64::MAX - 1, excess.min(budget.saturating_sub(n)))?;
        n += drop_all(t, oldest, Index::Dead, "dead_by_count")?;
    }
    if finished {
        let old = first_until(&t.done, now_ms - limits.finished_max_age_ms, budget)?;
        n += drop_all(t, old, Index::Done, "finished_by_age")?;
    }
    for (until, key) in first_until(&t.idempotency_expiry, now_ms, budget)? {
        t.idempotency_expiry.remove((until, key.as_str()))?;
        t.idempotency.remove(key.as_str())?;
    }
    Ok(n)
}

/// Deletes the notifications of `entries` (from `index`) with their records, counting
/// them under `counter`.
fn drop_all(
    t: &mut Tables,
    entries: Vec<(i64, String)>,
    index: Index,
    counter: &str,
) -> DbResult<usize> {
    for (at, id) in &entries {
        t.index(index).remove((*at, id.as_str()))?;
        t.forget(id)?;
    }
    if !entries.is_empty() {
        t.count(counter, entries.len() as u64)?;
    }
    Ok(entries.len())
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
