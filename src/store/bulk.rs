//! Bulk actions over every dead letter a filter matches (replay, discard): the matches are
//! paged newest first and acted on in bounded batches, each batch one atomic call. A
//! batch skips whatever stopped being dead meanwhile, so running one twice, or two at
//! once, never doubles anything. What was done is counted per tenant, so that each
//! tenant's auditors see what an action over every tenant did to theirs.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use super::{Cursor, ListFilter, Store, StoreResult};
use crate::domain::{JobId, Schedule, Tenant};

/// How many an action changed, per tenant (only tenants it changed some of).
pub type PerTenant = BTreeMap<Tenant, usize>;

/// Dead letters read, and acted on, per batch.
const BATCH: usize = 200;

/// Replays every dead letter matching `filter`. How many were replayed.
pub async fn replay_matching(
    store: &dyn Store,
    filter: &ListFilter,
    schedule: Option<&Schedule>,
    delay: Duration,
) -> StoreResult<PerTenant> {
    for_each_batch(store, filter, |ids| async move {
        store.replay_many(&ids, schedule, delay).await
    })
    .await
}

/// Discards every dead letter matching `filter`. How many were discarded.
pub async fn discard_matching(store: &dyn Store, filter: &ListFilter) -> StoreResult<PerTenant> {
    for_each_batch(
        store,
        filter,
        |ids| async move { store.discard(&ids).await },
    )
    .await
}

/// Pages through the matches once, oldest page last, calling `act` on each batch of ids
/// of one tenant; adds up what `act` counted, per tenant.
async fn for_each_batch<F, Fut>(
    store: &dyn Store,
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
        let mut by_tenant: BTreeMap<&Tenant, Vec<JobId>> = BTreeMap::new();
        for v in &page.items {
            by_tenant.entry(&v.spec.tenant).or_default().push(v.id);
        }
        for (tenant, ids) in by_tenant {
            let n = act(ids).await?;
            if n > 0 {
                *total.entry(tenant.clone()).or_default() += n;
            }
        }
        match page.next_cursor {
            Some(next) => after = Some(next),
            None => return Ok(total),
        }
    }
}
