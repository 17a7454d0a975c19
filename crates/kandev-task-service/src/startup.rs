//! Wiring: database, migrations, event bus, outbox relay and the server.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use kandev_common::{
    CancellationToken,
    serve::{self, ReadinessCheck},
    service_auth,
};
use kandev_events::{EventBus, JetStreamBus};
use kandev_proto::v1::task_service_server::TaskServiceServer;
use sqlx::PgPool;
use tokio::{net::TcpListener, sync::Notify};

use crate::{
    config::Settings,
    grpc::GrpcTaskAdapter,
    outbox::OutboxRelay,
    store::{OutboxStore, PgTaskStore, SqliteTaskStore, TaskStore},
};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("event bus: {0}")]
    Bus(#[from] kandev_events::BusError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("server: {0}")]
    Serve(std::io::Error),
    #[error("grpc setup: {0}")]
    Grpc(String),
    #[error("configuration: {0}")]
    Config(String),
}

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
        if settings.uses_sqlite() {
            let store = Arc::new(SqliteTaskStore::open(&settings.database_url, wake).await?);
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
    let pool = kandev_common::db::connect_schema(
        &settings.database_url,
        &settings.database_schema,
        settings.database_max_connections,
    )
    .await?;
    sqlx::migrate!("./migrations").run(&pool).await?;
    Ok(pool)
}

impl Application {
    /// Connects to NATS JetStream from the settings.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let bus = JetStreamBus::connect_replicated(
            &settings.nats_url,
            &settings.nats_login(),
            settings.nats_stream_replicas,
        )
        .await?;
        let ready_bus = bus.clone();
        let bus_ready = serve::sync_check(move || ready_bus.check_connected());
        Self::build_with_bus(settings, Arc::new(bus), bus_ready).await
    }

    /// Builds on a given bus (an in-process one, in a one-binary mode).
    pub async fn build_with_bus(
        settings: Settings,
        bus: Arc<dyn EventBus>,
        bus_ready: ReadinessCheck,
    ) -> Result<Self, StartupError> {
        service_auth::check(&settings.service_token).map_err(StartupError::Config)?;
        let outbox_wake = Arc::new(Notify::new());
        let storage = Storage::open(&settings, outbox_wake.clone()).await?;
        let listener = TcpListener::bind(&settings.listen_addr)
            .await
            .map_err(|source| StartupError::Listen {
                addr: settings.listen_addr.clone(),
                source,
            })?;
        let local_addr = listener.local_addr().map_err(StartupError::Serve)?;
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
        let (mut routes, health) = serve::grpc_base(
            self.settings
                .grpc_reflection
                .then_some(kandev_proto::FILE_DESCRIPTOR_SET),
        )
        .map_err(StartupError::Grpc)?;
        let store = self.storage.tasks.clone();
        routes.add_service(TaskServiceServer::new(GrpcTaskAdapter::new(store)));
        health
            .set_serving::<TaskServiceServer<GrpcTaskAdapter>>()
            .await;

        let db_store = self.storage.tasks.clone();
        let db_ready: ReadinessCheck = Arc::new(move || {
            let store = db_store.clone();
            Box::pin(async move { store.ping().await.map_err(|e| e.to_string()) })
        });
        let router = routes
            .routes()
            .into_axum_router()
            .merge(serve::health_routes(vec![
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

        // Only callers with the service token, probes aside.
        let token = service_auth::check(&self.settings.service_token)
            .map_err(StartupError::Config)?
            .clone();
        let router = service_auth::require(router, token);
        let router = kandev_common::metrics::instrument(
            "task-service",
            router,
            kandev_common::metrics::Scrape::Open,
        );
        // Every request in its span, continuing the caller's trace.
        let router = kandev_common::trace::instrument(router);
        crate::metric_names::describe();
        tracing::info!(addr = %self.local_addr, "task service listening (gRPC, /healthz, /readyz, /metrics)");
        let served = serve::serve(self.listener, router, shutdown).await;
        // Requests have drained; now the relay publishes what they wrote.
        relay_stop.cancel();
        let _ = relay_task.await;
        self.storage.tasks.close().await;
        tracing::info!("task service stopped");
        served.map_err(StartupError::Serve)
    }
}
