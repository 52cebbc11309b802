//! Every change of a notification on Redis, after its registration: postback works it out
//! with `lifecycle` from the notification as it was (`Held`), and `commit.lua` writes it
//! (`Change`) only where the notification is still so: its stored record the same, in
//! the same index. Where it is not (a cancel asked for during an attempt, a lease lost,
//! a claim meanwhile), the script answers with how it is now, and the change is worked
//! out again from that, in a further round.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::{Script, Value};

use super::acks::Acked;
use super::conn::Conn;
use super::reply::{earliest_at, int_at, text_at};
use super::schedules::ScheduleBook;
use super::script_error;
use super::tenant_groups::TenantGroups;
use crate::domain::{FieldError, JobSpec, OrderingKey, Tenant};
use crate::lifecycle::retention::Policy;
use crate::lifecycle::{Index, JobState, Now, Record};
use crate::store::keys::ShardKeys;
use crate::store::spec::{self, SharedSchedules};
use crate::store::{StoreError, StoreResult};

/// Rounds of working a change out again before a batch is given up (its caller tries
/// again later): each round needs another change to the same notification between two
/// calls, so more than a few means something is wrong.
const MAX_ROUNDS: usize = 5;

/// A notification as a change is worked out from.
#[derive(Debug, Clone)]
pub struct Held {
    /// The stored record as Redis holds it, or for one with none yet the one its
    /// registration gave it.
    pub text: String,
    /// The record, in flight while it is in the in-flight index (a claim does not write
    /// the record).
    pub record: Record,
    pub index: Index,
    /// Its score in `index`.
    pub score: i64,
    pub tenant: Tenant,
    /// Its ordering key within its tenant (`OrderingKey::scoped`), if it has one.
    pub ordering: Option<String>,
}

impl Held {
    /// As a claim returns it: `text` its stored record, or none (`None`) and its `spec`
    /// (whose schedule may be one of `shared`), claimed at `score` in the due index.
    pub fn claimed(
        id: &str,
        text: Option<String>,
        (raw, spec): (&str, &JobSpec),
        score: i64,
        shared: &dyn SharedSchedules,
    ) -> StoreResult<Self> {
        let (record, text) = record_of(id, text, raw, shared)?;
        Ok(Self {
            text,
            record: record.placed(Index::Due, score).placed(Index::InFlight, 0),
            index: Index::InFlight,
            score: 0,
            tenant: spec.tenant.clone(),
            ordering: spec.ordering(),
        })
    }

    /// As a script returns it (`held_of` in `lua/common.lua`); `None` when it is gone.
    pub fn parse(id: &str, v: &Value, shared: &dyn SharedSchedules) -> StoreResult<Option<Self>> {
        let Value::Array(parts) = v else {
            return Err(StoreError::Corrupt(format!(
                "state of {id} in a script reply"
            )));
        };
        // No index: it is gone.
        let Some(index) = Index::named(&text_at(parts, 2)?) else {
            return Ok(None);
        };
        let text = match parts.first() {
            Some(Value::BulkString(_)) => Some(text_at(parts, 0)?),
            _ => None,
        };
        let spec = match parts.get(1) {
            Some(Value::BulkString(_)) => text_at(parts, 1)?,
            _ => String::new(),
        };
        let (record, text) = record_of(id, text, &spec, shared)?;
        let score = int_at(parts, 3)?;
        let tenant = tenant_named(id, &text_at(parts, 4)?)?;
        let ordering = scoped_ordering(id, &text_at(parts, 5)?, &tenant)?;
        Ok(Some(Self {
            text,
            record: record.placed(index, score),
            index,
            score,
            tenant,
            ordering,
        }))
    }
}

/// The tenant of `id` as the scripts name it (`''` for the default one).
pub fn tenant_named(id: &str, name: &str) -> StoreResult<Tenant> {
    match name {
        "" => Ok(Tenant::default()),
        name => Tenant::parse(name, "tenant")
            .map_err(|e| StoreError::Corrupt(format!("tenant of {id}: {}", e.message))),
    }
}

/// The ordering key `held_of` read off `id`'s spec (`''` for none), scoped by its
/// tenant, as `OrderingKey::scoped` scopes it.
fn scoped_ordering(id: &str, key: &str, tenant: &Tenant) -> StoreResult<Option<String>> {
    if key.is_empty() {
        return Ok(None);
    }
    let corrupt =
        |e: FieldError| StoreError::Corrupt(format!("ordering key of {id}: {}", e.message));
    Ok(Some(
        OrderingKey::parse(key).map_err(corrupt)?.scoped(tenant),
    ))
}

/// The record of `id` and its text: the stored one, or the one its spec's first line
/// gives it.
fn record_of(
    id: &str,
    text: Option<String>,
    spec: &str,
    shared: &dyn SharedSchedules,
) -> StoreResult<(Record, String)> {
    match text {
        Some(text) => {
            let record = Record::decode(&text)
                .map_err(|e| StoreError::Corrupt(format!("state record of {id}: {e}")))?;
            Ok((record, text))
        }
        None => {
            let record = spec::registration(spec, shared).ok_or_else(|| {
                StoreError::Corrupt(format!("{id} has neither a state record nor a first line"))
            })?;
            let text = record.encode();
            Ok((record, text))
        }
    }
}

