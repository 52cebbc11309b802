//! `Record`: the mutable part of a notification as every store keeps it (one JSON
//! object, the same on Redis, in Postgres and in the embedded file), and the index it
//! belongs in.
//!
//! The encoding starts with its layout's version (`"v":2`); a schedule is its intervals
//! as text in the largest unit that divides each one (`15s,3m,1h`; a bare number is
//! ms). Records of earlier builds (layout 1: no `v`) are read by the same decoder, since
//! they differ only in what it accepts besides: Redis's wrote the same fields, the
//! embedded store's kept the schedule as an array of ms and a few more fields. A record
//! of a later layout is refused rather than misread.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where a notification is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Scheduled,
    InFlight,
    Delivered,
    Dead,
    Cancelled,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::InFlight => "in_flight",
            JobState::Delivered => "delivered",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Delivered, dead or cancelled: only a replay (of a dead one) changes it again.
    pub fn is_finished(self) -> bool {
        FinishedStates::ALL.contains(self)
    }
}

/// A set of finished states (delivered, dead, cancelled): those a resend takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishedStates(u8);

impl FinishedStates {
    const EACH: [JobState; 3] = [JobState::Delivered, JobState::Dead, JobState::Cancelled];

    /// Delivered, dead and cancelled.
    pub const ALL: Self = Self(
        Self::bit(JobState::Delivered) | Self::bit(JobState::Dead) | Self::bit(JobState::Cancelled),
    );

    const fn bit(state: JobState) -> u8 {
        1 << state as u8
    }

    /// Those of `states` that are finished.
    pub fn of(states: impl IntoIterator<Item = JobState>) -> Self {
        let bits = states.into_iter().fold(0, |bits, s| bits | Self::bit(s));
        Self(bits & Self::ALL.0)
    }

    pub fn contains(self, state: JobState) -> bool {
        self.0 & Self::bit(state) != 0
    }

    /// Its states: delivered, dead, cancelled, in that order.
    pub fn states(self) -> impl Iterator<Item = JobState> {
        Self::EACH.into_iter().filter(move |s| self.contains(*s))
    }
}

/// What a reader is shown of a notification's record. Times are ms since the epoch, on
/// the store's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    pub state: JobState,
    pub attempts: u32,
    pub max_attempts: u32,
    pub created_at: i64,
    #[serde(default)]
    pub next_at: Option<i64>,
    #[serde(default)]
    pub finished_at: Option<i64>,
    /// How often it was replayed from the dead letters.
    #[serde(default)]
    pub replays: u32,
    /// A cancel arrived during an attempt: no retry after it.
    #[serde(default)]
    pub cancel_requested: bool,
    /// When it last came back to `scheduled` (a retry, a deferral, a hand-back, a
    /// replay); `None` while it has not.
    #[serde(default)]
    pub moved_at: Option<i64>,
    /// Scheduled behind an earlier notification of its ordering key: it has no time of
    /// its own until that one is delivered, dead or cancelled.
    #[serde(default)]
    pub waiting: bool,
    /// Held while its endpoint is paused: not attempted, its schedule frozen, until the
    /// endpoint is resumed.
    #[serde(default)]
    pub held: bool,
    /// Held back by its endpoint's open circuit since then (no request made since, no
    /// attempt counted): it goes when the circuit lets a request through.
    #[serde(default)]
    pub circuit_since: Option<i64>,
    /// When it is dead-lettered if still held back by an open circuit: its cycle's start,
    /// delay and whole schedule (`transitions::past_deadline`).
    #[serde(default)]
    pub deadline: Option<i64>,
}

impl JobStatus {
    /// Since when it is in its state: its finish, its last return to `scheduled`, or its
    /// registration. (A claim is not counted: on Redis it writes no record.)
    pub fn since(&self) -> i64 {
        self.finished_at
            .or(self.moved_at)
            .unwrap_or(self.created_at)
    }
}

