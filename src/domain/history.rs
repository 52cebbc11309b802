//! A notification's history as every store keeps it (one JSON array, oldest first): its
//! attempts (`Attempt`), and notes of what happened between them (`Note`): held back by
//! its endpoint's open circuit (once per wait, since no request was made), dead because
//! that circuit was still open at its deadline, and each new cycle a replay or a resend
//! began. `Cycles` reads the cycles back out of a history: when and why each began, the
//! URL its attempts went to, and which cycle each entry belongs to.

use serde::{Deserialize, Serialize};

use super::Attempt;

/// One entry of a history: a note has a `note` field, an attempt never does (attempts
/// written by earlier builds read as they were).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Entry {
    Note(Note),
    Attempt(Attempt),
}

/// Something that happened to a notification between its attempts, at `at` (ms since
/// the epoch, the store's clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub at: i64,
    pub note: NoteKind,
    /// The URL it concerns: the endpoint whose circuit held it back, or the new URL a
    /// replay gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The cycle a replay or resend began: 1 for the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<u32>,
}

/// What a note tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteKind {
    /// Held back by its endpoint's open circuit: no request was made and no attempt
    /// counted; it waits for the circuit to let a request through.
    CircuitWait,
    /// Dead: its endpoint's circuit was still open at its deadline.
    CircuitDeadline,
    /// A new cycle: an operator replayed it from the dead letters.
    Replay,
    /// A new cycle: an operator sent it again after it finished.
    Resend,
}

impl NoteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoteKind::CircuitWait => "circuit_wait",
            NoteKind::CircuitDeadline => "circuit_deadline",
            NoteKind::Replay => "replay",
            NoteKind::Resend => "resend",
        }
    }

    /// Whether it begins a cycle.
    fn begins_cycle(self) -> bool {
        matches!(self, NoteKind::Replay | NoteKind::Resend)
    }
}

/// The error a circuit's note stands for.
pub const CIRCUIT_OPEN: &str = "circuit_open";
pub const CIRCUIT_DEADLINE: &str =
    "circuit_open until its deadline: the endpoint did not recover within its schedule's span";

impl Note {
    /// Held back by the open circuit of the endpoint at `url`.
    pub fn circuit_wait(at: i64, url: &str) -> Self {
        Self::about(at, NoteKind::CircuitWait, Some(url))
    }

    /// Dead at its deadline, the circuit of the endpoint at `url` still open.
    pub fn circuit_deadline(at: i64, url: &str) -> Self {
        Self::about(at, NoteKind::CircuitDeadline, Some(url))
    }

    /// Cycle `cycle` begun by a replay or a resend (`kind`), with the new URL it got.
    pub fn began(at: i64, kind: NoteKind, cycle: u32, url: Option<&str>) -> Self {
        Self {
            cycle: Some(cycle),
            ..Self::about(at, kind, url)
        }
    }

    fn about(at: i64, note: NoteKind, url: Option<&str>) -> Self {
        Self {
            at,
            note,
            url: url.map(str::to_string),
            cycle: None,
        }
    }

    /// The error it stands for in a history's view: none for a cycle's beginning.
    pub fn error(&self) -> Option<&'static str> {
        match self.note {
            NoteKind::CircuitWait => Some(CIRCUIT_OPEN),
            NoteKind::CircuitDeadline => Some(CIRCUIT_DEADLINE),
            NoteKind::Replay | NoteKind::Resend => None,
        }
    }
}

impl Entry {
    /// When it happened.
    pub fn at(&self) -> i64 {
        match self {
            Entry::Note(n) => n.at,
            Entry::Attempt(a) => a.at,
        }
    }

    /// The URL it went to or concerns, where it says.
    pub fn url(&self) -> Option<&str> {
        match self {
            Entry::Note(n) => n.url.as_deref(),
            Entry::Attempt(a) => a.url.as_deref(),
        }
    }

    /// The new cycle it begins, if it is a replay's or a resend's note.
    fn begins(&self) -> Option<&Note> {
        match self {
            Entry::Note(n) if n.note.begins_cycle() => Some(n),
            _ => None,
        }
    }

    pub fn is_attempt(&self) -> bool {
        matches!(self, Entry::Attempt(_))
    }

    /// How it ended, as a list shows the last of a history: an attempt, or a note of its
    /// circuit (a cycle's beginning ends nothing).
    pub fn ended(&self) -> Option<Ended<'_>> {
        match self {
            Entry::Attempt(a) => Some(Ended {
                at: a.at,
                status: a.status,
                error: a.error.as_deref(),
            }),
            Entry::Note(n) => n.error().map(|error| Ended {
                at: n.at,
                status: None,
                error: Some(error),
            }),
        }
    }
}

/// How the last attempt (or circuit's note) of a history ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended<'a> {
    pub at: i64,
    pub status: Option<u16>,
    pub error: Option<&'a str>,
}

impl<'a> Ended<'a> {
    /// The last of `history` that ended something.
    pub fn last(history: &'a [Entry]) -> Option<Self> {
        history.iter().rev().find_map(Entry::ended)
    }
}

