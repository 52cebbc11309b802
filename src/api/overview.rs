//! The counts: `GET /stats` (by state, per shard, and what retention deleted) and
//! `GET /overview`, the queue at a glance for the review page: counts by state, what
//! finished and what was dead-lettered in each five minutes of the last hour, and the
//! hosts with the most dead letters in that hour with their last error. Both count
//! every tenant, or one (`store::tenant_counts`).

use std::collections::HashMap;
use std::time::UNIX_EPOCH;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{invalid_query, ApiError, CommonErrors, ErrorBody};
use super::view::rfc3339;
use super::view::{CountsView, DegradedView, StatsView};
use super::AppState;
use super::{auth, paging};
use crate::domain::Ended;
use crate::store::{
    window_of, JobView, ListFilter, Listed, StoreResult, OUTCOME_WINDOWS, OUTCOME_WINDOW_MS,
};
use crate::tenancy::access::Principal;

/// Whose counts: a token bound to a tenant counts its own only.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CountsQuery {
    /// Only this tenant's notifications (for a token of every tenant; a token bound to a
    /// tenant may name its own only).
    tenant: Option<String>,
}

/// Counts by state, and of what retention deleted, over all shards and per shard. Role
/// `read`; a tenant-bound token counts its tenant's only.
#[utoipa::path(
    get,
    path = "/stats",
    operation_id = "getStats",
    tag = "operations",
    params(CountsQuery),
    responses(
        (status = 200, body = StatsView),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A tenant that is not a tenant's name; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn stats(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<CountsQuery>, QueryRejection>,
) -> Result<Json<StatsView>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let tenant = auth::tenant_filter(&caller, q.tenant.as_deref())?;
    let mut stats = StatsView::from(state.store.stats(tenant.as_ref()).await?);
    match &tenant {
        Some(tenant) => stats.retention = Some(state.retention.of(tenant).into()),
        None => {
            // How the store is set up is the operator's, as its shards' health is.
            stats.degraded_shards = DegradedView::all(state.rules.placement.health());
            stats.durability = Some(state.store.durability().into());
        }
    }
    Ok(Json(stats))
}

/// Most dead letters of the last hour read to rank the failing hosts.
const SAMPLE: usize = 500;
const TOP_HOSTS: usize = 5;

#[derive(Debug, Serialize, ToSchema)]
pub struct Overview {
    /// By state; `scheduled` counts the held ones too.
    pub counts: CountsView,
    /// Those of `counts.scheduled` held while their endpoint is paused (from the pause
    /// on, though each is kept apart only as it comes due).
    pub held: Held,
    /// Those of `counts.scheduled` held back by their endpoint path's open circuit (of an
    /// endpoint not paused).
    pub held_back: Held,
    /// Five-minute windows (aligned on five minutes of the clock), oldest first, the last
    /// one ending now.
    pub last_hour: Vec<Window>,
    /// The hosts with the most dead letters in the last hour (of the newest 500).
    pub failing_hosts: Vec<FailingHost>,
    /// For a token of every tenant: the shards that take no new notification now, and
    /// why (`/stats`' `degraded_shards`). Absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded_shards: Vec<DegradedView>,
}

/// Notifications held (while their endpoint is paused) or held back (by an open
/// circuit), counted up to 1,000.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = HeldCount)]
pub struct Held {
    pub count: u64,
    /// False when the count stopped before the end of its list (at 1,000, or, while
    /// endpoints are paused, after two pages of the queue read): there may be more.
    pub complete: bool,
}

/// Pages of the held list the overview reads at most to count it.
const HELD_PAGES: usize = 2;

#[derive(Debug, Serialize, ToSchema)]
pub struct Window {
    pub from: String,
    /// Delivered or cancelled in this window.
    pub finished: u64,
    /// Dead-lettered in this window (and not replayed or deleted since).
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

/// The queue at a glance, for the review page at `/ui`. Role `read`; a tenant-bound
/// token sees its tenant's only.
#[utoipa::path(
    get,
    path = "/overview",
    operation_id = "getOverview",
    tag = "operations",
    params(CountsQuery),
    responses(
        (status = 200, body = Overview),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A tenant that is not a tenant's name; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn overview(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<CountsQuery>, QueryRejection>,
) -> Result<Json<Overview>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let tenant = auth::tenant_filter(&caller, q.tenant.as_deref())?;
    let now = crate::clock::system_now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let first = window_of(now) - (OUTCOME_WINDOWS - 1);
    let stats = state.store.stats(tenant.as_ref()).await?;
    let windows = state
        .store
        .outcomes(tenant.as_ref(), first, OUTCOME_WINDOWS as usize)
        .await?;
    let last_hour = (first..)
        .zip(&windows)
        .map(|(w, o)| Window {
            from: rfc3339(w * OUTCOME_WINDOW_MS),
            finished: o.finished,
            dead: o.dead,
        })
        .collect();
    let everything = ListFilter {
        tenant,
        paused: state.pauses.paused(),
        ..ListFilter::default()
    };
    let held = count(&state, Listed::Held, &everything).await?;
    let held_back = count(&state, Listed::HeldBack, &everything).await?;
    let filter = ListFilter {
        since: Some(first * OUTCOME_WINDOW_MS),
        ..everything
    };
    let recent = state.store.dead_letters(&filter, SAMPLE, None).await?;
    let degraded_shards = match auth::sees_every_tenant(&caller) {
        true => DegradedView::all(state.rules.placement.health()),
        false => Vec::new(),
    };
    Ok(Json(Overview {
        degraded_shards,
        counts: stats.total.into(),
        held,
        held_back,
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
            let last = Ended::last(&letter.history);
            FailingHost {
                host,
                dead: 0,
                last_error: last.and_then(|a| a.error.map(str::to_string)),
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

/// The notifications of `listed` that `filter` matches, up to `HELD_PAGES` pages.
async fn count(state: &AppState, listed: Listed, filter: &ListFilter) -> StoreResult<Held> {
    let (count, complete) = paging::count(state.store.as_ref(), listed, filter, HELD_PAGES).await?;
    Ok(Held { count, complete })
}
