//! Property tests of the lifecycle: random sequences of events, from stale and current
//! leases alike, on random schedules, checked against the invariants every store relies
//! on.

use proptest::prelude::*;

use super::transitions::{self, Again, Cancelled, LetGo, NewCycle, Operation};
use super::{
    FinishedStates, Index, JobState, Now, Record, Verdict, HELD_OFFSET_MS, WAITING_OFFSET_MS,
};
use crate::domain::{Note, NoteKind, Outcome};

const URL: &str = "https://merchant.example/hook";

#[derive(Debug, Clone)]
enum Event {
    Claim,
    /// `stale`: the caller names the lease before the current one.
    Settle {
        outcome: Outcome,
        stale: bool,
        jitter_permille: i32,
        retry_after_ms: i64,
        /// How far the caller reckons the end ahead of the store's clock.
        ahead_ms: i64,
    },
    Defer {
        stale: bool,
        delay_ms: u64,
        reserved: bool,
    },
    Hold {
        stale: bool,
    },
    /// Held back by its endpoint's open circuit; `judged`: no probe in flight, no answer
    /// since it was held back.
    CircuitWait {
        stale: bool,
        delay_ms: u64,
        judged: bool,
    },
    Release {
        stale: bool,
    },
    Expire,
    Cancel,
    Again {
        which: Again,
        schedule: Option<Vec<u64>>,
    },
    AttemptNow {
        probe: bool,
    },
    /// Put behind an earlier notification of its ordering key.
    Wait,
    /// The one before it in its ordering key finished.
    TakeTurn,
}

fn schedule() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(100u64..100_000, 0..6)
}

/// A resend of any set of finished states.
fn resend() -> impl Strategy<Value = Again> {
    let states = [JobState::Delivered, JobState::Dead, JobState::Cancelled];
    prop::sample::subsequence(states.to_vec(), 0..=3)
        .prop_map(|states| Again::Resend(FinishedStates::of(states)))
}

fn event() -> impl Strategy<Value = Event> {
    let outcome = prop_oneof![
        Just(Outcome::Delivered),
        Just(Outcome::Failed),
        Just(Outcome::Failed),
        Just(Outcome::Failed),
        Just(Outcome::Gone),
    ];
    prop_oneof![
        3 => Just(Event::Claim),
        4 => (outcome, any::<bool>(), -100i32..=100, prop_oneof![Just(0i64), 0i64..200_000], prop_oneof![Just(0i64), -5i64..5, 0i64..60_000])
            .prop_map(|(outcome, stale, jitter_permille, retry_after_ms, ahead_ms)| Event::Settle {
                outcome, stale, jitter_permille, retry_after_ms, ahead_ms,
            }),
        1 => (any::<bool>(), 0u64..10_000, any::<bool>())
            .prop_map(|(stale, delay_ms, reserved)| Event::Defer { stale, delay_ms, reserved }),
        1 => any::<bool>().prop_map(|stale| Event::Release { stale }),
        1 => any::<bool>().prop_map(|stale| Event::Hold { stale }),
        2 => (any::<bool>(), 0u64..60_000, any::<bool>())
            .prop_map(|(stale, delay_ms, judged)| Event::CircuitWait { stale, delay_ms, judged }),
        1 => Just(Event::Expire),
        1 => Just(Event::Cancel),
        1 => (prop_oneof![Just(Again::Replay), resend()], prop::option::of(schedule()))
            .prop_map(|(which, schedule)| Event::Again { which, schedule }),
        1 => any::<bool>().prop_map(|probe| Event::AttemptNow { probe }),
        1 => Just(Event::Wait),
        1 => Just(Event::TakeTurn),
    ]
}

fn lease_of(r: &Record, stale: bool) -> u64 {
    if stale {
        r.lease.wrapping_sub(1)
    } else {
        r.lease
    }
}

/// The record after `e` at `now` with the note its history gets, or `None` when `e`
/// changes nothing.
fn apply(r: &Record, e: &Event, now: Now) -> Option<(Record, Option<Note>)> {
    match e {
        Event::CircuitWait {
            stale,
            delay_ms,
            judged,
        } => transitions::wait_for_circuit(r, lease_of(r, *stale), now, *delay_ms, URL, *judged),
        Event::Again { which, schedule } => {
            let cycle = NewCycle {
                which: *which,
                delay_ms: 0,
                schedule: schedule.as_deref(),
                url: None,
            };
            transitions::again(r, &cycle, now).map(|(r, note)| (r, Some(note)))
        }
        e => apply_unnoted(r, e, now).map(|r| (r, None)),
    }
}

