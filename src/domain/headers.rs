//! `ExtraHeaders`: request headers a producer asks to send with a notification. Names and
//! values must be valid HTTP; hop-by-hop headers and the headers postback sets itself
//! (signature, id, timestamp, user agent) are refused. A callback moved to another URL
//! keeps none of them (`headers_after_change`).

use http::HeaderName;

use super::FieldError;

const MAX_HEADERS: usize = 32;
const MAX_VALUE_LEN: usize = 4096;

/// Headers postback owns or that only make sense for one hop.
const REFUSED: &[&str] = &[
    "connection",
    "content-length",
    "host",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "webhook-id",
    "webhook-signature",
    "webhook-timestamp",
];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtraHeaders(Vec<(String, String)>);

impl ExtraHeaders {
    /// Validates name/value pairs; errors name the field `headers.<name>`.
    pub fn parse(pairs: Vec<(String, String)>) -> Result<Self, FieldError> {
        if pairs.len() > MAX_HEADERS {
            return Err(FieldError::new(
                "headers",
                format!("at most {MAX_HEADERS} headers"),
            ));
        }
        let mut out = Vec::with_capacity(pairs.len());
        for (name, value) in pairs {
            let field = || format!("headers.{name}");
            let parsed = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| FieldError::new(field(), "not a valid header name"))?;
            if REFUSED.contains(&parsed.as_str()) {
                return Err(FieldError::new(
                    field(),
                    "this header is set by postback or is hop-by-hop",
                ));
            }
            if value.len() > MAX_VALUE_LEN || !visible_ascii(&value) {
                return Err(FieldError::new(
                    field(),
                    format!("value must be visible ASCII, at most {MAX_VALUE_LEN} bytes"),
                ));
            }
            out.push((parsed.as_str().to_string(), value));
        }
        Ok(Self(out))
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }
}

/// The extra headers of a callback (a replayed dead letter's, a subscription's) after a
/// change: those given with the change; else, when it moves to another URL, none, since
/// the stored ones (an `Authorization`, say) were meant for the old receiver and follow
/// no URL whoever may change it chooses; else those it had. Whoever moves a callback and
/// wants headers sent there gives them, values and all.
pub fn headers_after_change<T: Default>(stored: T, given: Option<T>, moved: bool) -> T {
    match (given, moved) {
        (Some(given), _) => given,
        (None, true) => T::default(),
        (None, false) => stored,
    }
}

/// A request header's value as the API shows it: a credential withheld (`authorization`,
/// `cookie`, and names that say key, token, secret or password), since whoever may read a
/// notification is not thereby meant to hold the merchant's credentials.
pub fn shown_value<'a>(name: &str, value: &'a str) -> &'a str {
    const CREDENTIALS: [&str; 6] = [
        "authorization",
        "cookie",
        "key",
        "token",
        "secret",
        "password",
    ];
    let name = name.to_ascii_lowercase();
    match CREDENTIALS.iter().any(|c| name.contains(c)) {
        true => "(withheld)",
        false => value,
    }
}

/// Visible ASCII, spaces and tabs: what every receiver reads the same way. (HTTP also
/// lets bytes above 0x7f through, which receivers decode differently.)
fn visible_ascii(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(name: &str, value: &str) -> Result<ExtraHeaders, FieldError> {
        ExtraHeaders::parse(vec![(name.into(), value.into())])
    }

    #[test]
    fn accepts_ordinary_headers_lowercased() {
        let h = one("X-Merchant", "42").unwrap();
        assert_eq!(h.pairs(), &[("x-merchant".to_string(), "42".to_string())]);
    }

    #[test]
    fn a_callback_moved_elsewhere_keeps_only_the_headers_given_with_it() {
        let stored = vec![("authorization".to_string(), "Bearer s".to_string())];
        let given = vec![("x-shop".to_string(), "7".to_string())];
        assert_eq!(headers_after_change(stored.clone(), None, false), stored);
        assert_eq!(headers_after_change(stored.clone(), None, true), vec![]);
        let changed = headers_after_change(stored.clone(), Some(given.clone()), true);
        assert_eq!(changed, given);
        assert_eq!(
            headers_after_change(stored, Some(given.clone()), false),
            given
        );
    }

    #[test]
    fn credentials_are_withheld_from_view() {
        for name in [
            "authorization",
            "Cookie",
            "x-api-key",
            "x-auth-token",
            "client_secret",
        ] {
            assert_eq!(shown_value(name, "s3cr3t"), "(withheld)", "{name}");
        }
        assert_eq!(shown_value("x-merchant-ref", "m-7"), "m-7");
    }

    #[test]
    fn refuses_reserved_and_invalid_headers() {
        for (n, v) in [
            ("Webhook-Signature", "x"),
            ("Transfer-Encoding", "chunked"),
            ("Host", "a"),
            ("bad name", "x"),
            ("x-a", "line\nbreak"),
            ("x-a", "caf\u{e9}"),
        ] {
            let err = one(n, v).unwrap_err();
            assert!(err.field.starts_with("headers."), "{n}");
        }
        assert!(ExtraHeaders::parse(vec![("x-a".into(), "b".into()); MAX_HEADERS + 1]).is_err());
    }
}
