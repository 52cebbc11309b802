//! The delivery slots of one instance: at most `delivery.concurrency` notifications are
//! being sent (or waiting for a busy host's slot) at once.
//!
//! Under load, a slot that frees would stay empty while the scheduler claims its next
//! notification and reserves its send time (two store calls). So a busy scheduler also
//! claims a reserve of due notifications beyond the free slots, half as many as there
//! are slots, which queue here for one: a slot that frees is taken at once, and the
//! scheduler tops the reserve up once half of it has taken slots. It tops up only as
//! the reserve takes slots, not as it gives up waiting, so that while every slot is held
//! by a slow host the reserve is not claimed, given back and claimed again, and only
//! while the store may have more due (the last claim took all it asked for).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

pub struct Slots {
    permits: Arc<Semaphore>,
    capacity: usize,
    /// Due notifications queued for a slot at most, as the scheduler counts them when it
    /// claims more (`wanted`).
    reserve: usize,
    queued: AtomicUsize,
    /// Signalled when a queued notification takes a slot.
    taken: Notify,
}

/// A slot: held from when its notification may go until its outcome is queued for the
/// settler.
pub type Slot = OwnedSemaphorePermit;

impl Slots {
    pub fn new(capacity: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(capacity)),
            capacity,
            reserve: (capacity / 2).max(1),
            queued: AtomicUsize::new(0),
            taken: Notify::new(),
        }
    }

    /// Slots no notification holds or is queued for.
    pub fn free(&self) -> usize {
        self.permits.available_permits()
    }

    /// Whether at least three quarters of the slots are free: the instance is not busy.
    pub fn mostly_free(&self) -> bool {
        4 * self.free() >= 3 * self.capacity
    }

    /// A free slot, if there is one and no queued notification is before the caller.
    pub fn try_take(&self) -> Option<Slot> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Queues for a slot: counted among the reserve until the returned place takes one or
    /// gives up.
    pub fn queue(self: &Arc<Self>) -> InQueue {
        self.queued.fetch_add(1, Ordering::Relaxed);
        InQueue {
            slots: self.clone(),
        }
    }

    /// Waits until more are worth claiming: a slot is free, or (when `top_up`, as when
    /// the store may have more due) queued notifications have taken slots and at most
    /// half the reserve is left.
    pub async fn claimable(&self, top_up: bool) {
        loop {
            if self.free() > 0 {
                return;
            }
            tokio::select! {
                biased;
                _ = self.permits.acquire() => return,
                _ = self.taken.notified(), if top_up => {
                    if self.queued.load(Ordering::Relaxed) <= self.reserve / 2 {
                        return;
                    }
                }
            }
        }
    }

    /// How many due notifications a busy instance claims now: the free slots, and what
    /// the reserve lacks.
    pub fn wanted(&self) -> usize {
        (self.free() + self.reserve).saturating_sub(self.queued.load(Ordering::Relaxed))
    }
}

/// A due notification's place in the queue for a slot.
pub struct InQueue {
    slots: Arc<Slots>,
}

impl InQueue {
    /// The next slot that frees, unless none does `within`.
    pub async fn take(self, within: Duration) -> Option<Slot> {
        let permits = self.slots.permits.clone();
        let slot = tokio::time::timeout(within, permits.acquire_owned())
            .await
            .ok()?
            .ok()?;
        let slots = self.slots.clone();
        drop(self);
        slots.taken.notify_one();
        Some(slot)
    }
}

impl Drop for InQueue {
    fn drop(&mut self) {
        self.slots.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Slots;

    const MOMENT: Duration = Duration::from_millis(50);

    async fn claimable_within(slots: &Slots, d: Duration) -> bool {
        tokio::time::timeout(d, slots.claimable(true)).await.is_ok()
    }

    #[tokio::test]
    async fn a_busy_instance_wants_its_free_slots_and_the_reserve() {
        let slots = Arc::new(Slots::new(8));
        assert_eq!(slots.wanted(), 8 + 4);
        let held: Vec<_> = (0..6).filter_map(|_| slots.try_take()).collect();
        assert_eq!(held.len(), 6);
        assert!(!slots.mostly_free());
        assert_eq!(slots.wanted(), 2 + 4);
        let queued: Vec<_> = (0..3).map(|_| slots.queue()).collect();
        assert_eq!(slots.wanted(), 2 + 4 - 3);
        drop(queued);
        assert_eq!(slots.wanted(), 2 + 4);
    }

    #[tokio::test]
    async fn the_reserve_is_topped_up_as_it_takes_slots_not_as_it_gives_up() {
        let slots = Arc::new(Slots::new(2));
        let held: Vec<_> = (0..2).filter_map(|_| slots.try_take()).collect();
        let waiting = slots.queue();
        assert_eq!(
            slots.wanted(),
            0,
            "both slots held and the reserve of one queued"
        );
        assert!(!claimable_within(&slots, MOMENT).await);

        // It gives up: nothing more is worth claiming while every slot is held.
        assert!(waiting.take(MOMENT).await.is_none());
        assert!(!claimable_within(&slots, MOMENT).await);

        // Queued again, it takes the slot that frees: time to top the reserve up.
        let waiting = slots.queue();
        let taking = tokio::spawn(waiting.take(Duration::from_secs(5)));
        tokio::task::yield_now().await;
        let mut held = held;
        drop(held.pop());
        let slot = taking.await.unwrap();
        assert!(slot.is_some());
        assert!(claimable_within(&slots, Duration::from_secs(5)).await);
        assert_eq!(slots.wanted(), 1);
    }

    #[tokio::test]
    async fn a_drained_store_is_asked_again_only_for_a_free_slot() {
        let slots = Arc::new(Slots::new(2));
        let mut held: Vec<_> = (0..2).filter_map(|_| slots.try_take()).collect();
        let taking = tokio::spawn(slots.queue().take(Duration::from_secs(5)));
        tokio::task::yield_now().await;
        drop(held.pop());
        let taken = taking.await.unwrap();
        assert!(taken.is_some());
        let ask = |top_up| tokio::time::timeout(MOMENT, slots.claimable(top_up));
        assert!(ask(false).await.is_err(), "no slot free");
        drop(held);
        assert!(ask(false).await.is_ok(), "a slot free");
    }

    #[tokio::test]
    async fn a_free_slot_is_always_worth_a_claim() {
        let slots = Slots::new(2);
        assert!(claimable_within(&slots, MOMENT).await);
        let _one = slots.try_take();
        assert!(claimable_within(&slots, MOMENT).await);
    }
}