/// `apply` for the events that note nothing in the history.
fn apply_unnoted(r: &Record, e: &Event, now: Now) -> Option<Record> {
    match e {
        Event::Claim => transitions::claim(r, now.down() + 30_000),
        Event::Settle {
            outcome,
            stale,
            jitter_permille,
            retry_after_ms,
            ahead_ms,
        } => {
            let v = Verdict {
                outcome: *outcome,
                ended_at: now.up() + ahead_ms,
                retry_after_ms: *retry_after_ms,
                jitter_permille: *jitter_permille,
            };
            transitions::settle(r, lease_of(r, *stale), &v, now)
        }
        Event::Defer {
            stale,
            delay_ms,
            reserved,
        } => transitions::defer(r, lease_of(r, *stale), now, *delay_ms, *reserved),
        Event::Release { stale } => transitions::release(r, lease_of(r, *stale), now),
        Event::Hold { stale } => transitions::hold(r, lease_of(r, *stale), now),
        Event::Expire => match r.state {
            JobState::InFlight => transitions::expire(r, now),
            _ => None,
        },
        Event::Cancel => transitions::cancel(r, now).1,
        Event::AttemptNow { probe } => {
            let how = if *probe { LetGo::Probe } else { LetGo::Now };
            transitions::attempt_now(r, now, how)
        }
        Event::Wait => transitions::wait(r),
        Event::TakeTurn => transitions::take_turn(r, now),
        Event::CircuitWait { .. } | Event::Again { .. } => unreachable!("noted in `apply`"),
    }
}

/// The whole span of a schedule, in ms.
fn span(schedule: &[u64]) -> i64 {
    schedule.iter().map(|&ms| ms as i64).sum()
}

