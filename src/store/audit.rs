//! The audit log's entries: who did what to which notifications, kept by the store for
//! `retention.audit_max_age`, and read newest first in bounded steps. Every store keeps an
//! entry as `AuditRecord`'s JSON under a position `(ms, seq)`: the store's time of the
//! entry and a sequence number within that millisecond (on Redis, the stream entry's id).

use std::future::Future;
use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::{AuditLog, StoreError, StoreResult};
use crate::domain::Tenant;

/// Entries read, at most, to answer one page when a filter skips most of them.
pub const SCAN_BUDGET: usize = 2_000;

/// What an operator did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    Cancel,
    Replay,
    ReplayMatching,
    Discard,
    Purge,
    Resend,
    ResendMatching,
    AttemptNow,
    PauseEndpoint,
    ResumeEndpoint,
    CreateSubscription,
    UpdateSubscription,
    DeleteSubscription,
    ResendEvent,
    IssuePortalLink,
}

impl AuditAction {
    pub const ALL: [AuditAction; 15] = [
        AuditAction::Cancel,
        AuditAction::Replay,
        AuditAction::ReplayMatching,
        AuditAction::Discard,
        AuditAction::Purge,
        AuditAction::Resend,
        AuditAction::ResendMatching,
        AuditAction::AttemptNow,
        AuditAction::PauseEndpoint,
        AuditAction::ResumeEndpoint,
        AuditAction::CreateSubscription,
        AuditAction::UpdateSubscription,
        AuditAction::DeleteSubscription,
        AuditAction::ResendEvent,
        AuditAction::IssuePortalLink,
    ];

    /// As the API and the stored JSON write it.
    pub fn name(self) -> &'static str {
        match self {
            AuditAction::Cancel => "cancel",
            AuditAction::Replay => "replay",
            AuditAction::ReplayMatching => "replay_matching",
            AuditAction::Discard => "discard",
            AuditAction::Purge => "purge",
            AuditAction::Resend => "resend",
            AuditAction::ResendMatching => "resend_matching",
            AuditAction::AttemptNow => "attempt_now",
            AuditAction::PauseEndpoint => "pause_endpoint",
            AuditAction::ResumeEndpoint => "resume_endpoint",
            AuditAction::CreateSubscription => "create_subscription",
            AuditAction::UpdateSubscription => "update_subscription",
            AuditAction::DeleteSubscription => "delete_subscription",
            AuditAction::ResendEvent => "resend_event",
            AuditAction::IssuePortalLink => "issue_portal_link",
        }
    }
}

impl FromStr for AuditAction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|a| a.name()).collect();
                format!("`{s}` is not one of {}", names.join(", "))
            })
    }
}

/// One action, as recorded: the token's name, the tenant acted on (none: a bulk action
/// over every tenant), the notification or the filter, and how many it changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<Tenant>,
    pub action: AuditAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A bulk action's conditions, by name (`topic`, `host`, `since`, `until`, `tenant`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<serde_json::Map<String, serde_json::Value>>,
    pub count: u64,
    /// A replay that sent the notification to a new URL, or a subscription moved to one:
    /// where it went before and now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<UrlChange>,
}

/// The callback URL an action changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlChange {
    pub from: String,
    pub to: String,
}

impl UrlChange {
    /// What the audit log records of a callback that went from `from` to `to`: nothing
    /// when it stayed.
    pub fn between(from: &str, to: &str) -> Option<Self> {
        (from != to).then(|| Self {
            from: from.to_string(),
            to: to.to_string(),
        })
    }
}

/// Where an entry sits: its store time in ms and its sequence within that millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditPosition {
    pub ms: i64,
    pub seq: u64,
}

impl AuditPosition {
    /// As a Redis stream entry id, `<ms>-<seq>`.
    pub fn stream_id(&self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }

    pub fn parse_stream_id(raw: &str) -> Option<Self> {
        let (ms, seq) = raw.split_once('-')?;
        Some(Self {
            ms: ms.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }

    /// The opaque paging cursor.
    pub fn encode(&self) -> String {
        B64.encode(self.stream_id())
    }

    /// `None` for anything that is not a cursor this module made.
    pub fn decode(raw: &str) -> Option<Self> {
        Self::parse_stream_id(&String::from_utf8(B64.decode(raw).ok()?).ok()?)
    }
}

/// A recorded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub at: AuditPosition,
    pub record: AuditRecord,
}

impl AuditEntry {
    /// An entry from its position and stored JSON.
    pub fn decode(at: AuditPosition, json: &str) -> StoreResult<Self> {
        let record = serde_json::from_str(json)
            .map_err(|e| StoreError::Corrupt(format!("audit entry {}: {e}", at.stream_id())))?;
        Ok(Self { at, record })
    }
}

/// Which entries a reader wants; every condition given must hold.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<AuditAction>,
    pub tenant: Option<Tenant>,
    /// At or after, ms since the epoch.
    pub since: Option<i64>,
    /// At or before, ms since the epoch.
    pub until: Option<i64>,
}