/// One notification's change, as `commit.lua` takes it: 12 values, from the id to the
/// score it was worked out at (`run`).
#[derive(Debug, Clone)]
pub struct Change {
    id: String,
    /// The record it was worked out from; empty for a change that only asks how it is.
    expected: String,
    from: Index,
    /// Its score in `from` when the change was worked out (an ordering key's turn moves
    /// the score alone).
    score: i64,
    /// A time (ms) the change assumes Redis has reached; 0 for none.
    not_before: i64,
    record: String,
    /// Where it moves; `None` when it stays in its index (a cancel asked for in flight).
    to: Option<(Index, i64)>,
    entry: Option<String>,
    spec: Option<String>,
    /// What it was worked out from, to work it out again at Redis's time.
    source: Option<Box<Held>>,
    /// Its tenant, whose own indexes and counts a move changes; `None` for a change that
    /// only asks.
    tenant: Option<Tenant>,
    /// Its ordering key (scoped), whose list a finish or a replay changes.
    ordering: Option<String>,
}

impl Change {
    /// `held` becomes `new`.
    pub fn new(id: &str, held: &Held, new: &Record) -> Self {
        let to = match new.state {
            JobState::InFlight => None,
            _ => new.position(),
        };
        Self {
            id: id.to_string(),
            expected: held.text.clone(),
            from: held.index,
            score: held.score,
            not_before: 0,
            record: new.encode(),
            to,
            entry: None,
            spec: None,
            source: Some(Box::new(held.clone())),
            tenant: Some(held.tenant.clone()),
            ordering: held.ordering.clone(),
        }
    }

    /// Whether it only asks how the notification is, and writes nothing.
    fn only_asks(&self) -> bool {
        self.expected.is_empty()
    }

    /// Writes nothing: the reply says how the notification is.
    pub fn ask(id: &str) -> Self {
        Self {
            id: id.to_string(),
            expected: String::new(),
            from: Index::Due,
            score: 0,
            not_before: 0,
            record: String::new(),
            to: None,
            entry: None,
            spec: None,
            source: None,
            tenant: None,
            ordering: None,
        }
    }

    /// Only if Redis's clock has reached `at_ms` (an attempt's end).
    pub fn not_before(mut self, at_ms: i64) -> Self {
        self.not_before = at_ms;
        self
    }

    /// With an entry (an attempt or a note, JSON) for its history.
    pub fn with_entry(mut self, entry: String) -> Self {
        self.entry = Some(entry);
        self
    }

    /// With a new spec (the whole stored value).
    pub fn with_spec(mut self, spec: String) -> Self {
        self.spec = Some(spec);
        self
    }
}

/// What to do for one request in a round.
pub enum Decision<A> {
    /// Write this change; if it is written, the request's answer is `A`.
    Write(Change, A),
    /// Ask how the notification with this id is, then decide again.
    Ask(String),
    /// Nothing to write: the answer.
    Done(A),
}

/// The shard a commit goes to.
pub struct Shard<'a> {
    /// For reads.
    pub conn: &'a Conn,
    /// For the writes of `commit.lua`.
    pub writes: &'a Acked,
    pub script: &'a Script,
    pub keys: &'a ShardKeys,
    pub schedules: &'a ScheduleBook,
    pub wake_channel: &'a str,
    /// Each tenant's retention limits, its share of them in a shard.
    pub retention: &'a Policy,
}

/// What a commit came to: an answer per request, in order.
pub struct Committed<A> {
    pub answers: Vec<A>,
    /// A notification now heads the shard's due set, due in this long: schedulers
    /// should wake then.
    pub earliest: Option<Duration>,
    pub trimmed: usize,
}

/// A change on its way, for request `k`, with the answer if it is written.
type Pending<A> = (usize, Change, Option<A>);

