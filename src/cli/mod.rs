//! The `postback` command line: `serve` runs the service, `config check` checks its
//! configuration, `config signing` prints what verifies a tenant's deliveries,
//! `token new` makes an API token, `signing-key new` an ed25519 signing
//! key, `receive` is a receiver to try it
//! against, `completions` prints a shell's completion script; the other commands are the
//! operator's client of a running instance's API (`notify`, also `--batch` from a file,
//! `status`, `list`, `cancel`, `resend`, `attempt-now`, `stats`,
//! `endpoints`, `subscriptions …`, `events …`, `topics` (`events.rs`),
//! `dlq list|show|replay|discard|purge`, `audit`, `portal-link`),
//! printing readable tables or, with `--json`, the API's JSON answer.
//!
//! This file is the command line's shape (its commands, arguments and help) and its
//! dispatch; `local.rs` runs the commands that need no running instance, `operator.rs`
//! those that call one's API (`client.rs`), `batch.rs` registers from a file, `print.rs`
//! writes the answers.

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use clap::{Args, Parser, Subcommand};

use crate::tenancy::access::{LinkRole, Role};

mod batch;
mod client;
mod events;
mod local;
mod operator;
mod print;
mod receive;

#[derive(Parser)]
#[command(
    name = "postback",
    version,
    about = "Webhook notification dispatcher with tiered retries"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Where the operator's commands find the API, before or after the subcommand.
    #[command(flatten)]
    api: ApiArgs,
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
    /// Create or upgrade postback's schema in the configured Postgres database, then
    /// exit (`serve` does the same at start).
    Migrate {
        /// TOML configuration file; `POSTBACK_<SECTION>_<KEY>` variables override it.
        #[arg(long, env = "POSTBACK_CONFIG")]
        config: Option<PathBuf>,
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
    },
    /// Browse the queue: the notifications in one state, pending ones soonest due
    /// first, finished ones newest first.
    List {
        /// scheduled (the default), retrying (scheduled after a failed attempt), held
        /// (scheduled, its endpoint paused), held_back (scheduled, its endpoint path's
        /// circuit open), in_flight, delivered, dead or cancelled.
        #[arg(long)]
        state: Option<String>,
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
    },
    /// Cancel a notification that has not finished.
    Cancel { id: String },
    /// Send a delivered, dead or cancelled notification again (ID) under the same id, or
    /// every one of a state a filter matches (no ID).
    Resend {
        /// The notification; without it, --state and the filter (or --all) choose.
        #[arg(required_unless_present = "state")]
        id: Option<String>,
        /// delivered, dead or cancelled (without ID).
        #[arg(long, conflicts_with = "id")]
        state: Option<String>,
        #[command(flatten)]
        filter: Filter,
        /// Every notification of the state, when no filter is given.
        #[arg(long, requires = "state")]
        all: bool,
        /// Count what would be resent, and resend nothing.
        #[arg(long, requires = "state")]
        dry_run: bool,
        /// A new schedule (`1m,10m`) or a configured schedule's name.
        #[arg(long)]
        schedule: Option<String>,
        /// Before the first attempt of the new cycle.
        #[arg(long)]
        delay: Option<String>,
    },
    /// Make a scheduled or retrying notification due now.
    AttemptNow { id: String },
    /// Notifications per state, and what retention deleted.
    Stats {
        /// Only this tenant's (a token for every tenant only).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Callback endpoints and their health: every one (by tenant), or one (ID).
    Endpoints {
        /// One endpoint (`ep_…`); without it, the list.
        id: Option<String>,
        /// Pause the endpoint `ID`: its notifications are held until it is resumed.
        #[arg(long, requires = "id", conflicts_with = "resume")]
        pause: bool,
        /// Resume the endpoint `ID`: its held notifications are let go, oldest first.
        #[arg(long, requires = "id")]
        resume: bool,
        /// Only endpoints in this state: healthy, failing, paused.
        #[arg(long, conflicts_with = "id")]
        state: Option<String>,
        /// Only this tenant's (a token for every tenant only).
        #[arg(long, conflicts_with = "id")]
        tenant: Option<String>,
        /// Items per page (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed under the previous page.
        #[arg(long, conflicts_with = "id")]
        cursor: Option<String>,
    },
    /// A tenant's standing subscriptions: list, show, create, update, delete.
    Subscriptions {
        #[command(subcommand)]
        command: Subscriptions,
    },
    /// Events: publish one, list them, show one with its deliveries, resend one.
    Events {
        #[command(subcommand)]
        command: Events,
    },
    /// The topics a tenant published, each with its latest example.
    Topics {
        /// Whose (a token for every tenant only; default `default`).
        #[arg(long)]
        tenant: Option<String>,
        /// Items per page (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed under the previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Review the dead letters: list, show, replay, discard, purge.
    Dlq {
        #[command(subcommand)]
        command: Dlq,
    },
    /// Who cancelled, replayed, discarded or purged what, newest first.
    Audit {
        /// Only this token's actions (its configured name).
        #[arg(long)]
        actor: Option<String>,
        /// Only this action: cancel, replay, replay_matching, discard, purge, resend, resend_matching, attempt_now, pause_endpoint, resume_endpoint, create_subscription, update_subscription, delete_subscription, resend_event.
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
    },
    /// API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Print a link to the review page for one tenant's merchant, issued by the running
    /// instance (its `server.portal_secret` and tenants; a token with `operate`): a
    /// short-lived credential scoped to the tenant and to the roles asked (read always),
    /// in the URL's fragment. Rotating the secret revokes every link.
    PortalLink {
        /// The tenant (configured on the instance).
        #[arg(long)]
        tenant: String,
        /// How long the link works, at most 24h.
        #[arg(long, default_value = "1h")]
        ttl: String,
        /// What it may do, besides read: operate (resend, attempt now, pause, resume; a
        /// resend of a dead or cancelled one needs replay or cancel too), cancel, replay,
        /// redirect (replay to another URL or with other headers),
        /// reschedule (resend or replay with another schedule or delay), discard, bulk
        /// (the same over a filter, or an event's notifications), subscriptions (create,
        /// change, delete).
        #[arg(long, value_delimiter = ',', default_value = "read", value_parser = LinkRole::from_str)]
        roles: Vec<LinkRole>,
        /// The address merchants reach postback at; default: the API's address
        /// (--api-url).
        #[arg(long)]
        base_url: Option<String>,
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
    /// redacted, as TOML. Exits 1 naming every key it cannot read (or, once all are
    /// read, the first check across keys that fails).
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
        /// The token's name: the actor in the audit log, and its `[tokens.<name>]`.
        #[arg(
            required_unless_present = "name_option",
            conflicts_with = "name_option"
        )]
        name: Option<String>,
        /// The token's name, as NAME.
        #[arg(long = "name", id = "name_option", value_name = "NAME")]
        name_option: Option<String>,
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
    /// One endpoint's (`ep_…`, as `GET /endpoints` names it).
    #[arg(long)]
    endpoint: Option<String>,
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

/// What a subscription's notifications carry, and where they go.
#[derive(Args)]
pub(crate) struct SubscriptionFields {
    /// Where its notifications go.
    #[arg(long)]
    url: Option<String>,
    /// Topics it takes, comma-separated (`payment.*,refund.created`).
    #[arg(long, value_delimiter = ',')]
    topics: Option<Vec<String>>,
    #[arg(long)]
    description: Option<String>,
    /// Settings of its notifications, as a JSON object of `POST /notify` fields
    /// (`{"schedule": ["1m", "10m"], "profile": "alipay"}`); `@file.json` reads a file.
    #[arg(long)]
    settings: Option<String>,
}

#[derive(Subcommand)]
enum Subscriptions {
    /// Subscriptions, by id.
    List {
        /// Only this tenant's (a token for every tenant only).
        #[arg(long)]
        tenant: Option<String>,
        /// Items per page (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed under the previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One subscription.
    Show { id: String },
    /// Subscribe a URL to topics.
    Create {
        #[command(flatten)]
        fields: SubscriptionFields,
        /// Created disabled: it takes no events until enabled.
        #[arg(long)]
        disabled: bool,
        /// Whose (a token for every tenant only; default `default`).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Change what is given; the settings given replace the ones named.
    Update {
        id: String,
        #[command(flatten)]
        fields: SubscriptionFields,
        /// Take events again.
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        /// Take no events until enabled.
        #[arg(long)]
        disable: bool,
    },
    /// Delete one: later events do not reach it.
    Delete { id: String },
}

#[derive(Subcommand)]
enum Events {
    /// Publish an event to every subscription that takes its topic.
    Publish {
        /// What it is about (`payment.succeeded`).
        #[arg(long)]
        topic: String,
        /// The body, JSON (`@file.json` reads a file).
        #[arg(long)]
        body: String,
        /// Makes publishing it again safe: the same key answers the same event.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Whose (a token for every tenant only; default `default`).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Events, newest first.
    List {
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Published at or after (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Only this tenant's (a token for every tenant only).
        #[arg(long)]
        tenant: Option<String>,
        /// Items per page (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed under the previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One event, its body and each delivery's state.
    Show { id: String },
    /// Send an event's finished notifications again: all, or one subscription's.
    Resend {
        id: String,
        /// Only the notification made for this subscription.
        #[arg(long)]
        subscription: Option<String>,
    },
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
        } => local::serve(config, insecure_no_auth),
        Command::Migrate { config } => local::migrate(config),
        Command::Token {
            command:
                TokenCommand::New {
                    name,
                    name_option,
                    tenant,
                    roles,
                },
        } => local::new_token(&name.or(name_option).unwrap_or_default(), &tenant, &roles),
        Command::SigningKey {
            command: SigningKeyCommand::New,
        } => local::new_signing_key(),
        Command::Config {
            command:
                ConfigCommand::Check {
                    config,
                    insecure_no_auth,
                },
        } => local::check_config(config, insecure_no_auth),
        Command::Config {
            command: ConfigCommand::Signing { tenant, config },
        } => local::print_signing(&tenant, config),
        Command::Completions { shell } => local::completions(shell),
        Command::Receive { listen } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(receive::receive(listen))),
        client_command => operator::run_client(client_command, &cli.api),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("postback: {}", print::printable(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn the_commands_messages_name_are_commands_it_takes() {
        let words = crate::tenancy::access::NEW_TOKEN_COMMAND
            .split(' ')
            .map(|w| w.trim_matches('\''));
        assert!(Cli::try_parse_from(words).is_ok());
    }
}
