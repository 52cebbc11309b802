//! Collections on Redis: each a hash of documents, `{<prefix>:collections}:<name>:docs`,
//! and its keys in a sorted set at one score, `{<prefix>:collections}:<name>:keys`, which
//! lists them in order (`ZRANGE … BYLEX`). One hash tag for them all, so that on a
//! cluster a write of several collections is one script call on one slot
//! (`collections.lua`), sent on the connection whose writes wait for `store.replica_acks`.

use async_trait::async_trait;

use super::{script_error, store_error, RedisStore};
use crate::store::collections::{Change, Collection, Collections, End, Expect, Scan};
use crate::store::StoreResult;

/// The key names of the collections.
pub struct CollectionKeys {
    tag: String,
}

impl CollectionKeys {
    pub fn new(key_prefix: &str) -> Self {
        Self {
            tag: format!("{{{key_prefix}:collections}}"),
        }
    }

    fn docs(&self, c: Collection) -> String {
        format!("{}:{}:docs", self.tag, c.name())
    }

    fn keys(&self, c: Collection) -> String {
        format!("{}:{}:keys", self.tag, c.name())
    }
}

/// A scan's end as `ZRANGE … BYLEX` writes it.
fn lex(end: &End) -> String {
    format!("{}{}", if end.inclusive { '[' } else { '(' }, end.key)
}

#[async_trait]
impl Collections for RedisStore {
    async fn write(&self, changes: &[Change]) -> StoreResult<bool> {
        let Some(first) = changes.first() else {
            return Ok(true);
        };
        let mut call = self.scripts.collections.prepare_invoke();
        let mut touched: Vec<Collection> = Vec::new();
        for change in changes {
            let at = match touched.iter().position(|c| *c == change.collection) {
                Some(i) => i,
                None => {
                    call.key(self.collection_keys.docs(change.collection))
                        .key(self.collection_keys.keys(change.collection));
                    touched.push(change.collection);
                    touched.len() - 1
                }
            };
            let (expect, expected) = match &change.expect {
                Expect::Anything => ("*", ""),
                Expect::Nothing => ("-", ""),
                Expect::Exactly(doc) => ("=", doc.as_str()),
            };
            let (op, doc) = match &change.put {
                Some(doc) => ("p", doc.as_str()),
                None => ("d", ""),
            };
            call.arg(2 * at + 1)
                .arg(&change.key)
                .arg(expect)
                .arg(expected)
                .arg(op)
                .arg(doc);
        }
        let mut writes = self
            .to_replicas
            .on(&self.collection_keys.docs(first.collection));
        let applied: i64 = call
            .invoke_async(&mut writes)
            .await
            .map_err(script_error("collections"))?;
        Ok(applied == 1)
    }

    async fn read(
        &self,
        collection: Collection,
        keys: &[String],
    ) -> StoreResult<Vec<Option<String>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        redis::cmd("HMGET")
            .arg(self.collection_keys.docs(collection))
            .arg(keys)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)
    }

    async fn scan(
        &self,
        collection: Collection,
        scan: &Scan,
    ) -> StoreResult<Vec<(String, String)>> {
        let (low, high) = scan.bounds();
        let (from, to) = match scan.newest_first {
            true => (lex(&high), lex(&low)),
            false => (lex(&low), lex(&high)),
        };
        let mut range = redis::cmd("ZRANGE");
        range
            .arg(self.collection_keys.keys(collection))
            .arg(from)
            .arg(to)
            .arg("BYLEX");
        if scan.newest_first {
            range.arg("REV");
        }
        let keys: Vec<String> = range
            .arg("LIMIT")
            .arg(0)
            .arg(scan.limit)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        let docs = self.read(collection, &keys).await?;
        // A key deleted between the two reads is left out.
        Ok(keys
            .into_iter()
            .zip(docs)
            .filter_map(|(k, d)| Some((k, d?)))
            .collect())
    }
}
