//! Settings of the task service.

use kandev_common::{
    config::Validate,
    service_auth::{self, ServiceToken},
    telemetry::LogSettings,
};
use kandev_events::nats::{NatsLogin, NatsPassword, check_credentials};
use serde::{Deserialize, Serialize};

/// Loaded from defaults, the config file and `KANDEV_*` variables.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// gRPC and HTTP (`/healthz`, `/readyz`) on one port (`KANDEV_LISTEN_ADDR`).
    pub listen_addr: String,
    /// `KANDEV_DATABASE_URL`: `postgres://…`, or `sqlite:///path/tasks.db`
    /// for a SQLite file. May hold a password, so it is never logged.
    pub database_url: String,
    /// The Postgres schema this service owns.
    pub database_schema: String,
    pub database_max_connections: u32,
    /// `KANDEV_NATS_URL`.
    pub nats_url: String,
    /// This service's NATS user (`KANDEV_NATS_USER`, `task-service` in
    /// `deploy/nats/nats.conf`); unset for a NATS without authorization.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_user: Option<String>,
    /// Its password (`KANDEV_NATS_PASSWORD`); never logged.
    #[serde(skip_serializing)]
    pub nats_password: Option<NatsPassword>,
    /// Copies of each JetStream stream this service creates
    /// (`KANDEV_NATS_STREAM_REPLICAS`): 1 on a single server, 3 on a
    /// 3-node cluster. Every service must use the same value.
    pub nats_stream_replicas: usize,
    /// The secret the Kandev services share (`KANDEV_SERVICE_TOKEN`, at
    /// least 32 bytes; required): every call to this port but its probes must carry it. Never logged.
    #[serde(skip_serializing)]
    pub service_token: Option<ServiceToken>,
    /// How often the outbox relay polls when nothing wakes it, in ms.
    pub outbox_poll_ms: u64,
    /// Serve gRPC reflection (`KANDEV_GRPC_REFLECTION`): off by default, so
    /// the port does not describe itself to whoever reaches it.
    pub grpc_reflection: bool,
    pub log: LogSettings,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("listen_addr", &self.listen_addr)
            .field("database_schema", &self.database_schema)
            .field("nats_url", &self.nats_url)
            .field("nats_user", &self.nats_user)
            .finish_non_exhaustive()
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen_addr: "127.0.0.1:8081".into(),
            database_url: "postgres://postgres@127.0.0.1:5432/kandev".into(),
            database_schema: "task_service".into(),
            database_max_connections: 10,
            nats_url: "nats://127.0.0.1:4222".into(),
            nats_user: None,
            nats_password: None,
            nats_stream_replicas: 1,
            service_token: None,
            outbox_poll_ms: 1000,
            grpc_reflection: false,
            log: LogSettings::default(),
        }
    }
}

impl Validate for Settings {
    fn validate(&self) -> Result<(), String> {
        kandev_common::config::check_listen_and_database(
            &self.listen_addr,
            &self.database_url,
            &self.database_schema,
            self.database_max_connections,
        )?;
        if self.outbox_poll_ms == 0 {
            return Err("outbox_poll_ms must be at least 1".into());
        }
        check_credentials(&self.nats_user, &self.nats_password)?;
        if !(1..=5).contains(&self.nats_stream_replicas) {
            return Err("nats_stream_replicas must be 1 to 5 (NATS's limit)".into());
        }
        service_auth::check(&self.service_token)?;
        Ok(())
    }
}

impl Settings {
    /// Whether the database is a SQLite file (`sqlite:` URL) rather than
    /// Postgres: one machine, no server (`database_schema` is unused).
    pub fn uses_sqlite(&self) -> bool {
        self.database_url.starts_with("sqlite:")
    }

    /// Who this service is to NATS.
    pub fn nats_login(&self) -> NatsLogin {
        NatsLogin::new(
            "kandev-task-service",
            self.nats_user.clone(),
            self.nats_password.clone(),
        )
    }
}
