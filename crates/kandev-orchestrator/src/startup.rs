//! Wiring: database, event bus, clients, the engine, consumers and the server.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use kandev_common::{
    CancellationToken,
    serve::{self, ReadinessCheck},
    service_auth,
    startup::{self, StartError},
};
use kandev_events::{
    JetStreamBus,
    durable::{JetStreamStreams, Streams},
    live::{Live, NatsLive},
};
use kandev_proto::v1::orchestrator_server::OrchestratorServer;
use sqlx::{PgPool, migrate::Migrator};
use tokio::net::TcpListener;
use tokio_util::task::AbortOnDropHandle;

use crate::{
    clients::{self, AgentControl},
    config::Settings,
    consumers::{self, Source},
    engine::{
        Engine,
        store::{ExecutionStore, PgExecStore, SqliteExecStore},
    },
    feed::{
        FeedConsumer, FeedHub, FeedReader, Fence,
        store::{FeedStore, PgFeedStore, SqliteFeedStore},
    },
    grpc::GrpcOrchestratorAdapter,
    http::{self, AppState},
    leader::{self, DecisionLock},
    orchestration::Orchestration,
    pool::ManagerPool,
};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("client setup: {0}")]
    Client(String),
}

/// The migrations of the service's Postgres schema.
pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations");

/// The built service, bound to its port but not yet serving.
pub struct Application {
    listener: TcpListener,
    local_addr: SocketAddr,
    db: Database,
    /// The stored feed.
    feed: Arc<dyn FeedStore>,
    bus: EventStreams,
    /// The NATS connection, when the streams are JetStream's: the pool of
    /// agent managers is followed on it.
    nats: Option<JetStreamBus>,
    hub: Arc<FeedHub>,
    engine: Arc<Engine>,
    settings: Arc<Settings>,
    fence: Arc<Fence>,
    /// The pool of announced agent managers, when built from settings.
    pool_of_managers: Option<Arc<ManagerPool>>,
}

/// What the orchestrator consumes and publishes on: its durable streams
/// (`task.*`, `agent.*`, `acp.message.*`), the live feed, and whether they
/// answer (`/readyz`).
#[derive(Clone)]
pub struct EventStreams {
    pub streams: Arc<dyn Streams>,
    pub live: Arc<dyn Live>,
    pub ready: ReadinessCheck,
}

/// The orchestrator's database: Postgres, which replicas share, or a
/// SQLite file, for one process alone.
#[derive(Debug, Clone)]
pub enum Database {
    Postgres(PgPool),
    Sqlite(sqlx::SqlitePool),
}

impl Database {
    /// Opens the database of `settings.database_url` (`postgres://` or
    /// `sqlite:`), migrated.
    pub async fn open(settings: &Settings) -> Result<Database, StartupError> {
        Ok(if settings.common.uses_sqlite() {
            Database::Sqlite(connect_sqlite(&settings.common.database_url).await?)
        } else {
            Database::Postgres(connect_database(settings).await?)
        })
    }

    /// The readiness check's name.
    pub fn kind(&self) -> &'static str {
        match self {
            Database::Postgres(_) => "postgres",
            Database::Sqlite(_) => "sqlite",
        }
    }

    pub fn executions(&self) -> Arc<dyn ExecutionStore> {
        match self {
            Database::Postgres(pool) => Arc::new(PgExecStore::new(pool.clone())),
            Database::Sqlite(pool) => Arc::new(SqliteExecStore::new(pool.clone())),
        }
    }

    pub fn feed(&self) -> Arc<dyn FeedStore> {
        match self {
            Database::Postgres(pool) => Arc::new(PgFeedStore::new(pool.clone())),
            Database::Sqlite(pool) => Arc::new(SqliteFeedStore::new(pool.clone())),
        }
    }

    /// What serializes decisions: every replica's (an advisory lock of
    /// `schema`), or this process's alone.
    pub fn decision_lock(&self, schema: &str) -> DecisionLock {
        match self {
            Database::Postgres(pool) => DecisionLock::new(pool.clone(), schema),
            Database::Sqlite(_) => DecisionLock::local(),
        }
    }

    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        match self {
            Database::Postgres(pool) => sqlx::query("SELECT 1").execute(pool).await.map(drop),
            Database::Sqlite(pool) => sqlx::query("SELECT 1").execute(pool).await.map(drop),
        }
    }

    pub async fn close(&self) {
        match self {
            Database::Postgres(pool) => pool.close().await,
            Database::Sqlite(pool) => pool.close().await,
        }
    }
}

