//! The Redis store's one pub/sub subscription: wake-ups (a shard's new earliest due
//! time), endpoints' health from other instances, and changes of the fleet; kept with
//! backoff, moved to the new primary when Sentinel names another, and after a gap every
//! shard is looked at once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::RedisStore;
use crate::backoff::backoff;

impl RedisStore {
    /// Keeps the wake-up, health and fleet subscription, resubscribing with backoff.
    pub(super) async fn subscribe(&self, wake: &Notify, cancel: &CancellationToken) {
        let mut failures = 0u32;
        while !cancel.is_cancelled() {
            match self.listen(wake, cancel).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    if failures == 0 {
                        tracing::warn!(error = %e, "wake-up and health subscription lost; resubscribing");
                    }
                    failures += 1;
                }
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff(failures)) => {}
            }
        }
    }

    /// Subscribes to the wake channel and forwards messages until it drops or `cancel`.
    async fn listen(&self, wake: &Notify, cancel: &CancellationToken) -> redis::RedisResult<()> {
        let turn = self.next_pubsub.fetch_add(1, Ordering::Relaxed);
        let moved = self.place.moved();
        let mut pubsub = tokio::time::timeout(self.connect_timeout, self.place.pubsub(turn))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting for pub/sub")
            })??;
        pubsub
            .subscribe(&[
                &self.wake_channel,
                &self.health.channel,
                &self.fleet.channel,
            ])
            .await?;
        // Anything published while unsubscribed was missed: look at every shard once, and
        // at the fleet.
        self.clock.wake_all();
        wake.notify_one();
        self.fleet_changed.notify_one();
        let mut messages = pubsub.on_message();
        tokio::pin!(moved);
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                // The primary moved: subscribe on the new one.
                _ = &mut moved => return Ok(()),
                msg = messages.next() => match msg {
                    Some(msg) if msg.get_channel_name() == self.fleet.channel => {
                        let from: String = msg.get_payload().unwrap_or_default();
                        if self.fleet.is_another(&from) {
                            self.fleet_changed.notify_one();
                        }
                    }
                    Some(msg) if msg.get_channel_name() == self.health.channel => {
                        let text: String = msg.get_payload().unwrap_or_default();
                        self.heard_health(&text);
                    }
                    Some(msg) => {
                        let text: String = msg.get_payload().unwrap_or_default();
                        let (due_key, due_in) = wake_message(&text);
                        // Only the shard's owner claims it: the other instances'
                        // schedulers need not look again.
                        let look = match self.due_keys.get(due_key) {
                            Some(&shard) => self.clock.wake_in(shard, due_in),
                            None => {
                                self.clock.wake_all();
                                true
                            }
                        };
                        if look {
                            wake.notify_one();
                        }
                    }
                    None => return Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "pub/sub connection closed").into()),
                },
            }
        }
    }
}

impl RedisStore {
    /// Hands what another instance published of an endpoint's health to the listener.
    fn heard_health(&self, message: &str) {
        let listener = self
            .health_listener
            .read()
            .expect("health listener")
            .clone();
        if let (Some(listener), Some((endpoint, healthy))) = (listener, self.health.heard(message))
        {
            listener(endpoint, healthy);
        }
    }
}

/// A wake-up message: a shard's due key and the ms until its new earliest is due (a
/// message of earlier builds has no ms: due now).
fn wake_message(text: &str) -> (&str, Duration) {
    match text.rsplit_once(' ') {
        Some((key, ms)) => (key, Duration::from_millis(ms.parse().unwrap_or(0))),
        None => (text, Duration::ZERO),
    }
}