/// What must hold of `after` and the note it came with, the result of `e` on `before`
/// at `now`.
fn check(
    before: &Record,
    e: &Event,
    after: Option<&(Record, Option<Note>)>,
    now: Now,
) -> Result<(), TestCaseError> {
    let Some((after, note)) = after else {
        return Ok(());
    };
    check_notes(before, e, after, note.as_ref(), now)?;
    prop_assert!(after.attempts <= after.max_attempts);
    prop_assert!(
        after.circuit_since.is_none() || !after.state.is_finished(),
        "only one not finished waits for its circuit"
    );
    prop_assert_eq!(after.max_attempts as usize, after.schedule.len() + 1);
    prop_assert!(after.lease >= before.lease, "lease numbers never go back");
    prop_assert!(
        after.position().is_some(),
        "every record has its index: {:?}",
        after
    );
    if after.waiting {
        prop_assert_eq!(
            after.state,
            JobState::Scheduled,
            "only a scheduled one waits"
        );
        prop_assert!(
            after.position().unwrap().1 >= WAITING_OFFSET_MS,
            "a waiting one is out of every claim's reach"
        );
    }
    if before.waiting {
        prop_assert!(!matches!(e, Event::Claim), "a waiting one is never claimed");
    }
    if after.held {
        prop_assert!(
            after.state == JobState::Scheduled && !after.waiting,
            "only a scheduled one is held, and never while it waits: {:?}",
            after
        );
        let score = after.position().unwrap().1;
        prop_assert!(
            (HELD_OFFSET_MS..WAITING_OFFSET_MS).contains(&score),
            "a held one is out of every claim's reach, apart from the waiting ones"
        );
        prop_assert!(after.clone().placed(Index::Due, score).held);
    }
    if before.held {
        prop_assert!(!matches!(e, Event::Claim), "a held one is never claimed");
    }
    if after.reserved && !after.state.is_finished() && !matches!(e, Event::Defer { .. }) {
        prop_assert!(
            before.reserved && after.next_at == before.next_at,
            "a send time reserved in a quota holds only for the time it was reserved for: {:?} after {:?}",
            after,
            e
        );
    }
    if let (Event::Hold { .. }, true) = (e, after.state == JobState::Scheduled) {
        prop_assert_eq!(after.attempts, before.attempts, "holding spends no attempt");
        prop_assert_eq!(after.next_at, before.next_at, "nor moves its due time");
    }
    if before.state.is_finished() {
        let again = match e {
            Event::Again { which, .. } => Some(*which),
            _ => None,
        };
        let resent = matches!(again, Some(Again::Resend(states)) if states.contains(before.state));
        prop_assert!(
            resent || again == Some(Again::Replay) && before.state == JobState::Dead,
            "a finished notification comes back only by a resend of its state, or a replay of a dead one"
        );
    }
    match e {
        Event::Settle { stale: true, .. }
        | Event::Defer { stale: true, .. }
        | Event::CircuitWait { stale: true, .. }
        | Event::Release { stale: true } => {
            prop_assert!(false, "a stale lease changed {:?}", before)
        }
        Event::Settle {
            outcome: Outcome::Failed,
            ..
        } if before.probe && !before.cancel_requested => {
            prop_assert!(after.held && !after.probe, "a failed probe is held again");
            prop_assert_eq!(after.attempts, before.attempts, "and not counted");
            prop_assert_eq!(after.state, JobState::Scheduled);
        }
        Event::Settle {
            outcome: Outcome::Failed,
            jitter_permille,
            retry_after_ms,
            ahead_ms,
            ..
        } if after.state == JobState::Scheduled => {
            let ended = (now.up() + ahead_ms).min(now.up());
            let interval = after.schedule[after.attempts as usize - 1] as i64;
            let stretched =
                (interval * (1000 + i64::from(*jitter_permille)) + 999).div_euclid(1000);
            let due = after.next_at.unwrap();
            prop_assert!(due >= ended + stretched, "due {due} before its tier");
            prop_assert!(
                due >= ended + retry_after_ms,
                "due {due} before Retry-After"
            );
            prop_assert_eq!(after.attempts, before.attempts + 1);
            prop_assert!(!after.reserved, "a reserved send time serves one attempt");
        }
        Event::Settle { .. } => prop_assert_eq!(after.attempts, before.attempts + 1),
        Event::CircuitWait {
            delay_ms, judged, ..
        } => {
            prop_assert_eq!(
                after.attempts,
                before.attempts,
                "an open circuit spends no tier"
            );
            let deadline = after.deadline.expect("a deadline once held back");
            let due_before = before.next_at.unwrap();
            match after.state {
                JobState::Scheduled => {
                    let due = after.next_at.unwrap();
                    prop_assert!(
                        due <= deadline || deadline <= now.up(),
                        "never due after a deadline still ahead"
                    );
                    prop_assert!(due <= now.up() + *delay_ms as i64);
                    prop_assert!(due > now.up() || *delay_ms == 0 || deadline > now.up());
                    prop_assert!(after.circuit_since.is_some());
                }
                JobState::Dead => prop_assert!(
                    *judged
                        && transitions::dies_waiting(
                            due_before,
                            Some(deadline),
                            before.waiting_since()
                        ),
                    "dead only at its deadline, already waiting, on a verdict"
                ),
                state => prop_assert!(
                    state == JobState::Cancelled && before.cancel_requested,
                    "{:?}",
                    state
                ),
            }
        }
        Event::Defer {
            delay_ms, reserved, ..
        } if after.state == JobState::Scheduled => {
            prop_assert!(after.next_at.unwrap() >= now.up() + *delay_ms as i64);
            prop_assert_eq!(after.attempts, before.attempts);
            prop_assert_eq!(after.reserved, *reserved);
        }
        Event::Release { .. } | Event::Expire if after.state == JobState::Scheduled => {
            prop_assert!(
                after.next_at >= before.next_at,
                "a hand-back is never early"
            );
            prop_assert_eq!(after.attempts, before.attempts);
            prop_assert_eq!(
                after.reserved,
                before.reserved && after.next_at == before.next_at,
                "a hand-back keeps its send time while it is due then"
            );
        }
        Event::Again { .. } => {
            prop_assert_eq!(
                after.deadline,
                Some(after.next_at.unwrap() + span(&after.schedule)),
                "a new cycle has a new window"
            );
            prop_assert!(!after.reserved);
            prop_assert!(!after.cancel_requested, "a new cycle is not cancelled");
            prop_assert_eq!(after.attempts, 0);
            prop_assert_eq!(after.replays, before.replays + 1);
        }
        Event::AttemptNow { probe } => {
            prop_assert_eq!(before.state, JobState::Scheduled);
            prop_assert!(!*probe || before.held, "only a held one is let go to probe");
            prop_assert_eq!(after.probe, *probe);
            prop_assert!(!after.held);
            prop_assert!(
                after.circuit_since.is_none(),
                "a release ends a circuit's wait"
            );
            prop_assert_eq!(after.next_at, Some(now.down()), "due now");
            prop_assert_eq!(after.attempts, before.attempts);
            prop_assert_eq!(
                after.waiting,
                before.waiting,
                "it keeps its place in its key"
            );
        }
        Event::Wait => prop_assert_eq!(after.next_at, before.next_at, "it keeps its own time"),
        Event::TakeTurn => {
            prop_assert!(!after.waiting);
            prop_assert!(
                after.next_at >= before.next_at && after.next_at >= Some(now.up()),
                "its turn is never before its own time, nor in the past"
            );
        }
        _ => {}
    }
    Ok(())
}