/// Commits `requests` in rounds: `first` decides each from what the caller knows, and
/// `again` from how the notification is now (`None`: gone) at Redis's `Now`.
/// `budget(n)` is the retention budget of a round of `n` changes (0: none).
pub async fn commit<T, A>(
    shard: &Shard<'_>,
    requests: &[T],
    budget: impl Fn(usize) -> usize + Sync,
    first: impl Fn(&T) -> StoreResult<Decision<A>>,
    again: impl Fn(&T, Option<Held>, Now) -> StoreResult<Decision<A>>,
) -> StoreResult<Committed<A>> {
    let mut answers: Vec<Option<A>> = requests.iter().map(|_| None).collect();
    let mut pending: Vec<Pending<A>> = Vec::new();
    for (k, request) in requests.iter().enumerate() {
        place(k, first(request)?, &mut pending, &mut answers);
    }
    let (mut earliest, mut trimmed) = (None, 0);
    for _ in 0..MAX_ROUNDS {
        if pending.is_empty() {
            break;
        }
        let changes: Vec<&Change> = pending.iter().map(|(_, c, _)| c).collect();
        let reply = run(shard, &changes, &budget).await?;
        earliest = earliest.into_iter().chain(earliest_at(&reply, 0)?).min();
        trimmed += int_at(&reply, 1)? as usize;
        let now = Now::from_micros(int_at(&reply, 2)?);
        let results = &reply[3..];
        let now_held = now_held(shard, &pending, results).await?;
        let mut next = Vec::new();
        for (((k, change, answer), result), now_held) in
            pending.into_iter().zip(results).zip(now_held)
        {
            match (result, answer) {
                (Value::Int(1), Some(answer)) => answers[k] = Some(answer),
                // As it was, but Redis's clock is behind the time the change assumed.
                (Value::Int(2), Some(_)) => {
                    let held = change.source.clone().map(|h| *h);
                    place(k, again(&requests[k], held, now)?, &mut next, &mut answers);
                }
                _ => place(
                    k,
                    again(&requests[k], now_held, now)?,
                    &mut next,
                    &mut answers,
                ),
            }
        }
        pending = next;
    }
    if !pending.is_empty() {
        return Err(StoreError::Unavailable(format!(
            "{} changes kept meeting concurrent ones",
            pending.len()
        )));
    }
    Ok(Committed {
        answers: answers
            .into_iter()
            .map(|a| a.expect("every request answered"))
            .collect(),
        earliest,
        trimmed,
    })
}

/// How each notification of a round that was not written is now, as the script answered
/// (`None` for those written, and those gone).
async fn now_held<A>(
    shard: &Shard<'_>,
    pending: &[Pending<A>],
    results: &[Value],
) -> StoreResult<Vec<Option<Held>>> {
    let read = |shared: &dyn SharedSchedules| {
        pending
            .iter()
            .zip(results)
            .map(|((_, change, answer), result)| match (result, answer) {
                (Value::Int(1 | 2), Some(_)) => Ok(None),
                _ => Held::parse(&change.id, result, shared),
            })
            .collect()
    };
    shard.schedules.reading(shard.conn, shard.keys, read).await
}

fn place<A>(k: usize, d: Decision<A>, pending: &mut Vec<Pending<A>>, answers: &mut [Option<A>]) {
    match d {
        Decision::Write(change, answer) => pending.push((k, change, Some(answer))),
        Decision::Ask(id) => pending.push((k, Change::ask(&id), None)),
        Decision::Done(answer) => answers[k] = Some(answer),
    }
}

/// One call of `commit.lua`: every key and argument, in the script's order; each
/// tenant's retention budget is `budget` of the number of its changes.
async fn run(
    shard: &Shard<'_>,
    changes: &[&Change],
    budget: &(dyn Fn(usize) -> usize + Sync),
) -> StoreResult<Vec<Value>> {
    let mut call = shard.script.key(shard.keys.all().as_slice());
    let mut groups = TenantGroups::after(shard.keys.all().len());
    let mut per_tenant: BTreeMap<&Tenant, usize> = BTreeMap::new();
    for tenant in changes.iter().filter_map(|c| c.tenant.as_ref()) {
        *per_tenant.entry(tenant).or_default() += 1;
    }
    for (tenant, n) in per_tenant {
        groups.retain(tenant, budget(n));
    }
    groups.add_keys(&mut call, shard.keys);
    call.arg(shard.wake_channel);
    groups.add_args(&mut call, shard.retention);
    let mut lists = shard.keys.all().len() + groups.key_count();
    for c in changes {
        let (to, score) = c.to.map_or(("", 0), |(index, at)| (index.name(), at));
        let list = match &c.ordering {
            Some(key) => {
                call.key(shard.keys.ordering(key));
                lists += 1;
                lists
            }
            None => 0,
        };
        let group = c.tenant.as_ref().map_or(0, |t| groups.of(t));
        call.arg(&c.id)
            .arg(&c.expected)
            .arg(c.from.name())
            .arg(c.not_before)
            .arg(&c.record)
            .arg(to)
            .arg(score)
            .arg(c.entry.as_deref().unwrap_or_default())
            .arg(c.spec.as_deref().unwrap_or_default())
            .arg(group)
            .arg(list)
            .arg(c.score);
    }
    // A round that only asks writes nothing for replicas to acknowledge.
    let mut writes = match changes.iter().all(|c| c.only_asks()) {
        true => Acked::primary_only(shard.conn.clone()),
        false => shard.writes.on(shard.keys.due()),
    };
    let reply: Vec<Value> = call
        .invoke_async(&mut writes)
        .await
        .map_err(script_error("commit"))?;
    if reply.len() != 3 + changes.len() {
        return Err(StoreError::Corrupt(
            "commit reply of the wrong length".into(),
        ));
    }
    Ok(reply)
}
