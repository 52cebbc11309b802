//! `events.schema_dir`: a JSON Schema per topic, one file each (`payment.succeeded.json`
//! holds the schema of the topic `payment.succeeded`), read and compiled at start-up (a
//! file that is not a schema stops it, naming the file), and checked at each publish of
//! the topic: a body that does not conform is refused naming where it fails. A schema's
//! references (`$ref`, a `$id` that moves its base) resolve only within the directory:
//! one that leads elsewhere (`../`, an absolute path, a `file://` URL outside it, a
//! symbolic link out of it, `http(s)://`) stops start-up naming the schema file and where
//! it leads, before anything there is read. The JSON Schema meta-schemas
//! (`https://json-schema.org/…`) are built in, and read from nowhere.

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, Context};
use boon::{CompileError, Compiler, SchemaIndex, Schemas, UrlLoader, ValidationError};
use serde_json::Value;

use crate::domain::{FieldError, RawJson, Topic};

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
        let root = std::fs::canonicalize(dir)
            .with_context(|| format!("{KEY}: cannot read {}", dir.display()))?;
        let mut compiler = Compiler::new();
        compiler.use_loader(Box::new(WithinDir(root.clone())));
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
            // Where it is in the directory: a link out of it is refused as a reference is.
            let absolute = root.join(path.file_name().unwrap_or_default());
            let index = compiler
                .compile(&absolute.to_string_lossy(), &mut loaded.schemas)
                .map_err(|e| compile_error(&path, &e))?;
            loaded.by_topic.insert(topic, index);
        }
        Ok(loaded)
    }

    /// The topics that have a schema.
    pub fn topics(&self) -> impl Iterator<Item = &Topic> {
        self.by_topic.keys()
    }

    /// Refuses a `body` of `topic` that its schema does not accept, naming the first
    /// place that fails (`body`, then its JSON pointer: `body/items/0/amount`), or that
    /// holds what the schema cannot read as a value (a number beyond a double's range, a
    /// lone surrogate). A body of a topic without a schema is not read at all.
    pub fn check(&self, topic: &Topic, body: &RawJson) -> Result<(), FieldError> {
        let Some(index) = self.by_topic.get(topic) else {
            return Ok(());
        };
        let value = body.value("body").map_err(|e| {
            let why = format!("{}: the schema of `{topic}` cannot read it", e.message);
            FieldError::new(e.field, why)
        })?;
        self.schemas
            .validate(&value, *index)
            .map_err(|e| refusal(topic, &e))
    }
}

/// Why the schema file at `path` was refused: a reference that leads out of the
/// directory, named by where it leads, or what makes it no JSON Schema.
fn compile_error(path: &Path, e: &CompileError) -> anyhow::Error {
    match e {
        CompileError::LoadUrlError { url, src } if src.is::<Outside>() => anyhow!(
            "{KEY}: {} refers to {url}{src}: a schema's references resolve only within \
             the directory",
            path.display()
        ),
        e => anyhow!("{KEY}: {} is not a JSON Schema: {e:#}", path.display()),
    }
}

/// What a schema may read: files in the directory `.0` (canonical), once symbolic links
/// are followed, and nothing else (no other place on disk, no network).
struct WithinDir(PathBuf);

/// A reference refused for leading out of the directory: of a symbolic link, where it
/// leads.
#[derive(Debug)]
struct Outside(Option<PathBuf>);

impl fmt::Display for Outside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str(", outside the directory"),
            Some(real) => write!(f, ", a link to {}, outside the directory", real.display()),
        }
    }
}

impl Error for Outside {}

impl UrlLoader for WithinDir {
    fn load(&self, url: &str) -> Result<Value, Box<dyn Error>> {
        let path = url::Url::parse(url)
            .ok()
            .filter(|u| u.scheme() == "file")
            .and_then(|u| u.to_file_path().ok())
            .ok_or(Outside(None))?;
        // Checked as written before anything is read, then again where links lead.
        if !self.holds(&path) {
            return Err(Outside(None).into());
        }
        let real = std::fs::canonicalize(&path)?;
        if !self.holds(&real) {
            return Err(Outside(Some(real)).into());
        }
        let file = std::fs::File::open(real)?;
        Ok(serde_json::from_reader(std::io::BufReader::new(file))?)
    }
}

