//! The Postgres store's transitions, each inside one transaction (`Tx`): it locks the
//! notification's row, asks `lifecycle` what the event leads to, and writes the answer
//! with its place in the indexes. Claims choose rows with `FOR UPDATE SKIP LOCKED`, so
//! that instances sharing the database never wait on each other's rows. Nothing here
//! decides a state. Beside it: `trim` (retention), `rates` (quotas), `intake`
//! (`postback.notify()`), `audit`, `endpoints` (their records and pauses).

use std::time::Duration;

use tokio::time::Instant;

use super::tx::{col, corrupt, place, Fault, PgResult, Tx};
use crate::domain::{Entry, JobId, Tenant};
use crate::lifecycle::{transitions, wakes_at, Cancelled, JobStatus, LetGo, NewCycle, Record};
use crate::store::spec;
pub(super) use crate::store::types::NewJob;
use crate::store::{
    idempotency_value, Claim, ClaimedJob, Deferral, Enqueued, IdempotencyEntry, Settlement,
};

/// Stores a notification and schedules its first attempt, or answers with the earlier
/// notification of its idempotency key (refusing it when that came with another
/// request).
pub async fn enqueue(t: &mut Tx<'_>, job: &NewJob) -> PgResult<Enqueued> {
    let (record, stored) = registered(t, job);
    enqueue_registered(t, job, record, stored).await
}

/// Its record and stored spec as registered now.
fn registered(t: &Tx<'_>, job: &NewJob) -> (Record, String) {
    let record = transitions::register(job.schedule.clone(), t.now, job.delay_ms);
    let stored = spec::stored(record.created_at, job.delay_ms, &job.schedule, &job.spec);
    (record, stored)
}

/// `enqueue`, with the record and stored spec worked out already.
async fn enqueue_registered(
    t: &mut Tx<'_>,
    job: &NewJob,
    record: Record,
    stored: String,
) -> PgResult<Enqueued> {
    if let Some(entry) = &job.idempotency {
        if let Some(earlier) = claim_key(t, entry, &job.id).await? {
            return Ok(earlier);
        }
    }
    let id = job.id.to_string();
    let (tenant, ordering) = (spec::tenant(&stored), spec::ordering(&stored));
    let (idx, at) = place(&record);
    t.execute(
        "INSERT INTO postback.jobs (id, tenant, ordering, spec, record, idx, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &id,
            &&*tenant,
            &ordering,
            &stored,
            &record.encode(),
            &idx,
            &at,
        ],
    )
    .await?;
    let record = match ordering.as_deref() {
        Some(key) => t.save(&id, Some(key), None, &record).await?,
        None => record,
    };
    let heads = t.heads_due(&id, &record).await?;
    Ok(Enqueued::stored(job.id, record.status(), heads))
}

/// Stores registrations in order, as `enqueue` would one by one: those with neither an
/// idempotency key nor an ordering key (which need nothing read first) in one
/// statement, the rest one by one. One answer per registration, in order.
pub async fn enqueue_group(t: &mut Tx<'_>, jobs: &[NewJob]) -> PgResult<Vec<Enqueued>> {
    let mut answers: Vec<Option<Enqueued>> = vec![None; jobs.len()];
    let mut plain = Plain::default();
    for (i, job) in jobs.iter().enumerate() {
        let (record, stored) = registered(t, job);
        match (&job.idempotency, spec::ordering(&stored)) {
            (None, None) => plain.add(i, job, &record, stored),
            _ => answers[i] = Some(enqueue_registered(t, job, record, stored).await?),
        }
    }
    let heads = plain.write(t).await?;
    for (n, (i, id, status)) in plain.stored.into_iter().enumerate() {
        answers[i] = Some(Enqueued::stored(id, status, heads == Some(n)));
    }
    Ok(answers.into_iter().flatten().collect())
}

/// Registrations that need nothing read first, stored in one statement.
#[derive(Default)]
struct Plain {
    /// Place in the group, id and status of each.
    stored: Vec<(usize, JobId, JobStatus)>,
    ids: Vec<String>,
    tenants: Vec<String>,
    specs: Vec<String>,
    records: Vec<String>,
    at: Vec<i64>,
}

