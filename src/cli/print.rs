//! How the operator commands print API answers: aligned tables and `key: value` lines
//! for people, or the JSON answer itself with `--json`. A producer's body is shown as
//! stored: laid out by `pretty_json`, which copies every token as written (no number
//! rounded, no key moved), or as it is; `--json` prints the answer as the API wrote it,
//! laid out the same way. What came from the store or a
//! receiver may hold control characters (a terminal's escape sequences) and other
//! invisible ones (`domain::invisible`: a right-to-left override that shows what
//! follows backwards, zero-width characters), values that earlier builds stored
//! included; they are shown escaped, never sent to the terminal: `\u{202e}` in tables,
//! `\u202e` in JSON (the same JSON). Output whose reader has gone (`| head`) ends there,
//! quietly.

use std::borrow::Cow;
use std::fmt::Display;
use std::io::{ErrorKind, Write};

use comfy_table::{presets, Table};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::client::Answer;
use super::ApiArgs;
use crate::domain::invisible;

/// What a command prints, gathered before it is written.
#[derive(Default)]
pub struct Out(String);

impl Out {
    pub fn line(&mut self, text: impl Display) {
        self.0.push_str(&text.to_string());
        self.0.push('\n');
    }
}

/// Prints `answer` as the API wrote it with `--json` (laid out by `pretty_json`),
/// otherwise with `human`.
pub fn answer(
    api: &ApiArgs,
    answer: &Answer,
    human: impl FnOnce(&Answer, &mut Out),
) -> anyhow::Result<()> {
    let mut out = Out::default();
    if api.json {
        let laid_out = pretty_json(&answer.text);
        out.line(escaped_json(laid_out.as_deref().unwrap_or(&answer.text)));
    } else {
        human(answer, &mut out);
    }
    emit(&out.0)
}

/// Writes `text` to stdout, anything `printable` would escape escaped; a reader that has
/// gone away ends the output, not the command.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(printable(text).as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// A portal link issued: the link on stdout (for a script to take), what it is for on
/// stderr.
pub fn portal_link(a: &Answer, base: &str, out: &mut Out) {
    out.line(format!(
        "{}{}",
        base.trim_end_matches('/'),
        text(&a["path"])
    ));
    eprintln!(
        "\nFor {}'s merchant, with {}, until {}. Rotating server.portal_secret revokes every link.",
        text(&a["tenant"]),
        list(&a["roles"]),
        text(&a["expires_at"])
    );
}

/// The answer to a registration, a replay or a resend: what it is now, not its history.
pub fn registered(a: &Answer, out: &mut Out) {
    fields(
        a,
        &["id", "state", "attempts", "url", "next_attempt_at"],
        out,
    );
}

/// A notification and its history, by cycle.
pub fn notification(a: &Answer, out: &mut Out) {
    fields(
        a,
        &[
            "id",
            "state",
            "list",
            "tenant",
            "url",
            "topic",
            "ordering_key",
            "waiting",
            "profile",
            "success",
            "attempts",
            "next_attempt_at",
            "held_back_since",
            "deadline",
            "created_at",
            "finished_at",
            "cancel_requested",
            "replays",
            "resends",
        ],
        out,
    );
    request_body(a, out);
    history(a, out);
}

/// A dead letter: the notification, when it died, its body, its history by cycle.
pub fn dead_letter(a: &Answer, out: &mut Out) {
    fields(
        a,
        &[
            "id",
            "state",
            "tenant",
            "url",
            "topic",
            "ordering_key",
            "profile",
            "success",
            "attempts",
            "dead_at",
            "created_at",
            "replays",
            "resends",
        ],
        out,
    );
    request_body(a, out);
    history(a, out);
}

/// The body each attempt sends (`request` of a notification), under its content type.
fn request_body(a: &Value, out: &mut Out) {
    let request = &a["request"];
    let Some(stored) = request["body"].as_str() else {
        return;
    };
    let headers = request["headers"].as_array().map(Vec::as_slice);
    let content_type = headers
        .unwrap_or_default()
        .iter()
        .find(|h| h["name"] == "content-type")
        .and_then(|h| h["value"].as_str())
        .unwrap_or_default();
    let json = content_type.starts_with("application/json");
    body(&format!("body ({content_type})"), stored, json, out);
}

