//! The operator commands of events: `subscriptions list|show|create|update|delete`,
//! `events publish|list|show|resend` and `topics`, as a client of the API.

use serde_json::{json, Map, Value};

use super::client::{raw_json, with_raw, Client};
use super::operator::read_arg;
use super::{print, ApiArgs, Events, SubscriptionFields, Subscriptions};

pub(super) async fn subscriptions(command: Subscriptions, api: &ApiArgs) -> anyhow::Result<()> {
    let client = Client::new(api)?;
    let answer = match command {
        Subscriptions::List {
            tenant,
            limit,
            cursor,
        } => {
            let query = page(&[("tenant", tenant), ("cursor", cursor)], limit);
            let answer = client.get_query("/subscriptions", &query).await?;
            return print::answer(api, &answer, print::subscriptions);
        }
        Subscriptions::Show { id } => client.get(&format!("/subscriptions/{id}")).await?,
        Subscriptions::Create {
            fields,
            disabled,
            tenant,
        } => {
            let mut body = request(fields)?;
            body.insert("enabled".into(), (!disabled).into());
            if let Some(t) = tenant {
                body.insert("tenant".into(), t.into());
            }
            client.post("/subscriptions", &Value::Object(body)).await?
        }
        Subscriptions::Update {
            id,
            fields,
            enable,
            disable,
        } => {
            let mut body = request(fields)?;
            if enable || disable {
                body.insert("enabled".into(), enable.into());
            }
            let path = format!("/subscriptions/{id}");
            client.patch(&path, &Value::Object(body)).await?
        }
        Subscriptions::Delete { id } => {
            client.delete(&format!("/subscriptions/{id}")).await?;
            return print::emit(&format!("deleted {id}\n"));
        }
    };
    print::answer(api, &answer, print::subscription)
}

/// The request body of the fields given: the settings' keys, then the named fields.
fn request(fields: SubscriptionFields) -> anyhow::Result<Map<String, Value>> {
    let mut body = match fields.settings {
        Some(raw) => match serde_json::from_str(&read_arg(&raw)?) {
            Ok(Value::Object(settings)) => settings,
            _ => anyhow::bail!("--settings is not a JSON object"),
        },
        None => Map::new(),
    };
    let given = [
        ("url", fields.url.map(Value::from)),
        ("topics", fields.topics.map(Value::from)),
        ("description", fields.description.map(Value::from)),
    ];
    body.extend(
        given
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?))),
    );
    Ok(body)
}

pub(super) async fn events(command: Events, api: &ApiArgs) -> anyhow::Result<()> {
    let client = Client::new(api)?;
    match command {
        Events::Publish {
            topic,
            body,
            idempotency_key,
            tenant,
        } => {
            let body = raw_json(read_arg(&body)?, "--body")?;
            let mut event = Map::new();
            event.insert("topic".into(), topic.into());
            if let Some(key) = idempotency_key {
                event.insert("idempotency_key".into(), key.into());
            }
            if let Some(t) = tenant {
                event.insert("tenant".into(), t.into());
            }
            let answer = client
                .post_text("/events", with_raw(event, "body", body), None)
                .await?;
            print::answer(api, &answer, print::event)
        }
        Events::List {
            topic,
            since,
            tenant,
            limit,
            cursor,
        } => {
            let given = [
                ("topic", topic),
                ("since", since),
                ("tenant", tenant),
                ("cursor", cursor),
            ];
            let answer = client.get_query("/events", &page(&given, limit)).await?;
            print::answer(api, &answer, print::events)
        }
        Events::Show { id } => {
            let answer = client.get(&format!("/events/{id}")).await?;
            print::answer(api, &answer, print::event)
        }
        Events::Resend { id, subscription } => {
            let body = match subscription {
                Some(s) => json!({"subscription": s}),
                None => Value::Null,
            };
            let answer = client.post(&format!("/events/{id}/resend"), &body).await?;
            print::answer(api, &answer, |a, out| {
                print::count("resent", "notifications", a, out)
            })
        }
    }
}

pub(super) async fn topics(
    tenant: Option<String>,
    limit: usize,
    cursor: Option<String>,
    api: &ApiArgs,
) -> anyhow::Result<()> {
    let query = page(&[("tenant", tenant), ("cursor", cursor)], limit);
    let answer = Client::new(api)?.get_query("/topics", &query).await?;
    print::answer(api, &answer, print::topics)
}

/// The query of a list: the parameters given, and the page size.
fn page(given: &[(&'static str, Option<String>)], limit: usize) -> Vec<(&'static str, String)> {
    let mut query: Vec<(&str, String)> = given
        .iter()
        .filter_map(|(k, v)| Some((*k, v.clone()?)))
        .collect();
    query.push(("limit", limit.to_string()));
    query
}
