//! The Postgres store's endpoint records: tallies added, the pauses they decide stored,
//! pauses set by hand, idle records forgotten. What a record becomes is
//! `endpoints::health`'s rule; this locks, reads and writes it.

use std::collections::HashMap;

use super::tx::{col, corrupt, PgResult, Tx};
use crate::endpoints::health::{
    self, Added, EndpointNotice, EndpointPause, EndpointRecord, EndpointRules,
};
use crate::store::EndpointTally;

/// Adds each tally to its endpoint's record under `rules`: rows made for new endpoints
/// first (so that two instances adding to a new one both lock it), then locked, worked
/// out and written, with the pauses they decide. What the records tell.
pub async fn record_endpoints(
    t: &mut Tx<'_>,
    tallies: &[EndpointTally],
    rules: &EndpointRules,
) -> PgResult<Vec<EndpointNotice>> {
    let keys: Vec<String> = tallies
        .iter()
        .map(|t| health::key(&t.endpoint.tenant, &t.endpoint.id()))
        .collect();
    t.execute(
        "INSERT INTO postback.endpoints (key, record) SELECT unnest($1::text[]), ''
         ON CONFLICT (key) DO NOTHING",
        &[&keys],
    )
    .await?;
    let rows = t
        .query(
            "SELECT key, record FROM postback.endpoints WHERE key = ANY($1) ORDER BY key FOR UPDATE",
            &[&keys],
        )
        .await?;
    let stored: HashMap<String, String> = rows
        .iter()
        .map(|r| Ok((col(r, "key")?, col(r, "record")?)))
        .collect::<PgResult<_>>()?;
    let now = crate::clock::now_ms();
    let mut added = Vec::with_capacity(keys.len());
    for (key, tally) in keys.iter().zip(tallies) {
        let before = stored
            .get(key)
            .map(String::as_str)
            .filter(|r| !r.is_empty());
        added.push(EndpointRecord::added(key, before, tally, now, rules).map_err(corrupt)?);
    }
    let records: Vec<&str> = added.iter().map(|a| a.json.as_str()).collect();
    t.execute(
        "UPDATE postback.endpoints e SET record = n.record
         FROM unnest($1::text[], $2::text[]) AS n(key, record) WHERE e.key = n.key",
        &[&keys, &records],
    )
    .await?;
    let paused = insert_pauses(t, &keys, &added).await?;
    let told = keys.iter().zip(added);
    Ok(told
        .flat_map(|(key, a)| a.notices(paused.contains(key)))
        .collect())
}

/// Stores the pauses that `added` (under `keys`) decide, for endpoints not paused
/// already; the keys of those it paused.
async fn insert_pauses(t: &mut Tx<'_>, keys: &[String], added: &[Added]) -> PgResult<Vec<String>> {
    let (keys, pauses): (Vec<&String>, Vec<String>) = keys
        .iter()
        .zip(added)
        .filter_map(|(key, a)| Some((key, a.pause.as_ref()?.encode())))
        .unzip();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = t
        .query(
            "INSERT INTO postback.endpoint_pauses (key, pause)
             SELECT * FROM unnest($1::text[], $2::text[])
             ON CONFLICT (key) DO NOTHING RETURNING key",
            &[&keys, &pauses],
        )
        .await?;
    rows.iter().map(|r| col(r, "key")).collect()
}

/// Pauses the endpoint of `key` with `pause`, or resumes it, noting when in its record;
/// whether that changed whether it is paused.
pub async fn set_pause(t: &mut Tx<'_>, key: &str, pause: Option<&EndpointPause>) -> PgResult<bool> {
    if let Some(p) = pause {
        let set = t
            .execute(
                "INSERT INTO postback.endpoint_pauses (key, pause) VALUES ($1, $2)
                 ON CONFLICT (key) DO NOTHING",
                &[&key, &p.encode()],
            )
            .await?;
        return Ok(set > 0);
    }
    let rows = t
        .query(
            "SELECT record FROM postback.endpoints WHERE key = $1 AND record <> '' FOR UPDATE",
            &[&key],
        )
        .await?;
    if let Some(row) = rows.first() {
        let resumed = EndpointRecord::resumed(key, col(row, "record")?, crate::clock::now_ms());
        t.execute(
            "UPDATE postback.endpoints SET record = $2 WHERE key = $1",
            &[&key, &resumed.map_err(corrupt)?],
        )
        .await?;
    }
    let removed = t
        .execute(
            "DELETE FROM postback.endpoint_pauses WHERE key = $1",
            &[&key],
        )
        .await?;
    Ok(removed > 0)
}

/// Forgets the idle records among up to `n` after `after` (rows locked as they are read,
/// so none changes before it is deleted); how many, and the key to go on from.
pub async fn forget_endpoints(
    t: &mut Tx<'_>,
    idle_before: i64,
    after: Option<&str>,
    n: usize,
) -> PgResult<(usize, Option<String>)> {
    let rows = t
        .query(
            "SELECT key, record FROM postback.endpoints WHERE key > $1 ORDER BY key LIMIT $2
             FOR UPDATE SKIP LOCKED",
            &[&after.unwrap_or(""), &(n as i64)],
        )
        .await?;
    let read: Vec<(String, String)> = rows
        .iter()
        .map(|r| Ok((col(r, "key")?, col(r, "record")?)))
        .collect::<PgResult<_>>()?;
    let next = (read.len() == n)
        .then(|| read.last().map(|(k, _)| k.clone()))
        .flatten();
    let idle: Vec<&String> = read
        .iter()
        .filter(|(key, json)| !json.is_empty() && health::is_idle(key, json, idle_before))
        .map(|(key, _)| key)
        .collect();
    if idle.is_empty() {
        return Ok((0, next));
    }
    let forgotten = t
        .execute(
            "DELETE FROM postback.endpoints e WHERE key = ANY($1)
             AND NOT EXISTS (SELECT 1 FROM postback.endpoint_pauses p WHERE p.key = e.key)",
            &[&idle],
        )
        .await?;
    Ok((forgotten as usize, next))
}