/// A producer's body under `heading`, as stored: laid out by `pretty_json` when it is
/// JSON, else as it is.
fn body(heading: &str, stored: &str, json: bool, out: &mut Out) {
    out.line(format!("\n{heading}:"));
    match json.then(|| pretty_json(stored)).flatten() {
        Some(laid_out) => out.line(laid_out),
        None => out.line(stored),
    }
}

/// JSON text laid out two spaces a level, every token as written: numbers, strings and
/// keys copied from `json` in their order, never read as values (a `Value` would write
/// `12345678901234567890123` as `1.2345678901234568e+22` and `10.10` as `10.1`, and sort
/// keys); `None` for text that is not one JSON value. The command line's one layout of
/// JSON: of a body, and of an answer with `--json`.
pub fn pretty_json(json: &str) -> Option<String> {
    serde_json::from_str::<IgnoredAny>(json).ok()?;
    let mut out = String::with_capacity(json.len() * 2);
    let mut depth = 0;
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => copy_string(&mut chars, &mut out),
            '{' | '[' => {
                out.push(c);
                while chars.next_if(char::is_ascii_whitespace).is_some() {}
                if let Some(close) = chars.next_if(|&n| n == '}' || n == ']') {
                    out.push(close);
                    continue;
                }
                depth += 1;
                new_line(depth, &mut out);
            }
            '}' | ']' => {
                depth -= 1;
                new_line(depth, &mut out);
                out.push(c);
            }
            ',' => {
                out.push(c);
                new_line(depth, &mut out);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    Some(out)
}

/// Copies the rest of a JSON string, its escapes as written, through its closing quote.
fn copy_string(chars: &mut impl Iterator<Item = char>, out: &mut String) {
    out.push('"');
    let mut escaped = false;
    for c in chars {
        out.push(c);
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '"') => return,
            _ => {}
        }
    }
}

fn new_line(depth: usize, out: &mut String) {
    out.push('\n');
    out.push_str(&"  ".repeat(depth));
}

/// `2 of 2`, and once it was sent again `2 of 2 in this cycle; 9 in all`; the count
/// alone where the answer has no more.
fn attempts(a: &Value, count: &Value) -> String {
    let again = a["cycle"].as_u64().is_some_and(|n| n > 0);
    match (&a["max_attempts"], &a["total_attempts"]) {
        (Value::Null, _) => text(count),
        (max, total) if again && !total.is_null() => format!(
            "{} of {} in this cycle; {} in all",
            text(count),
            text(max),
            text(total)
        ),
        (max, _) => format!("{} of {}", text(count), text(max)),
    }
}

/// A page of dead letters, and how to get the next one.
pub fn dead_letters(a: &Answer, out: &mut Out) {
    let items = a["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        out.line("no dead letters");
    } else {
        let mut t = table(&[
            "ID",
            "DEAD AT",
            "TENANT",
            "ATTEMPTS",
            "TOPIC",
            "URL",
            "LAST FAILURE",
        ]);
        for i in items {
            t.add_row([
                text(&i["id"]),
                text(&i["dead_at"]),
                text(&i["tenant"]),
                text(&i["attempts"]),
                text(&i["topic"]),
                text(&i["url"]),
                last_failure(i),
            ]);
        }
        out.line(t);
    }
    if let Some(next) = a["next_cursor"].as_str() {
        out.line(format!("\nmore: --cursor {next}"));
    }
}

/// What a page of the queue lists: its state, whether a filter narrowed it, and, for an
/// empty page, the counts of every state (`GET /stats`) to say where the rest are.
pub struct Listed<'a> {
    pub state: &'a str,
    pub filtered: bool,
    pub others: Option<&'a Value>,
}

