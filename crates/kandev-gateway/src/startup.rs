//! Wiring: database and migrations, the bootstrap admin, signing key,
//! downstream clients, limiters, and the server.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::Router;
use kandev_common::{
    CancellationToken,
    serve::ReadinessCheck,
    startup::{self, StartError},
};
use secrecy::{ExposeSecret, SecretString};
use sqlx::{PgPool, migrate::Migrator};
use tokio::net::TcpListener;

use crate::{
    auth::JwtKeys,
    clients::{self, Downstream},
    config::{Settings, given},
    first_start,
    rate_limit::RateLimiter,
    state::{AppState, Limits},
    stream::live::LiveFeeds,
    users::{PgUserStore, SqliteUserStore, UserStore, Users},
};

/// Why the gateway could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("bootstrap admin: {0}")]
    Bootstrap(anyhow::Error),
    #[error("downstream endpoint: {0}")]
    Endpoint(#[from] tonic::transport::Error),
    #[error("cannot connect to NATS at {url}: {reason}")]
    Nats { url: String, reason: String },
    #[error("data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
}

/// The migrations of the gateway's Postgres schema.
pub static MIGRATIONS: Migrator = sqlx::migrate!("./migrations");

fn kept(
    settings: &Settings,
    name: &str,
    make: impl FnOnce() -> String,
) -> Result<(SecretString, bool), StartupError> {
    let dir = std::path::Path::new(&settings.data_dir);
    first_start::kept(dir, name, make).map_err(|source| StartupError::DataDir {
        path: dir.join(name).display().to_string(),
        source,
    })
}

/// The password of the admin to create on first start: the configured one,
/// else (with a data directory, while no admin exists) one generated and
/// kept there; its path is logged, never the password.
async fn first_admin_password(
    users: &dyn UserStore,
    settings: &Settings,
) -> Result<Option<SecretString>, StartupError> {
    if let Some(password) = given(&settings.admin_password) {
        return Ok(Some(password.clone()));
    }
    if settings.data_dir.is_empty() || users.any_admin().await.map_err(StartError::Database)? {
        return Ok(None);
    }
    let (password, _) = kept(
        settings,
        first_start::ADMIN_PASSWORD_FILE,
        first_start::random_password,
    )?;
    tracing::info!(
        username = %settings.admin_username,
        password_file = %std::path::Path::new(&settings.data_dir)
            .join(first_start::ADMIN_PASSWORD_FILE)
            .display(),
        "no KANDEV_ADMIN_PASSWORD: the first admin's password is in password_file"
    );
    Ok(Some(password))
}

/// The JWT signing key: the configured one, else the one kept in the data
/// directory (generated on first start), else a random one for this process
/// in development mode.
fn signing_key(settings: &Settings) -> Result<SecretString, StartupError> {
    if let Some(secret) = given(&settings.jwt_secret) {
        return Ok(secret.clone());
    }
    if !settings.data_dir.is_empty() {
        let (secret, made) = kept(settings, first_start::JWT_SECRET_FILE, || {
            JwtKeys::random_secret().expose_secret().to_string()
        })?;
        if made {
            tracing::info!(
                data_dir = %settings.data_dir,
                "no KANDEV_JWT_SECRET: generated a signing key, kept in the data directory"
            );
        }
        return Ok(secret);
    }
    if settings.dev_random_jwt_secret {
        tracing::warn!(
            "no KANDEV_JWT_SECRET: using a random signing key for this process only \
             (development mode; tokens stop working on restart)"
        );
        return Ok(JwtKeys::random_secret());
    }
    Err(StartError::Config("KANDEV_JWT_SECRET is required".into()).into())
}

/// Opens the users' database of `settings.database_url`: Postgres for a
/// `postgres://` URL (the gateway's schema, migrated), SQLite for a
/// `sqlite:` one (the file, created and migrated).
pub async fn open_users(settings: &Settings) -> Result<Users, StartupError> {
    if settings.common.uses_sqlite() {
        let users = SqliteUserStore::open(&settings.common.database_url)
            .await
            .map_err(StartError::from)?;
        return Ok(Arc::new(users));
    }
    Ok(Arc::new(PgUserStore::new(
        connect_database(settings).await?,
    )))
}

/// Connects with `search_path` set to the gateway's schema, creating the
/// schema and running migrations.
pub async fn connect_database(settings: &Settings) -> Result<PgPool, StartupError> {
    Ok(startup::connect_database(&settings.common, &MIGRATIONS).await?)
}

/// The built gateway, bound to its port but not yet serving.
pub struct Application {
    listener: TcpListener,
    local_addr: SocketAddr,
    users: Users,
    router: Router,
    state: AppState,
    header_read_timeout_secs: u64,
}

