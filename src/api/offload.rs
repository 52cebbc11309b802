//! Where a pass over a request's body runs. Reading a body (its nesting, its fields),
//! its canonical text and fingerprint, its schema, the notifications an event makes of
//! it: each pass is O(n log n) for n bytes (a schema's, times the schema's size), yet
//! the largest body the limits allow costs several milliseconds of a core even so, and
//! a batch several times that. On one of the runtime's worker threads such a pass would
//! hold up every other request that thread serves, `/healthz` among them, so a pass
//! over a large body hands the thread's other tasks to another thread for its while
//! (`block_in_place`: the pass can borrow what the request holds, and runs inside the
//! intake's database transaction too, where a task of its own could not). A pass over
//! a small body (most are), well under a millisecond, runs in place and spares the
//! hand-over.

use tokio::runtime::{Handle, RuntimeFlavor};

/// The largest body passed over in place: a pass over it takes well under a millisecond.
const IN_PLACE_BYTES: usize = 8 * 1024;

/// `pass()`, a pass over `bytes` bytes of a body: in place for a small body, else off
/// the runtime's worker threads. In place too where there are no worker threads to
/// keep free (outside a runtime, or on one of a single thread).
pub(super) fn pass_over<T>(bytes: usize, pass: impl FnOnce() -> T) -> T {
    let workers =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    match workers && bytes > IN_PLACE_BYTES {
        true => tokio::task::block_in_place(pass),
        false => pass(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    /// On a runtime of one worker thread, beside a task that counts each time it runs:
    /// how many times it ran while a pass over `bytes` bytes waited for it (as long as
    /// `tries` looks, or until it ran `enough` times). Counted, not timed: where the
    /// pass holds the worker, the count cannot move.
    fn runs_beside_a_pass(bytes: usize, tries: usize, enough: usize) -> usize {
        let one_worker = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        one_worker.block_on(async move {
            let runs = Arc::new(AtomicUsize::new(0));
            let counted = runs.clone();
            let counter = tokio::spawn(async move {
                loop {
                    counted.fetch_add(1, SeqCst);
                    tokio::task::yield_now().await;
                }
            });
            let pass = tokio::spawn(async move {
                let before = runs.load(SeqCst);
                pass_over(bytes, || {
                    let ran = || runs.load(SeqCst) - before;
                    for _ in 0..tries {
                        if ran() >= enough {
                            break;
                        }
                        std::thread::yield_now();
                    }
                    ran()
                })
            });
            let ran = pass.await.unwrap();
            counter.abort();
            ran
        })
    }

    #[test]
    fn a_pass_over_a_large_body_leaves_the_worker_to_other_tasks() {
        assert!(runs_beside_a_pass(IN_PLACE_BYTES + 1, 10_000_000, 100) >= 100);
    }

    #[test]
    fn a_pass_over_a_small_body_runs_in_place() {
        assert_eq!(runs_beside_a_pass(IN_PLACE_BYTES, 10_000, 1), 0);
    }
}
