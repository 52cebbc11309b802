//! Reading the settings: defaults, then the TOML file (`--config PATH`), then
//! environment variables `POSTBACK_<SECTION>_<KEY>`; a value that cannot be read is
//! named as the file and the variable name it.

use std::path::Path;

use anyhow::bail;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;

use super::Settings;

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
    figment.merge(env_provider()).extract().map_err(named_error)
}

fn env_provider() -> Env {
    Env::prefixed("POSTBACK_")
        .filter(|key| {
            let key = key.as_str().to_ascii_lowercase();
            SECTIONS.iter().any(|s| key.starts_with(&format!("{s}_")))
        })
        .map(|key| key.as_str().replacen('_', ".", 1).into())
}

/// A setting that could not be read, named as the configuration file and the
/// environment variable (where one can address it) would name it:
/// `delivery.jitter (POSTBACK_DELIVERY_JITTER)`.
pub(super) fn named_error(e: figment::Error) -> anyhow::Error {
    let key = e.path.join(".").to_ascii_lowercase();
    let source = e.metadata.as_ref().map(|m| m.name.to_string());
    let section = key.split('.').next().unwrap_or_default();
    let name = match SECTIONS.contains(&section) {
        true => format!(
            "{key} (POSTBACK_{})",
            key.replace('.', "_").to_ascii_uppercase()
        ),
        false => key.clone(),
    };
    let place = match (key.is_empty(), source) {
        (true, _) => String::new(),
        (false, Some(source)) => format!("{name} in {source}: "),
        (false, None) => format!("{name}: "),
    };
    anyhow::anyhow!("invalid configuration: {place}{}", e.kind)
}