impl Plain {
    fn add(&mut self, i: usize, job: &NewJob, record: &Record, stored: String) {
        self.stored.push((i, job.id, record.status()));
        self.ids.push(job.id.to_string());
        self.tenants.push(spec::tenant(&stored).to_string());
        self.specs.push(stored);
        self.records.push(record.encode());
        self.at.push(record.next_at.unwrap_or_default());
    }

    /// Inserts them; which of them (by its place here) now heads the due index.
    async fn write(&self, t: &mut Tx<'_>) -> PgResult<Option<usize>> {
        if self.ids.is_empty() {
            return Ok(None);
        }
        t.execute(
            "INSERT INTO postback.jobs (id, tenant, spec, record, idx, at)
             SELECT id, tenant, spec, record, 'due', at
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[])
                 AS u(id, tenant, spec, record, at)",
            &[
                &self.ids,
                &self.tenants,
                &self.specs,
                &self.records,
                &self.at,
            ],
        )
        .await?;
        let first = (0..self.ids.len()).min_by_key(|&n| (self.at[n], &self.ids[n]));
        let Some(first) = first else { return Ok(None) };
        let record = Record::decode(&self.records[first]).map_err(corrupt)?;
        Ok(t.heads_due(&self.ids[first], &record)
            .await?
            .then_some(first))
    }
}

/// Takes the idempotency key for `id`, or answers with the notification that holds it
/// (a concurrent registration of the same key waits here for the other to commit).
async fn claim_key(
    t: &mut Tx<'_>,
    entry: &IdempotencyEntry,
    id: &JobId,
) -> PgResult<Option<Enqueued>> {
    let until = t.now.up() + entry.ttl_ms as i64;
    let kept = entry.kept(id);
    let taken = t
        .execute(
            "INSERT INTO postback.idempotency (tenant, key, kept, until) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant, key) DO UPDATE SET kept = $3, until = $4
             WHERE postback.idempotency.until <= $5",
            &[&entry.tenant, &entry.key, &kept, &until, &t.now.down()],
        )
        .await?;
    if taken == 1 {
        return Ok(None);
    }
    let rows = t
        .query(
            "SELECT kept FROM postback.idempotency WHERE tenant = $1 AND key = $2",
            &[&entry.tenant, &entry.key],
        )
        .await?;
    let kept: String = rows
        .first()
        .map(|r| col(r, "kept"))
        .transpose()?
        .unwrap_or_default();
    let (first, _) = idempotency_value(&kept);
    let mismatch = entry.mismatches(&kept);
    let status = match mismatch {
        true => None,
        false => t.job(first).await?.map(|row| row.record.status()),
    };
    Ok(Some(Enqueued {
        id: parse_id(first)?,
        status,
        duplicate: true,
        mismatch,
        earliest: None,
    }))
}

/// Hands back up to `limit` expired leases, then leases up to `limit` notifications due
/// by `now + ahead_ms` until `now + lease_ms`, with how long until the next due
/// notification or lease end. Rows another instance holds are skipped.
pub async fn claim(
    t: &mut Tx<'_>,
    limit: usize,
    (lease_ms, ahead_ms): (i64, i64),
    asked: Instant,
) -> PgResult<Claim> {
    t.exclude_wake_checks().await?;
    let now_ms = t.now.down();
    let limit = limit as i64;
    let expired = t
        .query(
            "SELECT id, record, ordering FROM postback.jobs
             WHERE idx = 'inflight' AND at <= $1 ORDER BY at, id LIMIT $2
             FOR UPDATE SKIP LOCKED",
            &[&now_ms, &limit],
        )
        .await?;
    for row in &expired {
        let (id, old) = (col::<&str>(row, "id")?, decode(col(row, "record")?)?);
        if let Some(new) = transitions::expire(&old, t.now) {
            let ordering: Option<&str> = col(row, "ordering")?;
            t.save(id, ordering, Some(&old), &new).await?;
        }
    }
    let due = t
        .query(
            "SELECT id, record, spec, at FROM postback.jobs
             WHERE idx = 'due' AND at <= $1 ORDER BY at, id LIMIT $2
             FOR UPDATE SKIP LOCKED",
            &[&(now_ms + ahead_ms), &limit],
        )
        .await?;
    let mut jobs = Vec::with_capacity(due.len());
    let (mut ids, mut records) = (Vec::new(), Vec::new());
    for row in &due {
        let (id, old) = (col::<&str>(row, "id")?, decode(col(row, "record")?)?);
        let Some(new) = transitions::claim(&old, now_ms + lease_ms) else {
            continue;
        };
        jobs.push(ClaimedJob {
            id: parse_id(id)?,
            lease: new.lease,
            attempt: new.attempts + 1,
            max_attempts: new.max_attempts,
            due_at: col(row, "at")?,
            claimed_at_us: t.now.micros(),
            claim_asked: asked,
            spec: spec::decode(col(row, "spec")?).map_err(corrupt)?,
            reserved: new.reserved,
            probe: new.probe,
            deadline: new.deadline,
            waiting_since: new.waiting_since(),
            next_interval_ms: new.schedule.get(new.attempts as usize).copied(),
        });
        ids.push(id);
        records.push(new.encode());
    }
    // Claimed notifications neither join nor leave an ordering key: one statement.
    t.execute(
        "UPDATE postback.jobs SET record = u.record, idx = 'inflight', at = $3
         FROM unnest($1::text[], $2::text[]) AS u(id, record) WHERE jobs.id = u.id",
        &[&ids, &records, &(now_ms + lease_ms)],
    )
    .await?;
    let next_wake = next_wake_at(t).await?;
    Ok(Claim {
        jobs,
        next_wake: next_wake.map(|at| Duration::from_millis((at - now_ms).max(0) as u64)),
        ..Claim::default()
    })
}

