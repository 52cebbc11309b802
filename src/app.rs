//! One postback instance: `App::build` opens the store, binds the listener and makes the
//! delivery pipeline; `App::run` runs the API, the scheduler and the retention sweep
//! until the future it is given completes, then shuts them down in order. `serve` (what
//! `postback serve` runs) does both and stops on SIGTERM or Ctrl-C; tests and embedders
//! can run an instance in process the same way.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::paging::CursorSeal;
use crate::api::{self, AppState, RegistrationRules, TenantRules};
use crate::config::{redact, Config, RedisTarget, StoreTarget};
use crate::delivery::policy::Policy;
use crate::delivery::scheduler::{Dispatcher, Observers, Pipeline};
use crate::delivery::sender::{Route, Sender};
use crate::delivery::tenant_shares::TenantShares;
use crate::domain::{Destinations, Placement, ShardHealth};
use crate::endpoints::circuits::ClosedCircuits;
use crate::endpoints::pauses::EndpointPauses;
use crate::endpoints::tallies::EndpointTallies;
use crate::observability::ops_events::OpsEvents;
use crate::store::{EmbeddedStore, HealthListener, PostgresStore, RedisStore, Store};
use crate::sweep;
use crate::tenancy::access;

pub use crate::delivery::egress::Network;

/// How long a starting instance waits to write the rules `postback.notify()` checks.
const RULES_WAIT: Duration = Duration::from_secs(5);

/// Runs an instance until SIGTERM or Ctrl-C.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    App::build(config).await?.run(shutdown_signal()).await
}

/// What an instance runs on besides its configuration. `postback serve` opens the store
/// the configuration names, listens on `server.listen` and delivers over the host's
/// network; a simulation gives a store of its own (`store`), the network its receivers
/// are on (`network`), and calls the API in process (`App::router`) rather than over a
/// socket (`in_process`).
#[derive(Default)]
pub struct Seams {
    pub store: Option<Arc<dyn Store>>,
    pub network: Option<Arc<dyn Network>>,
    pub in_process: bool,
}

/// An instance, built and not yet running.
pub struct App {
    /// `None` for an instance whose API is called in process.
    listener: Option<TcpListener>,
    router: axum::Router,
    store: Arc<dyn Store>,
    dispatcher: Dispatcher,
    /// Dead letters told to the ops URLs.
    ops: Arc<OpsEvents>,
    /// What registrations and attempts show of endpoints, for the store.
    endpoints: Arc<EndpointTallies>,
    /// Which endpoints are paused, read from the store.
    pauses: Arc<EndpointPauses>,
    /// The circuits this instance closed, whose held-back notifications it lets go.
    circuits: Arc<ClosedCircuits>,
    /// The delivery policy, whose breaker learns what other instances saw.
    delivery: Arc<Policy>,
    wake: Arc<Notify>,
    /// What registrations through the database are checked against, as the API's.
    rules: Arc<RegistrationRules>,
    sweep_interval: Duration,
    /// Endpoints idle this long are forgotten (`retention.dead_max_age`).
    forget_endpoints_after: Duration,
    pipeline: Pipeline,
    server_limits: api::ServerLimits,
    /// What the fan-out sweep registers events' notifications with, as the API does.
    api_state: AppState,
    /// Events are forgotten after this long (`retention.finished_max_age`).
    forget_events_after: Duration,
}

