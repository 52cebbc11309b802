//! The transitions of a notification's life, each a pure function of its record, the
//! event and the store's time. A function that returns `None` (or `Refused`) changes
//! nothing: the event does not apply to the record as it is now (a lease that was lost,
//! a replay of one that is not dead). Where the record then belongs is
//! `Record::position`.

use super::record::{FinishedStates, JobState, JobStatus, Layout, Record};
use super::time::Now;
use crate::domain::{Note, NoteKind, Outcome};

/// How one attempt ended, as far as the schedule is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub outcome: Outcome,
    /// When the attempt ended, ms on the store's clock as the caller reckons it (never
    /// early; `settle` takes at most the store's now).
    pub ended_at: i64,
    /// The next attempt is not due before this many ms after the end (`Retry-After`).
    pub retry_after_ms: i64,
    /// The next interval is stretched or shrunk by this many thousandths.
    pub jitter_permille: i32,
}

impl Verdict {
    /// When the attempt ended, taken as at most the store's `now`: the caller's reckoning
    /// is an upper bound and may run ahead of the store's clock.
    pub fn ended(&self, now: Now) -> i64 {
        self.ended_at.min(now.up())
    }

    /// The wait before the next attempt when the interval for it is `interval_ms`:
    /// stretched by the jitter (rounded up), and at least the `Retry-After`.
    pub fn wait_after(&self, interval_ms: u64) -> i64 {
        let mut wait = interval_ms as i64;
        if self.jitter_permille != 0 {
            let stretched = wait * (1000 + i64::from(self.jitter_permille));
            wait = (stretched + 999).div_euclid(1000);
        }
        wait.max(self.retry_after_ms)
    }
}

/// A new notification: scheduled `delay_ms` after its registration, its deadline its
/// whole schedule after that.
pub fn register(schedule: Vec<u64>, now: Now, delay_ms: u64) -> Record {
    let created_at = now.up();
    let first = created_at.saturating_add(delay_ms as i64);
    Record {
        v: Layout,
        state: JobState::Scheduled,
        attempts: 0,
        lease: 0,
        max_attempts: schedule.len() as u32 + 1,
        deadline: Some(first.saturating_add(span(&schedule))),
        schedule,
        created_at,
        next_at: Some(first),
        finished_at: None,
        replays: 0,
        cancel_requested: false,
        lease_until: None,
        reserved: false,
        moved_at: None,
        waiting: false,
        held: false,
        probe: false,
        circuit_since: None,
        failed_late_at: None,
    }
}

/// A schedule's whole span: its intervals added up, in ms.
fn span(schedule: &[u64]) -> i64 {
    schedule
        .iter()
        .map(|&ms| ms as i64)
        .fold(0, i64::saturating_add)
}

/// Leased for one attempt until `lease_until`; not while it waits behind its ordering
/// key or is held. The lease number does not change here: it goes up when the notification leaves
/// flight.
pub fn claim(r: &Record, lease_until: i64) -> Option<Record> {
    (r.state == JobState::Scheduled && !r.waiting && !r.held).then(|| Record {
        state: JobState::InFlight,
        lease_until: Some(lease_until),
        ..r.clone()
    })
}

/// The record while `lease` is still the current lease of its attempt.
fn held(r: &Record, lease: u64) -> Option<Record> {
    (r.state == JobState::InFlight && r.lease == lease).then(|| r.clone())
}

/// Records one attempt: delivered, cancelled (a cancel was asked for during it), dead
/// (`Gone`, or the last attempt failed) or scheduled at the next tier, counted from the
/// attempt's end (at most `now`). A probe of a paused endpoint that failed (not `Gone`)
/// is held again instead, due when it ended, and not counted: its schedule stays where
/// it was (the attempt is in its history). An attempt due at or after its deadline that
/// failed is remembered (`failed_late_at`): held back by its circuit after it, it is
/// dead, that failure being the verdict a notification just let go waits for.
pub fn settle(r: &Record, lease: u64, v: &Verdict, now: Now) -> Option<Record> {
    let mut r = held(r, lease)?;
    let ended = v.ended(now);
    let probe = std::mem::take(&mut r.probe);
    let failed = !matches!(v.outcome, Outcome::Delivered | Outcome::Gone);
    let due = r.next_at.unwrap_or(ended);
    r.failed_late_at = (failed && past_deadline(due, r.deadline)).then_some(ended);
    r.circuit_since = None;
    r.reserved = false;
    leave_flight(&mut r);
    if probe && failed && !r.cancel_requested {
        schedule_at(&mut r, ended, now);
        r.held = true;
        return Some(r);
    }
    r.attempts += 1;
    if v.outcome == Outcome::Delivered {
        finish(&mut r, JobState::Delivered, ended);
    } else if r.cancel_requested {
        finish(&mut r, JobState::Cancelled, ended);
    } else if v.outcome == Outcome::Gone || r.attempts >= r.max_attempts {
        finish(&mut r, JobState::Dead, ended);
    } else {
        let interval = r.schedule.get(r.attempts as usize - 1).copied();
        let at = ended.saturating_add(v.wait_after(interval.unwrap_or(0)));
        schedule_at(&mut r, at, now);
    }
    Some(r)
}

