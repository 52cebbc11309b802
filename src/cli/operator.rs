//! The operator's commands, each a call of a running instance's API: `notify` (also
//! `--batch`), `status`, `list`, `cancel`, `stats`, `dlq …`, `audit`, `portal-link`.

use serde_json::value::to_raw_value;
use serde_json::{json, Map, Value};

use super::client::{raw_json, with_raw, Client};
use super::{batch, print, ApiArgs, Command, Dlq, Filter, NotifyArgs};

/// Runs an operator's command against the instance its `--url` names.
pub(super) fn run_client(command: Command, api: &ApiArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(client_command(command, api))
}

async fn client_command(command: Command, api: &ApiArgs) -> anyhow::Result<()> {
    match command {
        Command::Serve { .. }
        | Command::Migrate { .. }
        | Command::Token { .. }
        | Command::SigningKey { .. }
        | Command::Completions { .. }
        | Command::Config { .. }
        | Command::Receive { .. } => {
            unreachable!(
                "serve, migrate, token, completions, config and receive run without the API"
            )
        }
        Command::Notify(args) => notify(args, api).await,
        Command::PortalLink {
            tenant,
            ttl,
            roles,
            base_url,
        } => {
            let roles: Vec<&str> = roles.iter().map(|r| r.name()).collect();
            let body = json!({"tenant": tenant, "ttl": ttl, "roles": roles});
            let link = Client::new(api)?.post("/portal-links", &body).await?;
            let base = base_url.as_deref().unwrap_or(&api.api_url);
            print::answer(api, &link, |a, out| print::portal_link(a, base, out))
        }
        Command::Status { id, key, tenant } => {
            let client = Client::new(api)?;
            let id = match (id, key) {
                (Some(id), _) => id,
                (None, key) => by_key(&client, &key.unwrap_or_default(), tenant).await?,
            };
            let answer = client.get(&format!("/notifications/{id}")).await?;
            print::answer(api, &answer, print::notification)
        }
        Command::List {
            state,
            filter,
            key,
            limit,
            cursor,
        } => {
            let page = Page { limit, cursor };
            list(api, state, &filter, key, page).await
        }
        Command::Cancel { id } => {
            let answer = Client::new(api)?
                .delete(&format!("/notifications/{id}"))
                .await?;
            print::answer(api, &answer, print::notification)
        }
        Command::Resend {
            id,
            state,
            filter,
            all,
            dry_run,
            schedule: new_schedule,
            delay,
        } => {
            let mut body = timing(new_schedule.as_deref(), delay);
            let client = Client::new(api)?;
            let Some(state) = state else {
                let id = id.unwrap_or_default();
                let path = format!("/notifications/{id}/resend");
                let answer = client.post(&path, &Value::Object(body)).await?;
                return print::answer(api, &answer, print::registered);
            };
            filter.or_all(all, "resend every notification of the state")?;
            body.insert("state".into(), state.into());
            body.insert("dry_run".into(), dry_run.into());
            body.extend(filter.json(all));
            let answer = client
                .post("/notifications/resend", &Value::Object(body))
                .await?;
            let verb = if dry_run { "would resend" } else { "resent" };
            print::answer(api, &answer, |a, out| {
                print::count(verb, "notifications", a, out)
            })
        }
        Command::AttemptNow { id } => {
            let path = format!("/notifications/{id}/attempt-now");
            let answer = Client::new(api)?.post(&path, &json!(null)).await?;
            print::answer(api, &answer, print::notification)
        }
        Command::Stats { tenant } => {
            let query: Vec<(&str, String)> = tenant.map(|t| ("tenant", t)).into_iter().collect();
            let answer = Client::new(api)?.get_query("/stats", &query).await?;
            print::answer(api, &answer, print::stats)
        }
        Command::Dlq { command } => dlq(command, api).await,
        Command::Subscriptions { command } => super::events::subscriptions(command, api).await,
        Command::Events { command } => super::events::events(command, api).await,
        Command::Topics {
            tenant,
            limit,
            cursor,
        } => super::events::topics(tenant, limit, cursor, api).await,
        Command::Endpoints {
            id: Some(id),
            pause,
            resume,
            ..
        } => {
            let client = Client::new(api)?;
            let answer = match (pause, resume) {
                (true, _) => {
                    client
                        .post(&format!("/endpoints/{id}/pause"), &json!(null))
                        .await?
                }
                (_, true) => {
                    client
                        .post(&format!("/endpoints/{id}/resume"), &json!(null))
                        .await?
                }
                _ => client.get(&format!("/endpoints/{id}")).await?,
            };
            print::answer(api, &answer, print::endpoint)
        }
        Command::Endpoints {
            id: None,
            state,
            pause: _,
            resume: _,
            tenant,
            limit,
            cursor,
        } => {
            let given = [("state", state), ("tenant", tenant), ("cursor", cursor)];
            let mut query: Vec<(&str, String)> = given
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            query.push(("limit", limit.to_string()));
            let answer = Client::new(api)?.get_query("/endpoints", &query).await?;
            print::answer(api, &answer, print::endpoints)
        }
        Command::Audit {
            actor,
            action,
            tenant,
            since,
            until,
            limit,
            cursor,
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
            let answer = Client::new(api)?.get_query("/audit", &query).await?;
            print::answer(api, &answer, print::audit)
        }
    }
}

