//! Reading the mixed arrays that the Lua scripts return.

use std::time::Duration;

use redis::Value;

use crate::store::{StoreError, StoreResult};

pub fn int_at(reply: &[Value], i: usize) -> StoreResult<i64> {
    match reply.get(i) {
        Some(Value::Int(n)) => Ok(*n),
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(i, "an integer")),
        _ => Err(bad(i, "an integer")),
    }
}

pub fn text_at(reply: &[Value], i: usize) -> StoreResult<String> {
    match reply.get(i) {
        Some(Value::BulkString(b)) => {
            String::from_utf8(b.clone()).map_err(|_| bad(i, "UTF-8 text"))
        }
        Some(Value::SimpleString(s)) => Ok(s.clone()),
        _ => Err(bad(i, "text")),
    }
}

/// A script's "new earliest" answer (`announce_if_heads` in common.lua): 0 for none, else
/// 1 + the ms until it is due.
pub fn earliest_at(reply: &[Value], i: usize) -> StoreResult<Option<Duration>> {
    let n = int_at(reply, i)?;
    Ok((n >= 1).then(|| Duration::from_millis((n - 1) as u64)))
}

fn bad(i: usize, what: &str) -> StoreError {
    StoreError::Corrupt(format!("script reply item {i} is not {what}"))
}
