//! A cap on concurrent deliveries per host, so that a host whose requests hang holds at
//! most `cap` of the instance's delivery slots.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Clone)]
pub struct HostSlots {
    cap: usize,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// One delivery's slot at its host, given back when dropped.
pub struct HostSlot {
    host: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl HostSlots {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            in_flight: Arc::default(),
        }
    }

    /// A slot at `host`, or `None` while it already has `cap` deliveries in flight.
    pub fn try_acquire(&self, host: &str) -> Option<HostSlot> {
        let mut map = self.in_flight.lock().expect("host slots");
        let n = map.entry(host.to_string()).or_default();
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(HostSlot {
            host: host.to_string(),
            in_flight: self.in_flight.clone(),
        })
    }
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        let mut map = self.in_flight.lock().expect("host slots");
        if let Some(n) = map.get_mut(&self.host) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.host);
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
        assert!(slots.try_acquire("a").is_none());
        assert!(slots.try_acquire("b").is_some(), "hosts are independent");
        drop(a);
        assert!(slots.try_acquire("a").is_some());
    }
}
