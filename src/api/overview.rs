//! `GET /overview`: the queue at a glance for the review page: counts by state, what
//! finished and what was dead-lettered in each five minutes of the last hour, and the
//! hosts with the most dead letters in that hour with their last error.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth;
use super::error::{ApiError, CommonErrors};
use super::view::rfc3339;
use super::view::CountsView;
use super::AppState;
use crate::access::{Principal, Role};
use crate::store::{DeadFilter, JobView};

const WINDOW_MS: i64 = 5 * 60 * 1000;
const WINDOWS: usize = 12;
/// Most dead letters of the last hour read to rank the failing hosts.
const SAMPLE: usize = 500;
const TOP_HOSTS: usize = 5;

#[derive(Debug, Serialize, ToSchema)]
pub struct Overview {
    pub counts: CountsView,
    /// Five-minute windows, oldest first, the last one ending now.
    pub last_hour: Vec<Window>,
    /// The hosts with the most dead letters in the last hour (of the newest 500).
    pub failing_hosts: Vec<FailingHost>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Window {
    pub from: String,
    /// Delivered or cancelled in this window.
    pub finished: u64,
    /// Dead-lettered in this window.
    pub dead: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FailingHost {
    pub host: String,
    pub dead: usize,
    pub last_error: Option<String>,
    pub last_status: Option<u16>,
    pub last_at: Option<String>,
}

/// The queue at a glance, for the review page at `/ui`. Role `read`, for every tenant:
/// counts are not kept per tenant, so a tenant-bound token is refused.
#[utoipa::path(
    get,
    path = "/overview",
    operation_id = "getOverview",
    tag = "operations",
    responses((status = 200, body = Overview), CommonErrors),
    security(("bearer" = []))
)]
pub async fn overview(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
) -> Result<Json<Overview>, ApiError> {
    auth::require(&caller, Role::Read)?;
    auth::require_every_tenant(&caller, "the overview's counts")?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let from = now - WINDOW_MS * WINDOWS as i64;
    let stats = state.store.stats().await?;
    let windows = state.store.outcomes_over(from, WINDOW_MS, WINDOWS).await?;
    let last_hour = windows
        .iter()
        .enumerate()
        .map(|(i, w)| Window {
            from: rfc3339(from + i as i64 * WINDOW_MS),
            finished: w.finished,
            dead: w.dead,
        })
        .collect();
    let filter = DeadFilter {
        since: Some(from),
        ..DeadFilter::default()
    };
    let recent = state.store.dead_letters(&filter, SAMPLE, None).await?;
    Ok(Json(Overview {
        counts: stats.total.into(),
        last_hour,
        failing_hosts: failing_hosts(&recent.items),
    }))
}

/// Dead letters by host, most first; each host's newest letter gives its last error.
fn failing_hosts(newest_first: &[JobView]) -> Vec<FailingHost> {
    let mut by_host: HashMap<String, FailingHost> = HashMap::new();
    for letter in newest_first {
        let host = letter.spec.host();
        let entry = by_host.entry(host.clone()).or_insert_with(|| {
            let last = letter.history.last();
            FailingHost {
                host,
                dead: 0,
                last_error: last.and_then(|a| a.error.clone()),
                last_status: last.and_then(|a| a.status),
                last_at: letter.status.finished_at.map(rfc3339),
            }
        });
        entry.dead += 1;
    }
    let mut hosts: Vec<FailingHost> = by_host.into_values().collect();
    hosts.sort_by(|a, b| b.dead.cmp(&a.dead).then_with(|| a.host.cmp(&b.host)));
    hosts.truncate(TOP_HOSTS);
    hosts
}