/// Registers one notification, or with `--batch` many from a file.
async fn notify(args: NotifyArgs, api: &ApiArgs) -> anyhow::Result<()> {
    if let Some(file) = &args.batch {
        return batch::register(file, api).await;
    }
    // The body goes as the producer wrote it: never parsed and written out again.
    let body = match (&args.body, &args.body_text) {
        (Some(raw), _) => raw_json(read_arg(raw)?, "--body")
            .map_err(|e| anyhow::anyhow!("{e}; use --body-text for text"))?,
        (None, Some(raw)) => to_raw_value(&read_arg(raw)?)?,
        (None, None) => unreachable!("clap requires a body"),
    };
    let mut request = json!({"url": args.url.unwrap_or_default()});
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
    let Value::Object(fields) = request else {
        unreachable!("built as an object")
    };
    let client = Client::new(api)?;
    let text = with_raw(fields, "body", body);
    let answer = client
        .post_text("/notify", text, args.idempotency_key.as_deref())
        .await?;
    print::answer(api, &answer, print::registered)
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

/// The dead-letter commands: list, show, replay, discard, purge.
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
            let mut body = timing(new_schedule.as_deref(), delay);
            match id {
                Some(id) => {
                    body.extend(url.map(|u| ("url".to_string(), u.into())));
                    let path = format!("/dead-letters/{id}/replay");
                    let answer = client.post(&path, &Value::Object(body)).await?;
                    print::answer(api, &answer, print::registered)
                }
                None => {
                    filter.or_all(all, "replay every dead letter")?;
                    body.extend(filter.json(all));
                    let answer = client
                        .post("/dead-letters/replay", &Value::Object(body))
                        .await?;
                    print::answer(api, &answer, |a, out| {
                        print::count("replayed", "dead letters", a, out)
                    })
                }
            }
        }
        Dlq::Discard { id } => {
            client.delete(&format!("/dead-letters/{id}")).await?;
            print::answer(api, &json!({"discarded": id}).into(), |_, out| {
                out.line(format!("discarded {id}"))
            })
        }
        Dlq::Purge { filter, all } => {
            filter.or_all(all, "purge every dead letter")?;
            let body = Value::Object(filter.json(all).collect());
            let answer = client.post("/dead-letters/purge", &body).await?;
            print::answer(api, &answer, |a, out| {
                print::count("purged", "dead letters", a, out)
            })
        }
    }
}

impl Filter {
    fn given(&self) -> impl Iterator<Item = (&'static str, &String)> {
        [
            ("topic", &self.topic),
            ("host", &self.host),
            ("endpoint", &self.endpoint),
            ("since", &self.since),
            ("until", &self.until),
            ("tenant", &self.tenant),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    }

    /// Refuses a bulk action (`does`, what `--all` would do) with neither a filter nor
    /// `--all`, in the CLI's own terms rather than the API's.
    fn or_all(&self, all: bool, does: &str) -> anyhow::Result<()> {
        if !all && self.given().next().is_none() {
            anyhow::bail!(
                "no filter given: pass --topic, --host, --endpoint, --since, --until or --tenant, or --all to {does}"
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

/// Which page of a list.
struct Page {
    limit: usize,
    cursor: Option<String>,
}

/// A page of the queue in one state (`scheduled` unless given), or the notification of
/// an idempotency key. An empty first page of the default state, unfiltered, says what
/// the other states hold, so that nothing scheduled is not read as nothing at all.
async fn list(
    api: &ApiArgs,
    state: Option<String>,
    filter: &Filter,
    key: Option<String>,
    page: Page,
) -> anyhow::Result<()> {
    let client = Client::new(api)?;
    let chosen = state.is_some() || key.is_some() || page.cursor.is_some();
    let state = state.unwrap_or_else(|| "scheduled".to_string());
    let mut query = filter.pairs();
    match &key {
        Some(key) => query.push(("idempotency_key", key.clone())),
        None => query.push(("state", state.clone())),
    }
    query.push(("limit", page.limit.to_string()));
    query.extend(page.cursor.map(|c| ("cursor", c)));
    let answer = client.get_query("/notifications", &query).await?;
    let narrowed = filter.given().any(|(k, _)| k != "tenant");
    let empty = answer["items"].as_array().is_some_and(Vec::is_empty);
    let others = match !api.json && empty && !chosen && !narrowed {
        true => {
            let tenant = filter.tenant.iter().map(|t| ("tenant", t.clone()));
            Some(
                client
                    .get_query("/stats", &tenant.collect::<Vec<_>>())
                    .await?,
            )
        }
        false => None,
    };
    let listed = print::Listed {
        state: &state,
        filtered: narrowed || key.is_some(),
        others: others.as_deref(),
    };
    print::answer(api, &answer, |a, out| print::notifications(a, &listed, out))
}

/// The body of a replay or resend with a new schedule and delay, if given.
fn timing(new_schedule: Option<&str>, delay: Option<String>) -> Map<String, Value> {
    let mut body = Map::new();
    body.extend(new_schedule.map(|s| ("schedule".to_string(), schedule(s))));
    body.extend(delay.map(|d| ("delay".to_string(), d.into())));
    body
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

/// `Name: value` arguments as a JSON object of headers.
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
pub(super) fn read_arg(raw: &str) -> anyhow::Result<String> {
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
}
