//! Send times reserved in rate keys' quotas on Redis (`reserve.lua`), each key on a
//! slot of its own: one call for every key on a standalone Redis, one per key on a
//! cluster.

use async_trait::async_trait;
use redis::Value;

use super::conn::Conn;
use super::reply::int_at;
use super::{script_error, RedisStore};
use crate::delivery::policy::{RateAsk, SendTimes};
use crate::store::{RateReservations, StoreError, StoreResult};

impl RedisStore {
    /// Runs `reserve.lua` for `asks` in one call: on a cluster, their keys must share a
    /// slot (one ask per call does).
    async fn reserve_in_one_call(&self, asks: &[RateAsk]) -> StoreResult<Vec<SendTimes>> {
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        let mut call = self.scripts.reserve.prepare_invoke();
        for ask in asks {
            call.key(format!("{{{}{}}}", self.rate_prefix, ask.key));
            call.arg(ask.interval_us)
                .arg(ask.tolerance_us)
                .arg(ask.count)
                .arg(ask.not_before_us)
                .arg(ask.pause_us);
        }
        let reply: Vec<Value> = call
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(script_error("reserve"))?;
        if reply.len() != 1 + 2 * asks.len() {
            return Err(StoreError::Corrupt(
                "reserve reply of the wrong length".into(),
            ));
        }
        let now_us = int_at(&reply, 0)?;
        let slots = asks.iter().enumerate().map(|(i, ask)| {
            Ok(SendTimes {
                now_us,
                start_us: int_at(&reply, 1 + 2 * i)?,
                tat_us: int_at(&reply, 2 + 2 * i)?,
                interval_us: ask.interval_us,
                tolerance_us: ask.tolerance_us,
            })
        });
        slots.collect()
    }
}

#[async_trait]
impl RateReservations for RedisStore {
    async fn reserve(&self, asks: &[RateAsk]) -> StoreResult<Vec<SendTimes>> {
        if !matches!(self.conn, Conn::Cluster(_)) {
            return self.reserve_in_one_call(asks).await;
        }
        let calls = asks.chunks(1).map(|ask| self.reserve_in_one_call(ask));
        let answers = futures_util::future::try_join_all(calls).await?;
        Ok(answers.into_iter().flatten().collect())
    }
}
