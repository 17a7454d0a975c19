//! Wiring: database, migrations, Docker, event bus, reconciliation and the
//! server.

use std::{net::SocketAddr, sync::Arc};

use kandev_common::CancellationToken;
use kandev_common::serve::{self, ReadinessCheck};
use kandev_common::startup::{self, StartError};
use kandev_events::{EventBus, JetStreamBus};
use kandev_proto::v1::agent_manager_server::AgentManagerServer;
use sqlx::{PgPool, migrate::Migrator};
use tokio::net::TcpListener;
use tokio_util::task::AbortOnDropHandle;

use crate::{
    config::Settings,
    docker::Docker,
    grpc::GrpcAgentAdapter,
    manager::AgentManager,
    store::{PgAgentStore, SqliteAgentStore, Store},
};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("docker: {0}")]
    Docker(String),
}

/// The migrations of the service's Postgres schema.
pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations");

/// The built service, bound to its port but not yet serving.
pub struct Application {
    /// The workspaces root mounted `nosuid,nodev` while the manager runs.
    _sealed: crate::workspace::SealedRoot,
    listener: TcpListener,
    local_addr: SocketAddr,
    store: Store,
    /// `postgres` or `sqlite`, the readiness check's name.
    store_kind: &'static str,
    bus_ready: ReadinessCheck,
    manager: AgentManager,
    /// Whether the start reconciled; if the engine did not answer, the
    /// engine watcher does once it does.
    reconciled: bool,
    /// Announces this manager to the pool on NATS (not on an in-process bus).
    announce_on: Option<async_nats::Client>,
}

/// Opens the database of `settings.database_url`: Postgres for a
/// `postgres://` URL (the service's schema, migrated), SQLite for a
/// `sqlite:` one (the file, created and migrated).
pub async fn open_store(settings: &Settings) -> Result<Store, StartupError> {
    if settings.common.uses_sqlite() {
        let store = SqliteAgentStore::open(&settings.common.database_url, &settings.manager_id)
            .await
            .map_err(StartError::from)?;
        return Ok(Arc::new(store));
    }
    let pool = connect_database(settings).await?;
    Ok(Arc::new(PgAgentStore::new(pool, &settings.manager_id)))
}

/// Connects to Postgres with `search_path` set to the service's schema,
/// creating the schema and running migrations.
pub async fn connect_database(settings: &Settings) -> Result<PgPool, StartupError> {
    Ok(startup::connect_database(&settings.common, &MIGRATIONS).await?)
}

impl Application {
    /// Connects to NATS JetStream from the settings.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let bus = JetStreamBus::connect_configured(&settings.nats_login(), &settings.common)
            .await
            .map_err(StartError::from)?;
        let bus_ready = bus.readiness();
        let nats = bus.client().clone();
        let mut app = Self::build_with_bus(settings, Arc::new(bus), bus_ready).await?;
        app.announce_on = Some(nats);
        Ok(app)
    }

    /// Builds on a given bus (an in-process one, in a one-binary mode).
    /// Reconciles containers left by an earlier run before returning. A
    /// Docker engine that does not answer (restarting, say) does not stop
    /// the start: `/readyz` reports it, launches answer UNAVAILABLE, and
    /// the containers are reconciled once it answers.
    pub async fn build_with_bus(
        settings: Settings,
        bus: Arc<dyn EventBus>,
        bus_ready: ReadinessCheck,
    ) -> Result<Self, StartupError> {
        kandev_common::service_auth::check(&settings.common.service_token)
            .map_err(StartError::Config)?;
        let sealed = crate::workspace::seal_root(&settings)
            .map_err(|e| StartError::Config(format!("workspaces root: {e}")))?;
        let store = open_store(&settings).await?;
        let store_kind = if settings.common.uses_sqlite() {
            "sqlite"
        } else {
            "postgres"
        };
        let docker = Docker::connect(&settings.docker_host)
            .map_err(|e| StartupError::Docker(e.to_string()))?;
        let engine = docker.ping().await;
        let (listener, local_addr) = startup::bind(&settings.common.listen_addr).await?;
        let manager = AgentManager::new(docker, store.clone(), bus, settings);
        let reconciled = match engine {
            Ok(()) => {
                manager.reconcile().await;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "starting without the Docker engine; agents run once it answers");
                false
            }
        };
        Ok(Application {
            _sealed: sealed,
            listener,
            local_addr,
            store,
            store_kind,
            bus_ready,
            manager,
            reconciled,
            announce_on: None,
        })
    }

    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The domain service, for in-process callers.
    pub fn manager(&self) -> AgentManager {
        self.manager.clone()
    }

    /// Serves until `shutdown` fires and in-flight requests drain. Agent
    /// containers keep running (they survive the manager) and are
    /// reconciled by the next start.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), StartupError> {
        let settings = self.manager.settings();
        let server = AgentManagerServer::new(GrpcAgentAdapter::new(self.manager.clone()));
        let grpc = startup::grpc_routes(settings.grpc_reflection, server).await?;

        let db = self.manager.clone();
        let db_ready: ReadinessCheck = Arc::new(move || {
            let m = db.clone();
            Box::pin(async move { m.ping_store().await.map_err(|e| e.to_string()) })
        });
        let dk = self.manager.clone();
        let docker_ready: ReadinessCheck = Arc::new(move || {
            let m = dk.clone();
            Box::pin(async move { m.ping_docker().await })
        });
        let router = grpc.merge(serve::health_routes(vec![
            (self.store_kind, db_ready),
            ("nats", self.bus_ready.clone()),
            ("docker", docker_ready),
        ]));

        let stop_watching = shutdown.child_token();
        // To the pool: this manager's address, capacity and load.
        let announcer = self.announce_on.clone().map(|client| {
            let url = crate::announce::advertised_url(
                &self.manager.settings().advertise_url,
                self.local_addr,
            );
            tracing::info!(%url, "announcing this manager to the pool");
            AbortOnDropHandle::new(tokio::spawn(crate::announce::run(
                self.manager.clone(),
                client,
                url,
                stop_watching.clone(),
            )))
        });
        let watcher = tokio::spawn({
            let manager = self.manager.clone();
            let stop = stop_watching.clone();
            let reconciled = self.reconciled;
            async move { manager.watch_engine(stop, reconciled).await }
        });

        let router =
            startup::internal_port("agent-manager", router, &settings.common.service_token)?;
        crate::metric_names::describe();
        // Exported from the start, so dashboards and alerts see a zero.
        metrics::counter!(crate::metric_names::DOCKER_ERRORS).increment(0);
        tracing::info!(addr = %self.local_addr, "agent manager listening (gRPC, /healthz, /readyz, /metrics)");
        let served = serve::serve(self.listener, router, shutdown).await;
        stop_watching.cancel();
        let _ = watcher.await;
        if let Some(announcer) = announcer {
            let _ = announcer.await;
        }
        self.store.close().await;
        tracing::info!("agent manager stopped");
        Ok(served.map_err(StartError::Serve)?)
    }
}