impl Application {
    /// Follows the live feeds on NATS (`KANDEV_NATS_URL`).
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let (nats, live) = connect_nats(&settings).await?;
        let ready = kandev_common::serve::sync_check(move || {
            if nats.connection_state() == async_nats::connection::State::Connected {
                Ok(())
            } else {
                Err("nats not connected".to_string())
            }
        });
        Self::build_on(settings, live, ("nats", ready)).await
    }

    /// Follows the live feeds on `live` (one process's own, in the
    /// `kandev` binary); `bus` is its readiness check, by name.
    pub async fn build_on(
        settings: Settings,
        live: Arc<LiveFeeds>,
        bus: (&'static str, ReadinessCheck),
    ) -> Result<Self, StartupError> {
        // The internal services answer only calls that carry it.
        let service_token = kandev_common::service_auth::check(&settings.common.service_token)
            .map_err(StartError::Config)?
            .clone();
        let users = open_users(&settings).await?;
        let admin_password = first_admin_password(users.as_ref(), &settings).await?;
        crate::routes::auth::bootstrap_admin(
            users.as_ref(),
            &settings.admin_username,
            admin_password.as_ref().map(|p| p.expose_secret()),
        )
        .await
        .map_err(StartupError::Bootstrap)?;
        let secret = signing_key(&settings)?;
        let jwt = JwtKeys::new(&secret, Duration::from_secs(settings.jwt_ttl_secs));
        let downstream = Downstream::new(&settings, &service_token)?;
        let limits = &settings.rate_limit;
        let state = AppState::new(
            users.clone(),
            jwt,
            downstream.clone(),
            Limits {
                login: RateLimiter::new(limits.login_per_minute, limits.login_burst),
                api: RateLimiter::new(limits.api_per_minute, limits.api_burst),
                trust_forwarded_for: settings.trust_forwarded_for,
            },
            live,
            settings.body_limit_bytes,
        );
        let mut checks = readiness(&users, settings.common.uses_sqlite(), &downstream);
        checks.push(bus);
        let router = crate::app::router(state.clone(), &settings, checks);

        let (listener, local_addr) = startup::bind(&settings.common.listen_addr).await?;
        Ok(Application {
            listener,
            local_addr,
            users,
            router,
            state,
            header_read_timeout_secs: settings.header_read_timeout_secs,
        })
    }

    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The router, for tests that call it without a socket.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The shared state (signing keys, for tests that forge tokens).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` fires, then lets in-flight requests finish
    /// (see [`crate::server`]).
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), StartupError> {
        tracing::info!(addr = %self.local_addr, "gateway listening");
        let streams = self.state.streams_stop().clone();
        let server_stop = CancellationToken::new();
        let stopping = server_stop.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            // Upgraded connections are not drained by the server: tell the
            // streams to close with 1001.
            streams.cancel();
            stopping.cancel();
        });
        crate::server::serve(
            self.listener,
            self.router,
            server_stop,
            Duration::from_secs(self.header_read_timeout_secs),
        )
        .await;
        self.users.close().await;
        tracing::info!("gateway stopped");
        Ok(())
    }
}

/// Connects to NATS (retrying in the background until it answers) for the
/// live feeds; a reconnect tells every stream to read what it missed.
async fn connect_nats(
    settings: &Settings,
) -> Result<(async_nats::Client, Arc<LiveFeeds>), StartupError> {
    let feeds: Arc<std::sync::OnceLock<Arc<LiveFeeds>>> = Arc::default();
    let reconnected = feeds.clone();
    let on_event = move |event: &async_nats::Event| match event {
        async_nats::Event::Connected => {
            if let Some(feeds) = reconnected.get() {
                feeds.reconnected();
            }
        }
        async_nats::Event::Disconnected => {
            tracing::warn!("NATS disconnected; live feeds wait for it");
        }
        other => tracing::debug!(event = %other, "nats"),
    };
    // Refused credentials stop the start; a NATS not up yet is waited for.
    let url = &settings.common.nats_url;
    let nats = kandev_events::nats::connect(url, &settings.nats_login(), on_event)
        .await
        .map_err(|e| match e {
            kandev_events::BusError::Refused { .. } => StartError::Config(e.to_string()).into(),
            e => StartupError::Nats {
                url: url.clone(),
                reason: e.to_string(),
            },
        })?;
    let live = LiveFeeds::new(
        Arc::new(kandev_events::live::NatsLive::new(nats.clone())),
        settings.stream_client_buffer,
    );
    let _ = feeds.set(live.clone());
    Ok((nats, live))
}

/// The database (`postgres` or `sqlite`) and the three services' gRPC health.
fn readiness(
    users: &Users,
    sqlite: bool,
    downstream: &Downstream,
) -> Vec<(&'static str, ReadinessCheck)> {
    let within = downstream.connect_timeout;
    let db = users.clone();
    let name = if sqlite { "sqlite" } else { "postgres" };
    let mut checks: Vec<(&'static str, ReadinessCheck)> = vec![(
        name,
        Arc::new(move || {
            let db = db.clone();
            Box::pin(async move {
                match tokio::time::timeout(within, db.ping()).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "{name} not ready");
                        Err("unreachable".to_string())
                    }
                    Err(_) => Err("timed out".to_string()),
                }
            })
        }),
    )];
    for (name, channel) in downstream.channels() {
        let channel = channel.clone();
        checks.push((
            name,
            Arc::new(move || Box::pin(clients::check_health(channel.clone(), within))),
        ));
    }
    checks
}
