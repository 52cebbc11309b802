//! Idempotency keys of registrations placed off their key's degraded shard (`Placement`):
//! the key is kept at that shard before the notification is stored elsewhere, so that a
//! repeat meets it wherever the repeat is placed, there once the shard has recovered
//! included. A key there may name a notification that no shard holds: one whose
//! registration is under way (a repeat is told to try again), or one that was never
//! stored (its registration failed after the key was kept: the key is taken over).
//! `under_way` alone decides which.

use super::{store_error, RedisStore};
use crate::domain::{JobId, Notification};
use crate::store::keys::ShardKeys;
use crate::store::{Enqueued, Idempotency, Reads, StoreError, StoreResult};

/// How often a registration moved off its key's degraded shard tries to keep the key
/// there while other repeats of it change it.
const TAKE_OVER_TRIES: usize = 3;

/// How long after its id was made a notification that a key names may still be on its
/// way to being stored: a registration is answered within the store's response and
/// replica timeouts, far less than this, and ids are made by instances whose clocks
/// agree far better.
const UNDER_WAY_MS: i64 = 30_000;

/// What a key names.
enum Named {
    /// A stored notification: a repeat is answered with it.
    Stored(Enqueued),
    /// A notification no shard holds, whose registration may still store it.
    UnderWay(JobId),
    /// A notification no shard holds, whose registration is over.
    Gone,
}

/// Whether `id`, named by a key and held by no shard, may still be stored. An id of an
/// earlier build holds no time: its registration is long over.
fn under_way(id: &JobId) -> bool {
    id.made_at_ms()
        .is_some_and(|at| crate::clock::now_ms() - at < UNDER_WAY_MS)
}

fn not_stored_yet(id: &JobId) -> StoreError {
    StoreError::Unavailable(format!(
        "the notification its idempotency key names ({id}) is not stored yet"
    ))
}

impl RedisStore {
    /// For a registration placed off its idempotency key's degraded shard, before it is
    /// stored: the notification the key registered already (kept at that shard: it was
    /// registered there before the shard was seen degraded, answered 503 but stored on
    /// its primary, or moved elsewhere earlier), or its refusal for another request; 503
    /// while that one's registration is under way; else the key is kept there now,
    /// naming this notification. Refused (503) when that shard's primary cannot keep it:
    /// storing the notification elsewhere unkept would let a repeat register it again.
    pub(super) async fn meet_key_where_moved_from(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
    ) -> StoreResult<Option<Enqueued>> {
        let Some((i, keys)) = self.moved_from(idempotency) else {
            return Ok(None);
        };
        let mine = i.entry().kept(&n.id);
        for _ in 0..TAKE_OVER_TRIES {
            let kept = self.kept_at(keys, i).await?;
            if let Some(kept) = &kept {
                match self.named(i, kept).await? {
                    Named::Stored(earlier) => return Ok(Some(earlier)),
                    Named::UnderWay(id) => return Err(not_stored_yet(&id)),
                    Named::Gone => {}
                }
            }
            // Kept only if the key still holds what was read: of two repeats taking it
            // over at once, one wins and the other meets it.
            if self.replace_key(keys, i, kept.as_deref(), &mine).await? {
                return Ok(None);
            }
        }
        Err(StoreError::Unavailable(
            "an idempotency key kept at a degraded shard changed under every try".into(),
        ))
    }