/// A notification's record: its status, its schedule and its lease.
///
/// `lease` is the number of its current (or last) lease: it goes up each time the
/// notification leaves flight, so a settle, deferral or release naming an older number
/// comes from a lease that was lost and changes nothing. On Redis a claim does not
/// write the record (the in-flight index says it is in flight), so a stored record may
/// read `scheduled` while in flight; `transitions::claim` makes the record the claimer
/// holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default)]
    pub v: Layout,
    pub state: JobState,
    pub attempts: u32,
    pub lease: u64,
    pub max_attempts: u32,
    #[serde(serialize_with = "schedule_out", deserialize_with = "schedule_in")]
    pub schedule: Vec<u64>,
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replays: u32,
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancel_requested: bool,
    /// While in flight, when its lease ends: kept by the embedded store, whose in-flight
    /// index is keyed by it. Redis keeps it as the in-flight index's score instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<i64>,
    /// Its next attempt's send time is reserved in its rate key's quota (it was deferred
    /// to that time): it goes when due without reserving again.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reserved: bool,
    /// When it last came back to `scheduled` (`JobStatus::moved_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_at: Option<i64>,
    /// Scheduled behind an earlier notification of its ordering key
    /// (`transitions::wait`): due at `next_at` only once its turn comes
    /// (`transitions::take_turn`), and kept in the due index `WAITING_OFFSET_MS` later
    /// until then, so that no claim reaches it. Written by the embedded store; Redis
    /// keeps only that offset in its score, which readers take it from.
    #[serde(default, skip_serializing_if = "is_false")]
    pub waiting: bool,
    /// Held while its endpoint is paused (`transitions::hold`): due at `next_at` only
    /// once let go again (`transitions::attempt_now`), and kept in the due index
    /// `HELD_OFFSET_MS` later until then, so that no claim reaches it. As `waiting`,
    /// Redis keeps only that offset in its score.
    #[serde(default, skip_serializing_if = "is_false")]
    pub held: bool,
    /// Let go from being held to probe its paused endpoint (`LetGo::Probe`): attempted
    /// although the endpoint is paused, and held again if the attempt fails, without
    /// using up a step of its schedule.
    #[serde(default, skip_serializing_if = "is_false")]
    pub probe: bool,
    /// The end of its cycle's window: its start (registration, replay or resend), delay
    /// and whole schedule. Held back by an open circuit when due at or after it, it is
    /// dead (`transitions::wait_for_circuit`). Records of earlier builds have none until
    /// first held back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
    /// When its endpoint's open circuit first held it back since its last attempt
    /// (`transitions::wait_for_circuit`): its history notes it once, then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_since: Option<i64>,
    /// When its last attempt, due at or after its deadline, failed (`transitions::settle`):
    /// held back by an open circuit after it, it is dead as one already waiting is (that
    /// failure was the request it waited for), where one just let go waits once more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_late_at: Option<i64>,
}

/// How much later than its own due time a held notification is kept in the due index:
/// 2^47 ms, so that no claim reaches it, it stays apart from (before) the waiting ones,
/// and its own time stays exact in a sorted set's double. A score from here up is no
/// time at which anything is due.
pub const HELD_OFFSET_MS: i64 = 1 << 47;

/// Whether a due-index score (or a lease end) is a time a scheduler should wake for: not
/// a held or waiting notification's, kept `HELD_OFFSET_MS` or more later, which no time
/// makes due. Every store decides the next wake-up by this; `claim.lua` gets the bound
/// as `HELD`.
pub fn wakes_at(score: i64) -> bool {
    score < HELD_OFFSET_MS
}

/// How much later than its own due time a waiting notification is kept in the due index:
/// 2^48 ms, about 8,900 years, so that no claim reaches it, and its own time (the score
/// less this) stays exact in a sorted set's double.
pub const WAITING_OFFSET_MS: i64 = 1 << 48;

/// The layout of a record: written as this build's, read up to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layout;

impl Layout {
    const CURRENT: u8 = 2;
}

impl Serialize for Layout {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(Self::CURRENT)
    }
}

impl<'de> Deserialize<'de> for Layout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match u8::deserialize(d)? {
            v if v <= Self::CURRENT => Ok(Layout),
            v => Err(serde::de::Error::custom(format!(
                "a record of layout {v}, written by a later build"
            ))),
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The indexes a notification is kept in, each ordered by a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// Scheduled, by due time.
    Due,
    /// In flight, by lease deadline.
    InFlight,
    /// Dead-lettered, by when.
    Dead,
    /// Delivered or cancelled, by when.
    Done,
}

impl Index {
    /// Whether a notification of an ordering key moving `from` one index `to` another
    /// joins the back of its key: registered, or sent again after it finished.
    pub fn joins_order(from: Option<Index>, to: Option<Index>) -> bool {
        to == Some(Index::Due) && matches!(from, None | Some(Index::Dead | Index::Done))
    }

    /// Whether it leaves its key (and the next takes its turn if it was first): it
    /// finished.
    pub fn leaves_order(from: Option<Index>, to: Option<Index>) -> bool {
        matches!(from, Some(Index::Due | Index::InFlight))
            && matches!(to, Some(Index::Dead | Index::Done))
    }

    const ALL: [Index; 4] = [Index::Due, Index::InFlight, Index::Dead, Index::Done];

    /// The name the Redis scripts know the index by.
    pub fn name(self) -> &'static str {
        match self {
            Index::Due => "due",
            Index::InFlight => "inflight",
            Index::Dead => "dead",
            Index::Done => "done",
        }
    }

    /// The index of that name; `None` for another.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|index| index.name() == name)
    }
}

