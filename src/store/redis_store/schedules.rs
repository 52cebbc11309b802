//! Schedules kept once per shard (`{postback:N}:schedules`: reference → schedule text),
//! which the first lines of specs refer to (`store::spec`). `enqueue.lua` adds one the
//! first time a shard's registrations use it (up to `MAX_SHARED` per shard; past that,
//! schedules are written out), and nothing changes or removes one, so an instance keeps
//! those it has read for as long as it runs and reads a shard's again only when a spec
//! names one it has not seen.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;

use super::conn::Conn;
use super::store_error;
use crate::lifecycle::schedule_intervals;
use crate::store::keys::ShardKeys;
use crate::store::spec::SharedSchedules;
use crate::store::StoreResult;

/// Most schedules one shard keeps once (`lua/enqueue.lua` is given it): producers that
/// send a schedule of their own with every notification cannot grow the hash further.
pub const MAX_SHARED: usize = 256;

/// The shared schedules this instance has read, by shard.
#[derive(Default)]
pub struct ScheduleBook {
    /// The shard's `schedules` key → reference → intervals (ms).
    known: Mutex<HashMap<String, HashMap<String, Vec<u64>>>>,
}

impl ScheduleBook {
    /// What `read` makes of replies of the shard of `keys`, with that shard's shared
    /// schedules; read again, once the shard's schedules are loaded from Redis, when it
    /// asked for one this instance had not read yet.
    pub async fn reading<T>(
        &self,
        conn: &Conn,
        keys: &ShardKeys,
        read: impl Fn(&dyn SharedSchedules) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let shard = ShardSchedules {
            book: self,
            key: keys.schedules(),
            missed: Cell::new(false),
        };
        let first = read(&shard);
        if !shard.missed.get() {
            return first;
        }
        self.load(conn, keys).await?;
        read(&shard)
    }

    /// Reads every schedule the shard of `keys` keeps (at most `MAX_SHARED`).
    async fn load(&self, conn: &Conn, keys: &ShardKeys) -> StoreResult<()> {
        let texts: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(keys.schedules())
            .query_async(&mut conn.clone())
            .await
            .map_err(store_error)?;
        let schedules = texts
            .into_iter()
            .map(|(reference, text)| (reference, schedule_intervals(&text)))
            .collect();
        self.lock().insert(keys.schedules().to_string(), schedules);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Vec<u64>>>> {
        // The map is only ever inserted into whole: a panic elsewhere cannot leave it
        // half written.
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One shard's shared schedules, as a reply is read.
struct ShardSchedules<'a> {
    book: &'a ScheduleBook,
    key: &'a str,
    /// Whether a reference was asked for that the book does not hold.
    missed: Cell<bool>,
}

impl SharedSchedules for ShardSchedules<'_> {
    fn get(&self, reference: &str) -> Option<Vec<u64>> {
        let found = self
            .book
            .lock()
            .get(self.key)
            .and_then(|shard| shard.get(reference).cloned());
        self.missed.set(self.missed.get() || found.is_none());
        found
    }
}
