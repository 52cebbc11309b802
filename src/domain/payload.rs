//! `Payload`: the exact bytes a notification sends and their content type. A body sent
//! as a JSON value is delivered as the producer wrote it (its bytes, from the value's
//! first character to its last: numbers, key order and spacing within it kept); a JSON
//! string is delivered as its text.

use serde::Serialize;
use serde_json::value::RawValue;

use super::FieldError;

pub const JSON: &str = "application/json";
pub const TEXT: &str = "text/plain; charset=utf-8";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    body: String,
    content_type: &'static str,
}

impl Payload {
    /// The content type of a JSON body.
    pub const JSON_CONTENT_TYPE: &'static str = JSON;

    /// From the `body` field of a request as sent: any JSON value but `null`.
    pub fn from_raw(raw: &RawValue) -> Result<Self, FieldError> {
        let text = raw.get();
        match text.as_bytes().first() {
            Some(b'"') => {
                let text: String = serde_json::from_str(text)
                    .map_err(|_| FieldError::new("body", "not a valid JSON string"))?;
                Ok(Self {
                    body: text,
                    content_type: TEXT,
                })
            }
            _ if text == "null" => Err(FieldError::new(
                "body",
                "required: a JSON value or a string",
            )),
            _ => Ok(Self {
                body: text.to_string(),
                content_type: JSON,
            }),
        }
    }

    /// postback's own JSON body (`ops_events`): `value` written compactly.
    pub fn json(value: &impl Serialize) -> Self {
        Self {
            body: serde_json::to_string(value).expect("a JSON value serializes"),
            content_type: JSON,
        }
    }

    pub fn body(&self) -> &str {
        &self.body
    }

    pub fn content_type(&self) -> &'static str {
        self.content_type
    }

    pub fn into_parts(self) -> (String, &'static str) {
        (self.body, self.content_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    #[test]
    fn json_is_kept_as_written_and_strings_are_their_text() {
        let written = "{\"z\": -0, \"a\":[1.0, 1E+2],\n \"n\":12345678901234567890123}";
        let p = Payload::from_raw(&raw(written)).unwrap();
        assert_eq!((p.body(), p.content_type()), (written, JSON));
        let p = Payload::from_raw(&raw("\"trade_no=1&x=2 \\u00e9\"")).unwrap();
        assert_eq!((p.body(), p.content_type()), ("trade_no=1&x=2 é", TEXT));
        assert!(Payload::from_raw(&raw("null")).is_err());
    }
}
