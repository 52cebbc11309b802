//! What the list routes share (`GET /notifications`, `GET /dead-letters`, `GET /audit`):
//! the page size, the cursor each gives back, the RFC 3339 times of their `since` and
//! `until`, and the filter of the notification lists; and a list counted a bounded
//! number of pages at most (an endpoint's backlog, the overview's held ones).
//!
//! A cursor is sealed (`CursorSeal`): a page cut short by the scan limit ends at the
//! last notification it examined, which may be another tenant's, so a cursor must say
//! nothing a caller could read, and nobody may make one up. The key is the deployment's,
//! kept in its store, so that a walk may go on at another instance and nothing in the
//! configuration gives it away.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::error::ApiError;
use super::AppState;
use crate::domain::FieldError;
use crate::store::collections::{Change, Collection, Collections, Expect};
use crate::store::{ListFilter, Listed, Reads, StoreError, StoreResult};
use crate::tenancy::access::Principal;

const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 500;

/// How many of `listed` match `filter`, reading at most `pages` pages of 500, and
/// whether the count reached the list's end.
pub async fn count(
    store: &dyn Reads,
    listed: Listed,
    filter: &ListFilter,
    pages: usize,
) -> StoreResult<(u64, bool)> {
    let (mut n, mut after) = (0, None);
    for _ in 0..pages {
        let page = store
            .list(listed, filter, MAX_LIMIT, after.as_ref())
            .await?;
        n += page.items.len() as u64;
        after = page.next_cursor;
        if after.is_none() {
            return Ok((n, true));
        }
    }
    Ok((n, false))
}

/// Items per page: `limit` if given (1 to 500), otherwise 50.
pub fn limit(raw: Option<usize>) -> Result<usize, FieldError> {
    let limit = raw.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(FieldError::new(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        ));
    }
    Ok(limit)
}

/// The name of the cursor key among the deployment's secrets (`Collection::Secrets`).
const KEY_NAME: &str = "cursor_seal";
const KEY_LEN: usize = 32;

/// Seals cursors with ChaCha20-Poly1305 under the deployment's key (`of_deployment`).
pub struct CursorSeal {
    key: LessSafeKey,
    random: SystemRandom,
}

impl CursorSeal {
    /// The seal of the deployment whose store is `store`: under the key kept there, which
    /// the first instance to start makes from the system's randomness (two starting at
    /// once both end up with the one written first).
    pub async fn of_deployment(store: &dyn Collections) -> StoreResult<Self> {
        if let Some(key) = stored_key(store).await? {
            return Ok(Self::new(&key));
        }
        let mut fresh = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut fresh)
            .expect("the system's randomness");
        let made = Change::put(Collection::Secrets, KEY_NAME, B64.encode(fresh))
            .expecting(Expect::Nothing);
        match store.write(&[made]).await {
            // Written on the primary, which is what is read back: replicas missing at
            // start-up (a cluster just made) must not stop an instance. A failover that
            // loses it ends the walks under way, nothing more.
            Ok(_) | Err(StoreError::NotReplicated { .. }) => {}
            Err(e) => return Err(e),
        }
        let key = stored_key(store).await?;
        let key = key.ok_or_else(|| StoreError::Corrupt("the cursor key was not kept".into()))?;
        Ok(Self::new(&key))
    }

    fn new(secret: &[u8; KEY_LEN]) -> Self {
        let key = UnboundKey::new(&CHACHA20_POLY1305, secret).expect("a 32-byte key");
        Self {
            key: LessSafeKey::new(key),
            random: SystemRandom::new(),
        }
    }

    /// `plain`, sealed under a fresh nonce, as URL-safe base64.
    pub fn seal(&self, plain: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .expect("the system's randomness");
        let mut sealed = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::empty(),
                &mut sealed,
            )
            .expect("a cursor is short");
        B64.encode([&nonce[..], &sealed].concat())
    }

    /// What `seal` sealed; `None` for anything else.
    pub fn open(&self, sealed: &str) -> Option<String> {
        let bytes = B64.decode(sealed).ok()?;
        let (nonce, rest) = bytes.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut rest = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::empty(), &mut rest)
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

/// The cursor key kept in `store`, if one was made.
async fn stored_key(store: &dyn Collections) -> StoreResult<Option<[u8; KEY_LEN]>> {
    let held = store
        .read(Collection::Secrets, &[KEY_NAME.to_string()])
        .await?;
    let Some(doc) = held.into_iter().flatten().next() else {
        return Ok(None);
    };
    let key = B64.decode(&doc).ok().and_then(|k| k.try_into().ok());
    key.map(Some)
        .ok_or_else(|| StoreError::Corrupt("the cursor key is not 32 bytes of base64".into()))
}