/// Back to due `delay_ms` from now without counting an attempt (over quota, a busy host,
/// a pause), or cancelled when a cancel was asked for. `reserved`: that time is its send
/// time in its rate key's quota.
pub fn defer(r: &Record, lease: u64, now: Now, delay_ms: u64, reserved: bool) -> Option<Record> {
    let mut r = held(r, lease)?;
    r.reserved = reserved;
    hand_back(&mut r, now, now.up() + delay_ms as i64);
    Some(r)
}

/// Held for its paused endpoint instead of attempted, without counting an attempt: its
/// due time and schedule stay as they were, out of every claim's reach until it is let
/// go (`attempt_now`), or cancelled when a cancel was asked for.
pub fn hold(r: &Record, lease: u64, now: Now) -> Option<Record> {
    let mut r = held(r, lease)?;
    let at = r.next_at.unwrap_or(now.down());
    r.reserved = false;
    hand_back(&mut r, now, at);
    r.held = r.state == JobState::Scheduled;
    Some(r)
}

/// Held back by the open circuit of its endpoint (at `url`) instead of attempted: no
/// request was made, so no attempt is counted and no step of its schedule spent. Due
/// again `delay_ms` from now (when the circuit may let a request through), but not after
/// its deadline while that is ahead; dead instead when `judged` (the circuit's open state
/// is a verdict: no probe in flight, no answer from its endpoint since it was held back)
/// and it `dies_waiting`, or cancelled when a cancel was asked for. Its history notes the
/// wait once, when it begins (a note until its next attempt or its release), and the
/// death.
pub fn wait_for_circuit(
    r: &Record,
    lease: u64,
    now: Now,
    delay_ms: u64,
    url: &str,
    judged: bool,
) -> Option<(Record, Option<Note>)> {
    let mut r = held(r, lease)?;
    let due = r.next_at.unwrap_or(now.down());
    let remaining = r.schedule.get(r.attempts as usize..).unwrap_or_default();
    let deadline = *r
        .deadline
        .get_or_insert(due.saturating_add(span(remaining)));
    r.reserved = false;
    if judged && dies_waiting(due, Some(deadline), r.waiting_since()) && !r.cancel_requested {
        leave_flight(&mut r);
        finish(&mut r, JobState::Dead, now.down());
        return Some((r, Some(Note::circuit_deadline(now.down(), url))));
    }
    let note = r
        .circuit_since
        .is_none()
        .then(|| Note::circuit_wait(now.down(), url));
    r.circuit_since.get_or_insert(now.down());
    let mut at = now.up().saturating_add(delay_ms as i64);
    if deadline > now.up() {
        at = at.min(deadline);
    }
    hand_back(&mut r, now, at);
    let note = note.filter(|_| r.state == JobState::Scheduled);
    Some((r, note))
}

/// Whether a notification due at `due_at` and held back by an open circuit is past its
/// `deadline`.
pub fn past_deadline(due_at: i64, deadline: Option<i64>) -> bool {
    deadline.is_some_and(|d| due_at >= d)
}

/// Whether a notification due at `due_at`, held back by an open circuit whose verdict
/// stands, is dead rather than waiting longer: past its `deadline`, and already waiting
/// for the circuit when it came due (`Record::waiting_since`: held back, or its last
/// attempt past its deadline failed). One just let go (an endpoint's resume, an
/// operator's attempt now) waits once more, for the probe its release asked for, before
/// its deadline counts.
pub fn dies_waiting(due_at: i64, deadline: Option<i64>, waiting_since: Option<i64>) -> bool {
    past_deadline(due_at, deadline) && waiting_since.is_some()
}