/// What must hold of the note an event adds to the history: a circuit's wait noted once
/// (when it begins), its deadline's death, and each new cycle, with its number.
fn check_notes(
    before: &Record,
    e: &Event,
    after: &Record,
    note: Option<&Note>,
    now: Now,
) -> Result<(), TestCaseError> {
    let kind = note.map(|n| n.note);
    match e {
        Event::CircuitWait { .. } => {
            let expected = match after.state {
                JobState::Dead => Some(NoteKind::CircuitDeadline),
                JobState::Scheduled if before.circuit_since.is_none() => {
                    Some(NoteKind::CircuitWait)
                }
                _ => None,
            };
            prop_assert_eq!(kind, expected, "a wait is noted once, as it begins");
            prop_assert!(note.is_none_or(|n| n.at == now.down() && n.url.as_deref() == Some(URL)));
        }
        Event::Again { which, .. } => {
            let expected = match which {
                Again::Replay => NoteKind::Replay,
                Again::Resend(_) => NoteKind::Resend,
            };
            prop_assert_eq!(kind, Some(expected));
            prop_assert_eq!(note.and_then(|n| n.cycle), Some(after.replays));
        }
        _ => prop_assert!(note.is_none()),
    }
    Ok(())
}

/// A record some random sequence of events led to, from a fresh registration: any state
/// a store may keep, held, waiting, held back, with a cancel asked for in flight.
pub(crate) fn reached() -> impl Strategy<Value = Record> {
    let events = prop::collection::vec((event(), 0i64..120_000_000), 0..40);
    (schedule(), events).prop_map(|(schedule, events)| {
        let mut clock = 1_700_000_000_000_000i64;
        let mut r = transitions::register(schedule, Now::from_micros(clock), 0);
        for (e, step_us) in &events {
            clock += step_us;
            if let Some((after, _)) = apply(&r, e, Now::from_micros(clock)) {
                r = after;
            }
        }
        r
    })
}