impl AuditFilter {
    /// Whether `e` passes the actor, action and tenant conditions (times are the
    /// store's range).
    pub fn matches(&self, e: &AuditEntry) -> bool {
        let r = &e.record;
        self.actor.as_ref().is_none_or(|a| *a == r.actor)
            && self.action.is_none_or(|a| a == r.action)
            && self
                .tenant
                .as_ref()
                .is_none_or(|t| r.tenant.as_ref() == Some(t))
    }

    fn skips_some(&self) -> bool {
        self.actor.is_some() || self.action.is_some() || self.tenant.is_some()
    }
}

/// A page of entries, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditPage {
    pub items: Vec<AuditEntry>,
    pub next_cursor: Option<AuditPosition>,
}

/// One page of `store`'s audit log: the entries matching `filter`, newest first, up to
/// `limit`, after `after`.
pub async fn page(
    store: &dyn AuditLog,
    filter: &AuditFilter,
    limit: usize,
    after: Option<AuditPosition>,
) -> StoreResult<AuditPage> {
    read_pages(filter, limit, after, |before, n| {
        store.audit_entries(filter, before, n)
    })
    .await
}

/// One page: reads older entries in chunks through `read(before, n)` (up to `n` entries
/// older than `before`, or the newest, within the filter's time range, newest first)
/// until `limit` match, the log ends, or `SCAN_BUDGET` entries were read; then the page
/// ends where reading stopped, so the next one goes on from there.
async fn read_pages<F, Fut>(
    filter: &AuditFilter,
    limit: usize,
    after: Option<AuditPosition>,
    mut read: F,
) -> StoreResult<AuditPage>
where
    F: FnMut(Option<AuditPosition>, usize) -> Fut,
    Fut: Future<Output = StoreResult<Vec<AuditEntry>>>,
{
    let chunk = if filter.skips_some() { 500 } else { limit };
    let mut page = AuditPage::default();
    let (mut before, mut scanned) = (after, 0);
    loop {
        let entries = read(before, chunk).await?;
        let ended = entries.len() < chunk;
        scanned += entries.len();
        for e in entries {
            before = Some(e.at);
            if filter.matches(&e) {
                page.items.push(e);
                if page.items.len() == limit {
                    page.next_cursor = before;
                    return Ok(page);
                }
            }
        }
        if ended {
            return Ok(page);
        }
        if scanned >= SCAN_BUDGET {
            page.next_cursor = before;
            return Ok(page);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ms: i64, actor: &str) -> AuditEntry {
        AuditEntry {
            at: AuditPosition { ms, seq: 0 },
            record: AuditRecord {
                actor: actor.into(),
                tenant: None,
                action: AuditAction::Purge,
                target: None,
                filter: None,
                count: 3,
                url: None,
            },
        }
    }

    #[test]
    fn a_cursor_round_trips_and_garbage_is_refused() {
        let p = AuditPosition {
            ms: 1_700_000_000_123,
            seq: 4,
        };
        assert_eq!(AuditPosition::decode(&p.encode()), Some(p));
        assert_eq!(AuditPosition::decode("!!"), None);
        assert_eq!(AuditPosition::decode(&B64.encode("12")), None);
        assert_eq!("replay_matching".parse(), Ok(AuditAction::ReplayMatching));
        assert!("explode".parse::<AuditAction>().is_err());
        for a in AuditAction::ALL {
            assert_eq!(
                serde_json::to_value(a).unwrap(),
                a.name(),
                "stored as named"
            );
        }
    }

    #[tokio::test]
    async fn pages_walk_the_log_once_whatever_the_filter_skips() {
        let log: Vec<AuditEntry> = (0..30)
            .rev()
            .map(|ms| entry(ms, if ms % 3 == 0 { "ops" } else { "bot" }))
            .collect();
        let read = |before: Option<AuditPosition>, n: usize| {
            let older: Vec<AuditEntry> = log
                .iter()
                .filter(|e| before.is_none_or(|b| e.at < b))
                .take(n)
                .cloned()
                .collect();
            async move { Ok(older) }
        };
        let filter = AuditFilter {
            actor: Some("ops".into()),
            ..AuditFilter::default()
        };
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let p = read_pages(&filter, 4, after, read).await.unwrap();
            seen.extend(p.items.iter().map(|e| e.at.ms));
            match p.next_cursor {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, vec![27, 24, 21, 18, 15, 12, 9, 6, 3, 0]);
    }
}