impl App {
    /// Opens the store, binds the API's address and makes the pipeline; a problem is
    /// named by the configuration key it comes from.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        Self::build_with(config, Seams::default()).await
    }

    /// `build`, on what `seams` gives.
    pub async fn build_with(config: Config, seams: Seams) -> anyhow::Result<Self> {
        let s = &config.settings;
        let store = match seams.store {
            Some(store) => store,
            None => open_store(&config).await?,
        };
        let listener = match seams.in_process {
            true => None,
            false => Some(TcpListener::bind(s.server.listen).await.with_context(|| {
                format!(
                    "server.listen (POSTBACK_SERVER_LISTEN): cannot listen on {}",
                    s.server.listen
                )
            })?),
        };
        if config.tokens.is_open() {
            tracing::warn!("API authentication is off (--insecure-no-auth)");
        }
        let wake = Arc::new(Notify::new());
        let signer = config.signer()?;
        warn_unsigned(&signer);
        let route = Route {
            proxy: config.proxy.as_ref(),
            network: seams.network,
        };
        let sender = Sender::new(&s.delivery, route, signer.clone(), &config.tenants)?;
        let delivery = Arc::new(Policy::new(s.delivery.policy_limits(), &config.quotas()));
        let shares = config
            .tenants
            .iter()
            .map(|(t, c)| (t.clone(), c.max_concurrency));
        let shares = TenantShares::new(
            s.delivery.concurrency,
            s.delivery.tenant_reserve.get(),
            shares.collect(),
        );
        let ops = Arc::new(OpsEvents::new(&config)?);
        let endpoints = Arc::new(EndpointTallies::new(config.endpoint_rules()));
        let nudged = delivery.clone();
        let pauses =
            EndpointPauses::new(s.endpoints.probe_interval).telling(Box::new(move |tenant, id| {
                nudged.nudge_endpoint(tenant, id)
            }));
        let pauses = Arc::new(pauses);
        let circuits = Arc::new(ClosedCircuits::default());
        let dispatcher = Dispatcher::new(
            store.clone(),
            sender,
            shares,
            delivery.clone(),
            wake.clone(),
            s.delivery.clone(),
            config.shards,
            Observers {
                ops: ops.clone(),
                endpoints: endpoints.clone(),
                pauses: pauses.clone(),
                circuits: circuits.clone(),
                wake: wake.clone(),
            },
        );
        let pipeline = Pipeline::default();
        let health = store
            .shard_health()
            .unwrap_or_else(|| Arc::new(ShardHealth::new(config.shards)));
        let metrics = crate::observability::metrics::install()?;
        // Every shard's gauge from the start, on every store: the dashboard and the
        // alert rules find the series before a shard is first degraded.
        for shard in 0..config.shards {
            crate::observability::metrics::shard_degraded(
                usize::from(shard),
                health.is_degraded(shard),
            );
        }
        let rules = Arc::new(registration_rules(&config, health));
        let cursors = CursorSeal::of_deployment(store.as_ref())
            .await
            .context("store: cannot read or keep the key that seals list cursors")?;
        let state = AppState::new(api::Shared {
            store: store.clone(),
            wake: wake.clone(),
            rules: rules.clone(),
            delivery: delivery.clone(),
            metrics,
            pipeline: pipeline.clone(),
            host_labels: s.metrics.host_labels,
            body_timeout: s.server.body_timeout,
            metrics_token: s.server.metrics_token.as_deref().map(access::digest),
            signer,
            cursors: Arc::new(cursors),
            endpoints: endpoints.clone(),
            pauses: pauses.clone(),
            ops: ops.clone(),
            portal: config.tokens.portal(),
            retention: config.retention().policy(),
        });
        let tokens = Arc::new(config.tokens.clone());
        Ok(Self {
            listener,
            router: api::router(state.clone(), tokens, &s.server),
            api_state: state,
            forget_events_after: s.retention.finished_max_age,
            store,
            dispatcher,
            ops,
            endpoints,
            pauses,
            circuits,
            delivery,
            wake,
            rules,
            sweep_interval: s.retention.sweep_interval,
            forget_endpoints_after: s.retention.dead_max_age,
            pipeline,
            server_limits: api::ServerLimits {
                header_timeout: s.server.header_timeout,
                idle_timeout: s.server.idle_timeout,
                max_connections: s.server.max_connections,
            },
        })
    }

    /// The address the API listens on (none for an instance called in process).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.listener {
            Some(listener) => listener.local_addr(),
            None => Err(std::io::Error::other("the API is called in process")),
        }
    }

    /// The API as a service, to call in process.
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// Runs until `stop` completes: then the API stops taking requests, the scheduler
    /// stops claiming and lets deliveries in flight finish within the grace period, and
    /// the wake-up watcher and the retention sweep end.
    pub async fn run(self, stop: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let tasks = CancellationToken::new();
        let running = self.pipeline.running();
        let dispatcher = self.dispatcher;
        let token = tasks.child_token();
        let dispatching = tokio::spawn(async move {
            let _running = running;
            dispatcher.run(token).await
        });
        let watching = {
            let (store, wake, token) = (self.store.clone(), self.wake.clone(), tasks.child_token());
            if let Some(fleet) = store.fleet() {
                let delivery = self.delivery;
                let health: HealthListener = Arc::new(move |endpoint, healthy| {
                    delivery.learn(endpoint, healthy);
                });
                fleet.on_health(health);
            }
            tokio::spawn(async move { store.watch(wake, token).await })
        };
        // Stopped after the deliveries in flight end, so that it tells their dead letters.
        let ops_stop = CancellationToken::new();
        let telling = tokio::spawn(self.ops.clone().run(
            self.store.clone(),
            self.wake.clone(),
            ops_stop.clone(),
        ));
        let tallying = tokio::spawn(self.endpoints.run(
            self.store.clone(),
            self.ops.clone(),
            self.pauses.clone(),
            self.wake.clone(),
            ops_stop.clone(),
        ));
        let pausing = tokio::spawn(self.pauses.run(self.store.clone(), tasks.child_token()));
        let letting_go = tokio::spawn(self.circuits.run(self.store.clone(), tasks.child_token()));
        // Bounded: a database that holds the connection but does not answer must not keep
        // the instance from serving (or from a stop); the intake writes them later.
        let publishing = api::intake::publish_rules(self.store.as_ref(), &self.rules);
        let rules_written = tokio::time::timeout(RULES_WAIT, publishing)
            .await
            .unwrap_or(false);
        let taking_in = tokio::spawn(api::intake::run(
            self.store.clone(),
            self.rules,
            rules_written,
            self.wake.clone(),
            tasks.child_token(),
        ));
        let fanning_out = tokio::spawn(api::run_fanout(
            self.api_state,
            self.forget_events_after,
            tasks.child_token(),
        ));
        let sweeping = tokio::spawn(sweep::run(
            self.store,
            self.sweep_interval,
            self.forget_endpoints_after,
            tasks.child_token(),
        ));
        match self.listener {
            Some(listener) => {
                tracing::info!(addr = %listener.local_addr()?, version = env!("CARGO_PKG_VERSION"), "postback listening");
                api::serve(listener, self.router, self.server_limits, stop).await;
            }
            None => stop.await,
        }

        tracing::info!("stopping: no new claims; finishing deliveries in flight");
        tasks.cancel();
        dispatching.await.context("dispatcher")?;
        ops_stop.cancel();
        telling.await.context("ops events")?;
        tallying.await.context("endpoints' health")?;
        watching.await.context("wake-up watcher")?;
        sweeping.await.context("retention sweep")?;
        taking_in.await.context("intake")?;
        fanning_out.await.context("fan-out sweep")?;
        pausing.await.context("endpoint pauses")?;
        letting_go.await.context("closed circuits")?;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Says at start-up which tenants' deliveries go unsigned, so that nobody learns it from
/// a receiver.
fn warn_unsigned(signer: &crate::delivery::signing::Signer) {
    let unsigned = signer.unsigned();
    if unsigned.is_empty() {
        return;
    }
    let tenants: Vec<&str> = unsigned.iter().map(|t| &***t).collect();
    tracing::warn!(
        tenants = %tenants.join(","),
        "deliveries are not signed: no signing secret or key is configured; \
         `postback signing-key new` makes a key for signing.keys (POSTBACK_SIGNING_KEYS)"
    );
}

/// The configured store, with one line saying which and where.
async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let s = &config.settings;
    let target = match &config.store {
        StoreTarget::Embedded(dir) => {
            let store = EmbeddedStore::open(dir, config.retention())?;
            tracing::info!(store = "embedded", path = %store.path().display(), "store opened");
            return Ok(Arc::new(store));
        }
        StoreTarget::Redis(target) => target,
        StoreTarget::Postgres(url) => {
            let store = PostgresStore::connect(url, &s.store, config.retention()).await?;
            tracing::info!(store = "postgres", url = %redact::address(url), "store connected");
            return Ok(Arc::new(store));
        }
    };
    let store = RedisStore::connect(target, config.shards, &s.store, config.retention()).await?;
    let (kind, urls): (_, Vec<String>) = match target {
        RedisTarget::Standalone(url) => ("redis", vec![redact::address(url)]),
        RedisTarget::Cluster(seeds) => (
            "redis cluster",
            seeds.iter().map(|u| redact::address(u)).collect(),
        ),
        RedisTarget::Sentinel(s) => (
            "redis sentinel",
            s.sentinels
                .iter()
                .map(|a| format!("{a}/{}", s.master_name))
                .collect(),
        ),
    };
    tracing::info!(store = kind, url = %urls.join(","), shards = config.shards, instance = store.instance(), "store connected");
    Ok(Arc::new(store))
}

