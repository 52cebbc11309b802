//! Idempotency, decided once for every entry point (`POST /notify`, its batch, events,
//! `postback.notify()`) and every store: what a producer's key may be
//! (`IdempotencyKey`), and what a repeat of it is held to (`Fingerprint`). Whose key it
//! is comes from its tenant, kept beside it by structure (`store::Idempotency`).

use std::sync::LazyLock;

use regex::Regex;
use sha2::{Digest, Sha256};

use super::json::canonical_json;
use super::FieldError;

/// A producer's idempotency key: 1 to 255 visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

static PATTERN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(IdempotencyKey::PATTERN).expect("a valid pattern"));

impl IdempotencyKey {
    /// The rule as a regular expression, which postback evaluates here and Postgres in
    /// `postback.notify()` (it is written into `postback.intake_rules` at start-up), so
    /// that the two cannot disagree.
    pub const PATTERN: &'static str = "^[!-~]{1,255}$";
    /// The rule as an error says it.
    pub const RULE: &'static str = "must be 1 to 255 visible ASCII characters";

    /// Validates `raw` as sent; errors are reported against `field`.
    pub fn parse(raw: &str, field: &str) -> Result<Self, FieldError> {
        match PATTERN.is_match(raw) {
            true => Ok(Self(raw.to_string())),
            false => Err(FieldError::new(field, Self::RULE)),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// What a repeated idempotency key is held to: `j` and the first 16 bytes of the
/// SHA-256 of the request's canonical JSON text (`json::canonical_json`), in hex. A
/// request that is not JSON (an internal key's text) is hashed as it is. Postgres
/// computes the same of a `jsonb` request: `'j' || encode(substr(sha256(convert_to(
/// request::text, 'UTF8')), 1, 16), 'hex')`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Marks the form: fingerprints of earlier builds (32 hex digits, of the bytes as
    /// sent) never start with it.
    const FORM: &'static str = "j";

    /// The fingerprint of `request` (a request without its idempotency key).
    pub fn of_request(request: &[u8]) -> Self {
        let digest = match canonical_json(request) {
            Some(canonical) => Sha256::digest(canonical.as_bytes()),
            None => Sha256::digest(request),
        };
        Self(format!(
            "{}{}",
            Self::FORM,
            crate::tenancy::access::hex(&digest[..16])
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether a repeat with this fingerprint is refused by the one kept with its key:
    /// kept in this form and different. One kept by an earlier build (another form, or
    /// none) answers its notification whatever the request.
    pub fn refuses(&self, kept: Option<&str>) -> bool {
        kept.is_some_and(|kept| kept.starts_with(Self::FORM) && kept != self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_without_spaces_up_to_255() {
        for ok in ["order-42", "a", "~!#:;", &"k".repeat(255)] {
            assert_eq!(IdempotencyKey::parse(ok, "k").unwrap().as_str(), ok);
        }
        for bad in [
            "",
            "a b",
            "a\tb",
            " a",
            "a\n",
            "café",
            "a\u{0}",
            &"k".repeat(256),
        ] {
            let e = IdempotencyKey::parse(bad, "idempotency_key").unwrap_err();
            assert_eq!(
                (e.field.as_str(), e.message.as_str()),
                ("idempotency_key", IdempotencyKey::RULE)
            );
        }
    }

    /// The pattern says what the byte rule says, for every byte.
    #[test]
    fn the_pattern_is_visible_ascii() {
        for b in 0u8..=127 {
            let text = (b as char).to_string();
            assert_eq!(
                IdempotencyKey::parse(&text, "k").is_ok(),
                b.is_ascii_graphic(),
                "{b}"
            );
        }
    }

    #[test]
    fn a_request_has_one_fingerprint_whatever_its_spacing_or_field_order() {
        let a = Fingerprint::of_request(br#"{"url":"u","body":{"a":1,"b":10.10}}"#);
        let b = Fingerprint::of_request(b"{ \"body\" : {\"b\":10.10, \"a\":1}, \"url\":\"u\" }");
        assert_eq!(a, b);
        assert_ne!(
            a,
            Fingerprint::of_request(br#"{"url":"u","body":{"a":1,"b":10.1}}"#)
        );
        assert_eq!(a.as_str().len(), 33);
    }

    #[test]
    fn only_a_fingerprint_of_this_form_refuses() {
        let mine = Fingerprint::of_request(b"{}");
        let other = Fingerprint::of_request(b"[]");
        assert!(mine.refuses(Some(other.as_str())));
        assert!(!mine.refuses(Some(mine.as_str())));
        assert!(
            !mine.refuses(Some("0123456789abcdef0123456789abcdef")),
            "an earlier build's"
        );
        assert!(!mine.refuses(None));
    }
}
