//! Idempotency keys of registrations placed off their key's degraded shard (`Placement`):
//! the key is kept at that shard before the notification is stored elsewhere, so that a
//! repeat meets it wherever the repeat is placed, there once the shard has recovered
//! included. A key there may name a notification that no shard holds; the key at that
//! notification's own shard, written with the notification, tells why (`named`): it
//! was stored and deleted since (a repeat is answered as for any key that outlived its
//! notification), the other shard registered another one for the key (a repeat is
//! answered with that one), or it was not stored: its registration is under way (a
//! repeat is told to try again) or failed after the key was kept (the key is given up).

use std::time::Duration;

use super::{store_error, RedisStore};
use crate::config::StoreSettings;
use crate::domain::{JobId, Notification};
use crate::store::keys::ShardKeys;
use crate::store::{Enqueued, Idempotency, Reads, StoreError, StoreResult};

/// How often a registration moved off its key's degraded shard tries to keep the key
/// there while other repeats of it change it.
const TAKE_OVER_TRIES: usize = 3;

/// How long after its id was made a notification that a key names may still be on its
/// way to being stored, at least: instances' clocks, which make ids, agree far better.
const UNDER_WAY_AT_LEAST: Duration = Duration::from_secs(30);

/// How long a registration may take at most: every try of its connection and its reply,
/// and its wait for the replicas, twice over, and at least `UNDER_WAY_AT_LEAST`.
pub(super) fn registration_at_most(s: &StoreSettings) -> Duration {
    let once = s.connect_timeout + s.response_timeout + s.replica_ack_timeout;
    (once * 4).max(UNDER_WAY_AT_LEAST)
}

/// What a key names, as a repeat meets it.
enum Named {
    /// A repeat is answered with this: the notification (with `status: None` when it
    /// was stored and deleted since), or the refusal for another request.
    Answer(Enqueued),
    /// A notification no shard holds, whose registration may still store it.
    UnderWay(JobId),
    /// A notification never stored, whose registration is over: the key is given up.
    Gone,
}

/// Whether `id`, named by a key and held by no shard, may still be stored, a
/// registration taking `at_most`. An id in the hex form of earlier builds was made long
/// ago: its registration is over.
fn under_way(id: &JobId, at_most: Duration) -> bool {
    id.made_at_ms()
        .is_some_and(|at| crate::clock::now_ms() - at < at_most.as_millis() as i64)
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
        let Some((i, from, keys)) = self.moved_from(idempotency) else {
            return Ok(None);
        };
        let mine = i.entry().kept(&n.id);
        for _ in 0..TAKE_OVER_TRIES {
            let kept = self.kept_at(keys, i).await?;
            if let Some(kept) = &kept {
                match self.named(i, from, kept).await? {
                    Named::Answer(earlier) => return Ok(Some(earlier)),
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

    /// What a registration handed to its shard's script is answered: the key kept where
    /// it was moved from made what that shard holds (`keep_where_moved_from`), and a
    /// repeat answered with a notification of another shard told what that one is
    /// (`status_elsewhere`).
    pub(super) async fn after_stored(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
        enqueued: StoreResult<Enqueued>,
    ) -> StoreResult<Enqueued> {
        self.keep_where_moved_from(idempotency, n, &enqueued).await;
        self.status_elsewhere(n, idempotency, enqueued?).await
    }

    /// After a registration moved off its key's degraded shard was stored: where the
    /// shard it went to answered with an earlier notification of the key, or stored it
    /// without the replicas' acknowledgement (`NotReplicated`: stored on its primary all
    /// the same), the key kept at the degraded shard is made the one the other shard
    /// holds, naming what it registered, if it still names this notification.
    async fn keep_where_moved_from(
        &self,
        idempotency: Option<&Idempotency>,
        n: &Notification,
        outcome: &StoreResult<Enqueued>,
    ) {
        let Some((i, _, keys)) = self.moved_from(idempotency) else {
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
    /// first was moved off this shard while it was degraded): what the key names, which
    /// the script could not read from this shard (`named`). One not stored yet is
    /// answered 503, to try again; one never stored gives up its key here, and the repeat
    /// is answered 503 too, to be registered when it comes again.
    async fn status_elsewhere(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
        e: Enqueued,
    ) -> StoreResult<Enqueued> {
        if !e.duplicate || e.mismatch || e.status.is_some() || e.id.shard() == n.id.shard() {
            return Ok(e);
        }
        let (Some(i), Ok(keys)) = (idempotency, self.keys(&n.id)) else {
            return Ok(e);
        };
        let Some(kept) = self.kept_at(keys, i).await? else {
            return Err(not_stored_yet(&e.id));
        };
        match self.named(i, n.id.shard(), &kept).await? {
            Named::Answer(answer) => Ok(answer),
            Named::UnderWay(id) => Err(not_stored_yet(&id)),
            Named::Gone => {
                self.replace_key(keys, i, Some(&kept), "").await?;
                Err(not_stored_yet(&e.id))
            }
        }
    }

    /// What the value `kept` of key `i` at shard `at` names: a stored notification, else
    /// what the key at that notification's own shard, written with it, says: that it
    /// was stored and deleted since, or that the shard registered another for the key;
    /// and when that shard holds no such key, whether its registration may still store
    /// it.
    async fn named(&self, i: &Idempotency, at: u16, kept: &str) -> StoreResult<Named> {
        let id = names(kept)
            .ok_or_else(|| StoreError::Corrupt(format!("an idempotency key holds `{kept}`")))?;
        let written_with_it = match (id.shard() == at, self.keys(&id)) {
            (true, _) => Some(kept.to_string()),
            (false, Ok(home)) => self.kept_at(home, i).await?,
            (false, Err(_)) => None,
        };
        let Some(written) = written_with_it else {
            return Ok(match under_way(&id, self.registration_at_most) {
                true => Named::UnderWay(id),
                false => Named::Gone,
            });
        };
        let first = names(&written).unwrap_or(id);
        let stored = Reads::get(self, &first).await?;
        let mismatch = i.entry().mismatches(&written);
        Ok(Named::Answer(Enqueued {
            id: first,
            status: stored.filter(|_| !mismatch).map(|v| v.status),
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

    /// The key, the shard it was moved from, if it was, and that shard's keys.
    fn moved_from<'a>(
        &'a self,
        idempotency: Option<&'a Idempotency>,
    ) -> Option<(&'a Idempotency, u16, &'a ShardKeys)> {
        let i = idempotency?;
        let from = i.moved_from?;
        Some((i, from, self.shards.get(usize::from(from))?))
    }
}

/// The notification a key's value names.
fn names(kept: &str) -> Option<JobId> {
    crate::store::idempotency_value(kept).0.parse().ok()
}