/// Back to due at once (or when it was due, if that is later) without counting an
/// attempt: a delivery stopped at shutdown, or a claim whose reply was lost. A send time
/// it reserved in its quota holds only if it is due then still: one handed back later
/// (its lease ran out) asks again, or it would go at once beside the send times reserved
/// since.
pub fn release(r: &Record, lease: u64, now: Now) -> Option<Record> {
    let mut r = held(r, lease)?;
    let at = due_again(&r, now);
    r.reserved &= r.next_at == Some(at);
    hand_back(&mut r, now, at);
    Some(r)
}

/// Its lease ended without a settle (its worker died): as `release`, whatever the lease.
pub fn expire(r: &Record, now: Now) -> Option<Record> {
    release(r, r.lease, now)
}

/// When a notification handed back is due again: when it was due, or now if that has
/// passed (a claim may take it before it is due).
fn due_again(r: &Record, now: Now) -> i64 {
    r.next_at.map_or(now.down(), |due| due.max(now.down()))
}

fn hand_back(r: &mut Record, now: Now, at: i64) {
    leave_flight(r);
    if r.cancel_requested {
        finish(r, JobState::Cancelled, now.down());
    } else {
        schedule_at(r, at, now);
    }
}

/// A later settle, deferral or release under the lease it had changes nothing.
fn leave_flight(r: &mut Record) {
    r.lease += 1;
    r.lease_until = None;
}

fn finish(r: &mut Record, state: JobState, at: i64) {
    r.state = state;
    r.next_at = None;
    r.finished_at = Some(at);
    r.waiting = false;
    r.held = false;
    r.circuit_since = None;
    r.failed_late_at = None;
}

/// Back to scheduled at `now`, due `at`.
fn schedule_at(r: &mut Record, at: i64, now: Now) {
    r.state = JobState::Scheduled;
    r.next_at = Some(at);
    r.moved_at = Some(now.up());
}

/// The answer to a cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// It is cancelled (now, or it already was) and will not be sent.
    Done,
    /// An attempt is in flight; the notification is cancelled after it.
    AfterAttempt,
    /// It was already delivered or dead.
    Finished(JobState),
    NotFound,
}

/// Cancels a scheduled notification at once, and one in flight after its attempt. The
/// answer, and the new record when it changed.
pub fn cancel(r: &Record, now: Now) -> (Cancelled, Option<Record>) {
    let mut new = r.clone();
    match r.state {
        JobState::Scheduled => {
            finish(&mut new, JobState::Cancelled, now.down());
            (Cancelled::Done, Some(new))
        }
        JobState::InFlight if r.cancel_requested => (Cancelled::AfterAttempt, None),
        JobState::InFlight => {
            new.cancel_requested = true;
            (Cancelled::AfterAttempt, Some(new))
        }
        JobState::Cancelled => (Cancelled::Done, None),
        state => (Cancelled::Finished(state), None),
    }
}

/// Which finished notifications a new cycle takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// Dead letters only (an operator's replay).
    Replay,
    /// Those finished in one of these states (a resend: the receiver lost what it was
    /// sent, or the cancel was a mistake): the states its caller may resend, so that a
    /// notification that changed state since it was looked at is taken back only if the
    /// caller may resend it as it is now.
    Resend(FinishedStates),
}

impl Again {
    fn takes(self, state: JobState) -> bool {
        match self {
            Again::Replay => state == JobState::Dead,
            Again::Resend(states) => states.contains(state),
        }
    }
}

/// A new cycle asked for: which finished notifications it takes back, after how long,
/// and what it changes: a new schedule, a new URL (for the history's note; the spec
/// itself is the store's to write).
#[derive(Debug, Clone, Copy)]
pub struct NewCycle<'a> {
    pub which: Again,
    pub delay_ms: u64,
    pub schedule: Option<&'a [u64]>,
    pub url: Option<&'a str>,
}

