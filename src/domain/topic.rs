//! `Topic`, what an event is about (`payment.succeeded`), and `TopicPattern`, which
//! topics a subscription takes (`payment.*`): dot-separated segments, a pattern's `*`
//! standing for exactly one segment, so that `payment.*` takes `payment.succeeded` but
//! neither `payment` nor `payment.refund.created`.

use std::fmt;

use super::FieldError;

/// Longest topic or pattern, in bytes.
const MAX_LEN: usize = 200;
/// The topics of postback's own operational events (`ops_events`), which no producer
/// may publish and no subscription take.
const RESERVED: &str = "postback";

/// An event's topic: segments of ASCII letters, digits, `_` and `-`, joined by dots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Topic(String);

impl Topic {
    pub fn parse(text: &str, field: &str) -> Result<Self, FieldError> {
        check(text, field, false)?;
        Ok(Self(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A topic, or segments of which some are `*` (any one segment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPattern(String);

impl TopicPattern {
    pub fn parse(text: &str, field: &str) -> Result<Self, FieldError> {
        check(text, field, true)?;
        Ok(Self(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `topic` is one this pattern takes: as many segments, each equal or `*`.
    pub fn matches(&self, topic: &Topic) -> bool {
        let mut wanted = self.0.split('.');
        let mut given = topic.0.split('.');
        loop {
            match (wanted.next(), given.next()) {
                (None, None) => return true,
                (Some(w), Some(g)) if w == "*" || w == g => {}
                _ => return false,
            }
        }
    }
}

fn check(text: &str, field: &str, pattern: bool) -> Result<(), FieldError> {
    let refuse = |why: &str| Err(FieldError::new(field, why));
    if text.is_empty() || text.len() > MAX_LEN {
        return refuse(&format!("must be 1 to {MAX_LEN} characters"));
    }
    for segment in text.split('.') {
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        let ok = !segment.is_empty() && segment.bytes().all(word);
        if !(ok || pattern && segment == "*") {
            return refuse(if pattern {
                "must be dot-separated segments of letters, digits, `_` or `-`, or `*` for any one segment"
            } else {
                "must be dot-separated segments of letters, digits, `_` or `-`"
            });
        }
    }
    if text.split('.').next() == Some(RESERVED) {
        return refuse("the `postback.` topics are postback's own operational events");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(t: &str) -> Topic {
        Topic::parse(t, "topic").unwrap()
    }

    fn pattern(p: &str) -> TopicPattern {
        TopicPattern::parse(p, "topics[0]").unwrap()
    }

    #[test]
    fn a_star_stands_for_exactly_one_segment() {
        let p = pattern("payment.*");
        assert!(p.matches(&topic("payment.succeeded")));
        assert!(!p.matches(&topic("payment")));
        assert!(!p.matches(&topic("payment.refund.created")));
        assert!(!p.matches(&topic("refund.created")));
        assert!(pattern("*.created").matches(&topic("refund.created")));
        assert!(pattern("payment.succeeded").matches(&topic("payment.succeeded")));
        assert!(!pattern("payment.succeeded").matches(&topic("payment.failed")));
    }

    #[test]
    fn bad_topics_and_patterns_name_their_field() {
        for bad in [
            "",
            "payment..x",
            ".x",
            "x.",
            "pay ment",
            "a.b!",
            "postback.x",
        ] {
            assert_eq!(
                Topic::parse(bad, "topic").unwrap_err().field,
                "topic",
                "{bad:?}"
            );
        }
        assert!(Topic::parse("payment.*", "topic").is_err());
        assert!(TopicPattern::parse("payment.**", "topics[1]").is_err());
        assert!(TopicPattern::parse("postback.*", "topics[1]").is_err());
        assert_eq!(
            TopicPattern::parse("a..b", "topics[1]").unwrap_err().field,
            "topics[1]"
        );
        assert!(Topic::parse(&"a".repeat(MAX_LEN + 1), "topic").is_err());
    }
}
