//! Settles on Redis. postback works out what each attempt leads to with `lifecycle`,
//! from the record its claim read, and `settle.lua` writes that only where the stored
//! record is still the one it was worked out from. Where it is not (a cancel asked for
//! during the attempt, a lease lost, an end reckoned ahead of Redis's clock, or no record
//! at hand), the script answers with the stored record and Redis's time, and the attempt
//! is worked out again from those.

use redis::{Script, Value};

use super::conn::Conn;
use super::reply::{int_at, text_at};
use super::store_error;
use crate::lifecycle::{retention, transitions, JobState, Now, Record};
use crate::store::keys::ShardKeys;
use crate::store::{Settlement, StoreError, StoreResult};

/// Rounds of working out again before a batch is given up as unsettled (the settler
/// tries it again later): each round needs another change to the same notification
/// between two calls, so more than a few means something is wrong.
const MAX_ROUNDS: usize = 5;

/// One attempt as `settle.lua` takes it (its 7 values per attempt).
struct Item {
    id: String,
    /// The record it was worked out from ('' for none).
    expected: String,
    /// The record after the attempt.
    record: String,
    index: &'static str,
    score: i64,
    ended: i64,
    /// The attempt's history entry (JSON).
    entry: String,
}

impl Item {
    /// The attempt `s` worked out from `held`, the stored record (or the one its
    /// registration gave it), at `now`. `None` when its lease is no longer current.
    fn decide(s: &Settlement, held: &str, in_flight: bool, now: Now) -> StoreResult<Option<Self>> {
        let mut r = Record::decode(held)
            .map_err(|e| StoreError::Corrupt(format!("state record of {}: {e}", s.id)))?;
        // A claim does not write the record: the in-flight index says it is in flight.
        if in_flight {
            r.state = JobState::InFlight;
        }
        let Some(new) = transitions::settle(&r, s.lease, &s.verdict(), now) else {
            return Ok(None);
        };
        let (index, score) = new.position().ok_or_else(|| {
            StoreError::Corrupt(format!("settled record of {} has no index", s.id))
        })?;
        let ended = s.ended_at.min(now.up());
        Ok(Some(Self {
            id: s.id.to_string(),
            expected: held.to_string(),
            record: new.encode(),
            index: index.name(),
            score,
            ended,
            entry: serde_json::to_string(&s.attempt(ended)).expect("an attempt serializes"),
        }))
    }

    /// The first round for `s`: worked out from its claimed record, taking the end it
    /// reckoned for Redis's time (the script checks that it is not ahead), or, without a
    /// claimed record, an item that asks the script for the stored one.
    fn first(s: &Settlement) -> StoreResult<Option<Self>> {
        match &s.claimed_record {
            Some(claimed) => Self::decide(s, claimed, true, Now::from_micros(s.ended_at * 1000)),
            None => Ok(Some(Self {
                id: s.id.to_string(),
                expected: String::new(),
                record: String::new(),
                index: "due",
                score: 0,
                ended: s.ended_at,
                entry: String::new(),
            })),
        }
    }
}

/// What a round's reply says of one attempt.
enum Answer {
    Written,
    Gone,
    /// Not written: the stored record and whether it is in flight.
    Stored(String, bool),
}

/// One call of `settle.lua`: every key and argument, in the script's order.
struct Call<'a> {
    keys: &'a ShardKeys,
    wake_channel: &'a str,
    /// Dead max age ms, dead max count per shard, finished max age ms.
    retention: [u64; 3],
    budget: usize,
    items: Vec<&'a Item>,
}

impl Call<'_> {
    async fn run(&self, script: &Script, conn: &Conn) -> StoreResult<Reply> {
        let mut call = script.key(self.keys.all().as_slice());
        call.arg(self.wake_channel)
            .arg(&self.retention[..])
            .arg(self.budget);
        for item in &self.items {
            call.arg(&item.id)
                .arg(&item.expected)
                .arg(&item.record)
                .arg(item.index)
                .arg(item.score)
                .arg(item.ended)
                .arg(&item.entry);
        }
        let reply: Vec<Value> = call
            .invoke_async(&mut conn.clone())
            .await
            .map_err(store_error)?;
        Reply::parse(&reply)
    }
}

struct Reply {
    earliest: bool,
    trimmed: usize,
    now_ms: i64,
    answers: Vec<Answer>,
}

impl Reply {
    fn parse(reply: &[Value]) -> StoreResult<Self> {
        let answers = reply
            .iter()
            .enumerate()
            .skip(3)
            .map(|(i, v)| match v {
                Value::Int(1) => Ok(Answer::Written),
                Value::Int(_) => Ok(Answer::Gone),
                Value::Array(pair) => Ok(Answer::Stored(text_at(pair, 0)?, int_at(pair, 1)? == 1)),
                _ => Err(StoreError::Corrupt(format!("settle reply item {i}"))),
            })
            .collect::<StoreResult<_>>()?;
        Ok(Self {
            earliest: int_at(reply, 0)? == 1,
            trimmed: int_at(reply, 1)? as usize,
            now_ms: int_at(reply, 2)?,
            answers,
        })
    }
}

/// What settling a shard's batch came to.
pub struct Outcome {
    /// Per settlement, in order: whether it was written (false: its lease was lost).
    pub applied: Vec<bool>,
    pub earliest: bool,
    pub trimmed: usize,
}

/// Where to settle: the connection, the script and the shard's keys and policy.
pub struct Target<'a> {
    pub conn: &'a Conn,
    pub script: &'a Script,
    pub keys: &'a ShardKeys,
    pub wake_channel: &'a str,
    pub retention: [u64; 3],
}

/// Settles `batch` (one shard's) in as many rounds as concurrent changes ask for.
pub async fn settle(target: &Target<'_>, batch: &[&Settlement]) -> StoreResult<Outcome> {
    let mut out = Outcome {
        applied: vec![false; batch.len()],
        earliest: false,
        trimmed: 0,
    };
    let mut pending: Vec<(usize, Item)> = Vec::with_capacity(batch.len());
    for (k, s) in batch.iter().enumerate() {
        pending.extend(Item::first(s)?.map(|item| (k, item)));
    }
    for _ in 0..MAX_ROUNDS {
        if pending.is_empty() {
            return Ok(out);
        }
        let call = Call {
            keys: target.keys,
            wake_channel: target.wake_channel,
            retention: target.retention,
            budget: retention::settle_budget(pending.len()),
            items: pending.iter().map(|(_, item)| item).collect(),
        };
        let reply = call.run(target.script, target.conn).await?;
        out.earliest |= reply.earliest;
        out.trimmed += reply.trimmed;
        let now = Now::from_micros(reply.now_ms * 1000);
        let mut again = Vec::new();
        for ((k, _), answer) in pending.into_iter().zip(reply.answers) {
            match answer {
                Answer::Written => out.applied[k] = true,
                Answer::Gone => {}
                Answer::Stored(held, in_flight) => {
                    let redo = Item::decide(batch[k], &held, in_flight, now)?;
                    again.extend(redo.map(|item| (k, item)));
                }
            }
        }
        pending = again;
    }
    if pending.is_empty() {
        return Ok(out);
    }
    Err(StoreError::Unavailable(format!(
        "{} settles kept meeting concurrent changes",
        pending.len()
    )))
}