/// Whether the transition that carries out `op` changes `r` at `now`, a resend of every
/// finished state.
fn takes(op: Operation, r: &Record, now: Now) -> bool {
    let again = |which| {
        let cycle = NewCycle {
            which,
            delay_ms: 0,
            schedule: None,
            url: None,
        };
        transitions::again(r, &cycle, now).is_some()
    };
    match op {
        Operation::Cancel => transitions::cancel(r, now).1.is_some(),
        Operation::AttemptNow => transitions::attempt_now(r, now, LetGo::Now).is_some(),
        Operation::Resend => again(Again::Resend(FinishedStates::ALL)),
        Operation::Replay => again(Again::Replay),
        Operation::Discard => transitions::discardable(r),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// What `Operation::applies` says of a notification's status is what the transition
    /// that carries it out does: it changes the record exactly when it applies.
    #[test]
    fn an_operation_applies_exactly_when_its_transition_changes_the_record(r in reached()) {
        let now = Now::from_micros(1_800_000_000_000_000);
        for op in Operation::ALL {
            prop_assert_eq!(op.applies(&r.status()), takes(op, &r, now), "{:?} on {:?}", op, r);
        }
    }

    #[test]
    fn every_sequence_of_events_keeps_the_invariants(
        schedule in schedule(),
        delay_ms in 0u64..10_000,
        events in prop::collection::vec((event(), 0i64..120_000_000), 1..60),
    ) {
        let mut clock = 1_700_000_000_000_000i64;
        let mut r = transitions::register(schedule, Now::from_micros(clock), delay_ms);
        prop_assert_eq!(r.deadline, Some(r.next_at.unwrap() + span(&r.schedule)));
        for (e, step_us) in &events {
            clock += step_us;
            let now = Now::from_micros(clock);
            let after = apply(&r, e, now);
            check(&r, e, after.as_ref(), now)?;
            if let Some((after, _)) = after {
                r = after;
            }
        }
    }

    /// An endpoint that never recovers: each time its notification falls due the circuit
    /// is open (now and then a probe goes, and fails). Only the probes spend tiers, each
    /// wait is noted once, and it is dead at its deadline at the latest, or by its tiers.
    #[test]
    fn a_notification_its_circuit_holds_back_spends_tiers_only_on_requests_and_dies_in_its_window(
        schedule in schedule(),
        steps in prop::collection::vec((any::<bool>(), 1u64..30_000), 1..200),
    ) {
        let mut now = Now::from_micros(1_000_000_000);
        let mut r = transitions::register(schedule, now, 0);
        let deadline = r.deadline.unwrap();
        let (mut requests, mut notes) = (0, Vec::new());
        let mut steps = steps.into_iter().cycle();
        while r.state == JobState::Scheduled {
            now = Now::from_micros(r.next_at.unwrap() * 1000);
            let due = r.next_at.unwrap();
            r = transitions::claim(&r, now.down() + 1000).unwrap();
            let (probe, delay_ms) = steps.next().unwrap();
            let last = r.attempts + 1 == r.max_attempts;
            if probe || last {
                let v = Verdict { outcome: Outcome::Failed, ended_at: now.up(), retry_after_ms: 0, jitter_permille: 0 };
                r = transitions::settle(&r, r.lease, &v, now).unwrap();
                requests += 1;
                continue;
            }
            let (after, note) = transitions::wait_for_circuit(&r, r.lease, now, delay_ms, URL, true).unwrap();
            notes.extend(note.map(|n| (n.note, requests)));
            if after.state == JobState::Dead {
                prop_assert!(due >= deadline, "dead at {due}, before its deadline {deadline}");
            } else {
                prop_assert!(after.next_at.unwrap() <= deadline.max(now.up() + delay_ms as i64));
            }
            r = after;
        }
        prop_assert_eq!(r.state, JobState::Dead);
        prop_assert_eq!(r.attempts, requests, "tiers spent by requests alone");
        let waits: Vec<u32> = notes.iter().filter(|(k, _)| *k == NoteKind::CircuitWait).map(|(_, at)| *at).collect();
        let mut distinct = waits.clone();
        distinct.dedup();
        prop_assert_eq!(&waits, &distinct, "one note per wait, a wait ending with a request");
        let by_deadline = notes.iter().any(|(k, _)| *k == NoteKind::CircuitDeadline);
        prop_assert!(by_deadline || r.attempts == r.max_attempts);
    }

    #[test]
    fn a_notification_that_always_fails_is_attempted_exactly_once_per_tier(
        schedule in schedule(),
    ) {
        let mut now = Now::from_micros(1_000_000);
        let mut r = transitions::register(schedule.clone(), now, 0);
        let mut attempts = 0;
        while r.state == JobState::Scheduled {
            now = Now::from_micros(r.next_at.unwrap() * 1000);
            r = transitions::claim(&r, now.down() + 1000).unwrap();
            let v = Verdict { outcome: Outcome::Failed, ended_at: now.up(), retry_after_ms: 0, jitter_permille: 0 };
            r = transitions::settle(&r, r.lease, &v, now).unwrap();
            attempts += 1;
        }
        prop_assert_eq!(r.state, JobState::Dead);
        prop_assert_eq!(attempts, schedule.len() + 1);
        prop_assert_eq!(r.attempts as usize, schedule.len() + 1);
    }
}

#[test]
fn a_cancel_during_an_attempt_cancels_after_it_instead_of_retrying() {
    let now = Now::from_micros(1_000_000);
    let r = transitions::register(vec![1000], now, 0);
    let r = transitions::claim(&r, 5000).unwrap();
    let (answer, r) = transitions::cancel(&r, now);
    assert_eq!(answer, Cancelled::AfterAttempt);
    let r = r.unwrap();
    let v = Verdict {
        outcome: Outcome::Failed,
        ended_at: 1001,
        retry_after_ms: 0,
        jitter_permille: 0,
    };
    let r = transitions::settle(&r, r.lease, &v, now).unwrap();
    assert_eq!(
        (r.state, r.attempts, r.finished_at),
        (JobState::Cancelled, 1, Some(1000))
    );
}

/// A notification past its deadline, held back by a circuit: `at` ms in, deadline 1 s.
fn waiting_past_its_deadline(at: i64) -> (Record, Now) {
    let now = Now::from_micros(1_000_000);
    let r = transitions::register(vec![500, 500], now, 0);
    let r = transitions::claim(&r, 5_000).unwrap();
    let (r, _) = transitions::wait_for_circuit(&r, r.lease, now, 60_000, URL, true).unwrap();
    assert_eq!(
        r.next_at, r.deadline,
        "held back until its deadline at most"
    );
    (r, Now::from_micros(at * 1000))
}

#[test]
fn one_let_go_waits_once_more_for_its_circuit_before_its_deadline_counts() {
    let (r, now) = waiting_past_its_deadline(2_500);
    let r = transitions::attempt_now(&r, now, LetGo::Now).unwrap();
    let r = transitions::claim(&r, 9_000).unwrap();
    let (r, note) = transitions::wait_for_circuit(&r, r.lease, now, 3_000, URL, true).unwrap();
    assert_eq!(r.state, JobState::Scheduled, "not dead at once: {r:?}");
    assert!(note.is_some(), "a new wait is noted");
    assert_eq!(
        r.next_at,
        Some(now.up() + 3_000),
        "due at the probe, not at once"
    );
    let later = Now::from_micros(r.next_at.unwrap() * 1000);
    let r = transitions::claim(&r, 99_000).unwrap();
    let (r, _) = transitions::wait_for_circuit(&r, r.lease, later, 3_000, URL, true).unwrap();
    assert_eq!(
        r.state,
        JobState::Dead,
        "the probe after its release failed"
    );
}

#[test]
fn a_held_back_one_whose_own_probe_failed_past_its_deadline_is_dead_at_its_next_hold() {
    let (r, _) = waiting_past_its_deadline(0);
    let since = r.circuit_since;
    let probe_at = Now::from_micros(r.next_at.unwrap() * 1000 + 30_000_000);
    let r = transitions::claim(&r, 99_000).unwrap();
    let failed = Verdict {
        outcome: Outcome::Failed,
        ended_at: probe_at.down(),
        retry_after_ms: 0,
        jitter_permille: 0,
    };
    let r = transitions::settle(&r, r.lease, &failed, probe_at).unwrap();
    assert_eq!((r.state, r.attempts), (JobState::Scheduled, 1));
    assert_eq!(
        r.circuit_since, None,
        "no longer held back: it was attempted"
    );
    assert!(since.is_some() && r.waiting_since().is_some());
    let next = Now::from_micros(r.next_at.unwrap() * 1000);
    let r = transitions::claim(&r, 99_001).unwrap();
    let (r, note) = transitions::wait_for_circuit(&r, r.lease, next, 30_000, URL, true).unwrap();
    assert_eq!(
        r.state,
        JobState::Dead,
        "its own failed probe was the verdict"
    );
    assert_eq!(note.map(|n| n.note), Some(NoteKind::CircuitDeadline));
}

#[test]
fn no_verdict_no_death_while_a_probe_is_in_flight() {
    let (r, _) = waiting_past_its_deadline(0);
    let now = Now::from_micros(r.next_at.unwrap() * 1000);
    let r = transitions::claim(&r, 99_000).unwrap();
    let (r, _) = transitions::wait_for_circuit(&r, r.lease, now, 2_000, URL, false).unwrap();
    assert_eq!(r.state, JobState::Scheduled);
    assert_eq!(r.next_at, Some(now.up() + 2_000));
}
