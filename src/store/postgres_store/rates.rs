//! The Postgres store's quotas: send times reserved in rate keys' quotas
//! (`policy::reserve`), each key's state locked while it is read and written.

use super::tx::{col, PgResult, Tx};
use crate::delivery::policy::{self, RateAsk, RateState, SendTimes};

/// Reserves send times in each ask's rate key (`policy::reserve`), keeping each key's
/// state only while it matters. Each key is locked while it is read and written.
pub async fn reserve(t: &mut Tx<'_>, asks: &[RateAsk]) -> PgResult<Vec<SendTimes>> {
    let now_us = t.now.micros();
    let mut out = Vec::with_capacity(asks.len());
    for ask in asks {
        let key = ask.key.as_str();
        t.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('rate ' || $1, 0))",
            &[&key],
        )
        .await?;
        let rows = t
            .query(
                "SELECT tat_us, paused_until_us FROM postback.rates WHERE key = $1",
                &[&key],
            )
            .await?;
        let state = match rows.first() {
            Some(r) => RateState {
                tat_us: col(r, "tat_us")?,
                paused_until_us: col(r, "paused_until_us")?,
            },
            None => RateState::default(),
        };
        let (new, slots) = policy::reserve(state, now_us, ask);
        if new.matters_until() > now_us {
            t.execute(
                "INSERT INTO postback.rates (key, tat_us, paused_until_us) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET tat_us = $2, paused_until_us = $3",
                &[&key, &new.tat_us, &new.paused_until_us],
            )
            .await?;
        } else if !rows.is_empty() {
            t.execute("DELETE FROM postback.rates WHERE key = $1", &[&key])
                .await?;
        }
        out.push(slots);
    }
    Ok(out)
}