/// When the earliest notification falls due or the earliest lease ends, if any.
pub async fn next_wake_at(t: &Tx<'_>) -> PgResult<Option<i64>> {
    let rows = t
        .query(
            "SELECT least(
                 (SELECT at FROM postback.jobs WHERE idx = 'due' ORDER BY at LIMIT 1),
                 (SELECT at FROM postback.jobs WHERE idx = 'inflight' ORDER BY at LIMIT 1))
               AS at",
            &[],
        )
        .await?;
    let at: Option<i64> = rows.first().map(|r| col(r, "at")).transpose()?.flatten();
    // A notification waiting behind its ordering key or held is not due until let go.
    Ok(at.filter(|at| wakes_at(*at)))
}

/// Applies `step` to the locked record of `id` and saves what it returns: the new
/// record, or `None` when there is no record or the step changed nothing.
pub(super) async fn apply(
    t: &mut Tx<'_>,
    id: &str,
    step: impl FnOnce(&Record) -> Option<Record>,
) -> PgResult<Option<Record>> {
    let Some(row) = t.job(id).await? else {
        return Ok(None);
    };
    let Some(new) = step(&row.record) else {
        return Ok(None);
    };
    let saved = t
        .save(id, row.ordering.as_deref(), Some(&row.record), &new)
        .await?;
    Ok(Some(saved))
}

/// One notification's change in a batch: its id, and the step from its record to the
/// new one (`None`: the event does not apply) with the entries to add to its history (a
/// JSON array, `appended`).
pub struct RecordStep<'a> {
    pub id: String,
    #[allow(clippy::type_complexity)]
    pub step: Box<dyn FnOnce(&Record) -> Option<(Record, Option<String>)> + Send + 'a>,
}

/// Applies each change to its locked record (all locked in id order at once) and saves
/// what it returns: records that join or leave an ordering key one by one (`Tx::save`),
/// the rest in one statement. Per change, in order, the new record (`None` where the
/// event did not apply).
pub async fn apply_many(
    t: &mut Tx<'_>,
    changes: Vec<RecordStep<'_>>,
) -> PgResult<Vec<Option<Record>>> {
    let applied = apply_many_of_tenants(t, changes).await?;
    Ok(applied.into_iter().map(|a| a.map(|(r, _)| r)).collect())
}