/// The indexes each tenant has of its own notifications, which its lists and its
/// retention read (so that neither depends on another tenant's volume): pending
/// (scheduled or in flight, scored as in the due index: in flight, by when it came due),
/// dead and done (by when they finished).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TenantIndex {
    Pending,
    Dead,
    Done,
}

impl TenantIndex {
    pub const ALL: [TenantIndex; 3] = [TenantIndex::Pending, TenantIndex::Dead, TenantIndex::Done];

    /// The tenant's index that mirrors `index`.
    pub fn of(index: Index) -> Self {
        match index {
            Index::Due | Index::InFlight => TenantIndex::Pending,
            Index::Dead => TenantIndex::Dead,
            Index::Done => TenantIndex::Done,
        }
    }

    /// Its name in keys and tables.
    pub fn name(self) -> &'static str {
        match self {
            TenantIndex::Pending => "pending",
            TenantIndex::Dead => "dead",
            TenantIndex::Done => "done",
        }
    }
}

impl Record {
    /// The index entry this record belongs in, and its score there.
    pub fn position(&self) -> Option<(Index, i64)> {
        match self.state {
            JobState::Scheduled if self.waiting => self
                .next_at
                .map(|at| (Index::Due, at.saturating_add(WAITING_OFFSET_MS))),
            JobState::Scheduled if self.held => self
                .next_at
                .map(|at| (Index::Due, at.saturating_add(HELD_OFFSET_MS))),
            JobState::Scheduled => self.next_at.map(|at| (Index::Due, at)),
            JobState::InFlight => self.lease_until.map(|at| (Index::InFlight, at)),
            JobState::Dead => self.finished_at.map(|at| (Index::Dead, at)),
            JobState::Delivered | JobState::Cancelled => {
                self.finished_at.map(|at| (Index::Done, at))
            }
        }
    }

    /// The entry this record belongs in among its tenant's indexes, and its score there:
    /// its `position`, but in flight at the time it came due (`next_at`, which a claim
    /// keeps), so that a claim, which moves many tenants' notifications at once, leaves
    /// the tenants' indexes as they are.
    pub fn tenant_position(&self) -> Option<(TenantIndex, i64)> {
        match self.state {
            JobState::InFlight => self.next_at.map(|at| (TenantIndex::Pending, at)),
            _ => self
                .position()
                .map(|(index, at)| (TenantIndex::of(index), at)),
        }
    }

    /// When it is due by its time: scheduled, neither waiting behind its ordering key
    /// nor held.
    pub fn due_at(&self) -> Option<i64> {
        match self.state {
            JobState::Scheduled if !self.waiting && !self.held => self.next_at,
            _ => None,
        }
    }

    /// Since when it has waited for its endpoint's open circuit, as its deadline counts
    /// (`transitions::dies_waiting`): held back since then, or since its last attempt,
    /// due past its deadline, failed.
    pub fn waiting_since(&self) -> Option<i64> {
        self.circuit_since.or(self.failed_late_at)
    }

    /// What a reader is shown.
    pub fn status(&self) -> JobStatus {
        JobStatus {
            state: self.state,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            created_at: self.created_at,
            next_at: self.next_at,
            finished_at: self.finished_at,
            replays: self.replays,
            cancel_requested: self.cancel_requested,
            moved_at: self.moved_at,
            waiting: self.waiting,
            held: self.held,
            circuit_since: self.circuit_since,
            deadline: self.deadline,
        }
    }

    /// As the index that holds it at `score` says: waiting behind an earlier notification
    /// of its ordering key when its due score is `WAITING_OFFSET_MS` late, held when it
    /// is `HELD_OFFSET_MS` late, and neither once claimed; due when a score of neither
    /// says. A store that gives a waiting one its turn by its score alone leaves
    /// its record as it was: the score says when it is due, as `transitions::take_turn`
    /// would have written it.
    pub fn placed(mut self, index: Index, score: i64) -> Self {
        match index {
            Index::InFlight => {
                self.state = JobState::InFlight;
                self.waiting = false;
                self.held = false;
            }
            Index::Due => {
                if score < HELD_OFFSET_MS {
                    self.due_at_turn(Some(score));
                }
                self.waiting = score >= WAITING_OFFSET_MS;
                self.held = (HELD_OFFSET_MS..WAITING_OFFSET_MS).contains(&score);
            }
            Index::Dead | Index::Done => {}
        }
        self
    }

    /// Due at `due` as its ordering key's turn came: a send time reserved in its quota
    /// is kept only if that is still its time.
    pub fn due_at_turn(&mut self, due: Option<i64>) {
        self.reserved &= due == self.next_at;
        self.next_at = due;
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }

    pub fn decode(raw: &str) -> serde_json::Result<Self> {
        serde_json::from_str(raw)
    }
}