/// A finished notification `c.which` takes back, scheduled again `c.delay_ms` from now:
/// a new cycle from a fresh attempt count, with a new schedule when given, and a new
/// deadline. Its history keeps what came before, and gets the note that begins the
/// cycle; its id (the `webhook-id` the receiver sees) stays.
pub fn again(r: &Record, c: &NewCycle, now: Now) -> Option<(Record, Note)> {
    if !c.which.takes(r.state) {
        return None;
    }
    let mut r = r.clone();
    if let Some(schedule) = c.schedule {
        r.schedule = schedule.to_vec();
    }
    r.max_attempts = r.schedule.len() as u32 + 1;
    r.attempts = 0;
    r.reserved = false;
    r.cancel_requested = false;
    r.replays += 1;
    r.finished_at = None;
    let first = now.up() + c.delay_ms as i64;
    r.deadline = Some(first.saturating_add(span(&r.schedule)));
    schedule_at(&mut r, first, now);
    let kind = match c.which {
        Again::Replay => NoteKind::Replay,
        Again::Resend(_) => NoteKind::Resend,
    };
    let note = Note::began(now.down(), kind, r.replays, c.url);
    Some((r, note))
}

/// How `attempt_now` lets a notification go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LetGo {
    /// Any scheduled one (pending, retrying or held): an operator's attempt now, or a
    /// resumed endpoint's backlog.
    Now,
    /// A held one only, as its paused endpoint's pause probe (not a circuit's probe):
    /// attempted although the endpoint is still paused (`Record::probe`).
    Probe,
}

/// What a caller may ask of one notification, each carried out by its transition: a
/// cancel (`cancel`), an attempt now (`attempt_now`, `LetGo::Now`), a resend and a
/// replay (`again`) and a discard (`discardable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Cancel,
    AttemptNow,
    Resend,
    Replay,
    Discard,
}

impl Operation {
    /// Every operation, for the tests that hold each to its transition.
    #[cfg(test)]
    pub const ALL: [Operation; 5] = [
        Operation::Cancel,
        Operation::AttemptNow,
        Operation::Resend,
        Operation::Replay,
        Operation::Discard,
    ];

    /// Whether its transition changes a notification as `s` shows it now: a cancel one
    /// scheduled (held, held back or waiting behind its ordering key included) or in
    /// flight without a cancel asked for already; an attempt now one scheduled; a resend
    /// one finished (which finished states its caller may resend is the caller's:
    /// `Again::Resend`); a replay and a discard a dead one.
    pub fn applies(self, s: &JobStatus) -> bool {
        match self {
            Operation::Cancel => match s.state {
                JobState::Scheduled => true,
                JobState::InFlight => !s.cancel_requested,
                _ => false,
            },
            Operation::AttemptNow => s.state == JobState::Scheduled,
            Operation::Resend => s.state.is_finished(),
            Operation::Replay | Operation::Discard => s.state == JobState::Dead,
        }
    }
}

/// A scheduled notification due now instead of later, as `how` says; a held one is let
/// go. One waiting behind an earlier one of its ordering key keeps waiting, due at once
/// when its turn comes. Its attempt count stays; a send time it reserved in its rate
/// key's quota is given up (its next claim reserves one again). A wait for its endpoint's
/// circuit ends here: held back again, it waits for the probe its release asked for
/// before its deadline counts (`dies_waiting`).
pub fn attempt_now(r: &Record, now: Now, how: LetGo) -> Option<Record> {
    let probe = how == LetGo::Probe;
    if !Operation::AttemptNow.applies(&r.status()) || (probe && !r.held) {
        return None;
    }
    let mut r = r.clone();
    r.reserved = false;
    r.held = false;
    r.probe = probe;
    r.circuit_since = None;
    r.failed_late_at = None;
    schedule_at(&mut r, now.down(), now);
    Some(r)
}

/// A scheduled notification put behind an earlier one of its ordering key (at its
/// registration or replay): it keeps its own due time for when its turn comes.
pub fn wait(r: &Record) -> Option<Record> {
    (r.state == JobState::Scheduled && !r.waiting && !r.held).then(|| Record {
        waiting: true,
        ..r.clone()
    })
}

/// Its turn: the notification before it in its ordering key was delivered, dead or
/// cancelled. Due at its own time, or now if that has passed.
pub fn take_turn(r: &Record, now: Now) -> Option<Record> {
    if r.state != JobState::Scheduled || !r.waiting {
        return None;
    }
    let mut r = r.clone();
    r.waiting = false;
    r.due_at_turn(r.next_at.map(|at| at.max(now.up())));
    Some(r)
}

/// Whether a discard deletes it: only dead letters are discarded.
pub fn discardable(r: &Record) -> bool {
    Operation::Discard.applies(&r.status())
}
