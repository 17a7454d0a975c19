//! What every service's start shares: the failures they have in common,
//! binding the port, the database pinned to the service's schema and
//! migrated, the gRPC routes with health (and reflection when enabled),
//! the layers around an internal port (service token, metrics, request
//! spans), and the binary's `main` ([`run_main`]).

use std::{convert::Infallible, future::Future, net::SocketAddr, path::Path};

use anyhow::Context as _;
use axum::Router;
use clap::{CommandFactory as _, FromArgMatches as _};
use sqlx::{PgPool, migrate::Migrator};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{codegen::Service, server::NamedService};

use crate::{
    config::{ConfigError, ServiceConfig, ServiceSettings},
    serve, service_auth, shutdown, telemetry,
};

/// Why a service could not start, or stopped with an error: the failures
/// every service shares (each service's own error wraps them, as they are).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The event bus (`kandev_events::BusError`, converted there).
    #[error("event bus: {0}")]
    Bus(Box<dyn std::error::Error + Send + Sync>),
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

/// Binds `addr`, and reads back the address it got (the port, for `:0`).
pub async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen {
            addr: addr.to_string(),
            source,
        })?;
    let local_addr = listener.local_addr().map_err(StartError::Serve)?;
    Ok((listener, local_addr))
}

/// Connects to the Postgres of `settings` with `search_path` set to the
/// service's schema (created when missing), and runs `migrations`.
pub async fn connect_database(
    settings: &ServiceSettings,
    migrations: &Migrator,
) -> Result<PgPool, StartError> {
    let pool = crate::db::connect_schema(
        &settings.database_url,
        &settings.database_schema,
        settings.database_max_connections,
    )
    .await?;
    migrations.run(&pool).await?;
    Ok(pool)
}

/// The gRPC routes of a service serving `server`: the standard health
/// service, with `server` marked serving, and reflection over Kandev's
/// descriptors when `reflection` is on (see [`serve::grpc_base`]).
pub async fn grpc_routes<S>(reflection: bool, server: S) -> Result<Router, StartError>
where
    S: Service<http::Request<tonic::body::Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Response: axum::response::IntoResponse,
    S::Future: Send + 'static,
{
    let descriptors = reflection.then_some(kandev_proto::FILE_DESCRIPTOR_SET);
    let (mut routes, health) = serve::grpc_base(descriptors).map_err(StartError::Grpc)?;
    routes.add_service(server);
    health.set_serving::<S>().await;
    Ok(routes.routes().into_axum_router())
}

/// An internal service's `router` as it is served: only callers with the
/// service `token` (probes aside), every request counted and timed as
/// `service`'s, with `/metrics` open, and in its span, continuing the
/// caller's trace.
pub fn internal_port(
    service: &'static str,
    router: Router,
    token: &Option<service_auth::ServiceToken>,
) -> Result<Router, StartError> {
    let token = service_auth::check(token).map_err(StartError::Config)?;
    let router = service_auth::require(router, token.clone());
    let router = crate::metrics::instrument(service, router, crate::metrics::Scrape::Open);
    Ok(crate::trace::instrument(router))
}

/// A service binary: its name (`kandev-gateway`) and what `--help` says.
#[derive(Debug, Clone, Copy)]
pub struct Binary {
    pub name: &'static str,
    /// Paragraphs separated by a blank line; the first is the short help.
    pub about: &'static str,
}

/// The command line of every service: `--config FILE`.
#[derive(Debug, clap::Parser)]
#[command(version)]
struct Args {
    /// A TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

/// A service's `main`: reads `--config`, loads the settings with `load`,
/// installs telemetry under the binary's name (without `kandev-`), builds
/// the service with `build` and runs it with `run` until SIGTERM or ctrl-c.
pub async fn run_main<S, A, E, B, R>(
    binary: Binary,
    load: impl FnOnce(Option<&Path>) -> Result<S, ConfigError>,
    build: impl FnOnce(S) -> B,
    run: impl FnOnce(A, CancellationToken) -> R,
) -> anyhow::Result<()>
where
    S: ServiceConfig,
    E: std::error::Error + Send + Sync + 'static,
    B: Future<Output = Result<A, E>>,
    R: Future<Output = Result<(), E>>,
{
    let short = binary.about.split("\n\n").next().unwrap_or_default();
    let matches = Args::command()
        .name(binary.name)
        .about(short)
        .long_about(binary.about)
        .get_matches();
    let args = Args::from_arg_matches(&matches)?;
    let settings = load(args.config.as_deref()).context("loading configuration")?;
    let service = binary.name.trim_start_matches("kandev-");
    let _telemetry = telemetry::init(service, &settings.common().log);
    let shutdown = shutdown::on_signal();
    let app = build(settings)
        .await
        .with_context(|| format!("starting the {}", service.replace('-', " ")))?;
    run(app, shutdown).await?;
    Ok(())
}
