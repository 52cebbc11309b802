//! Bulk actions over every notification a filter matches: replay and discard of dead
//! letters, and resend of finished ones. The matches are paged and acted on in bounded
//! batches, each batch one atomic call. A batch skips whatever left its state
//! meanwhile, so running one twice, or two at once, never doubles anything. What was
//! done is counted per tenant, so that each tenant's auditors see what an action over
//! every tenant did to theirs.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use crate::domain::{JobId, Schedule, Tenant};
use crate::lifecycle::Again;
use crate::store::{
    Cursor, FinishedStates, JobView, ListFilter, Listed, OperatorActions, Reads, StoreResult,
    WalkCursor,
};

/// How many an action changed, per tenant (only tenants it changed some of).
pub type PerTenant = BTreeMap<Tenant, usize>;

/// Notifications read, and acted on, per batch.
const BATCH: usize = 200;

/// Replays every dead letter matching `filter`. How many were replayed.
pub async fn replay_matching(
    store: &(impl Reads + OperatorActions + ?Sized),
    filter: &ListFilter,
    schedule: Option<&Schedule>,
    delay: Duration,
) -> StoreResult<PerTenant> {
    for_each_batch(store, filter, |ids| async move {
        store.send_again(Again::Replay, &ids, schedule, delay).await
    })
    .await
}

/// Discards every dead letter matching `filter`. How many were discarded.
pub async fn discard_matching(
    store: &(impl Reads + OperatorActions + ?Sized),
    filter: &ListFilter,
) -> StoreResult<PerTenant> {
    for_each_batch(
        store,
        filter,
        |ids| async move { store.discard(&ids).await },
    )
    .await
}

/// What a bulk resend sends again: the finished notifications in `listed` (delivered,
/// dead or cancelled), of those the caller `may` resend, with a new schedule when given,
/// after `delay`.
#[derive(Debug, Clone, Copy)]
pub struct Resend<'a> {
    pub listed: Listed,
    pub may: FinishedStates,
    pub schedule: Option<&'a Schedule>,
    pub delay: Duration,
}

/// Sends again every notification `resend` takes that `filter` matches. How many were
/// resent.
pub async fn resend_matching(
    store: &(impl Reads + OperatorActions + ?Sized),
    filter: &ListFilter,
    resend: Resend<'_>,
) -> StoreResult<PerTenant> {
    let mut total = PerTenant::new();
    let mut after: Option<WalkCursor> = None;
    let which = Again::Resend(resend.may);
    loop {
        let page = store
            .list(resend.listed, filter, BATCH, after.as_ref())
            .await?;
        let act = |ids: Vec<JobId>| async move {
            store
                .send_again(which, &ids, resend.schedule, resend.delay)
                .await
        };
        by_tenant(&page.items, act, &mut total).await?;
        match page.next_cursor {
            Some(next) => after = Some(next),
            None => return Ok(total),
        }
    }
}

/// How many notifications in `listed` `filter` matches: what `resend_matching` would
/// resend if nothing changed meanwhile.
pub async fn count_matching(
    store: &dyn Reads,
    listed: Listed,
    filter: &ListFilter,
) -> StoreResult<usize> {
    let mut n = 0;
    let mut after: Option<WalkCursor> = None;
    loop {
        let page = store.list(listed, filter, BATCH, after.as_ref()).await?;
        n += page.items.len();
        match page.next_cursor {
            Some(next) => after = Some(next),
            None => return Ok(n),
        }
    }
}

/// Pages through the dead letters `filter` matches once, oldest page last, calling
/// `act` on each batch of ids of one tenant; adds up what `act` counted, per tenant.
async fn for_each_batch<F, Fut>(
    store: &(impl Reads + ?Sized),
    filter: &ListFilter,
    mut act: F,
) -> StoreResult<PerTenant>
where
    F: FnMut(Vec<JobId>) -> Fut,
    Fut: Future<Output = StoreResult<usize>>,
{
    let mut total = PerTenant::new();
    let mut after: Option<Cursor> = None;
    loop {
        let page = store.dead_letters(filter, BATCH, after.as_ref()).await?;
        by_tenant(&page.items, &mut act, &mut total).await?;
        match page.next_cursor {
            Some(next) => after = Some(next),
            None => return Ok(total),
        }
    }
}

/// Calls `act` on the ids of `items` of each tenant, adding what it counted to `total`.
async fn by_tenant<F, Fut>(items: &[JobView], mut act: F, total: &mut PerTenant) -> StoreResult<()>
where
    F: FnMut(Vec<JobId>) -> Fut,
    Fut: Future<Output = StoreResult<usize>>,
{
    let mut by_tenant: BTreeMap<&Tenant, Vec<JobId>> = BTreeMap::new();
    for v in items {
        by_tenant.entry(&v.spec.tenant).or_default().push(v.id);
    }
    for (tenant, ids) in by_tenant {
        let n = act(ids).await?;
        if n > 0 {
            *total.entry(tenant.clone()).or_default() += n;
        }
    }
    Ok(())
}