fn registration_rules(config: &Config, health: Arc<ShardHealth>) -> RegistrationRules {
    let d = &config.settings.delivery;
    RegistrationRules {
        schedules: config.settings.schedules.clone(),
        default_timeout: d.timeout,
        max_timeout: d.max_timeout,
        max_delay: d.max_delay,
        idempotency_ttl: config.settings.server.idempotency_ttl,
        destinations: Destinations::of(d.allow_private_networks),
        placement: Placement::watching(config.shards, health),
        profiles: config.profiles.clone(),
        event_schemas: config.event_schemas.clone(),
        max_request_bytes: config.settings.server.max_body_bytes,
        tenants: config
            .tenants
            .iter()
            .map(|(t, c)| {
                let rules = TenantRules {
                    allowed_hosts: c.allowed_hosts.clone(),
                    require_https: c.require_https,
                };
                (t.clone(), rules)
            })
            .collect(),
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
        biased;
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipeline_reads_stopped_once_its_task_ends_even_by_a_panic() {
        let pipeline = Pipeline::default();
        assert!(!pipeline.is_running(), "not running before it starts");
        let running = pipeline.running();
        assert!(pipeline.is_running());
        let task = std::thread::spawn(move || {
            let _running = running;
            panic!("a bug in the pipeline");
        });
        assert!(task.join().is_err());
        assert!(!pipeline.is_running());
    }
}
