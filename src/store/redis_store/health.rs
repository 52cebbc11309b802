//! The pub/sub channel on which instances tell each other how attempts at endpoints went
//! (`<prefix>:health`), so that every instance's circuit breaker counts the fleet's
//! failures. A message is `<instance> <0|1> <endpoint>`: who sent it (an instance
//! ignores its own, which it has counted already), failed or healthy, and the endpoint.

use async_trait::async_trait;

use super::{store_error, RedisStore};
use crate::store::{FleetMessaging, HealthListener, StoreResult};

pub struct HealthChannel {
    pub channel: String,
    /// This instance's id (`fleet.rs`).
    instance: String,
}

impl HealthChannel {
    pub fn new(key_prefix: &str, instance: &str) -> Self {
        Self {
            channel: format!("{key_prefix}:health"),
            instance: instance.to_string(),
        }
    }

    pub fn message(&self, endpoint: &str, healthy: bool) -> String {
        format!("{} {} {endpoint}", self.instance, u8::from(healthy))
    }

    /// What another instance told: the endpoint and whether it was healthy. `None` for
    /// this instance's own messages and for anything unreadable.
    pub fn heard<'m>(&self, message: &'m str) -> Option<(&'m str, bool)> {
        let mut parts = message.splitn(3, ' ');
        let (from, healthy, endpoint) = (parts.next()?, parts.next()?, parts.next()?);
        if from == self.instance || endpoint.is_empty() {
            return None;
        }
        match healthy {
            "0" => Some((endpoint, false)),
            "1" => Some((endpoint, true)),
            _ => None,
        }
    }
}

#[async_trait]
impl FleetMessaging for RedisStore {
    async fn publish_health(&self, endpoint: &str, healthy: bool) -> StoreResult<()> {
        redis::cmd("PUBLISH")
            .arg(&self.health.channel)
            .arg(self.health.message(endpoint, healthy))
            .query_async::<i64>(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(())
    }

    fn on_health(&self, listener: HealthListener) {
        *self.health_listener.write().expect("health listener") = Some(listener);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hears_the_others_not_itself() {
        let (a, b) = (HealthChannel::new("p", "a"), HealthChannel::new("p", "b"));
        let said = a.message("https://shop.example:443/hook", false);
        assert_eq!(a.heard(&said), None);
        assert_eq!(
            b.heard(&said),
            Some(("https://shop.example:443/hook", false))
        );
        assert_eq!(b.heard(&a.message("e", true)), Some(("e", true)));
        assert_eq!(b.heard("garbage"), None);
        assert_eq!(b.heard("x 7 e"), None);
    }
}
