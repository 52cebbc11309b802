//! `postback notify --batch FILE`: every line of a file a notification, registered
//! through `POST /notify/batch` 1,000 at a time, each line's result printed beside its
//! line number.

use std::io::Read;
use std::path::Path;

use anyhow::Context;
use serde_json::json;
use serde_json::value::RawValue;

use super::client::{Answer, Client};
use super::print::{self, Out};
use super::ApiArgs;
use crate::api::batch::MAX_ITEMS;

pub async fn register(file: &Path, api: &ApiArgs) -> anyhow::Result<()> {
    let items = read(file)?;
    if items.is_empty() {
        anyhow::bail!("{}: no notifications in it", file.display());
    }
    let client = Client::new(api)?;
    let mut results = Vec::with_capacity(items.len());
    for chunk in items.chunks(MAX_ITEMS) {
        // Each line goes as it was written: never parsed and written out again.
        let lines: Vec<&str> = chunk.iter().map(|(_, item)| item.get()).collect();
        let request = format!("{{\"items\":[{}]}}", lines.join(","));
        let answer = client.post_text("/notify/batch", request, None).await?;
        let answered = answer["items"].as_array().cloned().unwrap_or_default();
        for ((line, _), mut result) in chunk.iter().zip(answered) {
            result["line"] = json!(line);
            results.push(result);
        }
    }
    let refused = results.iter().filter(|r| r.get("error").is_some()).count();
    print::answer(api, &json!({ "items": results }).into(), table)?;
    eprintln!("registered {}, refused {refused}", results.len() - refused);
    if refused > 0 {
        anyhow::bail!("{refused} of {} notifications were refused", results.len());
    }
    Ok(())
}

/// The non-blank lines of `file` (`-`: standard input), each checked to be one JSON
/// value and kept as written, with their line numbers.
fn read(file: &Path) -> anyhow::Result<Vec<(usize, Box<RawValue>)>> {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| file.display().to_string())?
    };
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let item = RawValue::from_string(line.trim().to_string())
                .with_context(|| format!("{} line {}: not JSON", file.display(), i + 1))?;
            Ok((i + 1, item))
        })
        .collect()
}

fn table(a: &Answer, out: &mut Out) {
    let mut t = print::table(&["LINE", "ID", "STATE", "REFUSED"]);
    for r in a["items"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let refused = match r.get("error") {
            Some(e) => format!(
                "{}: {}",
                print::text(&e["code"]),
                print::text(&e["message"])
            ),
            None => String::new(),
        };
        t.add_row([
            print::text(&r["line"]),
            print::text(&r["id"]),
            print::text(&r["state"]),
            refused,
        ]);
    }
    out.line(t);
}
