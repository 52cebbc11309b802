//! What instances sharing the database tell each other, over `LISTEN/NOTIFY`: that a
//! notification became due earlier than any before it (`postback_due`, sent at the
//! commit of the transition), how attempts at an endpoint went (`postback_health`, for
//! every instance's circuit breakers), and that a producer's transaction registered a
//! notification (`postback_intake`, sent by `postback.notify()` at its commit). One connection per instance listens, over
//! TLS as the pool's do, and reconnects with a bounded backoff when it is lost.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{poll_fn, StreamExt};
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::tls::Connection;
use crate::store::HealthListener;

pub const DUE: &str = "postback_due";
pub const HEALTH: &str = "postback_health";
pub const INTAKE: &str = "postback_intake";

/// Longest wait between attempts to listen again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Who hears `postback_health` (set once the pipeline starts) and `postback_intake`.
#[derive(Clone, Default)]
pub struct Listeners {
    health: Arc<Mutex<Option<HealthListener>>>,
    pub intake: Arc<Notify>,
}

impl Listeners {
    pub fn set_health(&self, listener: HealthListener) {
        *self.health.lock().expect("health listener lock") = Some(listener);
    }

    fn health(&self) -> Option<HealthListener> {
        self.health.lock().expect("health listener lock").clone()
    }
}

/// A health report as sent: `<instance> <0|1> <endpoint>`.
pub fn health_payload(instance: &str, endpoint: &str, healthy: bool) -> String {
    format!("{instance} {} {endpoint}", u8::from(healthy))
}

/// Listens until `cancel` fires: `postback_due` wakes `wake`; another instance's
/// `postback_health` goes to the health listener. After the connection is (re)made the
/// scheduler is woken once, since a signal may have been missed meanwhile.
pub async fn listen(
    connection: Connection,
    instance: String,
    listeners: Listeners,
    wake: Arc<Notify>,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    while !cancel.is_cancelled() {
        match listen_once(&connection, &instance, &listeners, &wake, &cancel).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = %humantime::format_duration(backoff), "postgres: cannot listen for wake-ups")
            }
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn listen_once(
    via: &Connection,
    instance: &str,
    listeners: &Listeners,
    wake: &Notify,
    cancel: &CancellationToken,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = via.config.connect(via.tls.clone()).await?;
    let mut messages = poll_fn(move |cx| connection.poll_message(cx));
    let subscribe =
        client.batch_execute("LISTEN postback_due; LISTEN postback_health; LISTEN postback_intake");
    // The connection must be polled for the LISTEN to be answered.
    let mut subscribe = std::pin::pin!(subscribe);
    loop {
        tokio::select! {
            biased;
            done = &mut subscribe => { done?; break }
            message = messages.next() => match message {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
        }
    }
    wake.notify_one();
    listeners.intake.notify_one();
    loop {
        let message = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(()),
            m = messages.next() => m,
        };
        match message {
            Some(Ok(AsyncMessage::Notification(n))) if n.channel() == DUE => wake.notify_one(),
            Some(Ok(AsyncMessage::Notification(n))) if n.channel() == INTAKE => {
                listeners.intake.notify_one()
            }
            Some(Ok(AsyncMessage::Notification(n))) => {
                hear_health(n.payload(), instance, listeners)
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e),
            None => return Ok(()),
        }
    }
}

fn hear_health(payload: &str, instance: &str, listeners: &Listeners) {
    let mut words = payload.splitn(3, ' ');
    let (Some(from), Some(healthy), Some(endpoint)) = (words.next(), words.next(), words.next())
    else {
        return;
    };
    if from == instance {
        return;
    }
    if let Some(listener) = listeners.health() {
        listener(endpoint, healthy == "1");
    }
}