/// A page of one list of the queue, and how to get the next one.
pub fn notifications(a: &Answer, listed: &Listed, out: &mut Out) {
    let items = a["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        let matching = if listed.filtered { " match" } else { "" };
        out.line(format!("no {} notifications{matching}", listed.state));
        if let Some(stats) = listed.others {
            elsewhere(stats, out);
        }
    } else {
        let mut t = table(&[
            "ID",
            "STATE",
            "NEXT OR FINISHED",
            "TENANT",
            "ATTEMPTS",
            "TOPIC",
            "URL",
            "LAST",
        ]);
        for i in items {
            let when = match &i["next_attempt_at"] {
                Value::Null => &i["finished_at"],
                next => next,
            };
            t.add_row([
                text(&i["id"]),
                text(&i["state"]),
                text(when),
                text(&i["tenant"]),
                format!("{}/{}", text(&i["attempts"]), text(&i["max_attempts"])),
                text(&i["topic"]),
                text(&i["url"]),
                last_failure(i),
            ]);
        }
        out.line(t);
    }
    if let Some(next) = a["next_cursor"].as_str() {
        let why = match a["partial"].as_bool() {
            Some(true) => " (this page stopped at the bound of one call; there may be more)",
            _ => "",
        };
        out.line(format!("\nmore{why}: --cursor {next}"));
    }
}

/// How the last attempt ended: its status, and why it failed when the status does not
/// say (a 2xx whose body did not match `expect_body`), or its error.
fn last_failure(i: &Value) -> String {
    failure(&i["last_status"], &i["last_error"])
}

/// An attempt's failure: its status and error, as one phrase.
fn failure(status: &Value, error: &Value) -> String {
    match (status, error) {
        (Value::Number(n), Value::String(e)) if !e.starts_with("HTTP ") => {
            format!("HTTP {n}: {}", printable(e))
        }
        (_, Value::String(e)) => printable(e).into_owned(),
        (Value::Number(n), _) => format!("HTTP {n}"),
        (_, e) => text(e),
    }
}

/// A page of the audit log, and how to get the next one.
pub fn audit(a: &Answer, out: &mut Out) {
    let items = a["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        out.line("no audit entries");
    } else {
        let mut t = table(&["AT", "ACTOR", "TENANT", "ACTION", "ON", "COUNT"]);
        for i in items {
            let on = match (&i["target"], &i["filter"]) {
                (Value::String(id), _) => id.clone(),
                (_, Value::Object(f)) if f.is_empty() => "every dead letter".into(),
                (_, Value::Object(f)) => f
                    .iter()
                    .map(|(k, v)| format!("{k}={}", text(v)))
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => "-".into(),
            };
            let tenant = match &i["tenant"] {
                Value::Null => "*".into(),
                t => text(t),
            };
            t.add_row([
                text(&i["at"]),
                text(&i["actor"]),
                tenant,
                text(&i["action"]),
                on,
                text(&i["count"]),
            ]);
        }
        out.line(t);
    }
    if let Some(next) = a["next_cursor"].as_str() {
        out.line(format!("\nmore: --cursor {next}"));
    }
}

/// A page of endpoints, and how to get the next one.
pub fn endpoints(a: &Answer, out: &mut Out) {
    let items = a["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        out.line("no endpoints");
    } else {
        let header = [
            "ID",
            "TENANT",
            "URL",
            "STATE",
            "FAILURES",
            "SINCE",
            "LAST HOUR",
            "LAST SUCCESS",
        ];
        let mut t = table(&header);
        for e in items {
            t.add_row([
                text(&e["id"]),
                text(&e["tenant"]),
                text(&e["url"]),
                text(&e["state"]),
                text(&e["consecutive_failures"]),
                text(&e["failing_since"]),
                span(&e["last_hour"]),
                text(&e["last_success_at"]),
            ]);
        }
        out.line(t);
        circuits(items, true, out);
    }
    if let Some(next) = a["next_cursor"].as_str() {
        out.line(format!("\nmore: --cursor {next}"));
    }
}

