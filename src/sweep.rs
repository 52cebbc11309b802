//! The retention sweep: every `retention.sweep_interval`, deletes dead letters and
//! finished notifications past their limits, so that they expire even when nothing new
//! finishes (settles trim as they go), and forgets endpoints idle for as long as dead
//! letters are kept (`retention.dead_max_age`), a bounded number of records a sweep. What
//! was deleted is counted by the store and logged here.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::store::{EndpointHealth, Queue};

/// Endpoint records a sweep reads at most, looking for idle ones.
const ENDPOINTS_PER_SWEEP: usize = 1_000;

/// Sweeps until `stop` fires. Errors are logged once per outage, not per sweep.
pub async fn run(
    store: Arc<impl Queue + EndpointHealth + ?Sized>,
    every: Duration,
    forget_after: Duration,
    stop: CancellationToken,
) {
    let mut failing = false;
    let mut endpoints_from: Option<String> = None;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let idle_before = now_ms() - forget_after.as_millis() as i64;
        let from = endpoints_from.take();
        match store
            .forget_endpoints(idle_before, from.as_deref(), ENDPOINTS_PER_SWEEP)
            .await
        {
            Ok((forgotten, next)) => {
                if forgotten > 0 {
                    tracing::info!(forgotten, "retention forgot idle endpoints");
                }
                endpoints_from = next;
            }
            Err(e) => {
                endpoints_from = from;
                tracing::debug!(error = %e, "idle endpoints not forgotten; trying again later");
            }
        }
        match store.trim().await {
            Ok(n) => {
                if n > 0 {
                    tracing::info!(deleted = n, "retention deleted expired notifications");
                }
                failing = false;
            }
            Err(e) => {
                crate::observability::metrics::store_error("trim");
                if !failing {
                    tracing::warn!(error = %e, "retention sweep failed; trying again later");
                }
                failing = true;
            }
        }
    }
}
