//! The fleet: instances sharing one Redis divide its shards among themselves, so that each
//! claims only its own and claim and settle batches stay large however many instances
//! run. Each instance renews its membership every half of `store.shard_lease`
//! (`fleet.lua`, which also reassigns shards when members come or go) and learns its
//! shards from the reply; it renews at once when another announces a change on the fleet
//! channel, and when another's membership is due to end. A member not renewed for three
//! quarters of the lease is forgotten, so a killed instance's shards are taken over
//! within three quarters of the lease; a stopping one leaves at once.
//! Ownership only saves work: a claim is atomic whoever makes it, so an instance whose
//! ownership has not been renewed for a whole lease claims every shard again.

use std::time::Duration;

use tokio::time::Instant;

use redis::Script;

use super::conn::Conn;
use super::reply::int_at;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{script_error, RedisStore};
use crate::backoff::backoff;
use crate::store::StoreResult;

/// How long after another member's membership was due to end a renewal looks again.
const AFTER_ANOTHER_ENDS: Duration = Duration::from_millis(10);

pub struct Fleet {
    script: Script,
    /// `{<prefix>:fleet}:members` and `{<prefix>:fleet}:owners`.
    keys: [String; 2],
    /// Where a member that changed the fleet says so (`<prefix>:fleet`).
    pub channel: String,
    /// This instance's id, random per start.
    pub instance: String,
    lease: Duration,
    shards: usize,
}

/// What one renewal learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Live instances, this one included.
    pub instances: usize,
    /// The shards this instance owns.
    pub shards: Vec<usize>,
    /// Until when it owns them unless renewed.
    pub until: Instant,
    /// When to renew next: in half a lease, or as the first other member's membership
    /// ends (if it was not renewed, its shards are then taken over).
    pub renew_in: Duration,
}

impl Fleet {
    pub fn new(prefix: &str, instance: &str, lease: Duration, shards: usize) -> Self {
        let tag = format!("{{{prefix}:fleet}}");
        Self {
            script: Script::new(include_str!("../../../lua/fleet.lua")),
            keys: [format!("{tag}:members"), format!("{tag}:owners")],
            channel: format!("{prefix}:fleet"),
            instance: instance.to_string(),
            lease,
            shards,
        }
    }

    /// The longest a membership goes without a renewal (while Redis answers).
    pub fn every(&self) -> Duration {
        self.lease / 2
    }

    /// Renews this instance's membership: the live instances and the shards it owns.
    pub async fn renew(&self, conn: &Conn) -> StoreResult<Membership> {
        let asked = Instant::now();
        let reply = self.run(conn, self.lease * 3 / 4).await?;
        let instances = int_at(&reply, 0)? as usize;
        let other_ends = u64::try_from(int_at(&reply, 1)?).ok().map(|ms| {
            // Just after it, so that Redis's clock has passed it too.
            Duration::from_millis(ms) + AFTER_ANOTHER_ENDS
        });
        let shards = (2..reply.len())
            .map(|i| int_at(&reply, i).map(|s| s as usize))
            .collect::<StoreResult<_>>()?;
        Ok(Membership {
            instances,
            shards,
            until: asked + self.lease,
            renew_in: other_ends.map_or(self.every(), |ends| ends.min(self.every())),
        })
    }

    /// Leaves the fleet: the others take this instance's shards at once.
    pub async fn leave(&self, conn: &Conn) -> StoreResult<()> {
        self.run(conn, Duration::ZERO).await.map(drop)
    }

    async fn run(&self, conn: &Conn, membership: Duration) -> StoreResult<Vec<redis::Value>> {
        self.script
            .key(&self.keys[0])
            .key(&self.keys[1])
            .arg(&self.instance)
            .arg(membership.as_millis() as u64)
            .arg(self.shards)
            .arg(&self.channel)
            .invoke_async(&mut conn.clone())
            .await
            .map_err(script_error("fleet"))
    }

    /// Whether a message on the fleet channel (the id of the instance that sent it) came
    /// from another instance.
    pub fn is_another(&self, message: &str) -> bool {
        message != self.instance
    }
}

impl RedisStore {
    /// Renews this instance's place in the fleet until `cancel`, then leaves it so that
    /// the others take its shards at once. Wakes the scheduler when it gains shards.
    pub(super) async fn keep_membership(&self, wake: &Notify, cancel: &CancellationToken) {
        let mut failures = 0u32;
        while !cancel.is_cancelled() {
            let next = match self.fleet.renew(&self.conn).await {
                Ok(m) => {
                    if failures > 0 {
                        tracing::info!(failures, "fleet membership renewed again");
                        failures = 0;
                    }
                    crate::observability::metrics::fleet(m.instances, m.shards.len());
                    if self.clock.own(&m.shards, m.until) {
                        wake.notify_one();
                    }
                    m.renew_in
                }
                Err(e) => {
                    if failures == 0 {
                        tracing::warn!(error = %e, "cannot renew fleet membership; retrying");
                    }
                    crate::observability::metrics::store_error("fleet");
                    failures += 1;
                    backoff(failures).min(self.fleet.every())
                }
            };
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(next) => {}
                _ = self.fleet_changed.notified() => {}
            }
        }
        match self.fleet.leave(&self.conn).await {
            Ok(()) => {
                tracing::info!(instance = %self.fleet.instance, "left the fleet: its shards are handed over")
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot leave the fleet; its shards are taken over when its lease ends")
            }
        }
    }
}
