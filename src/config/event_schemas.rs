//! `events.schema_dir`: a JSON Schema per topic, one file each (`payment.succeeded.json`
//! holds the schema of the topic `payment.succeeded`), read and compiled at start-up (a
//! file that is not a schema stops it, naming the file), and checked at each publish of
//! the topic: a body that does not conform is refused naming where it fails.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Context};
use boon::{Compiler, SchemaIndex, Schemas, ValidationError};
use serde_json::Value;

use crate::domain::{FieldError, Topic};

const KEY: &str = "events.schema_dir (POSTBACK_EVENTS_SCHEMA_DIR)";

/// The compiled schemas, by topic.
#[derive(Default)]
pub struct EventSchemas {
    schemas: Schemas,
    by_topic: BTreeMap<Topic, SchemaIndex>,
}

impl std::fmt::Debug for EventSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_topic.keys()).finish()
    }
}

impl EventSchemas {
    /// Every `<topic>.json` of `dir` (none: no schemas).
    pub fn load(dir: Option<&Path>) -> anyhow::Result<Self> {
        let mut loaded = Self::default();
        let Some(dir) = dir else { return Ok(loaded) };
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("{KEY}: cannot read {}", dir.display()))?;
        let mut compiler = Compiler::new();
        for entry in entries {
            let path = entry
                .with_context(|| format!("{KEY}: cannot read {}", dir.display()))?
                .path();
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let topic = Topic::parse(stem, "topic").map_err(|e| {
                anyhow!(
                    "{KEY}: {} does not name a topic: {}",
                    path.display(),
                    e.message
                )
            })?;
            let absolute = std::fs::canonicalize(&path)
                .with_context(|| format!("{KEY}: cannot read {}", path.display()))?;
            let index = compiler
                .compile(&absolute.to_string_lossy(), &mut loaded.schemas)
                .map_err(|e| anyhow!("{KEY}: {} is not a JSON Schema: {e}", path.display()))?;
            loaded.by_topic.insert(topic, index);
        }
        Ok(loaded)
    }

    /// The topics that have a schema.
    pub fn topics(&self) -> impl Iterator<Item = &Topic> {
        self.by_topic.keys()
    }

    /// Refuses a `body` of `topic` that its schema does not accept, naming the first
    /// place that fails (`body`, then its JSON pointer: `body/items/0/amount`).
    pub fn check(&self, topic: &Topic, body: &Value) -> Result<(), FieldError> {
        let Some(index) = self.by_topic.get(topic) else {
            return Ok(());
        };
        self.schemas
            .validate(body, *index)
            .map_err(|e| refusal(topic, &e))
    }
}

/// The error of the first failing place: the deepest first cause.
fn refusal(topic: &Topic, e: &ValidationError) -> FieldError {
    let mut at = e;
    while let Some(first) = at.causes.first() {
        at = first;
    }
    FieldError::new(
        format!("body{}", at.instance_location),
        format!("does not match the schema of `{topic}`: {}", at.kind),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_body_is_held_to_its_topics_schema_and_a_bad_schema_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let schema = json!({"type": "object", "required": ["order"],
            "properties": {"order": {"type": "integer"}, "items": {"type": "array", "items": {"type": "object", "properties": {"amount": {"type": "number"}}}}}});
        std::fs::write(
            dir.path().join("payment.succeeded.json"),
            schema.to_string(),
        )
        .unwrap();
        std::fs::write(dir.path().join("README.txt"), "not a schema").unwrap();
        let schemas = EventSchemas::load(Some(dir.path())).unwrap();
        let paid = Topic::parse("payment.succeeded", "topic").unwrap();
        assert!(schemas.check(&paid, &json!({"order": 1})).is_ok());
        let e = schemas.check(&paid, &json!({"order": "one"})).unwrap_err();
        assert_eq!(e.field, "body/order", "{e:?}");
        let e = schemas
            .check(&paid, &json!({"order": 1, "items": [{"amount": "x"}]}))
            .unwrap_err();
        assert_eq!(e.field, "body/items/0/amount", "{e:?}");
        let other = Topic::parse("refund.created", "topic").unwrap();
        assert!(
            schemas.check(&other, &json!("anything")).is_ok(),
            "no schema: anything goes"
        );

        std::fs::write(dir.path().join("refund.created.json"), "{\"type\": 7}").unwrap();
        let e = EventSchemas::load(Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("events.schema_dir") && e.contains("refund.created.json"),
            "{e}"
        );
        std::fs::remove_file(dir.path().join("refund.created.json")).unwrap();
        std::fs::write(dir.path().join("not a topic.json"), "{}").unwrap();
        let e = EventSchemas::load(Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not name a topic"), "{e}");
    }
}