impl WithinDir {
    /// Whether `path` names a place inside the directory without going up (`..`).
    fn holds(&self, path: &Path) -> bool {
        let plain = path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        plain && path.starts_with(&self.0)
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
    use serde_json::value::RawValue;

    /// `text` as a body is sent.
    fn text(text: &str) -> RawJson {
        RawJson::new(RawValue::from_string(text.to_string()).unwrap())
    }

    fn raw(value: Value) -> RawJson {
        text(&value.to_string())
    }

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
        assert!(schemas.check(&paid, &raw(json!({"order": 1}))).is_ok());
        let e = schemas
            .check(&paid, &raw(json!({"order": "one"})))
            .unwrap_err();
        assert_eq!(e.field, "body/order", "{e:?}");
        let e = schemas
            .check(&paid, &raw(json!({"order": 1, "items": [{"amount": "x"}]})))
            .unwrap_err();
        assert_eq!(e.field, "body/items/0/amount", "{e:?}");
        let other = Topic::parse("refund.created", "topic").unwrap();
        assert!(
            schemas.check(&other, &raw(json!("anything"))).is_ok(),
            "no schema: anything goes"
        );
        for (unreadable, field) in [
            ("[1e400]", "body/0"),
            (r#"{"a/b": {"s": "\ud800"}}"#, "body/a~1b/s"),
        ] {
            let e = schemas.check(&paid, &text(unreadable)).unwrap_err();
            assert_eq!(e.field, field, "{e:?}");
            assert!(e.message.contains("payment.succeeded"), "{e:?}");
            assert!(
                schemas.check(&other, &text(unreadable)).is_ok(),
                "no schema: not read"
            );
        }

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

    /// A directory of schemas beside a directory `outside` that holds a schema too.
    fn dirs() -> (tempfile::TempDir, std::path::PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("any.json"), r#"{"type": "object"}"#).unwrap();
        let dir = root.path().join("schemas");
        std::fs::create_dir_all(dir.join("defs")).unwrap();
        (root, dir)
    }

    #[test]
    fn a_ref_within_the_directory_is_followed() {
        let (_root, dir) = dirs();
        let money = json!({"type": "object", "required": ["amount"],
            "properties": {"amount": {"type": "integer"}}});
        std::fs::write(dir.join("defs/money.json"), money.to_string()).unwrap();
        let schema = json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "properties": {"total": {"$ref": "defs/money.json"}}});
        std::fs::write(dir.join("payment.succeeded.json"), schema.to_string()).unwrap();
        let schemas = EventSchemas::load(Some(&dir)).unwrap();
        let paid = Topic::parse("payment.succeeded", "topic").unwrap();
        assert!(schemas
            .check(&paid, &raw(json!({"total": {"amount": 5}})))
            .is_ok());
        let e = schemas
            .check(&paid, &raw(json!({"total": {"amount": "5"}})))
            .unwrap_err();
        assert_eq!(e.field, "body/total/amount", "{e:?}");
    }

    #[test]
    fn a_ref_that_reaches_outside_the_directory_stops_start_up_naming_it() {
        let (root, dir) = dirs();
        let outside = root.path().join("outside/any.json");
        std::os::unix::fs::symlink(&outside, dir.join("defs/link.json")).unwrap();
        let absolute = outside.to_str().unwrap().to_string();
        for reference in [
            "../outside/any.json".to_string(),
            "defs/../../outside/any.json".to_string(),
            "defs/%2e%2e/%2e%2e/outside/any.json".to_string(),
            absolute.clone(),
            format!("file://{absolute}"),
            "defs/link.json".to_string(),
            "https://schemas.example/any.json".to_string(),
            "http://127.0.0.1:1/any.json".to_string(),
        ] {
            let schema = json!({"properties": {"x": {"$ref": reference}}});
            std::fs::write(dir.join("a.b.json"), schema.to_string()).unwrap();
            let e = format!("{:#}", EventSchemas::load(Some(&dir)).unwrap_err());
            assert!(
                e.contains("events.schema_dir") && e.contains("a.b.json") && e.contains("outside"),
                "{reference}: {e}"
            );
            let target = if reference.starts_with("http") {
                "any.json"
            } else {
                "outside/any.json"
            };
            assert!(e.contains(target), "names where it leads: {reference}: {e}");
        }
        std::fs::remove_file(dir.join("a.b.json")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("a.b.json")).unwrap();
        let e = format!("{:#}", EventSchemas::load(Some(&dir)).unwrap_err());
        assert!(
            e.contains("a link to") && e.contains("outside/any.json"),
            "{e}"
        );
        std::fs::remove_file(dir.join("a.b.json")).unwrap();
        let escaping_id = json!({"$id": format!("file://{}/", root.path().join("outside").display()),
            "$ref": "any.json"});
        std::fs::write(dir.join("a.b.json"), escaping_id.to_string()).unwrap();
        let e = format!("{:#}", EventSchemas::load(Some(&dir)).unwrap_err());
        assert!(e.contains("a.b.json") && e.contains("outside"), "{e}");
    }
}