/// The circuits of `endpoints`, a line per path (each path of an endpoint has its own
/// breaker): open or closed, open since when, when its next probe may go, and what it
/// holds back (counted in the view of one endpoint), or when it closed; nothing when none
/// has one. With `ids` (a list of endpoints), each line names its endpoint.
fn circuits(endpoints: &[Value], ids: bool, out: &mut Out) {
    let each = |e: &'_ Value| e["circuits"].as_array().cloned().unwrap_or_default();
    let rows: Vec<(&Value, Value)> = endpoints
        .iter()
        .flat_map(|e| each(e).into_iter().map(move |c| (e, c)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let mut header = vec!["PATH", "CIRCUIT", "OPEN SINCE", "NEXT PROBE", "CLOSED AT"];
    if ids {
        header.insert(0, "ENDPOINT");
    } else {
        header.insert(4, "HELD BACK");
    }
    let mut t = table(&header);
    for (e, c) in rows {
        let mut row = vec![
            text(&c["path"]),
            text(&c["state"]),
            text(&c["open_since"]),
            text(&c["next_probe_at"]),
            text(&c["closed_at"]),
        ];
        if ids {
            row.insert(0, text(&e["id"]));
        } else {
            row.insert(4, text(&c["held_back"]));
        }
        t.add_row(row);
    }
    out.line("\ncircuits:");
    out.line(t);
}

/// One endpoint, then its circuits.
pub fn endpoint(a: &Answer, out: &mut Out) {
    let mut shown = a.value.clone();
    shown["last_hour"] = span(&a["last_hour"]).into();
    shown["last_day"] = span(&a["last_day"]).into();
    let f = &a["last_failure"];
    if !f.is_null() {
        shown["last_failure"] =
            format!("{} {}", text(&f["at"]), failure(&f["status"], &f["error"])).into();
    }
    let p = &a["paused"];
    if !p.is_null() {
        shown["paused"] = format!("since {} by {}", text(&p["since"]), text(&p["by"])).into();
    }
    let n = &a["notifications"];
    if !n.is_null() {
        let at_least = if n["complete"] == false {
            "at least "
        } else {
            ""
        };
        shown["notifications"] = format!(
            "{at_least}{} pending, {} held (endpoint paused), {} held back (circuit open)",
            n["pending"], n["held"], n["held_back"]
        )
        .into();
    }
    let keys = [
        "id",
        "tenant",
        "url",
        "state",
        "paused",
        "notifications",
        "consecutive_failures",
        "failing_since",
        "last_failure",
        "last_hour",
        "last_day",
        "first_seen_at",
        "last_attempt_at",
        "last_success_at",
    ];
    fields(&shown, &keys, out);
    circuits(std::slice::from_ref(&a.value), false, out);
}

/// A page of subscriptions, and how to get the next one.
pub fn subscriptions(a: &Answer, out: &mut Out) {
    let items = a["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        out.line("no subscriptions");
    } else {
        let mut t = table(&["ID", "TENANT", "URL", "TOPICS", "ENABLED", "DESCRIPTION"]);
        for s in items {
            t.add_row([
                text(&s["id"]),
                text(&s["tenant"]),
                text(&s["url"]),
                list(&s["topics"]),
                text(&s["enabled"]),
                text(&s["description"]),
            ]);
        }
        out.line(t);
    }
    next_page(a, out);
}

pub fn subscription(a: &Answer, out: &mut Out) {
    let mut shown = a.value.clone();
    shown["topics"] = list(&a["topics"]).into();
    shown["settings"] = match &a["settings"] {
        Value::Object(s) if s.is_empty() => Value::Null,
        settings => settings.to_string().into(),
    };
    let keys = [
        "id",
        "tenant",
        "url",
        "topics",
        "enabled",
        "description",
        "settings",
        "created_at",
        "updated_at",
    ];
    fields(&shown, &keys, out);
}

/// A page of events, and how to get the next one.
pub fn events(a: &Answer, out: &mut Out) {
    let items = a["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        out.line("no events");
    } else {
        let mut t = table(&["ID", "TENANT", "TOPIC", "PUBLISHED", "DELIVERIES"]);
        for e in items {
            t.add_row([
                text(&e["id"]),
                text(&e["tenant"]),
                text(&e["topic"]),
                text(&e["created_at"]),
                text(&e["deliveries"]),
            ]);
        }
        out.line(t);
    }
    next_page(a, out);
}

/// What a producer wrote in an answer as a JSON value, as the API wrote it: an event's
/// `body`.
#[derive(Deserialize)]
struct EventBody<'a> {
    #[serde(borrow)]
    body: &'a RawValue,
}

/// A page of the topics catalog as the API wrote it, for each topic's `example`.
#[derive(Deserialize)]
struct Examples<'a> {
    #[serde(borrow)]
    items: Vec<Example<'a>>,
}

