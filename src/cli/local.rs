//! The commands that need no running instance: `serve` itself, `config check`, `config
//! signing`, `token new`, `signing-key new` and `completions`.

use std::path::PathBuf;

use clap::CommandFactory;

use super::{print, Cli};
use crate::config::{Config, RedisTarget, StoreTarget};
use crate::domain::Tenant;
use crate::tenancy::access::{self, Role, Scope};

/// Runs an instance until SIGTERM or Ctrl-C.
pub(super) fn serve(path: Option<PathBuf>, insecure_no_auth: bool) -> anyhow::Result<()> {
    let config = Config::load(path.as_deref(), insecure_no_auth)?;
    crate::delivery::sender::install_crypto_provider();
    let export =
        crate::observability::telemetry::init(&config.settings.log, &config.settings.traces)?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    match config.settings.server.worker_threads {
        0 => &mut runtime,
        n => runtime.worker_threads(n),
    };
    let served = runtime
        .enable_all()
        .build()?
        .block_on(crate::app::serve(config));
    if let Some(export) = export {
        export.shutdown();
    }
    served
}

/// Brings the configured Postgres database's schema up to this build's version.
pub(super) fn migrate(path: Option<PathBuf>) -> anyhow::Result<()> {
    let config = Config::load(path.as_deref(), true)?;
    let StoreTarget::Postgres(url) = &config.store else {
        anyhow::bail!("store.postgres_url (POSTBACK_STORE_POSTGRES_URL): not set; only a Postgres store has a schema to migrate");
    };
    let s = &config.settings;
    let migrated = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(crate::store::PostgresStore::migrate(url, &s.store))?;
    eprintln!("postback: {}", migration_done(&migrated));
    Ok(())
}

/// What `migrate` did, in one line: created the schema, upgraded it, or nothing.
fn migration_done(m: &crate::store::Migrated) -> String {
    let version = m.version;
    match m.applied.first() {
        None => format!("the schema postback is at version {version} already: nothing to do"),
        Some(1) => format!("created the schema postback at version {version}"),
        Some(_) => {
            let applied: Vec<String> = m.applied.iter().map(i32::to_string).collect();
            format!(
                "upgraded the schema postback to version {version} (applied {})",
                applied.join(", ")
            )
        }
    }
}

/// Prints the settings with their secrets redacted, or says what is wrong.
pub(super) fn check_config(path: Option<PathBuf>, insecure_no_auth: bool) -> anyhow::Result<()> {
    let config = Config::load(path.as_deref(), insecure_no_auth)?;
    print!("{}", toml::to_string(&config.settings.redacted())?);
    let store = match config.store {
        StoreTarget::Embedded(_) => "the embedded store",
        StoreTarget::Redis(RedisTarget::Standalone(_)) => "Redis",
        StoreTarget::Redis(RedisTarget::Cluster(_)) => "a Redis Cluster",
        StoreTarget::Redis(RedisTarget::Sentinel(_)) => "Redis through Sentinel",
        StoreTarget::Postgres(_) => "Postgres",
    };
    eprintln!(
        "postback: the configuration is valid: {store}, {} shard(s), {} tenant(s)",
        config.shards,
        config.tenants.len()
    );
    Ok(())
}

/// Prints what verifies `tenant`'s deliveries: its secrets and public keys.
pub(super) fn print_signing(tenant: &str, path: Option<PathBuf>) -> anyhow::Result<()> {
    let tenant = Tenant::parse(tenant, "tenant").map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let config = Config::load(path.as_deref(), true)?;
    let signer = config.signer()?;
    let keys = signer.keys_of(&tenant);
    for secret in &keys.secrets {
        println!("secret {}", secret.expose());
    }
    for key in &keys.keys {
        println!("public_key {}", key.public_key());
    }
    if keys.secrets.is_empty() && keys.keys.is_empty() {
        eprintln!("postback: nothing signs {tenant}'s deliveries: no secret or key is configured");
    }
    Ok(())
}

/// Prints the completion script of `shell`.
pub(super) fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "postback", &mut script);
    print::emit(&String::from_utf8(script)?)
}

/// Prints a fresh token and the `[tokens.<name>]` lines that accept it.
pub(super) fn new_token(name: &str, tenant: &str, roles: &[Role]) -> anyhow::Result<()> {
    let bare_key = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    anyhow::ensure!(
        bare_key,
        "--name `{name}`: use letters, digits, `-` and `_` (it becomes [tokens.{name}])"
    );
    Scope::parse(tenant).map_err(|e| anyhow::anyhow!("--tenant {e}"))?;
    let token = access::new_token()?;
    let roles: Vec<String> = roles.iter().map(|r| format!("\"{}\"", r.name())).collect();
    print::emit(&format!("{token}\n"))?;
    eprintln!("\nThe token above is shown once: hand it to its caller and keep no copy.");
    eprintln!("Add these lines to the configuration file:\n");
    eprintln!("[tokens.{name}]");
    eprintln!("sha256 = \"{}\"", access::digest_hex(&token));
    eprintln!("tenant = \"{tenant}\"");
    eprintln!("roles = [{}]", roles.join(", "));
    Ok(())
}

/// Prints a fresh ed25519 signing key and its public half.
pub(super) fn new_signing_key() -> anyhow::Result<()> {
    let (key, public) = crate::delivery::signing::SigningKey::generate()?;
    print::emit(&format!("{key}\n"))?;
    eprintln!(
        "\nThe signing key above is shown once: put it in the configuration and keep no copy."
    );
    eprintln!("Add it to `keys` of a [tenants.<name>] section, or to [signing] keys for every");
    eprintln!("tenant without its own. Its public key, which GET /signing-keys publishes:\n");
    eprintln!("{public}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Migrated;

    #[test]
    fn migrate_says_whether_it_created_upgraded_or_left_the_schema() {
        let said = |applied: &[i32]| {
            migration_done(&Migrated {
                applied: applied.to_vec(),
                version: 6,
            })
        };
        assert_eq!(
            said(&[1, 2, 3, 4, 5, 6]),
            "created the schema postback at version 6"
        );
        assert_eq!(
            said(&[5, 6]),
            "upgraded the schema postback to version 6 (applied 5, 6)"
        );
        assert_eq!(
            said(&[]),
            "the schema postback is at version 6 already: nothing to do"
        );
    }
}
