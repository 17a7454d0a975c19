//! Wiring: database, migrations, event bus, outbox relay and the server.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use kandev_common::CancellationToken;
use kandev_common::serve::{self, ReadinessCheck};
use kandev_common::startup::{self, StartError};
use kandev_events::{EventBus, JetStreamBus};
use kandev_proto::v1::task_service_server::TaskServiceServer;
use sqlx::{PgPool, migrate::Migrator};
use tokio::{net::TcpListener, sync::Notify};

use crate::{
    config::Settings,
    grpc::GrpcTaskAdapter,
    outbox::OutboxRelay,
    store::{OutboxStore, PgTaskStore, SqliteTaskStore, TaskStore},
};

/// Why the service could not start or stopped with an error: only what
/// every service may meet.
pub type StartupError = StartError;

/// The migrations of the service's Postgres schema.
pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations");

/// The built service, bound to its port but not yet serving.
pub struct Application {
    listener: TcpListener,
    local_addr: SocketAddr,
    bus: Arc<dyn EventBus>,
    bus_ready: ReadinessCheck,
    storage: Storage,
    outbox_wake: Arc<Notify>,
    settings: Settings,
}

/// The database behind the service, as its two faces.
#[derive(Clone)]
pub struct Storage {
    pub tasks: Arc<dyn TaskStore>,
    pub outbox: Arc<dyn OutboxStore>,
    /// `postgres` or `sqlite`, the readiness check's name.
    pub kind: &'static str,
}

impl Storage {
    /// Opens the database of `settings.database_url`: Postgres for a
    /// `postgres://` URL (the service's schema, migrated), SQLite for a
    /// `sqlite:` one (the file, created and migrated). Commits poke `wake`.
    pub async fn open(settings: &Settings, wake: Arc<Notify>) -> Result<Storage, StartupError> {
        if settings.common.uses_sqlite() {
            let store = SqliteTaskStore::open(&settings.common.database_url, wake).await?;
            let store = Arc::new(store);
            return Ok(Storage {
                tasks: store.clone(),
                outbox: store,
                kind: "sqlite",
            });
        }
        let pool = connect_database(settings).await?;
        let store = Arc::new(PgTaskStore::new(pool, wake));
        Ok(Storage {
            tasks: store.clone(),
            outbox: store,
            kind: "postgres",
        })
    }
}

/// Connects to Postgres with `search_path` set to the service's schema,
/// creating the schema and running migrations.
pub async fn connect_database(settings: &Settings) -> Result<PgPool, StartupError> {
    startup::connect_database(&settings.common, &MIGRATIONS).await
}

impl Application {
    /// Connects to NATS JetStream from the settings.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let bus =
            JetStreamBus::connect_configured(&settings.nats_login(), &settings.common).await?;
        let bus_ready = bus.readiness();
        Self::build_with_bus(settings, Arc::new(bus), bus_ready).await
    }

    /// Builds on a given bus (an in-process one, in a one-binary mode).
    pub async fn build_with_bus(
        settings: Settings,
        bus: Arc<dyn EventBus>,
        bus_ready: ReadinessCheck,
    ) -> Result<Self, StartupError> {
        kandev_common::service_auth::check(&settings.common.service_token)
            .map_err(StartError::Config)?;
        let outbox_wake = Arc::new(Notify::new());
        let storage = Storage::open(&settings, outbox_wake.clone()).await?;
        let (listener, local_addr) = startup::bind(&settings.common.listen_addr).await?;
        Ok(Application {
            listener,
            local_addr,
            bus,
            bus_ready,
            storage,
            outbox_wake,
            settings,
        })
    }

    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` fires, drains in-flight requests and the
    /// outbox (bounded), then returns.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), StartupError> {
        let store = self.storage.tasks.clone();
        let server = TaskServiceServer::new(GrpcTaskAdapter::new(store));
        let grpc = startup::grpc_routes(self.settings.grpc_reflection, server).await?;

        let db_store = self.storage.tasks.clone();
        let db_ready: ReadinessCheck = Arc::new(move || {
            let store = db_store.clone();
            Box::pin(async move { store.ping().await.map_err(|e| e.to_string()) })
        });
        let router = grpc.merge(serve::health_routes(vec![
            (self.storage.kind, db_ready),
            ("nats", self.bus_ready.clone()),
        ]));

        let relay = OutboxRelay::new(
            self.storage.outbox.clone(),
            self.bus.clone(),
            self.outbox_wake.clone(),
            Duration::from_millis(self.settings.outbox_poll_ms),
        );
        let relay_stop = CancellationToken::new();
        let relay_task = tokio::spawn(relay.run(relay_stop.clone()));

        let router =
            startup::internal_port("task-service", router, &self.settings.common.service_token)?;
        crate::metric_names::describe();
        tracing::info!(addr = %self.local_addr, "task service listening (gRPC, /healthz, /readyz, /metrics)");
        let served = serve::serve(self.listener, router, shutdown).await;
        // Requests have drained; now the relay publishes what they wrote.
        relay_stop.cancel();
        let _ = relay_task.await;
        self.storage.tasks.close().await;
        tracing::info!("task service stopped");
        served.map_err(StartError::Serve)
    }
}