#[derive(Deserialize)]
struct Example<'a> {
    #[serde(borrow)]
    example: &'a RawValue,
}

/// One event, its body, then a table of its deliveries.
pub fn event(a: &Answer, out: &mut Out) {
    let keys = ["id", "tenant", "topic", "created_at", "idempotency_key"];
    fields(a, &keys, out);
    if let Ok(event) = serde_json::from_str::<EventBody>(&a.text) {
        body("body (application/json)", event.body.get(), true, out);
    }
    let deliveries = a["deliveries"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if deliveries.is_empty() {
        out.line("\nno subscription took it");
        return;
    }
    let mut t = table(&[
        "SUBSCRIPTION",
        "NOTIFICATION",
        "STATE",
        "ATTEMPTS",
        "NEXT ATTEMPT",
    ]);
    for d in deliveries {
        let state = match &d["error"] {
            Value::Null => text(&d["state"]),
            e => format!("refused: {}", text(&e["message"])),
        };
        t.add_row([
            text(&d["subscription"]),
            text(&d["notification"]),
            state,
            text(&d["attempts"]),
            text(&d["next_attempt_at"]),
        ]);
    }
    out.line(format!("\n{t}"));
}

/// The topics catalog, then each topic's latest example, and how to get the next page.
pub fn topics(a: &Answer, out: &mut Out) {
    let items = a["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        out.line("no topics");
    } else {
        let mut t = table(&["TOPIC", "LAST PUBLISHED", "LAST EVENT"]);
        for i in items {
            t.add_row([
                text(&i["topic"]),
                text(&i["last_published_at"]),
                text(&i["last_event"]),
            ]);
        }
        out.line(t);
    }
    let examples =
        serde_json::from_str::<Examples>(&a.text).map_or_else(|_| Vec::new(), |e| e.items);
    for (i, example) in items.iter().zip(examples) {
        let heading = format!(
            "example of {} ({})",
            text(&i["topic"]),
            text(&i["last_event"])
        );
        body(&heading, example.example.get(), true, out);
    }
    next_page(a, out);
}

/// Where the notifications are when none is scheduled (and none waits behind its
/// ordering key): each other state's count, with the `--state` that lists it.
fn elsewhere(counts: &Value, out: &mut Out) {
    let states = [
        (
            "scheduled",
            "retrying, held (endpoint paused) or held back (circuit open)",
            "--state retrying, --state held, --state held_back",
        ),
        ("in_flight", "in flight", "--state in_flight"),
        ("dead", "dead", "--state dead"),
        (
            "finished",
            "delivered or cancelled",
            "--state delivered, --state cancelled",
        ),
    ];
    for (field, what, option) in states {
        let n = counts[field].as_u64().unwrap_or(0);
        if n > 0 {
            out.line(format!("{n} {what}: list them with {option}"));
        }
    }
}

/// A list's values, comma-separated.
fn list(v: &Value) -> String {
    let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
    items.iter().map(text).collect::<Vec<_>>().join(",")
}

fn next_page(a: &Value, out: &mut Out) {
    if let Some(next) = a["next_cursor"].as_str() {
        out.line(format!("\nmore: --cursor {next}"));
    }
}

/// Attempts over a span: `38/41 ok (92.7%)`.
fn span(s: &Value) -> String {
    match s["success_rate"].as_f64() {
        Some(rate) => format!(
            "{}/{} ok ({:.1}%)",
            text(&s["successes"]),
            text(&s["attempts"]),
            rate * 100.0
        ),
        None => "no attempts".into(),
    }
}

pub fn stats(a: &Answer, out: &mut Out) {
    let mut t = table(&["STATE", "NOTIFICATIONS"]);
    for state in ["scheduled", "in_flight", "dead", "finished"] {
        t.add_row([state.to_string(), text(&a[state])]);
    }
    out.line(format!("{t}\n"));
    let mut t = table(&["DELETED BY RETENTION", "NOTIFICATIONS"]);
    for (reason, key) in [
        ("dead letters past max age", "dead_by_age"),
        ("dead letters beyond max count", "dead_by_count"),
        ("finished past max age", "finished_by_age"),
    ] {
        t.add_row([reason.to_string(), text(&a["trimmed"][key])]);
    }
    out.line(t);
}

/// How many a bulk action changed: "replayed 3 dead letters", "resent 2 notifications".
pub fn count(verb: &str, noun: &str, a: &Answer, out: &mut Out) {
    out.line(format!("{verb} {} {noun}", text(&a["count"])));
}

/// The history, a table per cycle under the line that names the cycle as the review
/// page does (`Registered`, `Replay 1`, `Resend 2`, …) and says when it began, where it
/// went and how many attempts it made; attempts numbered within their cycle, a circuit's
/// note (no request) marked `-`.
fn history(a: &Value, out: &mut Out) {
    let entries = a["history"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let cycles = a["cycles"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for cycle in cycles {
        let number = &cycle["cycle"];
        let own: Vec<&Value> = entries.iter().filter(|e| &e["cycle"] == number).collect();
        let plural = if cycle["attempts"] == 1 { "" } else { "s" };
        out.line(format!(
            "\n{}, {}, to {}: {} attempt{plural}",
            text(&cycle["name"]),
            text(&cycle["began_at"]),
            text(&cycle["url"]),
            text(&cycle["attempts"]),
        ));
        if !own.is_empty() {
            out.line(entry_table(&own));
        }
    }
    let last = entries.iter().rev().find(|e| e["kind"] == "attempt");
    let headers = last.and_then(|h| h["response_headers"].as_array());
    if let (Some(last), Some(headers)) = (last, headers.filter(|h| !h.is_empty())) {
        let cycle = cycles.iter().find(|c| c["cycle"] == last["cycle"]);
        out.line(format!(
            "\nresponse headers of the last attempt ({}, {}):",
            text(cycle.map_or(&Value::Null, |c| &c["name"])),
            text(&last["at"])
        ));
        for h in headers {
            out.line(format!("  {}: {}", text(&h["name"]), text(&h["value"])));
        }
    }
}

/// One cycle's entries as a table.
fn entry_table(entries: &[&Value]) -> Table {
    let mut t = table(&["#", "AT", "STATUS", "ERROR", "MS", "RESPONSE"]);
    let mut n = 0;
    for e in entries {
        let number = match e["kind"] == "attempt" {
            true => {
                n += 1;
                n.to_string()
            }
            false => "-".to_string(),
        };
        t.add_row([
            number,
            text(&e["at"]),
            text(&e["status"]),
            text(&e["error"]),
            text(&e["duration_ms"]),
            excerpt(&text(&e["response"])),
        ]);
    }
    t
}

/// `key: value` lines for the fields present, aligned.
fn fields(a: &Value, keys: &[&str], out: &mut Out) {
    let width = keys.iter().map(|k| k.len()).max().unwrap_or(0) + 1;
    for key in keys {
        let shown = match (*key, a.get(*key)) {
            (_, None | Some(Value::Null)) => None,
            // Only a notification of an ordering key waits, or not.
            ("waiting", Some(_)) if a["ordering_key"].is_null() => None,
            ("success", Some(rule)) => Some(success_rule(rule)),
            ("attempts", Some(count)) => Some(attempts(a, count)),
            (_, Some(v)) => Some(text(v)),
        };
        if let Some(shown) = shown {
            out.line(format!("{:width$} {shown}", format!("{key}:")));
        }
    }
}

/// A success rule as a sentence (`200|204 and body `success``), or its JSON if it does
/// not read as one.
fn success_rule(v: &Value) -> String {
    serde_json::from_value::<crate::domain::SuccessRule>(v.clone()).map_or_else(
        |_| text(v),
        |rule| printable(&rule.to_string()).into_owned(),
    )
}

pub(super) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING).set_header(header.to_vec());
    t
}

/// A value as a cell: strings without quotes, null as `-`, invisible characters other
/// than line breaks and tabs escaped.
pub(super) fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => printable(s).into_owned(),
        other => escaped_json(&other.to_string()),
    }
}

