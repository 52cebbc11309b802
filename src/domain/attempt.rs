//! `Attempt`: the record of one delivery attempt, as kept in a notification's history;
//! `AttemptReport`: how an attempt went, as the sender says it, before it is recorded.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How an attempt ended, as far as the schedule is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The callback accepted the notification; no more attempts.
    Delivered,
    /// The callback failed; retry at the next tier, or dead-letter when none is left.
    Failed,
    /// The callback said it is gone for good (410): dead-letter at once.
    Gone,
}

impl Outcome {
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Failed => "failed",
            Outcome::Gone => "gone",
        }
    }
}

/// One attempt in a notification's history (`history::Entry`). `at` is when the attempt
/// started (ms since the epoch, Redis time); `status` is `None` and `error` says why when
/// no response came. `response` is the start of the response's body, `headers` its
/// headers as kept (`kept_headers`; none in histories written before they were kept),
/// `url` the URL it was sent to (none in histories written before it was kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub at: i64,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub response: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Response body bytes an attempt may keep at most (`delivery.response_bytes`, or a
/// tenant's own): enough for an error page or a stack trace, bounded, since every attempt
/// keeps them.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Response headers an attempt keeps at most, and the most bytes of their names and
/// values together: enough to debug a receiver (its content type, a request id, a
/// `Retry-After`), bounded, since every attempt keeps them.
pub const MAX_RESPONSE_HEADERS: usize = 32;
pub const MAX_RESPONSE_HEADER_BYTES: usize = 4096;

/// The response headers an attempt keeps, in the order they came: names in lower case,
/// values as text (a value that is not is shown lossily), `set-cookie` withheld (a
/// session of the receiver's is not postback's to keep), within `MAX_RESPONSE_HEADERS`
/// and `MAX_RESPONSE_HEADER_BYTES`; a header that would go over is left out, and so are
/// the rest.
pub fn kept_headers<'a>(
    headers: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Vec<(String, String)> {
    let mut kept = Vec::new();
    let mut bytes = 0;
    for (name, value) in headers {
        let value = match name.eq_ignore_ascii_case("set-cookie") {
            true => "(withheld)".to_string(),
            false => String::from_utf8_lossy(value).into_owned(),
        };
        bytes += name.len() + value.len();
        if kept.len() == MAX_RESPONSE_HEADERS || bytes > MAX_RESPONSE_HEADER_BYTES {
            break;
        }
        kept.push((name.to_ascii_lowercase(), value));
    }
    kept
}

/// The most of an attempt's error text a history keeps: an error may quote what a
/// caller wrote (a success rule's expected value), and is kept once per attempt.
pub const MAX_ERROR_BYTES: usize = 256;

/// The first `max` bytes of `text`, cut at a character boundary.
pub fn truncate(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// How one attempt went, before it is recorded.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub response: String,
    /// The response's headers as kept (`kept_headers`); none when no response came.
    pub headers: Vec<(String, String)>,
    /// How long the receiver asked to be left alone (429 or 503 with `Retry-After`).
    pub retry_after: Option<Duration>,
    pub reach: Reach,
}

/// Whether an attempt went out, and if it did, how its endpoint seemed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// A request was sent; not `healthy` after a connection error, a timeout, 429 or 5xx.
    Sent { healthy: bool },
    /// Not sent: the SSRF guard refused the destination.
    Blocked,
}

impl AttemptReport {
    /// A failed attempt that reached the host, which did not seem healthy; its error
    /// text cut to `MAX_ERROR_BYTES` (`…` marks the cut).
    pub fn failure(status: Option<u16>, error: String, response: String) -> Self {
        let error = match error.len() > MAX_ERROR_BYTES {
            true => truncate(&error, MAX_ERROR_BYTES - '…'.len_utf8()) + "…",
            false => error,
        };
        Self {
            outcome: Outcome::Failed,
            status,
            error: Some(error),
            duration_ms: 0,
            response,
            headers: Vec::new(),
            retry_after: None,
            reach: Reach::Sent { healthy: false },
        }
    }

    /// An attempt not made because the SSRF guard refused its destination (`why`).
    pub fn blocked(why: String) -> Self {
        Self {
            reach: Reach::Blocked,
            ..Self::failure(None, why, String::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_headers_are_kept_within_their_bounds_and_cookies_withheld() {
        let raw = [
            ("Content-Type", "text/plain".as_bytes()),
            ("Set-Cookie", b"session=secret"),
            ("X-Request-Id", b"r-1"),
        ];
        assert_eq!(
            kept_headers(raw.into_iter()),
            [
                ("content-type".to_string(), "text/plain".to_string()),
                ("set-cookie".into(), "(withheld)".into()),
                ("x-request-id".into(), "r-1".into()),
            ]
        );
        let many = vec![("x-n", b"v".as_slice()); 100];
        assert_eq!(kept_headers(many.into_iter()).len(), MAX_RESPONSE_HEADERS);
        let big = "v".repeat(3000);
        let large = [("a", big.as_bytes()), ("b", big.as_bytes())];
        assert_eq!(
            kept_headers(large.into_iter()).len(),
            1,
            "the second goes over"
        );
    }

    #[test]
    fn truncates_on_a_character_boundary() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("ok", 10), "ok");
    }

    #[test]
    fn an_error_is_kept_to_its_first_bytes() {
        let long = format!("response body is not `{}`", "é".repeat(100_000));
        let kept = AttemptReport::failure(Some(200), long, String::new())
            .error
            .unwrap();
        assert!(
            kept.len() <= MAX_ERROR_BYTES && kept.ends_with('…'),
            "{}",
            kept.len()
        );
        let short = AttemptReport::failure(None, "timeout".into(), String::new());
        assert_eq!(short.error.as_deref(), Some("timeout"));
    }
}
