//! The retention sweep: every `retention.sweep_interval`, deletes dead letters and
//! finished notifications past their limits, so that they expire even when nothing new
//! finishes (settles trim as they go). What was deleted is counted by the store and
//! logged here.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// Sweeps until `stop` fires. Errors are logged once per outage, not per sweep.
pub async fn run(store: Arc<dyn Store>, every: Duration, stop: CancellationToken) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match store.trim().await {
            Ok(n) => {
                if n > 0 {
                    tracing::info!(deleted = n, "retention deleted expired notifications");
                }
                failing = false;
            }
            Err(e) => {
                crate::metrics::store_error("trim");
                if !failing {
                    tracing::warn!(error = %e, "retention sweep failed; trying again later");
                }
                failing = true;
            }
        }
    }
}
