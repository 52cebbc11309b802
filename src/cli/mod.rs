//! The `postback` command line: `serve` runs the service, `config check` checks its
//! configuration, `config signing` prints what verifies a tenant's deliveries,
//! `token new` makes an API token, `signing-key new` an ed25519 signing
//! key, `receive` is a receiver to try it
//! against, `completions` prints a shell's completion script; the other commands are the
//! operator's client of a running instance's API (`notify`, also `--batch` from a file,
//! `status`, `list`, `cancel`, `stats`, `dlq list|show|replay|discard|purge`, `audit`),
//! printing readable tables or, with `--json`, the API's JSON answer.

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use clap::{Args, CommandFactory, Parser, Subcommand};
use serde_json::{json, Map, Value};

use crate::access::{self, Role, Scope};
use crate::config::{Config, RedisTarget, StoreTarget};
use crate::domain::Tenant;

mod batch;
mod client;
mod print;
mod receive;

use client::Client;

#[derive(Parser)]
#[command(
    name = "postback",
    version,
    about = "Webhook notification dispatcher with tiered retries"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API, the scheduler and the sender pool.
    Serve {
        /// TOML configuration file; `POSTBACK_<SECTION>_<KEY>` variables override it.
        #[arg(long, env = "POSTBACK_CONFIG")]
        config: Option<PathBuf>,
        /// Serve the API without bearer tokens (development only).
        #[arg(long)]
        insecure_no_auth: bool,
    },
    /// Register a notification.
    Notify(NotifyArgs),
    /// Show a notification, by id or by its idempotency key: state, attempts, next
    /// attempt and history.
    Status {
        #[arg(required_unless_present = "key")]
        id: Option<String>,
        /// The Idempotency-Key it was registered with (kept for idempotency_ttl).
        #[arg(long, conflicts_with = "id")]
        key: Option<String>,
        /// The tenant of the key (a token for every tenant only; default `default`).
        #[arg(long, requires = "key")]
        tenant: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Browse the queue: the notifications in one state, pending ones soonest due
    /// first, finished ones newest first.
    List {
        /// scheduled, retrying (scheduled after a failed attempt), in_flight, delivered,
        /// dead or cancelled.
        #[arg(long, default_value = "scheduled")]
        state: String,
        #[command(flatten)]
        filter: Filter,
        /// Only the notification registered with this Idempotency-Key.
        #[arg(long)]
        key: Option<String>,
        /// Items per page (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed under the previous page.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Cancel a notification that has not finished.
    Cancel {
        id: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Notifications per state, and what retention deleted.
    Stats {
        /// Only this tenant's (a token for every tenant only).
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Review the dead letters: list, show, replay, discard, purge.
    Dlq {
        #[command(subcommand)]
        command: Dlq,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Who cancelled, replayed, discarded or purged what, newest first.
    Audit {
        /// Only this token's actions (its configured name).
        #[arg(long)]
        actor: Option<String>,
        /// Only this action: cancel, replay, replay_matching, discard, purge.
        #[arg(long)]
        action: Option<String>,
        /// Only actions on this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// At or after (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// At or before (RFC 3339).
        #[arg(long)]
        until: Option<String>,
        /// Items per page (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed under the previous page.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// ed25519 signing keys (`v1a` signatures).
    SigningKey {
        #[command(subcommand)]
        command: SigningKeyCommand,
    },
    /// A receiver to try postback against on one machine: 200 to every request, 503
    /// under /fail; prints each request it gets.
    Receive {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: std::net::SocketAddr,
    },
    /// Check the configuration (the file and `POSTBACK_*` variables) as `serve` would,
    /// without starting.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print the completion script of a shell, e.g.
    /// `postback completions bash > /etc/bash_completion.d/postback`.
    Completions { shell: clap_complete::Shell },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate the configuration; print the effective configuration, with secrets
    /// redacted, as TOML. Exits 1 naming the key of the first problem.
    Check {
        /// TOML configuration file; `POSTBACK_<SECTION>_<KEY>` variables override it.
        #[arg(long, env = "POSTBACK_CONFIG")]
        config: Option<PathBuf>,
        /// Accept a configuration without API tokens, as `serve --insecure-no-auth` does.
        #[arg(long)]
        insecure_no_auth: bool,
    },
    /// Print what verifies a tenant's deliveries, to hand to its merchant: the shared
    /// secrets (`whsec_…`, for `v1` signatures) and the public keys (`whpk_…`, for
    /// `v1a`), its own or derived from the instance's.
    Signing {
        /// The tenant.
        tenant: String,
        /// TOML configuration file; `POSTBACK_<SECTION>_<KEY>` variables override it.
        #[arg(long, env = "POSTBACK_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print a fresh random token once, and the configuration lines that accept it (its
    /// SHA-256, never the token itself).
    New {
        /// The token's name: the actor in the audit log.
        #[arg(long)]
        name: String,
        /// The tenant it acts for, or `*` for every tenant.
        #[arg(long)]
        tenant: String,
        /// What it may do: notify, read, operate, audit (comma-separated).
        #[arg(long, value_delimiter = ',', required = true, value_parser = Role::from_str)]
        roles: Vec<Role>,
    },
}

#[derive(Subcommand)]
enum SigningKeyCommand {
    /// Print a fresh signing key (`whsk_…`, for `signing.keys` or a tenant's `keys`) and
    /// its public key (`whpk_…`, what `GET /signing-keys` will publish).
    New,
}

/// Where the API is and how to talk to it.
#[derive(Args)]
struct ApiArgs {
    /// Base URL of a running postback.
    #[arg(
        long,
        env = "POSTBACK_API_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    api_url: String,
    /// Bearer token of the API.
    #[arg(
        long,
        env = "POSTBACK_API_TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Args)]
struct NotifyArgs {
    /// Callback URL.
    #[arg(long, required_unless_present = "batch")]
    url: Option<String>,
    /// The body as JSON, or @FILE to read it from a file.
    #[arg(long, group = "payload", required_unless_present_any = ["body_text", "batch"])]
    body: Option<String>,
    /// The body as plain text, sent as is, or @FILE.
    #[arg(long, group = "payload")]
    body_text: Option<String>,
    /// Intervals between attempts (`15s,3m,10m`) or a configured schedule's name.
    #[arg(long)]
    schedule: Option<String>,
    /// Before the first attempt (`30s`).
    #[arg(long)]
    delay: Option<String>,
    /// Per-attempt timeout (`10s`).
    #[arg(long)]
    timeout: Option<String>,
    /// Success also needs the trimmed response body to equal this.
    #[arg(long)]
    expect_body: Option<String>,
    /// What counts as delivered, as JSON (`{"json_pointer": "/code", "json_equals":
    /// "SUCCESS"}`), or @FILE.
    #[arg(long)]
    success: Option<String>,
    /// A configured profile (schedule and success rule): `alipay`, `wechatpay`, ….
    #[arg(long)]
    profile: Option<String>,
    /// Attempted one at a time with the others of this key, in registration order.
    #[arg(long)]
    ordering_key: Option<String>,
    /// A label to filter by (`payment.succeeded`).
    #[arg(long)]
    topic: Option<String>,
    /// Rate-limit key; default the URL's host.
    #[arg(long)]
    rate_key: Option<String>,
    /// An extra request header, `Name: value`; repeatable.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Makes the registration safe to repeat.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// The tenant it is for (a token for every tenant only).
    #[arg(long)]
    tenant: Option<String>,
    /// Register every line of FILE (`-`: standard input) instead, each a `POST /notify`
    /// body with an optional `idempotency_key`, 1,000 per request; exits 1 if any is
    /// refused.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["url", "body", "body_text", "schedule", "delay", "timeout", "expect_body", "success", "profile", "ordering_key", "topic", "rate_key", "headers", "idempotency_key", "tenant"])]
    batch: Option<PathBuf>,
    #[command(flatten)]
    api: ApiArgs,
}

/// Which notifications a list or bulk action covers.
#[derive(Args, Default)]
struct Filter {
    /// Only this topic.
    #[arg(long)]
    topic: Option<String>,
    /// The callback URL's host.
    #[arg(long)]
    host: Option<String>,
    /// At or after (RFC 3339): when it was dead-lettered, or for `list` the time the
    /// list is ordered by (next attempt, or finish).
    #[arg(long)]
    since: Option<String>,
    /// At or before (RFC 3339), as --since.
    #[arg(long)]
    until: Option<String>,
    /// Only this tenant's (a token for every tenant only).
    #[arg(long)]
    tenant: Option<String>,
}

#[derive(Subcommand)]
enum Dlq {
    /// Dead letters, newest first.
    List {
        #[command(flatten)]
        filter: Filter,
        /// Items per page (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed under the previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One dead letter with its body and attempt history.
    Show { id: String },
    /// Send one dead letter again (ID), or every one a filter matches (no ID).
    Replay {
        /// The dead letter; without it, the filter (or --all) chooses.
        id: Option<String>,
        #[command(flatten)]
        filter: Filter,
        /// Every dead letter, when no filter is given.
        #[arg(long)]
        all: bool,
        /// A new callback URL (one dead letter only).
        #[arg(long, requires = "id")]
        url: Option<String>,
        /// A new schedule (`1m,10m`) or a configured schedule's name.
        #[arg(long)]
        schedule: Option<String>,
        /// Before the first new attempt.
        #[arg(long)]
        delay: Option<String>,
    },
    /// Delete one dead letter for good.
    Discard { id: String },
    /// Delete every dead letter a filter matches.
    Purge {
        #[command(flatten)]
        filter: Filter,
        /// Every dead letter, when no filter is given.
        #[arg(long)]
        all: bool,
    },
}

/// Parses the command line and runs it; the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            insecure_no_auth,
        } => serve(config, insecure_no_auth),
        Command::Token {
            command:
                TokenCommand::New {
                    name,
                    tenant,
                    roles,
                },
        } => new_token(&name, &tenant, &roles),
        Command::SigningKey {
            command: SigningKeyCommand::New,
        } => new_signing_key(),
        Command::Config {
            command:
                ConfigCommand::Check {
                    config,
                    insecure_no_auth,
                },
        } => check_config(config, insecure_no_auth),
        Command::Config {
            command: ConfigCommand::Signing { tenant, config },
        } => print_signing(&tenant, config),
        Command::Completions { shell } => completions(shell),
        Command::Receive { listen } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(receive::receive(listen))),
        client_command => run_client(client_command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("postback: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(path: Option<PathBuf>, insecure_no_auth: bool) -> anyhow::Result<()> {
    let config = Config::load(path.as_deref(), insecure_no_auth)?;
    crate::sender::install_crypto_provider();
    let export = crate::telemetry::init(&config.settings.log, &config.settings.traces)?;
    let served = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(crate::app::serve(config));
    if let Some(export) = export {
        export.shutdown();
    }
    served
}

fn check_config(path: Option<PathBuf>, insecure_no_auth: bool) -> anyhow::Result<()> {
    let config = Config::load(path.as_deref(), insecure_no_auth)?;
    print!("{}", toml::to_string(&config.settings.redacted())?);
    let store = match config.store {
        StoreTarget::Embedded(_) => "the embedded store",
        StoreTarget::Redis(RedisTarget::Standalone(_)) => "Redis",
        StoreTarget::Redis(RedisTarget::Cluster(_)) => "a Redis Cluster",
    };
    eprintln!(
        "postback: the configuration is valid: {store}, {} shard(s), {} tenant(s)",
        config.shards,
        config.tenants.len()
    );
    Ok(())
}

fn print_signing(tenant: &str, path: Option<PathBuf>) -> anyhow::Result<()> {
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

fn run_client(command: Command) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(client_command(command))
}

async fn client_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve { .. }
        | Command::Token { .. }
        | Command::SigningKey { .. }
        | Command::Completions { .. }
        | Command::Config { .. }
        | Command::Receive { .. } => {
            unreachable!("serve, token, completions, config and receive run without the API")
        }
        Command::Notify(args) => notify(args).await,
        Command::Status {
            id,
            key,
            tenant,
            api,
        } => {
            let client = Client::new(&api)?;
            let id = match (id, key) {
                (Some(id), _) => id,
                (None, key) => by_key(&client, &key.unwrap_or_default(), tenant).await?,
            };
            let answer = client.get(&format!("/notifications/{id}")).await?;
            print::answer(&api, &answer, print::notification)
        }
        Command::List {
            state,
            filter,
            key,
            limit,
            cursor,
            api,
        } => {
            let mut query = filter.pairs();
            match key {
                Some(key) => query.push(("idempotency_key", key)),
                None => query.push(("state", state)),
            }
            query.push(("limit", limit.to_string()));
            query.extend(cursor.map(|c| ("cursor", c)));
            let answer = Client::new(&api)?
                .get_query("/notifications", &query)
                .await?;
            print::answer(&api, &answer, print::notifications)
        }
        Command::Cancel { id, api } => {
            let answer = Client::new(&api)?
                .delete(&format!("/notifications/{id}"))
                .await?;
            print::answer(&api, &answer, print::notification)
        }
        Command::Stats { tenant, api } => {
            let query: Vec<(&str, String)> = tenant.map(|t| ("tenant", t)).into_iter().collect();
            let answer = Client::new(&api)?.get_query("/stats", &query).await?;
            print::answer(&api, &answer, print::stats)
        }
        Command::Dlq { command, api } => dlq(command, &api).await,
        Command::Audit {
            actor,
            action,
            tenant,
            since,
            until,
            limit,
            cursor,
            api,
        } => {
            let given = [
                ("actor", actor),
                ("action", action),
                ("tenant", tenant),
                ("since", since),
                ("until", until),
                ("cursor", cursor),
            ];
            let mut query: Vec<(&str, String)> = given
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            query.push(("limit", limit.to_string()));
            let answer = Client::new(&api)?.get_query("/audit", &query).await?;
            print::answer(&api, &answer, print::audit)
        }
    }
}

/// Prints the completion script of `shell`.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "postback", &mut script);
    print::emit(&String::from_utf8(script)?)
}

/// Prints a fresh token and the `[tokens.<name>]` lines that accept it.
fn new_token(name: &str, tenant: &str, roles: &[Role]) -> anyhow::Result<()> {
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

fn new_signing_key() -> anyhow::Result<()> {
    let (key, public) = crate::signing::SigningKey::generate()?;
    print::emit(&format!("{key}\n"))?;
    eprintln!(
        "\nThe signing key above is shown once: put it in the configuration and keep no copy."
    );
    eprintln!("Add it to `keys` of a [tenants.<name>] section, or to [signing] keys for every");
    eprintln!("tenant without its own. Its public key, which GET /signing-keys publishes:\n");
    eprintln!("{public}");
    Ok(())
}

async fn notify(args: NotifyArgs) -> anyhow::Result<()> {
    if let Some(file) = &args.batch {
        return batch::register(file, &args.api).await;
    }
    let body = match (&args.body, &args.body_text) {
        (Some(raw), _) => {
            let text = read_arg(raw)?;
            serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("--body is not JSON ({e}); use --body-text for text")
            })?
        }
        (None, Some(raw)) => Value::String(read_arg(raw)?),
        (None, None) => unreachable!("clap requires a body"),
    };
    let mut request = json!({"url": args.url.unwrap_or_default(), "body": body});
    let fields = [
        ("delay", &args.delay),
        ("timeout", &args.timeout),
        ("expect_body", &args.expect_body),
        ("topic", &args.topic),
        ("rate_key", &args.rate_key),
        ("tenant", &args.tenant),
        ("profile", &args.profile),
        ("ordering_key", &args.ordering_key),
    ];
    for (field, value) in fields {
        if let Some(v) = value {
            request[field] = v.clone().into();
        }
    }
    if let Some(s) = &args.schedule {
        request["schedule"] = schedule(s);
    }
    if let Some(raw) = &args.success {
        request["success"] = serde_json::from_str(&read_arg(raw)?)
            .map_err(|e| anyhow::anyhow!("--success is not JSON ({e})"))?;
    }
    if !args.headers.is_empty() {
        request["headers"] = Value::Object(headers(&args.headers)?);
    }
    let client = Client::new(&args.api)?;
    let answer = client
        .post_with_key("/notify", &request, args.idempotency_key.as_deref())
        .await?;
    print::answer(&args.api, &answer, print::registered)
}

/// The id of the notification registered with the idempotency key `key`.
async fn by_key(client: &Client, key: &str, tenant: Option<String>) -> anyhow::Result<String> {
    let mut query = vec![("idempotency_key", key.to_string())];
    query.extend(tenant.map(|t| ("tenant", t)));
    let page = client.get_query("/notifications", &query).await?;
    match page["items"][0]["id"].as_str() {
        Some(id) => Ok(id.to_string()),
        None => anyhow::bail!(
            "no notification has the idempotency key `{key}` (a key is kept for idempotency_ttl)"
        ),
    }
}

async fn dlq(command: Dlq, api: &ApiArgs) -> anyhow::Result<()> {
    let client = Client::new(api)?;
    match command {
        Dlq::List {
            filter,
            limit,
            cursor,
        } => {
            let mut query = filter.pairs();
            query.push(("limit", limit.to_string()));
            query.extend(cursor.map(|c| ("cursor", c)));
            let answer = client.get_query("/dead-letters", &query).await?;
            print::answer(api, &answer, print::dead_letters)
        }
        Dlq::Show { id } => {
            let answer = client.get(&format!("/dead-letters/{id}")).await?;
            print::answer(api, &answer, print::dead_letter)
        }
        Dlq::Replay {
            id,
            filter,
            all,
            url,
            schedule: new_schedule,
            delay,
        } => {
            let mut body = Map::new();
            if let Some(s) = &new_schedule {
                body.insert("schedule".into(), schedule(s));
            }
            body.extend(delay.map(|d| ("delay".to_string(), d.into())));
            match id {
                Some(id) => {
                    body.extend(url.map(|u| ("url".to_string(), u.into())));
                    let path = format!("/dead-letters/{id}/replay");
                    let answer = client.post(&path, &Value::Object(body)).await?;
                    print::answer(api, &answer, print::registered)
                }
                None => {
                    filter.or_all(all, "replay")?;
                    body.extend(filter.json(all));
                    let answer = client
                        .post("/dead-letters/replay", &Value::Object(body))
                        .await?;
                    print::answer(api, &answer, |a, out| print::count("replayed", a, out))
                }
            }
        }
        Dlq::Discard { id } => {
            client.delete(&format!("/dead-letters/{id}")).await?;
            print::answer(api, &json!({"discarded": id}), |_, out| {
                out.line(format!("discarded {id}"))
            })
        }
        Dlq::Purge { filter, all } => {
            filter.or_all(all, "purge")?;
            let body = Value::Object(filter.json(all).collect());
            let answer = client.post("/dead-letters/purge", &body).await?;
            print::answer(api, &answer, |a, out| print::count("purged", a, out))
        }
    }
}

impl Filter {
    fn given(&self) -> impl Iterator<Item = (&'static str, &String)> {
        [
            ("topic", &self.topic),
            ("host", &self.host),
            ("since", &self.since),
            ("until", &self.until),
            ("tenant", &self.tenant),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    }

    /// Refuses a bulk action (`verb`) with neither a filter nor `--all`, in the CLI's
    /// own terms rather than the API's.
    fn or_all(&self, all: bool, verb: &str) -> anyhow::Result<()> {
        if !all && self.given().next().is_none() {
            anyhow::bail!(
                "no filter given: pass --topic, --host, --since, --until or --tenant, or --all to {verb} every dead letter"
            );
        }
        Ok(())
    }

    /// As query parameters.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        self.given().map(|(k, v)| (k, v.clone())).collect()
    }

    /// As the fields of a bulk request, with `all` when asked for.
    fn json(&self, all: bool) -> impl Iterator<Item = (String, Value)> + '_ {
        let all = all.then(|| ("all".to_string(), Value::Bool(true)));
        self.given()
            .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
            .chain(all)
    }
}

/// `15s,3m` is a list of durations; anything else names a configured schedule.
fn schedule(raw: &str) -> Value {
    let items: Vec<&str> = raw.split(',').map(str::trim).collect();
    if items.iter().all(|i| humantime::parse_duration(i).is_ok()) {
        json!(items)
    } else {
        Value::String(raw.to_string())
    }
}

fn headers(raw: &[String]) -> anyhow::Result<Map<String, Value>> {
    raw.iter()
        .map(|h| {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| anyhow::anyhow!("--header `{h}` is not `Name: value`"))?;
            Ok((name.trim().to_string(), value.trim().into()))
        })
        .collect()
}

/// The argument itself, or the contents of the file it names as `@PATH`.
fn read_arg(raw: &str) -> anyhow::Result<String> {
    match raw.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))
        }
        None => Ok(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_a_list_of_durations_or_a_name() {
        assert_eq!(schedule("15s, 3m"), json!(["15s", "3m"]));
        assert_eq!(schedule("alipay"), json!("alipay"));
    }

    #[test]
    fn headers_are_name_colon_value() {
        let h = headers(&["X-Shop: 42".into()]).unwrap();
        assert_eq!(h["X-Shop"], "42");
        assert!(headers(&["nocolon".into()]).is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
