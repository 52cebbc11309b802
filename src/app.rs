//! `postback serve`: connects the store, starts the dispatcher and the API in one
//! process, and shuts them down in order on SIGTERM or Ctrl-C.

use std::sync::Arc;

use anyhow::Context;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, NotifyPolicy, Tokens};
use crate::config::{Config, RedisTarget, StoreTarget};
use crate::domain::Destinations;
use crate::policy::Policy;
use crate::retention;
use crate::scheduler::Dispatcher;
use crate::sender::Sender;
use crate::signing::Signer;
use crate::store::{EmbeddedStore, RedisStore, Store};

pub async fn serve(config: Config) -> anyhow::Result<()> {
    let s = &config.settings;
    let store = open_store(&config).await?;
    let listener = tokio::net::TcpListener::bind(s.server.listen)
        .await
        .with_context(|| {
            format!(
                "server.listen (POSTBACK_SERVER_LISTEN): cannot listen on {}",
                s.server.listen
            )
        })?;
    if s.server.api_tokens.is_empty() {
        tracing::warn!("API authentication is off (--insecure-no-auth)");
    }

    let wake = Arc::new(Notify::new());
    let stop = CancellationToken::new();
    let signer = Signer::new(config.secrets.clone(), config.key_secrets.clone());
    let sender = Sender::new(&s.delivery, signer)?;
    let delivery = Arc::new(Policy::new(&s.delivery, &config.quotas));
    let dispatcher = Dispatcher::new(
        store.clone(),
        sender,
        delivery.clone(),
        wake.clone(),
        s.delivery.clone(),
        config.jitter_percent,
    );
    let dispatching = tokio::spawn(dispatcher.run(stop.child_token()));
    let watching = {
        let (store, wake, stop) = (store.clone(), wake.clone(), stop.child_token());
        tokio::spawn(async move { store.watch_wakeups(wake, stop).await })
    };
    let sweeping = tokio::spawn(retention::sweep(
        store.clone(),
        s.retention.sweep_interval,
        stop.child_token(),
    ));

    let state = AppState {
        store,
        wake,
        policy: Arc::new(notify_policy(&config)),
        delivery,
        metrics: crate::metrics::install()?,
    };
    let tokens = Tokens(Arc::new(s.server.api_tokens.as_slice().to_vec()));
    let app = api::router(state, tokens, &s.server);
    tracing::info!(addr = %listener.local_addr()?, version = env!("CARGO_PKG_VERSION"), "postback listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving the API")?;

    tracing::info!("stopping: no new claims; finishing deliveries in flight");
    stop.cancel();
    dispatching.await.context("dispatcher")?;
    watching.await.context("wake-up watcher")?;
    sweeping.await.context("retention sweep")?;
    tracing::info!("stopped");
    Ok(())
}

/// The configured store, with one line saying which and where.
async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let s = &config.settings;
    let target = match &config.store {
        StoreTarget::Embedded(dir) => {
            let store = EmbeddedStore::open(dir, &s.retention)?;
            tracing::info!(store = "embedded", path = %store.path().display(), "store opened");
            return Ok(Arc::new(store));
        }
        StoreTarget::Redis(target) => target,
    };
    let store = RedisStore::connect(target, config.shards, &s.store, &s.retention).await?;
    let (kind, urls) = match target {
        RedisTarget::Standalone(url) => ("redis", vec![url]),
        RedisTarget::Cluster(seeds) => ("redis cluster", seeds.iter().collect()),
    };
    let urls: Vec<String> = urls.into_iter().map(|url| redacted(url)).collect();
    tracing::info!(store = kind, url = %urls.join(","), shards = config.shards, "store connected");
    Ok(Arc::new(store))
}

fn notify_policy(config: &Config) -> NotifyPolicy {
    let d = &config.settings.delivery;
    NotifyPolicy {
        schedules: config.schedules.clone(),
        default_timeout: d.timeout,
        max_timeout: d.max_timeout,
        max_delay: d.max_delay,
        idempotency_ttl: config.settings.server.idempotency_ttl,
        destinations: if d.allow_private_networks {
            Destinations::Any
        } else {
            Destinations::PublicOnly
        },
    }
}

/// The URL without its password, for logs.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("****"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
