//! Reading the settings: defaults, then the TOML file (`--config PATH`), then
//! environment variables `POSTBACK_<SECTION>_<KEY>`; a value that cannot be read is
//! named as the file and the variable name it, and every key no setting has is named at
//! once, each with the key it most likely meant.

use std::path::Path;

use anyhow::bail;
use figment::error::{Actual, Kind};
use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::Value;
use figment::{Figment, Source};

use super::Settings;
use crate::domain::DURATION_FORM;

/// Sections that environment variables may address (`POSTBACK_<SECTION>_<KEY>`).
const SECTIONS: &[&str] = &[
    "server",
    "store",
    "delivery",
    "retention",
    "signing",
    "log",
    "metrics",
    "traces",
    "ops",
    "endpoints",
    "events",
    "schedules",
    "quotas",
    "secrets",
];
// `tokens` and `tenants` nest one level deeper (`[tokens.<name>]`), which one `_` cannot
// address: they are written in the file.

/// The settings from the defaults, the file at `path` if given, and the environment.
pub(super) fn read(path: Option<&Path>) -> anyhow::Result<Settings> {
    let mut figment = Figment::from(Serialized::defaults(Settings::default()));
    if let Some(path) = path {
        if !path.exists() {
            bail!("config file {} does not exist", path.display());
        }
        figment = figment.merge(Toml::file(path));
    }
    extract(&figment.merge(env_provider()))
}

/// How many problems one reading names at most.
const MAX_PROBLEMS: usize = 20;

/// The settings `figment` holds, or what is wrong with them: every key no setting has
/// and every value that cannot be read, in as many readings, since a reading stops at
/// the first problem in key order (not the file's). Each reading after a problem leaves
/// out the key no setting has, or reads the value as its default; a value without one
/// (a setting under a name of the user's choosing) ends the search.
pub(super) fn extract(figment: &Figment) -> anyhow::Result<Settings> {
    let defaults = Figment::from(Serialized::defaults(Settings::default()));
    let mut reading = figment.clone();
    let mut problems = Vec::new();
    while problems.len() < MAX_PROBLEMS {
        let mut e = match reading.extract::<Settings>() {
            Ok(settings) if problems.is_empty() => return Ok(settings),
            Ok(_) => break,
            Err(e) => e,
        };
        let key = e.path.join(".");
        let next = match e.kind {
            Kind::UnknownField(..) => changed(&reading, &e.path, None),
            _ => defaults
                .find_value(&key)
                .ok()
                .and_then(|default| changed(&reading, &e.path, Some(default))),
        };
        e.metadata = figment.find_metadata(&key).cloned().or(e.metadata);
        problems.push(named_error(e).to_string());
        match next {
            Some(next) => reading = next,
            None => break,
        }
    }
    bail!("{}", problems.join("\n"))
}

/// `figment` with the value at `path` replaced by `value`, or removed; `None` when it
/// holds none there.
fn changed(figment: &Figment, path: &[String], value: Option<Value>) -> Option<Figment> {
    let mut root = figment.find_value("").ok()?;
    replace(&mut root, path, value).then(|| Figment::from(Serialized::defaults(root)))
}

/// Replaces the value at `path` under `at` by `value`, or removes it; whether there was
/// one.
fn replace(at: &mut Value, path: &[String], value: Option<Value>) -> bool {
    match (at, path) {
        (Value::Dict(_, dict), [name]) if dict.contains_key(name) => {
            match value {
                Some(value) => dict.insert(name.clone(), value),
                None => dict.remove(name),
            };
            true
        }
        (Value::Dict(_, dict), [name, rest @ ..]) if !rest.is_empty() => dict
            .get_mut(name)
            .is_some_and(|inner| replace(inner, rest, value)),
        _ => false,
    }
}

fn env_provider() -> Env {
    Env::prefixed("POSTBACK_")
        .filter(|key| {
            let key = key.as_str().to_ascii_lowercase();
            SECTIONS.iter().any(|s| key.starts_with(&format!("{s}_")))
        })
        .map(|key| key.as_str().replacen('_', ".", 1).into())
}

/// A setting that could not be read, named by its key and where it came from: the file
/// (by its path), or the environment variable that set it:
/// `delivery.jitter in /etc/postback.toml`, `delivery.jitter (from POSTBACK_DELIVERY_JITTER)`.
pub(super) fn named_error(e: figment::Error) -> anyhow::Error {
    let key = e.path.join(".").to_ascii_lowercase();
    let place = match (&e.metadata, key.is_empty()) {
        (_, true) => String::new(),
        (Some(m), false) if m.name.contains("environment") => format!(
            "{key} (from POSTBACK_{}): ",
            key.replace('.', "_").to_ascii_uppercase()
        ),
        (Some(m), false) => match &m.source {
            Some(Source::File(path)) => format!("{key} in {}: ", path.display()),
            _ => format!("{key}: "),
        },
        (None, false) => format!("{key}: "),
    };
    anyhow::anyhow!("invalid configuration: {place}{}", problem(&e.kind, &key))
}

/// What is wrong with the value at `key`, in postback's words where the parser's would
/// confuse.
fn problem(kind: &Kind, key: &str) -> String {
    match kind {
        Kind::UnknownField(name, known) => {
            let section = key.rsplit_once('.').map_or("the file", |(s, _)| s);
            let meant = meant(name, known)
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            format!(
                "no such key{meant}; those of {section} are {}",
                known.join(", ")
            )
        }
        Kind::InvalidValue(Actual::Str(value), expected) if expected == "a duration" => {
            format!("`{value}` is not a duration: {DURATION_FORM}")
        }
        Kind::InvalidType(actual, expected) => {
            format!("{} is not {}", shown(actual), wanted(expected))
        }
        other => other.to_string(),
    }
}

/// The key of `known` most like `name` (`tenants` for `tenant`, `listen` for `lisen`),
/// if one is like it.
fn meant<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::jaro(name, k), *k))
        .filter(|(likeness, _)| *likeness > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// A value as it was written (`10`, `abc`), or what it was when it has no short form.
fn shown(actual: &Actual) -> String {
    match actual {
        Actual::Bool(b) => format!("`{b}`"),
        Actual::Unsigned(n) => format!("`{n}`"),
        Actual::Signed(n) => format!("`{n}`"),
        Actual::Float(n) => format!("`{n}`"),
        Actual::Char(c) => format!("`{c}`"),
        Actual::Str(s) => format!("`{s}`"),
        other => other.to_string(),
    }
}

/// What a setting takes, in words rather than Rust's type names.
fn wanted(expected: &str) -> String {
    match expected {
        "a duration" => format!("a duration: {DURATION_FORM}"),
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" | "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        other => other.into(),
    }
}