/// As `apply_many`, with the tenant of each notification changed.
pub async fn apply_many_of_tenants(
    t: &mut Tx<'_>,
    changes: Vec<RecordStep<'_>>,
) -> PgResult<Vec<Option<(Record, Tenant)>>> {
    let ids: Vec<&str> = changes.iter().map(|c| c.id.as_str()).collect();
    let rows = t
        .query(
            "SELECT id, record, ordering, tenant FROM postback.jobs WHERE id = ANY($1)
             ORDER BY id FOR UPDATE",
            &[&ids],
        )
        .await?;
    let mut held = std::collections::HashMap::with_capacity(rows.len());
    for row in &rows {
        let ordering: Option<String> = col(row, "ordering")?;
        let tenant = parse_tenant(&col::<String>(row, "tenant")?)?;
        held.insert(
            col::<String>(row, "id")?,
            (decode(col(row, "record")?)?, ordering, tenant),
        );
    }
    let mut batch = Batch::default();
    let mut out = Vec::with_capacity(changes.len());
    for change in changes {
        let Some((old, ordering, tenant)) = held.get(&change.id) else {
            out.push(None);
            continue;
        };
        let Some((new, attempt)) = (change.step)(old) else {
            out.push(None);
            continue;
        };
        let new = match ordering {
            Some(key) => {
                let saved = t.save(&change.id, Some(key), Some(old), &new).await?;
                batch.add(&change.id, None, attempt);
                saved
            }
            None => {
                batch.add(&change.id, Some(&new), attempt);
                new
            }
        };
        out.push(Some((new, tenant.clone())));
    }
    batch.write(t).await?;
    Ok(out)
}

/// Records and attempts to write in one statement.
#[derive(Default)]
struct Batch {
    ids: Vec<String>,
    records: Vec<Option<String>>,
    idx: Vec<Option<&'static str>>,
    at: Vec<Option<i64>>,
    attempts: Vec<Option<String>>,
}

impl Batch {
    /// `record`: the new record, unless it was saved already.
    fn add(&mut self, id: &str, record: Option<&Record>, attempt: Option<String>) {
        let (idx, at) = record.map_or((None, None), place);
        self.ids.push(id.to_string());
        self.records.push(record.map(Record::encode));
        self.idx.push(idx);
        self.at.push(at);
        self.attempts.push(attempt);
    }

    /// The history is a JSON array: an attempt is appended without reading it back.
    async fn write(&self, t: &Tx<'_>) -> PgResult<()> {
        if self.ids.is_empty() {
            return Ok(());
        }
        t.execute(
            "UPDATE postback.jobs SET
                 record = coalesce(u.record, jobs.record),
                 idx = CASE WHEN u.record IS NULL THEN jobs.idx ELSE u.idx END,
                 at = CASE WHEN u.record IS NULL THEN jobs.at ELSE u.at END,
                 history = CASE WHEN u.attempt IS NULL THEN jobs.history
                     WHEN jobs.history = '[]' THEN u.attempt
                     ELSE left(jobs.history, -1) || ',' || substr(u.attempt, 2) END
             FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[])
                 AS u(id, record, idx, at, attempt)
             WHERE jobs.id = u.id",
            &[
                &self.ids,
                &self.records,
                &self.idx,
                &self.at,
                &self.attempts,
            ],
        )
        .await?;
        Ok(())
    }
}

/// Records attempts and moves each notification on: per settlement, its new record
/// (`None` where the lease was no longer current).
pub async fn settle(
    t: &mut Tx<'_>,
    batch: &[Settlement],
) -> PgResult<Vec<Option<(Record, Tenant)>>> {
    let now = t.now;
    let changes = batch
        .iter()
        .map(|s| RecordStep {
            id: s.id.to_string(),
            step: Box::new(move |r: &Record| {
                let verdict = s.verdict();
                let new = transitions::settle(r, s.lease, &verdict, now)?;
                let attempt = Entry::Attempt(s.attempt(verdict.ended(now)));
                Some((new, Some(appended(attempt))))
            }),
        })
        .collect();
    apply_many_of_tenants(t, changes).await
}

/// An entry as `Batch::write` appends it to a history: a JSON array of it alone.
fn appended(entry: Entry) -> String {
    serde_json::to_string(&[entry]).expect("a history entry serializes")
}

/// Hands leased notifications back to the due set after their delays, without counting
/// an attempt (cancelled instead where a cancel was asked for; dead where an open circuit
/// held one back past its deadline).
pub async fn defer(t: &mut Tx<'_>, batch: &[Deferral]) -> PgResult<Vec<Option<Record>>> {
    let now = t.now;
    let changes = batch
        .iter()
        .map(|d| RecordStep {
            id: d.id.to_string(),
            step: Box::new(move |r: &Record| {
                let (new, note) = d.apply(r, now)?;
                Some((new, note.map(|n| appended(Entry::Note(n)))))
            }),
        })
        .collect();
    apply_many(t, changes).await
}

