//! Bulk actions over every dead letter a filter matches (replay, discard): the matches are
//! paged newest first and acted on in bounded batches, each batch one atomic call. A
//! batch skips whatever stopped being dead meanwhile, so running one twice, or two at
//! once, never doubles anything.

use std::future::Future;
use std::time::Duration;

use super::{Cursor, ListFilter, Store, StoreResult};
use crate::domain::{JobId, Schedule};

/// Dead letters read, and acted on, per batch.
const BATCH: usize = 200;

/// Replays every dead letter matching `filter`. How many were replayed.
pub async fn replay_matching(
    store: &dyn Store,
    filter: &ListFilter,
    schedule: Option<&Schedule>,
    delay: Duration,
) -> StoreResult<usize> {
    for_each_batch(store, filter, |ids| async move {
        store.replay_many(&ids, schedule, delay).await
    })
    .await
}

/// Discards every dead letter matching `filter`. How many were discarded.
pub async fn discard_matching(store: &dyn Store, filter: &ListFilter) -> StoreResult<usize> {
    for_each_batch(
        store,
        filter,
        |ids| async move { store.discard(&ids).await },
    )
    .await
}

/// Pages through the matches once, oldest page last, calling `act` on each batch of ids;
/// adds up what `act` counted.
async fn for_each_batch<F, Fut>(
    store: &dyn Store,
    filter: &ListFilter,
    mut act: F,
) -> StoreResult<usize>
where
    F: FnMut(Vec<JobId>) -> Fut,
    Fut: Future<Output = StoreResult<usize>>,
{
    let mut total = 0;
    let mut after: Option<Cursor> = None;
    loop {
        let page = store.dead_letters(filter, BATCH, after.as_ref()).await?;
        let ids: Vec<JobId> = page.items.iter().map(|v| v.id).collect();
        if !ids.is_empty() {
            total += act(ids).await?;
        }
        match page.next_cursor {
            Some(next) => after = Some(next),
            None => return Ok(total),
        }
    }
}
