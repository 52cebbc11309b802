//! What `settle.lua` writes for an attempt, worked out here from the state record the
//! claim read, so that Redis need not decode and encode it: the script only checks that
//! the record is still that one (nothing settled, handed back or cancelled it since) and
//! writes this. When the record changed, or a cancel was asked for, the script's own
//! rules decide instead; these are the same rules.

use serde_json::{Map, Value};

use super::record::interval_ms;
use crate::domain::Outcome;
use crate::store::Settlement;

/// The record after the attempt, the index it moves to (`done`, `dead` or `due`, as
/// `settle.lua` names them), and its score there.
#[derive(Debug, PartialEq)]
pub struct Worked {
    pub record: String,
    pub index: &'static str,
    pub score: i64,
}

/// `None` when the claimed record is not one these rules cover: a cancel asked for, or a
/// record that does not parse (the script then decides, or ignores a lost lease).
pub fn work_out(claimed: &str, s: &Settlement) -> Option<Worked> {
    let mut r: Map<String, Value> = serde_json::from_str(claimed).ok()?;
    if r.get("cancel_requested").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let attempts = r.get("attempts")?.as_u64()? + 1;
    let lease = r.get("lease")?.as_u64()?;
    let exhausted = attempts >= r.get("max_attempts")?.as_u64()?;
    let (state, index, score) = match s.outcome {
        Outcome::Delivered => ("delivered", "done", s.ended_at),
        Outcome::Gone => ("dead", "dead", s.ended_at),
        Outcome::Failed if exhausted => ("dead", "dead", s.ended_at),
        Outcome::Failed => {
            let interval = nth_interval(r.get("schedule")?.as_str()?, attempts);
            (
                "scheduled",
                "due",
                s.ended_at.saturating_add(s.wait_after(interval)),
            )
        }
    };
    r.insert("attempts".into(), attempts.into());
    r.insert("lease".into(), (lease + 1).into());
    r.insert("state".into(), state.into());
    if index == "due" {
        r.insert("next_at".into(), score.into());
    } else {
        r.remove("next_at");
        r.insert("finished_at".into(), score.into());
    }
    Some(Worked {
        record: serde_json::to_string(&r).ok()?,
        index,
        score,
    })
}

/// The `n`-th interval (1-based) of a schedule as the scripts keep it; 0 past its end.
fn nth_interval(schedule: &str, n: u64) -> u64 {
    schedule
        .split(',')
        .nth(n as usize - 1)
        .map_or(0, interval_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::JobId;
    use std::time::Duration;

    const CLAIMED: &str = r#"{"state":"scheduled","attempts":1,"lease":4,"max_attempts":3,"schedule":"1000,5000","created_at":10,"next_at":20}"#;

    fn attempt(outcome: Outcome) -> Settlement {
        Settlement {
            id: JobId::new(0),
            lease: 4,
            outcome,
            status: Some(500),
            error: None,
            duration_ms: 3,
            response: String::new(),
            retry_after: None,
            jitter_permille: 0,
            ended_at: 100,
            claimed_record: None,
        }
    }

    fn record(w: &Worked) -> Value {
        serde_json::from_str(&w.record).unwrap()
    }

    #[test]
    fn a_failure_with_tiers_left_is_due_at_the_next_interval_after_the_attempt() {
        let w = work_out(CLAIMED, &attempt(Outcome::Failed)).unwrap();
        assert_eq!((w.index, w.score), ("due", 100 + 5000));
        let r = record(&w);
        assert_eq!(
            (&r["state"], &r["attempts"], &r["lease"], &r["next_at"]),
            (&"scheduled".into(), &2.into(), &5.into(), &5100.into())
        );
        assert_eq!(r["created_at"], 10, "the rest is kept");
    }

    #[test]
    fn jitter_and_retry_after_stretch_the_wait() {
        let mut a = attempt(Outcome::Failed);
        a.jitter_permille = 100;
        assert_eq!(work_out(CLAIMED, &a).unwrap().score, 100 + 5500);
        a.retry_after = Some(Duration::from_secs(60));
        assert_eq!(work_out(CLAIMED, &a).unwrap().score, 100 + 60_000);
    }

    #[test]
    fn delivered_gone_and_exhausted_finish_at_the_attempts_end() {
        let delivered = work_out(CLAIMED, &attempt(Outcome::Delivered)).unwrap();
        assert_eq!((delivered.index, delivered.score), ("done", 100));
        let r = record(&delivered);
        assert_eq!(
            (&r["state"], &r["finished_at"]),
            (&"delivered".into(), &100.into())
        );
        assert!(r.get("next_at").is_none());

        assert_eq!(
            work_out(CLAIMED, &attempt(Outcome::Gone)).unwrap().index,
            "dead"
        );
        let last = CLAIMED.replace(r#""attempts":1"#, r#""attempts":2"#);
        let dead = work_out(&last, &attempt(Outcome::Failed)).unwrap();
        assert_eq!(
            (dead.index, &record(&dead)["state"]),
            ("dead", &"dead".into())
        );
    }

    #[test]
    fn a_cancel_asked_for_or_a_strange_record_is_left_to_the_script() {
        let cancelled = CLAIMED.replace('}', r#","cancel_requested":true}"#);
        assert_eq!(work_out(&cancelled, &attempt(Outcome::Failed)), None);
        assert_eq!(work_out("not json", &attempt(Outcome::Failed)), None);
    }
}