/// The cursor of a previous page, if given: opened with `seal`, then read by `decode`.
pub fn cursor<T>(
    seal: &CursorSeal,
    raw: Option<&str>,
    decode: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, FieldError> {
    let read = |r: &str| seal.open(r).and_then(|plain| decode(&plain));
    raw.map(|r| read(r).ok_or_else(|| FieldError::new("cursor", "not a cursor from this API")))
        .transpose()
}

/// An RFC 3339 time (`2026-01-01T00:00:00Z`), if given, as ms since the epoch.
pub fn time(field: &str, raw: Option<&str>) -> Result<Option<i64>, FieldError> {
    let Some(raw) = raw else { return Ok(None) };
    let t = humantime::parse_rfc3339_weak(raw).map_err(|_| {
        FieldError::new(field, "must be an RFC 3339 time like 2026-01-01T00:00:00Z")
    })?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Ok(Some(ms as i64))
}

/// The filter of a notification list (or bulk action) from its parameters; the tenant is
/// the caller's to set.
pub fn filter(
    topic: Option<String>,
    host: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<ListFilter, FieldError> {
    Ok(ListFilter {
        since: time("since", since)?,
        until: time("until", until)?,
        topic,
        host,
        ..ListFilter::default()
    })
}

/// A bulk action's conditions as its request gives them.
pub(super) struct Conditions<'a> {
    pub topic: &'a Option<String>,
    pub host: &'a Option<String>,
    pub since: &'a Option<String>,
    pub until: &'a Option<String>,
    pub tenant: &'a Option<String>,
    /// One endpoint's only (`ep_…`): one the caller may see, else `422` naming it.
    pub endpoint: &'a Option<String>,
    /// `"all": true`: act on everything when no condition is given.
    pub all: bool,
}

/// The filter of a bulk action, within the caller's tenant. Without any condition it is
/// refused unless `all` says so, naming what `all` would act on (`every dead letter`).
pub(super) async fn bulk_filter(
    state: &AppState,
    caller: &Principal,
    c: Conditions<'_>,
    every: &str,
) -> Result<ListFilter, ApiError> {
    let endpoint = super::endpoints::filter(state, caller, c.endpoint.as_deref()).await?;
    let mut f = filter(
        c.topic.clone(),
        c.host.clone(),
        c.since.as_deref(),
        c.until.as_deref(),
    )?;
    let empty = f.topic.is_none()
        && f.host.is_none()
        && f.since.is_none()
        && f.until.is_none()
        && c.tenant.is_none()
        && endpoint.is_none();
    if empty && !c.all {
        let hint = format!("no filter given: pass `topic`, `host`, `endpoint`, `since`, `until` or `tenant`, or `\"all\": true` to act on {every}");
        return Err(FieldError::new("all", hint).into());
    }
    f.tenant = super::auth::tenant_filter(caller, c.tenant.as_deref())?;
    f.endpoint = endpoint;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RetentionSettings;
    use crate::store::EmbeddedStore;

    fn store(dir: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open(dir.path(), &RetentionSettings::default()).unwrap()
    }

    #[tokio::test]
    async fn a_store_keeps_one_cursor_key_that_every_seal_of_it_uses() {
        let (dir, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let sealed = CursorSeal::of_deployment(&store(&dir))
            .await
            .unwrap()
            .seal("at 5");
        let again = CursorSeal::of_deployment(&store(&dir)).await.unwrap();
        assert_eq!(again.open(&sealed).as_deref(), Some("at 5"));
        let elsewhere = CursorSeal::of_deployment(&store(&other)).await.unwrap();
        assert_eq!(elsewhere.open(&sealed), None, "another deployment's key");
    }

    #[tokio::test]
    async fn a_cursor_changed_anywhere_does_not_open() {
        let dir = tempfile::tempdir().unwrap();
        let seal = CursorSeal::of_deployment(&store(&dir)).await.unwrap();
        let sealed = seal.seal("at 5").into_bytes();
        for i in 0..sealed.len() {
            let mut changed = sealed.clone();
            changed[i] = if changed[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(changed).unwrap();
            assert_eq!(seal.open(&changed), None, "byte {i} changed");
        }
    }

    #[tokio::test]
    async fn a_kept_key_that_is_not_one_is_a_corrupt_store() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir);
        let put = Change::put(Collection::Secrets, KEY_NAME, "c2hvcnQ");
        assert!(s.write(&[put]).await.unwrap());
        let refused = CursorSeal::of_deployment(&s).await;
        assert!(matches!(refused, Err(StoreError::Corrupt(_))));
    }
}