    /// After a registration moved off its key's degraded shard was stored: where the
    /// shard it went to answered with an earlier notification of the key, or stored it
    /// without the replicas' acknowledgement (`NotReplicated`: stored on its primary all
    /// the same), the key kept at the degraded shard is made the one the other shard
    /// holds, naming what it registered, if it still names this notification.
    pub(super) async fn keep_where_moved_from(
        &self,
        idempotency: Option<&Idempotency>,
        n: &Notification,
        outcome: &StoreResult<Enqueued>,
    ) {
        let Some((i, keys)) = self.moved_from(idempotency) else {
            return;
        };
        let stored_elsewhere = match outcome {
            Ok(e) => e.duplicate,
            Err(e) => matches!(e, StoreError::NotReplicated { .. }),
        };
        let Some(placed) = self
            .shards
            .get(usize::from(n.id.shard()))
            .filter(|_| stored_elsewhere)
        else {
            return;
        };
        let mine = i.entry().kept(&n.id);
        let kept = match self.kept_at(placed, i).await {
            Ok(Some(kept)) => self.replace_key(keys, i, Some(&mine), &kept).await,
            Ok(None) => Ok(true),
            Err(e) => Err(e),
        };
        match kept {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(id = %n.id, "an idempotency key kept at its degraded shard was taken over meanwhile; left as it is")
            }
            Err(error) => {
                tracing::warn!(id = %n.id, %error, "cannot keep an idempotency key at its degraded shard as the shard it went to holds it; a repeat may register again")
            }
        }
    }

    /// A repeat answered with a notification of another shard (its key kept here when the
    /// first was moved off this shard while it was degraded): that notification's status,
    /// which the script could not read from this one. One not stored yet is answered 503,
    /// to try again; one whose registration is over without storing it gives up its key
    /// here, and the repeat is answered 503 too, to be registered when it comes again.
    pub(super) async fn status_elsewhere(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
        mut e: Enqueued,
    ) -> StoreResult<Enqueued> {
        if !e.duplicate || e.mismatch || e.status.is_some() || e.id.shard() == n.id.shard() {
            return Ok(e);
        }
        if let Some(view) = Reads::get(self, &e.id).await? {
            e.status = Some(view.status);
            return Ok(e);
        }
        if let (false, Some(i), Ok(keys)) = (under_way(&e.id), idempotency, self.keys(&n.id)) {
            if let Some(kept) = self.kept_at(keys, i).await? {
                if names(&kept) == Some(e.id) {
                    self.replace_key(keys, i, Some(&kept), "").await?;
                }
            }
        }
        Err(not_stored_yet(&e.id))
    }

    /// What the key value `kept` names: its notification if stored (or the refusal for
    /// another request), else whether its registration may still store it.
    async fn named(&self, i: &Idempotency, kept: &str) -> StoreResult<Named> {
        let id = names(kept)
            .ok_or_else(|| StoreError::Corrupt(format!("an idempotency key holds `{kept}`")))?;
        let Some(view) = Reads::get(self, &id).await? else {
            return Ok(match under_way(&id) {
                true => Named::UnderWay(id),
                false => Named::Gone,
            });
        };
        let mismatch = i.entry().mismatches(kept);
        Ok(Named::Stored(Enqueued {
            id,
            status: (!mismatch).then_some(view.status),
            duplicate: true,
            mismatch,
            earliest: None,
        }))
    }

    /// Keeps idempotency key `i` at the shard of `keys` as `new` (or forgets it, with
    /// ""), for its time, if it still holds `old` (is absent, with `None`). Whether it did.
    async fn replace_key(
        &self,
        keys: &ShardKeys,
        i: &Idempotency,
        old: Option<&str>,
        new: &str,
    ) -> StoreResult<bool> {
        let replaced: i64 = self
            .scripts
            .replace_key
            .key(keys.idempotency(&i.scoped()))
            .arg(old.unwrap_or(""))
            .arg(new)
            .arg(i.ttl_ms())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(replaced == 1)
    }

    /// What idempotency key `i` names at the shard of `keys`, if it is there.
    async fn kept_at(&self, keys: &ShardKeys, i: &Idempotency) -> StoreResult<Option<String>> {
        redis::cmd("GET")
            .arg(keys.idempotency(&i.scoped()))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)
    }

    /// The key and the keys of the shard it was moved from, if it was.
    fn moved_from<'a>(
        &'a self,
        idempotency: Option<&'a Idempotency>,
    ) -> Option<(&'a Idempotency, &'a ShardKeys)> {
        let i = idempotency?;
        Some((i, self.shards.get(usize::from(i.moved_from?))?))
    }
}

/// The notification a key's value names.
fn names(kept: &str) -> Option<JobId> {
    crate::store::idempotency_value(kept).0.parse().ok()
}
