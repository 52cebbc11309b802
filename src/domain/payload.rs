//! `Payload`: the exact bytes a notification sends and their content type. A JSON value
//! is sent as compact JSON; a string is sent as it is.

use serde_json::Value;

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

    /// From the `body` field of a request: any JSON value but `null`.
    pub fn from_json(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::Null => Err(FieldError::new(
                "body",
                "required: a JSON value or a string",
            )),
            Value::String(text) => Ok(Self {
                body: text,
                content_type: TEXT,
            }),
            other => Ok(Self {
                body: other.to_string(),
                content_type: JSON,
            }),
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
    use serde_json::json;

    #[test]
    fn json_is_compact_and_strings_are_verbatim() {
        let p = Payload::from_json(json!({"a": [1, 2]})).unwrap();
        assert_eq!((p.body(), p.content_type()), ("{\"a\":[1,2]}", JSON));
        let p = Payload::from_json(json!("trade_no=1&x=2")).unwrap();
        assert_eq!((p.body(), p.content_type()), ("trade_no=1&x=2", TEXT));
        assert!(Payload::from_json(Value::Null).is_err());
    }
}
