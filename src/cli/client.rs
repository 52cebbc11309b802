//! The operator commands' HTTP client of the API: the base URL, the bearer token, each
//! answer kept as the text the API wrote (`Answer`), and API errors turned into one
//! readable line (`404 not_found: notification not found`).

use std::collections::BTreeMap;
use std::ops::Deref;
use std::time::Duration;

use anyhow::{anyhow, Context};
use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::ApiArgs;

/// An API answer: its text as the API wrote it, which `--json` prints and where a
/// producer's body is read as the producer wrote it, and its value, read for what the
/// commands look up in it. A `Value` rounds a number beyond a double's and sorts keys:
/// what a producer wrote is never printed from it.
pub struct Answer {
    pub text: String,
    pub value: Value,
}

/// An answer of the command's own making, which holds nothing a producer wrote.
impl From<Value> for Answer {
    fn from(value: Value) -> Self {
        Self {
            text: value.to_string(),
            value,
        }
    }
}

impl Deref for Answer {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.value
    }
}

pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    pub fn new(args: &ApiArgs) -> anyhow::Result<Self> {
        crate::delivery::sender::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .user_agent(crate::delivery::sender::USER_AGENT_VALUE)
            .build()?;
        Ok(Self {
            http,
            base: args.api_url.trim_end_matches('/').to_string(),
            token: args.token.clone(),
        })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.send(self.request(Method::GET, path)).await
    }

    pub async fn get_query(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Answer> {
        self.send(self.request(Method::GET, path).query(query))
            .await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Answer> {
        self.send(self.request(Method::DELETE, path)).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> anyhow::Result<Answer> {
        self.send(self.request(Method::PATCH, path).json(body))
            .await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Answer> {
        self.post_with_key(path, body, None).await
    }

    /// A POST with an `Idempotency-Key` header when one is given.
    pub async fn post_with_key(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Answer> {
        let text = serde_json::to_string(body).expect("a JSON value serializes");
        self.post_text(path, text, idempotency_key).await
    }

    /// A POST of JSON already written (`text`: a producer's body in it as the producer
    /// wrote it), with an `Idempotency-Key` header when one is given.
    pub async fn post_text(
        &self,
        path: &str,
        text: String,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Answer> {
        let mut request = self
            .request(Method::POST, path)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(text);
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let (answer, headers) = self.exchange(request).await?;
        if headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
        {
            eprintln!("postback: {}", replayed(path));
        }
        Ok(answer)
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The JSON answer of a 2xx (null when there is none), or the API's error as one line.
    async fn send(&self, request: RequestBuilder) -> anyhow::Result<Answer> {
        Ok(self.exchange(request).await?.0)
    }

    /// As `send`, with the answer's headers.
    async fn exchange(&self, request: RequestBuilder) -> anyhow::Result<(Answer, HeaderMap)> {
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach the postback API at {}", self.base))?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.context("reading the API's answer")?;
        let body: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .with_context(|| format!("the API answered {status} with something not JSON"))?
        };
        if status.is_success() {
            let answer = match text.is_empty() {
                true => body.into(),
                false => Answer { text, value: body },
            };
            return Ok((answer, headers));
        }
        let error = &body["error"];
        let mut line = format!(
            "{} {}: {}",
            status.as_u16(),
            error["code"].as_str().unwrap_or("error"),
            error["message"].as_str().unwrap_or(&text)
        );
        if let Some(field) = error["field"].as_str() {
            line.push_str(&format!(" (field `{field}`)"));
        }
        if status == reqwest::StatusCode::UNAUTHORIZED {
            line.push_str("; pass --token or set POSTBACK_API_TOKEN");
        }
        Err(anyhow!(line))
    }
}

/// What an answer to a repeated `Idempotency-Key` at `path` means.
fn replayed(path: &str) -> &'static str {
    match path {
        "/events" => "this Idempotency-Key was used before: nothing new was published, and this is the event it published",
        _ => "this Idempotency-Key was used before: nothing new was stored, and this is the notification it registered",
    }
}

/// `fields` as a JSON object with `raw` under `name`, written as it is (a producer's
/// body: never parsed and written out again, so its numbers keep every digit).
pub fn with_raw(fields: Map<String, Value>, name: &str, raw: Box<RawValue>) -> String {
    let mut object: BTreeMap<String, Box<RawValue>> = fields
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                serde_json::value::to_raw_value(&v).expect("a JSON value"),
            )
        })
        .collect();
    object.insert(name.to_string(), raw);
    serde_json::to_string(&object).expect("JSON values serialize")
}

/// `text` as one JSON value, kept as written; `what` names it in the error.
pub fn raw_json(text: String, what: &str) -> anyhow::Result<Box<RawValue>> {
    RawValue::from_string(text).map_err(|e| anyhow!("{what} is not JSON ({e})"))
}
