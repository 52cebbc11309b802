//! Collections in the embedded file: the `documents` table, keyed by
//! `(collection name, key)`, written by the writer thread, all of a write in its
//! transaction.

use std::ops::Bound;

use redb::{ReadTransaction, ReadableTable};

use super::tables::{DbResult, Tables, DOCUMENTS};
use crate::store::collections::{Change, Collection, End, Scan};

/// Applies `changes` if every expectation holds; whether they were applied.
pub fn write(t: &mut Tables, changes: &[Change]) -> DbResult<bool> {
    for change in changes {
        let held = t
            .documents
            .get((change.collection.name(), change.key.as_str()))?
            .map(|d| d.value().to_string());
        if !change.expect.holds(held.as_deref()) {
            return Ok(false);
        }
    }
    for change in changes {
        let key = (change.collection.name(), change.key.as_str());
        match &change.put {
            Some(doc) => t.documents.insert(key, doc.as_str())?,
            None => t.documents.remove(key)?,
        };
    }
    Ok(true)
}

/// The documents under `keys`.
pub fn read(
    tx: &ReadTransaction,
    collection: Collection,
    keys: &[String],
) -> DbResult<Vec<Option<String>>> {
    let table = tx.open_table(DOCUMENTS)?;
    keys.iter()
        .map(|k| {
            let doc = table.get((collection.name(), k.as_str()))?;
            Ok(doc.map(|d| d.value().to_string()))
        })
        .collect()
}

fn bound<'a>(name: &'a str, end: &'a End) -> Bound<(&'a str, &'a str)> {
    let key = (name, end.key.as_str());
    match end.inclusive {
        true => Bound::Included(key),
        false => Bound::Excluded(key),
    }
}

/// The keys and documents `scan` reads.
pub fn scan(
    tx: &ReadTransaction,
    collection: Collection,
    scan: &Scan,
) -> DbResult<Vec<(String, String)>> {
    let table = tx.open_table(DOCUMENTS)?;
    let name = collection.name();
    let (low, high) = scan.bounds();
    let range = table.range::<(&str, &str)>((bound(name, &low), bound(name, &high)))?;
    let entry = |e: Result<_, redb::StorageError>| -> DbResult<(String, String)> {
        let (k, v): (redb::AccessGuard<(&str, &str)>, redb::AccessGuard<&str>) = e?;
        Ok((k.value().1.to_string(), v.value().to_string()))
    };
    match scan.newest_first {
        true => range.rev().take(scan.limit).map(entry).collect(),
        false => range.take(scan.limit).map(entry).collect(),
    }
}