/// Opens the orchestrator's SQLite file (`sqlite:` URL), creating it when
/// missing, and runs the SQLite migrations: the database of
/// [`SqliteExecStore`](crate::engine::store::SqliteExecStore) and
/// [`SqliteFeedStore`](crate::feed::store::SqliteFeedStore).
pub async fn connect_sqlite(url: &str) -> Result<sqlx::SqlitePool, StartupError> {
    let pool = kandev_common::db::sqlite::connect(url, 4)
        .await
        .map_err(StartError::from)?;
    sqlx::migrate!("./migrations-sqlite")
        .run(&pool)
        .await
        .map_err(StartError::from)?;
    Ok(pool)
}

/// Connects to Postgres with `search_path` set to the service's schema,
/// creating the schema and running migrations.
pub async fn connect_database(settings: &Settings) -> Result<PgPool, StartupError> {
    Ok(startup::connect_database(&settings.common, &MIGRATIONS).await?)
}

impl Application {
    /// Connects to everything from the settings; the agent manager is
    /// reached over gRPC at `agent_manager_url`.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let token =
            service_auth::check(&settings.common.service_token).map_err(StartError::Config)?;
        let pool = Arc::new(
            ManagerPool::new(
                &settings.agent_manager_url,
                token,
                Duration::from_millis(settings.manager_grace_ms),
            )
            .map_err(StartupError::Client)?,
        );
        let mut app = Self::build_with_agents(settings, pool.clone()).await?;
        app.pool_of_managers = Some(pool);
        Ok(app)
    }

    /// Builds with a given agent manager client, on NATS JetStream.
    pub async fn build_with_agents(
        settings: Settings,
        agents: Arc<dyn AgentControl>,
    ) -> Result<Self, StartupError> {
        let bus = JetStreamBus::connect_configured(&settings.nats_login(), &settings.common)
            .await
            .map_err(StartError::from)?;
        let streams = EventStreams {
            streams: Arc::new(JetStreamStreams::new(bus.clone())),
            live: Arc::new(NatsLive::new(bus.client().clone())),
            ready: bus.readiness(),
        };
        let mut app = Self::build_on(settings, agents, streams).await?;
        app.nats = Some(bus);
        Ok(app)
    }

    /// Builds with a given agent manager client on given streams (one
    /// process's own, in the `kandev` binary).
    pub async fn build_on(
        settings: Settings,
        agents: Arc<dyn AgentControl>,
        bus: EventStreams,
    ) -> Result<Self, StartupError> {
        let token = service_auth::check(&settings.common.service_token)
            .map_err(StartError::Config)?
            .clone();
        let settings = Arc::new(settings);
        let db = Database::open(&settings).await?;
        let tasks = clients::task_client(&settings.task_service_url, &token)
            .map_err(StartupError::Client)?;
        let hub = FeedHub::new(settings.ws_client_buffer);
        let fence = Arc::new(Fence::default());
        let engine = Engine::new(
            db.executions(),
            db.decision_lock(&settings.common.database_schema),
            settings.clone(),
            agents,
            tasks,
            hub.clone(),
            fence.clone(),
        );
        engine.signal_boards_on(bus.live.clone());
        let (listener, local_addr) = startup::bind(&settings.common.listen_addr).await?;
        Ok(Application {
            listener,
            local_addr,
            feed: db.feed(),
            db,
            bus,
            nats: None,
            hub,
            engine,
            settings,
            fence,
            pool_of_managers: None,
        })
    }

    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` fires, then stops the consumers and flushes
    /// the feed. Dropping this future instead (a crash) loses nothing: every
    /// unacknowledged message comes again after a restart.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), StartupError> {
        let orchestration: Arc<dyn Orchestration> = self.engine.clone();
        let feed = FeedReader {
            store: self.feed.clone(),
            hub: self.hub.clone(),
        };
        let server =
            OrchestratorServer::new(GrpcOrchestratorAdapter::new(orchestration.clone(), feed));
        let grpc = startup::grpc_routes(self.settings.grpc_reflection, server).await?;

        let db = self.db.clone();
        let db_ready: ReadinessCheck = Arc::new(move || {
            let db = db.clone();
            Box::pin(async move { db.ping().await.map_err(|e| e.to_string()) })
        });
        let bus_ready = self.bus.ready.clone();
        let state = AppState {
            orchestration,
            hub: self.hub.clone(),
            feed: self.feed.clone(),
            close_grace: Duration::from_millis(self.settings.ws_close_grace_ms),
        };
        let router = grpc
            .merge(http::routes(state))
            .merge(serve::health_routes(vec![
                (self.db.kind(), db_ready),
                (if self.nats.is_some() { "nats" } else { "bus" }, bus_ready),
            ]));

        // The leader's work; aborted with this future if it is dropped.
        let stop = CancellationToken::new();
        // Every replica follows the pool: each routes calls to managers.
        let _pool_listener = self
            .pool_of_managers
            .clone()
            .zip(self.nats.as_ref().map(|bus| bus.client().clone()))
            .map(|(pool, nats)| {
                AbortOnDropHandle::new(tokio::spawn(pool.listen(nats, stop.clone())))
            });
        let parts = LeaderParts {
            live: self.bus.live.clone(),
            streams: self.bus.streams.clone(),
            feed: self.feed.clone(),
            hub: self.hub.clone(),
            engine: self.engine.clone(),
            settings: self.settings.clone(),
            fence: self.fence.clone(),
        };
        let work = move |token| lead_work(parts.clone(), token);
        let leading = AbortOnDropHandle::new(match &self.db {
            Database::Postgres(pool) => tokio::spawn(leader::lead(
                pool.clone(),
                leader::lock_key(&self.settings.common.database_schema, "leader"),
                Duration::from_millis(self.settings.leader_poll_ms),
                stop.clone(),
                work,
            )),
            Database::Sqlite(_) => tokio::spawn(leader::lead_alone(stop.clone(), work)),
        });

        // Only callers with the service token (gRPC, REST and WebSocket
        // alike), probes aside.
        let token = &self.settings.common.service_token;
        let router = startup::internal_port("orchestrator", router, token)?;
        crate::metric_names::describe();
        // Exported from the start, so dashboards and alerts see a zero.
        metrics::gauge!(crate::metric_names::QUEUE_DEPTH).increment(0.0);
        tracing::info!(addr = %self.local_addr, "orchestrator listening (gRPC, REST, WebSocket, /healthz, /readyz, /metrics)");
        let served = serve::serve(self.listener, router, shutdown).await;
        stop.cancel();
        let _ = leading.await;
        self.db.close().await;
        tracing::info!("orchestrator stopped");
        Ok(served.map_err(StartError::Serve)?)
    }
}

/// What the leader's work is made of; cheap to clone.
#[derive(Clone)]
struct LeaderParts {
    live: Arc<dyn Live>,
    streams: Arc<dyn Streams>,
    feed: Arc<dyn FeedStore>,
    hub: Arc<FeedHub>,
    engine: Arc<Engine>,
    settings: Arc<Settings>,
    fence: Arc<Fence>,
}

/// What only the leading replica runs: the feed consumer, the `task.*` and
/// `agent.*` consumers and the scheduler, until `stop` fires.
async fn lead_work(parts: LeaderParts, stop: CancellationToken) {
    let LeaderParts {
        live,
        streams,
        feed: store,
        hub,
        engine,
        settings,
        fence,
    } = parts;
    let c = &settings.consumers;
    let feed = AbortOnDropHandle::new(tokio::spawn(
        FeedConsumer {
            store,
            hub,
            streams: streams.clone(),
            live,
            durable: c.acp_durable.clone(),
            filter: c.acp_filter.clone(),
            flush_every: Duration::from_millis(settings.feed_flush_ms),
            flush_max: settings.feed_flush_max,
            fence,
        }
        .run(stop.clone()),
    ));
    let tasks = AbortOnDropHandle::new(tokio::spawn(consumers::run(
        streams.clone(),
        Source::Tasks,
        c.task_durable.clone(),
        c.task_filter.clone(),
        engine.clone(),
        stop.clone(),
    )));
    let agents = AbortOnDropHandle::new(tokio::spawn(consumers::run(
        streams,
        Source::Agents,
        c.agent_durable.clone(),
        c.agent_filter.clone(),
        engine.clone(),
        stop.clone(),
    )));
    let trackers = AbortOnDropHandle::new(tokio::spawn(run_trackers(engine.clone(), stop.clone())));
    // Aborted with this future: a replica that loses the lead stops all.
    let checks = AbortOnDropHandle::new(tokio::spawn(run_checks(engine.clone(), stop.clone())));
    let ticker = AbortOnDropHandle::new(tokio::spawn(run_ticker(engine, stop)));
    for (what, handle) in [
        ("the feed consumer", feed),
        ("the task event consumer", tasks),
        ("the agent event consumer", agents),
        ("the scheduler", ticker),
        ("the checks poller", checks),
        ("the tracker reconcile", trackers),
    ] {
        if let Err(err) = handle.await {
            tracing::error!(%err, "{what} panicked");
        }
    }
}

/// Reads pushed commits' CI checks when due (see `engine::ci`), apart
/// from the scheduler: a slow forge never holds up the queue.
async fn run_checks(engine: Arc<Engine>, stop: CancellationToken) {
    let mut interval = tokio::time::interval(Duration::from_millis(
        engine.settings().checks_poll_ms.clamp(1, 1000),
    ));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = interval.tick() => {
                if let Err(err) = engine.poll_checks().await {
                    tracing::warn!(%err, "reading pushed commits' checks failed");
                }
            }
        }
    }
}

/// Reconciles the boards linked to issue trackers whose time has come
/// (see [`Engine::reconcile_due_trackers`]), looking every few seconds.
async fn run_trackers(engine: Arc<Engine>, stop: CancellationToken) {
    let every = Duration::from_secs(engine.settings().tracker_reconcile_secs.clamp(1, 5));
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = std::collections::HashMap::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = interval.tick() => {
                if let Err(err) = engine.reconcile_due_trackers(&mut failures, chrono::Utc::now()).await {
                    tracing::warn!(%err, "reconciling tracker links failed");
                }
            }
        }
    }
}

async fn run_ticker(engine: Arc<Engine>, stop: CancellationToken) {
    if let Err(err) = engine.recover().await {
        tracing::warn!(%err, "recovery after restart failed");
    }
    let mut interval = tokio::time::interval(Duration::from_millis(250));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut prune = tokio::time::interval(Duration::from_secs(3600));
    let mut sweep = tokio::time::interval(Duration::from_secs(
        engine.settings().workspace_sweep_secs.max(1),
    ));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = interval.tick() => {
                if let Err(err) = engine.tick().await {
                    tracing::warn!(%err, "scheduler tick failed");
                }
            }
            _ = sweep.tick() => {
                if let Err(err) = engine.sweep_workspaces().await {
                    tracing::warn!(%err, "sweeping finished workspaces failed");
                }
            }
            _ = prune.tick() => {
                if let Err(err) = engine.prune().await {
                    tracing::warn!(%err, "pruning processed events failed");
                }
            }
        }
    }
}