/// How a cycle began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Began {
    Registered,
    Replay,
    Resend,
    /// Before this build kept notes of cycles: a replay or a resend, when unknown.
    Unrecorded,
}

impl Began {
    pub fn as_str(self) -> &'static str {
        match self {
            Began::Registered => "registered",
            Began::Replay => "replay",
            Began::Resend => "resend",
            Began::Unrecorded => "unrecorded",
        }
    }
}

/// One cycle of a notification: its registration, or a replay or resend, and what came
/// of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// 0 for the registration's, then 1, 2, … for each replay or resend.
    pub number: u32,
    pub began: Began,
    /// When it began (`None` for one unrecorded).
    pub at: Option<i64>,
    /// The URL its attempts went to (or go to); `None` where no entry says it and a later
    /// cycle changed it (a history of an earlier build).
    pub url: Option<String>,
    /// Attempts made in it (requests: notes are not attempts).
    pub attempts: u32,
}

impl Cycle {
    /// What the review page and the command line call it: `Registered`, then by how it
    /// began and its number, `Replay 1`, `Resend 2`, … (`Sent again 3` for one an earlier
    /// build kept no note of).
    pub fn name(&self) -> String {
        let n = self.number;
        match self.began {
            Began::Registered => "Registered".into(),
            Began::Replay => format!("Replay {n}"),
            Began::Resend => format!("Resend {n}"),
            Began::Unrecorded => format!("Sent again {n}"),
        }
    }
}

/// A history read as cycles: the cycles, and for each entry, the cycle it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycles {
    pub cycles: Vec<Cycle>,
    /// Per entry of the history, in order: its cycle's number.
    pub of_entry: Vec<u32>,
}

impl Cycles {
    /// How many of its cycles began as `began` says: its replays, or its resends.
    pub fn count(&self, began: Began) -> u32 {
        self.cycles.iter().filter(|c| c.began == began).count() as u32
    }

    /// The cycles of `history`, of a notification registered at `created_at`, sent again
    /// `replays` times, whose URL is `url_now`. Each replay or resend begins a cycle with
    /// a note; the entries after it are that cycle's. Replays made before such notes were
    /// kept have none: their cycles are `Unrecorded`, and their entries are counted in the
    /// cycle before the first note.
    pub fn of(history: &[Entry], created_at: i64, replays: u32, url_now: &str) -> Self {
        let mut read: Vec<Reading> = (0..=replays).map(Reading::unrecorded).collect();
        read[0].cycle.began = Began::Registered;
        read[0].cycle.at = Some(created_at);
        let (mut current, mut of_entry) = (0u32, Vec::with_capacity(history.len()));
        for entry in history {
            if let Some(note) = entry.begins() {
                current = note.cycle.unwrap_or(current + 1);
                while read.len() <= current as usize {
                    read.push(Reading::unrecorded(read.len() as u32));
                }
                read[current as usize].began_with(note);
            }
            of_entry.push(current);
            read[current as usize].add(entry);
        }
        Self {
            cycles: resolve_urls(read, url_now),
            of_entry,
        }
    }

    /// The URL of cycle `number`, as far as it is known.
    pub fn url_of(&self, number: u32) -> Option<&str> {
        self.cycles
            .get(number as usize)
            .and_then(|c| c.url.as_deref())
    }
}

/// A cycle as its history is read: with whether it began with a new URL, and the first
/// URL its own entries name.
struct Reading {
    cycle: Cycle,
    new_url: bool,
    first_url: Option<String>,
}

impl Reading {
    fn unrecorded(number: u32) -> Self {
        Self {
            cycle: Cycle {
                number,
                began: Began::Unrecorded,
                at: None,
                url: None,
                attempts: 0,
            },
            new_url: false,
            first_url: None,
        }
    }

    fn began_with(&mut self, note: &Note) {
        self.cycle.began = match note.note {
            NoteKind::Replay => Began::Replay,
            _ => Began::Resend,
        };
        self.cycle.at = Some(note.at);
        self.new_url = note.url.is_some();
    }

    fn add(&mut self, entry: &Entry) {
        if self.first_url.is_none() {
            self.first_url = entry.url().map(str::to_string);
        }
        self.cycle.attempts += u32::from(entry.is_attempt());
    }
}

