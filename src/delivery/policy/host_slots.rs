//! A cap on concurrent deliveries per host, so that a host whose requests hang holds at
//! most `cap` of the instance's delivery slots. While a host is at its cap, the slots
//! keep a running average of how long its attempts take (before any has finished: how
//! long the host has been busy), which says how long a notification turned away should
//! wait before it tries again: milliseconds for a fast host, seconds for one that hangs.
//! For a fast host a slot frees so soon that waiting for it here (`acquire`) is cheaper
//! than handing the notification back to the store and claiming it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::Notify;

/// The shortest and longest wait of a notification turned away by a busy host.
const MIN_WAIT: Duration = Duration::from_millis(10);
const MAX_WAIT: Duration = Duration::from_secs(5);

/// A host whose attempts take at most this long is worth waiting for in process.
const FAST: Duration = Duration::from_millis(100);
/// How often a waiter looks again even without being told a slot freed.
const RECHECK: Duration = Duration::from_millis(10);

/// A host with deliveries in flight; hosts without any have no entry.
struct Host {
    in_flight: usize,
    /// Since when it has had deliveries in flight without a break.
    busy_since: Instant,
    /// Exponentially weighted average attempt duration, in ms.
    average_ms: Option<f64>,
    /// Told each time one of its slots frees.
    freed: Arc<Notify>,
}

/// The host is at its cap.
#[derive(Debug, Clone)]
pub struct Busy {
    /// About one attempt's duration there: how long to wait before asking again.
    pub wait: Duration,
    freed: Arc<Notify>,
}

impl Busy {
    /// Whether a slot will free so soon that waiting for it beats deferring.
    pub fn worth_waiting(&self) -> bool {
        self.wait <= FAST
    }
}

type Hosts = Arc<Mutex<HashMap<String, Host>>>;

/// The hosts' table, even after a thread panicked while holding it: every change to it
/// is one step on one entry, so a panic cannot leave it half-changed, and a slot given
/// back in `Drop` must not panic in turn.
fn lock(hosts: &Hosts) -> MutexGuard<'_, HashMap<String, Host>> {
    hosts.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone)]
pub struct HostSlots {
    cap: usize,
    hosts: Hosts,
}

/// One delivery's slot at its host, given back when dropped.
pub struct HostSlot {
    host: String,
    hosts: Hosts,
}

impl HostSlots {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            hosts: Arc::default(),
        }
    }

    /// A slot at `host`, or, while it already has `cap` deliveries in flight, how long to
    /// wait before asking again (about one attempt's duration there).
    pub fn try_acquire(&self, host: &str) -> Result<HostSlot, Busy> {
        let mut hosts = lock(&self.hosts);
        let h = hosts.entry(host.to_string()).or_insert_with(|| Host {
            in_flight: 0,
            busy_since: Instant::now(),
            average_ms: None,
            freed: Arc::new(Notify::new()),
        });
        if h.in_flight >= self.cap {
            let typical = match h.average_ms {
                Some(ms) => Duration::from_secs_f64(ms / 1000.0),
                None => h.busy_since.elapsed(),
            };
            return Err(Busy {
                wait: typical.clamp(MIN_WAIT, MAX_WAIT),
                freed: h.freed.clone(),
            });
        }
        h.in_flight += 1;
        Ok(HostSlot {
            host: host.to_string(),
            hosts: self.hosts.clone(),
        })
    }

    /// A slot at `host`, waiting up to `budget` for one to free while the host stays
    /// fast; otherwise, or when the budget runs out, how long to wait before asking again.
    pub async fn acquire(&self, host: &str, budget: Duration) -> Result<HostSlot, Busy> {
        let deadline = tokio::time::Instant::now() + budget;
        loop {
            let busy = match self.try_acquire(host) {
                Ok(slot) => return Ok(slot),
                Err(busy) => busy,
            };
            let now = tokio::time::Instant::now();
            if !busy.worth_waiting() || now >= deadline {
                return Err(busy);
            }
            let look_again = deadline.min(now + RECHECK);
            let _ = tokio::time::timeout_at(look_again, busy.freed.notified()).await;
        }
    }
}

impl HostSlot {
    /// Gives the slot back, learning how long the attempt took.
    pub fn finish(self, took: Duration) {
        let ms = took.as_secs_f64() * 1000.0;
        if let Some(h) = lock(&self.hosts).get_mut(&self.host) {
            h.average_ms = Some(h.average_ms.map_or(ms, |avg| 0.8 * avg + 0.2 * ms));
        }
    }
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        let mut hosts = lock(&self.hosts);
        if let Some(h) = hosts.get_mut(&self.host) {
            h.in_flight -= 1;
            h.freed.notify_one();
            if h.in_flight == 0 {
                hosts.remove(&self.host);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_each_host_and_frees_on_drop() {
        let slots = HostSlots::new(2);
        let a = slots.try_acquire("a").unwrap();
        let _b = slots.try_acquire("a").unwrap();
        assert!(slots.try_acquire("a").is_err());
        assert!(slots.try_acquire("b").is_ok(), "hosts are independent");
        drop(a);
        assert!(slots.try_acquire("a").is_ok());
    }

    #[test]
    fn slots_are_given_back_after_a_panic_while_the_table_was_held() {
        let slots = HostSlots::new(1);
        let held = slots.try_acquire("a").unwrap();
        let hosts = slots.hosts.clone();
        let poisoned = std::thread::spawn(move || {
            let _guard = hosts.lock().unwrap();
            panic!("a panic while the table is held");
        })
        .join();
        assert!(poisoned.is_err() && slots.hosts.is_poisoned());
        drop(held);
        assert!(slots.try_acquire("a").is_ok(), "the slot came back");
    }

    #[test]
    fn a_busy_host_says_to_wait_about_one_attempt() {
        let slots = HostSlots::new(2);
        for (host, took, wait) in [
            ("slow", Duration::from_secs(30), MAX_WAIT),
            ("fast", Duration::from_millis(1), MIN_WAIT),
            (
                "usual",
                Duration::from_millis(400),
                Duration::from_millis(400),
            ),
        ] {
            let first = slots.try_acquire(host).unwrap();
            let _second = slots.try_acquire(host).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            let before_any = slots.try_acquire(host).err().unwrap().wait;
            assert!(
                before_any >= Duration::from_millis(30),
                "busy for {before_any:?}"
            );
            first.finish(took);
            let _third = slots.try_acquire(host).unwrap();
            assert_eq!(slots.try_acquire(host).err().unwrap().wait, wait, "{host}");
        }
    }
}