/// A schedule as the records keep it: `15s,3m,10m,1h`. Written into one string: every
/// record written (registration, claim, settlement) writes its schedule.
pub fn schedule_text(intervals_ms: &[u64]) -> String {
    let units = [(3_600_000, "h"), (60_000, "m"), (1_000, "s")];
    let mut text = String::with_capacity(intervals_ms.len() * 4);
    for (i, &ms) in intervals_ms.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        let unit = units
            .iter()
            .find(|(size, _)| ms >= *size && ms.is_multiple_of(*size));
        let (count, unit) = unit.map_or((ms, ""), |(size, unit)| (ms / size, unit));
        text.push_str(itoa::Buffer::new().format(count));
        text.push_str(unit);
    }
    text
}

/// The intervals in ms of a schedule as the records keep it (or as earlier builds kept
/// it, in ms); an interval that does not read is 0.
pub fn schedule_intervals(text: &str) -> Vec<u64> {
    if text.is_empty() {
        return Vec::new();
    }
    text.split(',').map(interval_ms).collect()
}

/// One interval of a schedule as the records keep it (`15s`, or ms: `250`), in ms; 0 when
/// it does not read.
pub fn interval_ms(text: &str) -> u64 {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match &text[digits.len()..] {
        "h" => 3_600_000,
        "m" => 60_000,
        "s" => 1_000,
        _ => 1,
    };
    digits.parse::<u64>().map_or(0, |n| n * unit)
}

fn schedule_out<S: Serializer>(intervals: &[u64], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&schedule_text(intervals))
}

/// Text (this build, and Redis records of earlier ones) or an array of ms (embedded
/// records of earlier builds).
fn schedule_in<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Text(String),
        Millis(Vec<u64>),
    }
    Ok(match Stored::deserialize(d)? {
        Stored::Text(text) => schedule_intervals(&text),
        Stored::Millis(ms) => ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_time_wakes_a_scheduler_not_a_held_or_waiting_score() {
        assert!(wakes_at(1_795_000_000_000));
        assert!(!wakes_at(HELD_OFFSET_MS + 1_795_000_000_000));
        assert!(!wakes_at(WAITING_OFFSET_MS + 5));
    }

    #[test]
    fn a_waiting_one_whose_turn_came_by_its_score_reads_as_its_turn_wrote_it() {
        use crate::lifecycle::transitions::{register, take_turn, wait};
        use crate::lifecycle::Now;
        let registered = register(vec![1_000], Now::from_millis(1_000), 0);
        let waiting = wait(&registered).unwrap();
        for turn_at in [500, 1_001, 4_000] {
            let turn = take_turn(&waiting, Now::from_millis(turn_at)).unwrap();
            let (_, score) = turn.position().unwrap();
            assert_eq!(
                waiting.clone().placed(Index::Due, score),
                turn,
                "turn at {turn_at}"
            );
        }
        let still = waiting
            .clone()
            .placed(Index::Due, WAITING_OFFSET_MS + 1_001);
        assert_eq!(still, waiting, "still waiting: as it was");
    }

    #[test]
    fn a_record_of_layout_1_is_read_and_written_as_layout_2() {
        let layout_1 = r#"{"state":"scheduled","attempts":1,"lease":2,"max_attempts":3,"schedule":"15s,3m","created_at":1700000000000,"next_at":1700000015000}"#;
        let r = Record::decode(layout_1).unwrap();
        assert_eq!(r.schedule, vec![15_000, 180_000]);
        assert_eq!(r.position(), Some((Index::Due, 1_700_000_015_000)));
        let layout_2 = r.encode();
        assert_eq!(layout_2, layout_1.replacen('{', r#"{"v":2,"#, 1));
        assert_eq!(Record::decode(&layout_2).unwrap(), r);
        assert!(Record::decode(&layout_2.replacen(":2,", ":3,", 1)).is_err());
    }

    #[test]
    fn an_embedded_record_of_an_earlier_build_is_read() {
        let earlier = r#"{"state":"in_flight","attempts":0,"max_attempts":2,"created_at":5,"next_at":9,"finished_at":null,"replays":0,"cancel_requested":false,"schedule":[250],"lease":1,"lease_until":40}"#;
        let r = Record::decode(earlier).unwrap();
        assert_eq!(r.schedule, vec![250]);
        assert_eq!(r.position(), Some((Index::InFlight, 40)));
    }

    #[test]
    fn schedules_are_kept_in_their_largest_unit() {
        let ms = vec![15_000, 180_000, 3_600_000, 250, 90_000, 1_500];
        let text = schedule_text(&ms);
        assert_eq!(text, "15s,3m,1h,250,90s,1500");
        assert_eq!(schedule_intervals(&text), ms);
        assert_eq!(schedule_intervals("1000,5000"), vec![1_000, 5_000]);
        assert!(schedule_intervals("").is_empty());
    }
}