/// Each cycle's URL: the first its own entries name, else, walking back from the URL
/// the notification has now, the one after it, unless that one began with a new URL (or
/// unrecorded).
fn resolve_urls(read: Vec<Reading>, now: &str) -> Vec<Cycle> {
    let mut after: Option<String> = Some(now.to_string());
    let mut cycles: Vec<Cycle> = Vec::with_capacity(read.len());
    for r in read.into_iter().rev() {
        let mut cycle = r.cycle;
        cycle.url = r.first_url.or(after);
        let kept_at_start = cycle.number > 0 && cycle.began != Began::Unrecorded && !r.new_url;
        after = cycle.url.clone().filter(|_| kept_at_start);
        cycles.push(cycle);
    }
    cycles.reverse();
    cycles
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(at: i64, url: Option<&str>) -> Entry {
        Entry::Attempt(Attempt {
            at,
            status: Some(500),
            error: None,
            duration_ms: 3,
            response: String::new(),
            headers: Vec::new(),
            url: url.map(str::to_string),
        })
    }

    #[test]
    fn entries_read_back_as_they_were_written_and_as_earlier_builds_wrote_them() {
        let earlier =
            r#"[{"at":5,"status":null,"error":"timeout","duration_ms":10,"response":""}]"#;
        let read: Vec<Entry> = serde_json::from_str(earlier).unwrap();
        assert!(matches!(&read[0], Entry::Attempt(a) if a.url.is_none()));
        let history = vec![
            attempt(1, Some("https://a.example/h")),
            Entry::Note(Note::circuit_wait(2, "https://a.example/h")),
            Entry::Note(Note::began(
                3,
                NoteKind::Replay,
                1,
                Some("https://b.example/h"),
            )),
        ];
        let text = serde_json::to_string(&history).unwrap();
        assert!(text.contains(r#""note":"circuit_wait""#), "{text}");
        assert_eq!(serde_json::from_str::<Vec<Entry>>(&text).unwrap(), history);
    }

    #[test]
    fn cycles_group_the_entries_with_the_url_each_went_to() {
        let (a, b) = ("https://a.example/h", "https://b.example/h");
        let history = vec![
            attempt(10, Some(a)),
            attempt(20, Some(a)),
            Entry::Note(Note::began(30, NoteKind::Replay, 1, None)),
            Entry::Note(Note::circuit_wait(31, a)),
            Entry::Note(Note::circuit_deadline(40, a)),
            Entry::Note(Note::began(50, NoteKind::Replay, 2, Some(b))),
            attempt(60, Some(b)),
            Entry::Note(Note::began(70, NoteKind::Resend, 3, None)),
        ];
        let c = Cycles::of(&history, 1, 3, b);
        assert_eq!(c.of_entry, [0, 0, 1, 1, 1, 2, 2, 3]);
        let seen: Vec<_> = c
            .cycles
            .iter()
            .map(|c| (c.began, c.at, c.url.as_deref(), c.attempts))
            .collect();
        assert_eq!(
            seen,
            [
                (Began::Registered, Some(1), Some(a), 2),
                (Began::Replay, Some(30), Some(a), 0),
                (Began::Replay, Some(50), Some(b), 1),
                (Began::Resend, Some(70), Some(b), 0),
            ]
        );
    }

    #[test]
    fn a_cycle_without_entries_takes_the_url_of_the_one_after_unless_that_changed_it() {
        let (a, b) = ("https://a.example/h", "https://b.example/h");
        let resent = vec![Entry::Note(Note::began(5, NoteKind::Resend, 1, None))];
        let c = Cycles::of(&resent, 1, 1, a);
        assert_eq!(c.url_of(0), Some(a), "a resend keeps the URL");
        let replayed = vec![Entry::Note(Note::began(5, NoteKind::Replay, 1, Some(b)))];
        let c = Cycles::of(&replayed, 1, 1, b);
        assert_eq!((c.url_of(0), c.url_of(1)), (None, Some(b)));
    }

    #[test]
    fn replays_of_earlier_builds_are_unrecorded_cycles() {
        let a = "https://a.example/h";
        let history = vec![
            attempt(10, None),
            attempt(20, None),
            Entry::Note(Note::began(30, NoteKind::Resend, 2, None)),
            attempt(40, Some(a)),
        ];
        let c = Cycles::of(&history, 1, 2, a);
        assert_eq!(c.of_entry, [0, 0, 2, 2]);
        let began: Vec<_> = c.cycles.iter().map(|c| (c.began, c.attempts)).collect();
        assert_eq!(
            began,
            [
                (Began::Registered, 2),
                (Began::Unrecorded, 0),
                (Began::Resend, 1)
            ]
        );
        assert_eq!(
            (c.url_of(0), c.url_of(1), c.url_of(2)),
            (None, Some(a), Some(a)),
            "a resend keeps the URL; an unrecorded cycle may have changed it"
        );
        let names: Vec<String> = c.cycles.iter().map(Cycle::name).collect();
        assert_eq!(names, ["Registered", "Sent again 1", "Resend 2"]);
        let counts = [Began::Replay, Began::Resend, Began::Unrecorded].map(|b| c.count(b));
        assert_eq!(counts, [0, 1, 1], "a resend is no replay");
    }

    #[test]
    fn each_cycle_is_named_by_how_it_began_and_its_number() {
        let history = vec![
            Entry::Note(Note::began(10, NoteKind::Replay, 1, None)),
            Entry::Note(Note::began(20, NoteKind::Replay, 2, None)),
            Entry::Note(Note::began(30, NoteKind::Resend, 3, None)),
        ];
        let c = Cycles::of(&history, 1, 3, "https://a.example/h");
        let names: Vec<String> = c.cycles.iter().map(Cycle::name).collect();
        assert_eq!(names, ["Registered", "Replay 1", "Replay 2", "Resend 3"]);
        assert_eq!((c.count(Began::Replay), c.count(Began::Resend)), (2, 1));
    }
}
