//! `Schedule`: the intervals between attempts. Attempt k+1 is due `schedule[k-1]` after
//! attempt k failed; after `1 + len` failed attempts the notification is dead.

use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::FieldError;

/// At most this many retry tiers (the longest shipped schedule has 15).
pub const MAX_TIERS: usize = 50;
/// Each interval is at least this long, so that a schedule cannot hammer a callback.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Each interval is at most this long.
pub const MAX_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule(Vec<Duration>);

impl Schedule {
    /// Validates a list of intervals written as humantime strings (`"15s"`, `"3m"`).
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, FieldError> {
        if items.len() > MAX_TIERS {
            return Err(FieldError::new(
                "",
                format!("at most {MAX_TIERS} intervals, got {}", items.len()),
            ));
        }
        let intervals = items
            .iter()
            .enumerate()
            .map(|(i, s)| parse_interval(s.as_ref()).map_err(|e| e.within(&format!("[{i}]"))))
            .collect::<Result<_, _>>()?;
        Ok(Self(intervals))
    }

    pub fn intervals(&self) -> &[Duration] {
        &self.0
    }

    /// The intervals in ms, as the stores keep them.
    pub fn intervals_ms(&self) -> Vec<u64> {
        self.0.iter().map(|d| d.as_millis() as u64).collect()
    }

    /// Attempts in all: the first one plus one per interval.
    pub fn max_attempts(&self) -> u32 {
        1 + self.0.len() as u32
    }
}

/// A schedule in settings: a list of durations, or one comma-separated string as an
/// environment variable gives it (`"15s,3m,10m"`). It is validated as it is read.
impl<'de> Deserialize<'de> for Schedule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            List(Vec<String>),
        }
        let items = match Written::deserialize(d)? {
            Written::Text(text) => text
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(String::from)
                .collect(),
            Written::List(items) => items,
        };
        Schedule::parse(&items).map_err(|e| match e.field.is_empty() {
            true => de::Error::custom(e.message),
            false => de::Error::custom(e),
        })
    }
}

impl Serialize for Schedule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.0
                .iter()
                .map(|d| humantime::format_duration(*d).to_string()),
        )
    }
}

fn parse_interval(s: &str) -> Result<Duration, FieldError> {
    let d = parse_duration(s)?;
    if d < MIN_INTERVAL || d > MAX_INTERVAL {
        return Err(FieldError::new(
            "",
            format!(
                "interval `{s}` out of range ({} to {})",
                humantime::format_duration(MIN_INTERVAL),
                humantime::format_duration(MAX_INTERVAL)
            ),
        ));
    }
    Ok(d)
}

/// Parses one humantime duration (`250ms`, `15s`, `3m`, `1h 30m`).
pub fn parse_duration(s: &str) -> Result<Duration, FieldError> {
    humantime::parse_duration(s.trim())
        .map_err(|_| FieldError::new("", format!("`{s}` is not a duration: {DURATION_FORM}")))
}

/// How a duration is written, for the errors about one.
pub const DURATION_FORM: &str = "a number and a unit, like 500ms, 15s, 3m, 1h or 2d";

/// Milliseconds since the epoch as RFC 3339 UTC with milliseconds: how the API and the
/// ops events write a time.
pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// A duration as `parse_duration` reads it back, in whole days, hours, minutes, seconds
/// and ms: `90d`, `1h 30m`, `1s 500ms`, `0s` (never months, whose length varies).
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
        (1, "ms"),
    ];
    let mut rest = ms;
    let parts: Vec<String> = units
        .iter()
        .filter_map(|&(size, unit)| {
            let whole = rest / size;
            rest %= size;
            (whole > 0).then(|| format!("{whole}{unit}"))
        })
        .collect();
    if parts.is_empty() {
        return "0s".into();
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_written_in_units_that_read_back() {
        for (ms, text) in [
            (90 * 86_400_000, "90d"),
            (5_400_000, "1h 30m"),
            (1_500, "1s 500ms"),
            (0, "0s"),
            (86_400_000 + 1, "1d 1ms"),
        ] {
            let d = Duration::from_millis(ms);
            assert_eq!(duration_text(d), text);
            assert_eq!(parse_duration(text).unwrap(), d);
        }
    }

    #[test]
    fn parses_the_default_schedule() {
        let s =
            Schedule::parse(&["15s", "3m", "10m", "30m", "30m", "1h", "2h", "6h", "15h"]).unwrap();
        assert_eq!(s.max_attempts(), 10);
        assert_eq!(s.intervals()[1], Duration::from_secs(180));
    }

    #[test]
    fn an_empty_schedule_means_one_attempt() {
        assert_eq!(Schedule::parse::<&str>(&[]).unwrap().max_attempts(), 1);
    }

    #[test]
    fn names_the_bad_interval() {
        let err = Schedule::parse(&["1s", "soon"])
            .unwrap_err()
            .within("schedule");
        assert_eq!(err.field, "schedule[1]");
        let err = Schedule::parse(&["1ms"]).unwrap_err();
        assert_eq!(err.field, "[0]");
        assert!(Schedule::parse(&["30d"]).is_err());
        assert!(Schedule::parse(&vec!["1s"; MAX_TIERS + 1]).is_err());
    }
}