/// Whether the terminal is kept from `c`: an invisible character, but for line breaks
/// and tabs, which lay out what is printed.
fn harmful(c: char) -> bool {
    invisible(c) && c != '\n' && c != '\t'
}

/// `s` with every `harmful` character escaped (`\u{1b}`, `\u{202e}`), so that what a
/// receiver or a producer wrote can neither drive the terminal nor read as something
/// else.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(harmful) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| match harmful(c) {
                true => c.escape_default().to_string(),
                false => c.to_string(),
            })
            .collect(),
    )
}

/// JSON text with each `harmful` character written as a JSON escape (`\u202e`): the
/// same JSON. serde_json escapes only the C0 controls, and outside its strings JSON text
/// holds no character `harmful` would escape.
fn escaped_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if !harmful(c) {
            out.push(c);
            continue;
        }
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    }
    out
}

/// The first 40 characters on one line.
fn excerpt(s: &str) -> String {
    let one_line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let shown = match one_line.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    };
    printable(&shown).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_escaped() {
        let title = Value::String("ok\u{1b}]0;owned\u{7}\r\nnext\tline".into());
        assert_eq!(text(&title), "ok\\u{1b}]0;owned\\u{7}\\r\nnext\tline");
        assert_eq!(excerpt("a\u{1b}[2Jb"), "a [2Jb");
    }

    #[test]
    fn json_is_laid_out_with_every_token_as_written() {
        let written = "{\"id\":12345678901234567890123, \"amount\" :10.10,\"e\":1E+2,\r\n\
                       \"b\":{\"z\":[-0,-0.0],\"a\":\"caf\\u00e9 \\\"{[,: \"},\"n\":{ },\"l\":[]}";
        let laid_out = [
            "{",
            "  \"id\": 12345678901234567890123,",
            "  \"amount\": 10.10,",
            "  \"e\": 1E+2,",
            "  \"b\": {",
            "    \"z\": [",
            "      -0,",
            "      -0.0",
            "    ],",
            "    \"a\": \"caf\\u00e9 \\\"{[,: \"",
            "  },",
            "  \"n\": {},",
            "  \"l\": []",
            "}",
        ];
        assert_eq!(pretty_json(written), Some(laid_out.join("\n")));
        assert_eq!(pretty_json(" 1E+2 ").as_deref(), Some("1E+2"));
        assert_eq!(pretty_json("[1e400]").as_deref(), Some("[\n  1e400\n]"));
        for not_json in ["{\"a\": 1} x", "{\"a\": }", "order=1", ""] {
            assert_eq!(pretty_json(not_json), None, "{not_json}");
        }
    }

    /// An endpoint whose circuit at one path is open and holds two back, and whose
    /// circuit at another closed, as `GET /endpoints/{id}` answers.
    fn endpoint_with_circuits() -> Value {
        serde_json::json!({
            "id": "ep_0123456789abcdef01234567", "tenant": "default",
            "url": "https://shop.example", "state": "failing",
            "first_seen_at": "2026-01-01T00:00:00.000Z",
            "last_attempt_at": "2026-01-01T06:11:40.000Z", "last_success_at": null,
            "failing_since": "2026-01-01T06:11:20.000Z", "consecutive_failures": 10,
            "last_failure": {"at": "2026-01-01T06:11:40.000Z", "status": 503, "error": null},
            "last_hour": {"attempts": 10, "successes": 0, "success_rate": 0.0},
            "last_day": {"attempts": 10, "successes": 0, "success_rate": 0.0},
            "paused": null,
            "circuits": [
                {"path": "/hook", "state": "open", "open_since": "2026-01-01T06:11:33.000Z",
                 "next_probe_at": "2026-01-01T06:12:03.000Z", "closed_at": null, "held_back": 2},
                {"path": "/refunds", "state": "closed", "open_since": null,
                 "next_probe_at": null, "closed_at": "2026-01-01T05:00:00.000Z", "held_back": 0},
            ],
            "notifications": {"pending": 1, "held": 0, "held_back": 2, "complete": true},
        })
    }

    #[test]
    fn one_endpoint_shows_each_circuit_and_what_it_holds_back() {
        let mut out = Out::default();
        endpoint(&Answer::from(endpoint_with_circuits()), &mut out);
        let shown = [
            "id:                   ep_0123456789abcdef01234567",
            "tenant:               default",
            "url:                  https://shop.example",
            "state:                failing",
            "notifications:        1 pending, 0 held (endpoint paused), 2 held back (circuit open)",
            "consecutive_failures: 10",
            "failing_since:        2026-01-01T06:11:20.000Z",
            "last_failure:         2026-01-01T06:11:40.000Z HTTP 503",
            "last_hour:            0/10 ok (0.0%)",
            "last_day:             0/10 ok (0.0%)",
            "first_seen_at:        2026-01-01T00:00:00.000Z",
            "last_attempt_at:      2026-01-01T06:11:40.000Z",
            "",
            "circuits:",
            " PATH      CIRCUIT  OPEN SINCE                NEXT PROBE                HELD BACK  CLOSED AT",
            " /hook     open     2026-01-01T06:11:33.000Z  2026-01-01T06:12:03.000Z  2          -",
            " /refunds  closed   -                         -                         0          2026-01-01T05:00:00.000Z",
        ];
        assert_eq!(lines(&out.0), shown, "{}", out.0);
    }

    /// What was printed, a line each, without the spaces a table ends its lines with.
    fn lines(printed: &str) -> Vec<&str> {
        printed.lines().map(str::trim_end).collect()
    }

    #[test]
    fn a_list_of_endpoints_shows_each_circuit_under_its_endpoint() {
        let mut listed = endpoint_with_circuits();
        listed.as_object_mut().unwrap().remove("notifications");
        for c in listed["circuits"].as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("held_back");
        }
        let page = serde_json::json!({"items": [listed], "next_cursor": null});
        let mut out = Out::default();
        endpoints(&Answer::from(page), &mut out);
        let shown = [
            " ID                           TENANT   URL                   STATE    FAILURES  SINCE                     LAST HOUR       LAST SUCCESS",
            " ep_0123456789abcdef01234567  default  https://shop.example  failing  10        2026-01-01T06:11:20.000Z  0/10 ok (0.0%)  -",
            "",
            "circuits:",
            " ENDPOINT                     PATH      CIRCUIT  OPEN SINCE                NEXT PROBE                CLOSED AT",
            " ep_0123456789abcdef01234567  /hook     open     2026-01-01T06:11:33.000Z  2026-01-01T06:12:03.000Z  -",
            " ep_0123456789abcdef01234567  /refunds  closed   -                         -                         2026-01-01T05:00:00.000Z",
        ];
        assert_eq!(lines(&out.0), shown, "{}", out.0);
    }

    #[test]
    fn format_characters_are_shown_escaped_and_json_stays_the_same_json() {
        let topic = Value::String("paid\u{202e}gnp.exe\u{200b}\u{9b}\u{e0041}".into());
        let shown = "paid\\u{202e}gnp.exe\\u{200b}\\u{9b}\\u{e0041}";
        assert_eq!(text(&topic), shown);
        assert_eq!(
            text(&Value::Array(vec![topic.clone()])),
            "[\"paid\\u202egnp.exe\\u200b\\u009b\\udb40\\udc41\"]"
        );
        assert_eq!(excerpt("x\u{202e}y"), "x\\u{202e}y");
        let answer = serde_json::json!({"topic": topic, "n": [1, "é"]});
        let json = escaped_json(&serde_json::to_string_pretty(&answer).unwrap());
        assert!(json.chars().all(|c| !harmful(c)), "{json}");
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), answer);
    }
}