/// Hands leased notifications back, due at once (or when they were due, if later).
pub async fn release(t: &mut Tx<'_>, leases: &[(JobId, u64)]) -> PgResult<Vec<Option<Record>>> {
    let now = t.now;
    let changes = leases
        .iter()
        .map(|(id, lease)| RecordStep {
            id: id.to_string(),
            step: Box::new(move |r: &Record| Some((transitions::release(r, *lease, now)?, None))),
        })
        .collect();
    apply_many(t, changes).await
}

/// Whether any of `moved` (ids and new records) is scheduled and heads the due index;
/// then schedulers wake.
pub async fn any_heads(t: &mut Tx<'_>, moved: &[(String, Record)]) -> PgResult<bool> {
    let due = moved
        .iter()
        .filter_map(|(id, r)| r.due_at().map(|at| ((at, id), r)));
    match due.min_by(|a, b| a.0.cmp(&b.0)) {
        Some(((_, id), r)) => t.heads_due(id, r).await,
        None => Ok(false),
    }
}

/// Cancels a scheduled notification at once, or one in flight after its attempt.
pub async fn cancel(t: &mut Tx<'_>, id: &JobId) -> PgResult<Cancelled> {
    let (mut answer, now) = (Cancelled::NotFound, t.now);
    apply(t, &id.to_string(), |r| {
        let (said, new) = transitions::cancel(r, now);
        answer = said;
        new
    })
    .await?;
    Ok(answer)
}

/// Schedules a finished notification that `cycle.which` takes back again from a fresh
/// attempt count, with a new spec (meta line and body) or schedule when given, its
/// history noting the new cycle. Its new record; `None` when it is not taken back.
pub async fn again(
    t: &mut Tx<'_>,
    id: &JobId,
    spec: Option<&str>,
    cycle: &NewCycle<'_>,
) -> PgResult<Option<Record>> {
    let key = id.to_string();
    let now = t.now;
    let change = RecordStep {
        id: key.clone(),
        step: Box::new(move |r: &Record| {
            let (new, note) = transitions::again(r, cycle, now)?;
            Some((new, Some(appended(Entry::Note(note)))))
        }),
    };
    let again = apply_many(t, vec![change]).await?.pop().flatten();
    if let (Some(encoded), Some(r)) = (spec, &again) {
        let stored = spec::stored(r.created_at, 0, &r.schedule, encoded);
        t.execute(
            "UPDATE postback.jobs SET spec = $2 WHERE id = $1",
            &[&key, &stored],
        )
        .await?;
    }
    if let Some(r) = &again {
        t.heads_due(&key, r).await?;
    }
    Ok(again)
}

/// Makes a scheduled notification due now, as `how` says. Whether it was let go.
pub async fn attempt_now(t: &mut Tx<'_>, id: &JobId, how: LetGo) -> PgResult<bool> {
    let key = id.to_string();
    let now = t.now;
    let moved = apply(t, &key, |r| transitions::attempt_now(r, now, how)).await?;
    if let Some(r) = &moved {
        t.heads_due(&key, r).await?;
    }
    Ok(moved.is_some())
}

/// Deletes a dead letter. Whether it was one.
pub async fn discard(t: &mut Tx<'_>, id: &JobId) -> PgResult<bool> {
    let deleted = t
        .execute(
            "DELETE FROM postback.jobs WHERE id = $1 AND idx = 'dead'",
            &[&id.to_string()],
        )
        .await?;
    Ok(deleted == 1)
}

pub(super) fn decode(raw: &str) -> PgResult<Record> {
    Record::decode(raw).map_err(corrupt)
}

pub fn parse_tenant(raw: &str) -> PgResult<Tenant> {
    Tenant::parse(raw, "tenant")
        .map_err(|_| Fault::Corrupt(format!("bad tenant `{raw}` in postback.jobs")))
}

pub fn parse_id(raw: &str) -> PgResult<JobId> {
    raw.parse()
        .map_err(|_| Fault::Corrupt(format!("bad id `{raw}` in postback.jobs")))
}

/// A history as kept in `postback.jobs.history`.
pub fn history(raw: &str) -> PgResult<Vec<Entry>> {
    serde_json::from_str(raw).map_err(corrupt)
}
