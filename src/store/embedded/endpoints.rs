//! Endpoints' health in the embedded file: the `endpoints` table, key `<tenant> <id>`
//! (`endpoints::health::key`) → the record's JSON, read and written by the writer thread;
//! and the `endpoint_pauses` table, the same key → the pause of a paused endpoint.

use redb::{ReadTransaction, ReadableTable};

use super::tables::{DbError, DbResult, Tables, ENDPOINTS, PAUSES};
use crate::endpoints::health::{
    self, EndpointNotice, EndpointPause, EndpointRecord, EndpointRules,
};
use crate::store::EndpointTally;

/// Adds each tally to its endpoint's record under `rules`, with the pauses they decide;
/// what the records tell.
pub fn record(
    t: &mut Tables,
    tallies: &[EndpointTally],
    rules: &EndpointRules,
) -> DbResult<Vec<EndpointNotice>> {
    let now = crate::clock::now_ms();
    let mut told = Vec::new();
    for tally in tallies {
        let key = health::key(&tally.endpoint.tenant, &tally.endpoint.id());
        let stored = t
            .endpoints
            .get(key.as_str())?
            .map(|j| j.value().to_string());
        let added =
            EndpointRecord::added(&key, stored.as_deref(), tally, now, rules).map_err(corrupt)?;
        t.endpoints.insert(key.as_str(), added.json.as_str())?;
        let paused = match &added.pause {
            Some(pause) => set_pause(t, &key, Some(pause))?,
            None => false,
        };
        told.extend(added.notices(paused));
    }
    Ok(told)
}

/// Up to `n` records after `after`, within `tenant`'s if named, in key order.
pub fn list(
    tx: &ReadTransaction,
    tenant: Option<&crate::domain::Tenant>,
    after: Option<&str>,
    n: usize,
) -> DbResult<Vec<EndpointRecord>> {
    let table = tx.open_table(ENDPOINTS)?;
    let (low, high) = health::range(tenant, after);
    let range = match &low {
        Some((key, _)) => table.range(key.as_str()..)?,
        None => table.range::<&str>(..)?,
    };
    let mut out = Vec::with_capacity(n);
    for entry in range {
        let (key, json) = entry?;
        let key = key.value();
        if matches!(&low, Some((first, false)) if key == first.as_str()) {
            continue;
        }
        if high.as_deref().is_some_and(|h| key >= h) || out.len() == n {
            break;
        }
        out.push(EndpointRecord::decode(key, json.value()).map_err(corrupt)?);
    }
    Ok(out)
}

/// Forgets the idle records among up to `n` after `after`; how many, and the key to go
/// on from.
pub fn forget(
    t: &mut Tables,
    idle_before: i64,
    after: Option<&str>,
    n: usize,
) -> DbResult<(usize, Option<String>)> {
    let read: Vec<(String, String)> = {
        let range = match after {
            Some(a) => t
                .endpoints
                .range::<&str>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))?,
            None => t.endpoints.range::<&str>(..)?,
        };
        let entries = range
            .take(n)
            .map(|e| e.map(|(k, v)| (k.value().to_string(), v.value().to_string())));
        entries.collect::<Result<_, _>>()?
    };
    let next = (read.len() == n)
        .then(|| read.last().map(|(k, _)| k.clone()))
        .flatten();
    let mut forgotten = 0;
    for (key, json) in &read {
        let paused = t.pauses.get(key.as_str())?.is_some();
        if !paused && health::is_idle(key, json, idle_before) {
            t.endpoints.remove(key.as_str())?;
            forgotten += 1;
        }
    }
    Ok((forgotten, next))
}

/// The record under `key`, if any.
pub fn get(tx: &ReadTransaction, key: &str) -> DbResult<Option<EndpointRecord>> {
    let table = tx.open_table(ENDPOINTS)?;
    let json = table.get(key)?;
    json.map(|j| EndpointRecord::decode(key, j.value()).map_err(corrupt))
        .transpose()
}

fn corrupt(e: crate::store::StoreError) -> DbError {
    DbError::corrupted(e.to_string())
}

/// Pauses the endpoint of `key`, or resumes it (noting when in its record); whether that
/// changed whether it is paused.
pub fn set_pause(t: &mut Tables, key: &str, pause: Option<&EndpointPause>) -> DbResult<bool> {
    Ok(match pause {
        Some(_) if t.pauses.get(key)?.is_some() => false,
        Some(p) => t.pauses.insert(key, p.encode().as_str())?.is_none(),
        None => {
            let stored = t.endpoints.get(key)?.map(|j| j.value().to_string());
            if let Some(json) = stored {
                let resumed = EndpointRecord::resumed(key, &json, crate::clock::now_ms());
                t.endpoints
                    .insert(key, resumed.map_err(corrupt)?.as_str())?;
            }
            t.pauses.remove(key)?.is_some()
        }
    })
}

/// Every pause, by key.
pub fn pauses(tx: &ReadTransaction) -> DbResult<Vec<(String, EndpointPause)>> {
    let table = tx.open_table(PAUSES)?;
    let mut out = Vec::new();
    for entry in table.iter()? {
        let (key, json) = entry?;
        let key = key.value().to_string();
        let pause = EndpointPause::decode(&key, json.value()).map_err(corrupt)?;
        out.push((key, pause));
    }
    Ok(out)
}
