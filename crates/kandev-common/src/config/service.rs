//! The settings every service has, written once: each service flattens
//! [`ServiceSettings`] into its own (`#[serde(flatten)]`), so the keys stay
//! top-level (`KANDEV_LISTEN_ADDR`, `KANDEV_DATABASE_URL`, `KANDEV_NATS_URL`,
//! `KANDEV_SERVICE_TOKEN`, `KANDEV_LOG__FORMAT`, ...) and one environment
//! file serves them all.

use serde::{Deserialize, Serialize};

use super::Validate;
use crate::{
    service_auth::{self, ServiceToken},
    telemetry::LogSettings,
};

/// A NATS password: never printed, never serialized (settings keep it with
/// `#[serde(skip_serializing)]`).
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct NatsPassword(String);

impl NatsPassword {
    /// The password itself, for the connection only.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl From<String> for NatsPassword {
    fn from(s: String) -> Self {
        NatsPassword(s)
    }
}

impl From<&str> for NatsPassword {
    fn from(s: &str) -> Self {
        NatsPassword(s.to_string())
    }
}

impl std::fmt::Debug for NatsPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NatsPassword([redacted])")
    }
}

/// Checks that a NATS user and its password come together.
pub fn check_nats_credentials(
    user: &Option<String>,
    password: &Option<NatsPassword>,
) -> Result<(), String> {
    match (user, password) {
        (Some(user), _) if user.is_empty() => Err("nats_user must not be empty".into()),
        (Some(_), None) => Err("nats_user is set but nats_password is not".into()),
        (None, Some(_)) => Err("nats_password is set but nats_user is not".into()),
        _ => Ok(()),
    }
}

/// What every service's settings share: its port, its database, NATS, the
/// service token and logging. A service's `Default` names its own address
/// and schema ([`ServiceSettings::new`]); [`Default`] here leaves them
/// empty (the loader always starts from the service's own defaults).
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceSettings {
    /// The service's one port (`KANDEV_LISTEN_ADDR`): gRPC and HTTP
    /// (`/healthz`, `/readyz`, `/metrics`); the gateway's REST and WebSocket.
    pub listen_addr: String,
    /// `KANDEV_DATABASE_URL`: `postgres://…`, or `sqlite:///path/file.db`
    /// for a SQLite file. May hold a password, so it is never logged.
    pub database_url: String,
    /// The Postgres schema this service owns (`KANDEV_DATABASE_SCHEMA`).
    pub database_schema: String,
    pub database_max_connections: u32,
    /// `KANDEV_NATS_URL` (several servers comma-separated).
    pub nats_url: String,
    /// This service's NATS user (`KANDEV_NATS_USER`: `task-service`,
    /// `orchestrator`, ... in `deploy/nats/nats.conf`); unset for a NATS
    /// without authorization.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_user: Option<String>,
    /// Its password (`KANDEV_NATS_PASSWORD`); never logged.
    #[serde(skip_serializing)]
    pub nats_password: Option<NatsPassword>,
    /// Copies of each JetStream stream a service creates
    /// (`KANDEV_NATS_STREAM_REPLICAS`): 1 on a single server, 3 on a
    /// 3-node cluster. Every service must use the same value (the gateway
    /// creates none).
    pub nats_stream_replicas: usize,
    /// The secret the Kandev services share (`KANDEV_SERVICE_TOKEN`, at
    /// least 32 bytes; required): every call to an internal service's port
    /// but its probes must carry it, and calls to the other services carry
    /// it. Never logged.
    #[serde(skip_serializing)]
    pub service_token: Option<ServiceToken>,
    pub log: LogSettings,
}

impl ServiceSettings {
    /// The shared defaults, with the service's own address and schema.
    pub fn new(listen_addr: &str, database_schema: &str) -> Self {
        ServiceSettings {
            listen_addr: listen_addr.into(),
            database_url: "postgres://postgres@127.0.0.1:5432/kandev".into(),
            database_schema: database_schema.into(),
            database_max_connections: 10,
            nats_url: "nats://127.0.0.1:4222".into(),
            nats_user: None,
            nats_password: None,
            nats_stream_replicas: 1,
            service_token: None,
            log: LogSettings::default(),
        }
    }

    /// Whether the database is a SQLite file (`sqlite:` URL) rather than
    /// Postgres: one machine, no server (`database_schema` is unused, but
    /// to name the orchestrator's lock keys).
    pub fn uses_sqlite(&self) -> bool {
        self.database_url.starts_with("sqlite:")
    }

    /// Validates the shared settings around `own`, the service's own
    /// checks: the address and the database first, then `own`, then the
    /// NATS credentials and replicas, and the service token last.
    pub fn validate_with(&self, own: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
        super::check_listen_and_database(
            &self.listen_addr,
            &self.database_url,
            &self.database_schema,
            self.database_max_connections,
        )?;
        own()?;
        check_nats_credentials(&self.nats_user, &self.nats_password)?;
        if !(1..=5).contains(&self.nats_stream_replicas) {
            return Err("nats_stream_replicas must be 1 to 5 (NATS's limit)".into());
        }
        service_auth::check(&self.service_token)?;
        Ok(())
    }
}

/// A service's settings: the shared ones among them, and the service's
/// own checks. Such settings are [`Validate`]: the shared checks around
/// the service's own (see [`ServiceSettings::validate_with`]).
pub trait ServiceConfig {
    /// The settings every service has.
    fn common(&self) -> &ServiceSettings;

    /// Returns a readable reason when the service's own settings cannot
    /// work.
    fn validate_own(&self) -> Result<(), String>;
}

impl<T: ServiceConfig> Validate for T {
    fn validate(&self) -> Result<(), String> {
        self.common().validate_with(|| self.validate_own())
    }
}

impl Default for ServiceSettings {
    fn default() -> Self {
        ServiceSettings::new("", "")
    }
}

impl std::fmt::Debug for ServiceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceSettings")
            .field("listen_addr", &self.listen_addr)
            .field("database_schema", &self.database_schema)
            .field("nats_url", &self.nats_url)
            .field("nats_user", &self.nats_user)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
// figment's Jail API returns its own large error type.
#[allow(clippy::result_large_err)]
mod tests {
    use std::path::Path;

    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::{
        config::{ConfigError, load},
        telemetry::LogFormat,
    };

    /// A service's settings, as the services write theirs.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(default)]
    struct Flat {
        #[serde(flatten)]
        common: ServiceSettings,
        port: u16,
        enabled: bool,
        roots: Vec<String>,
    }

    impl Default for Flat {
        fn default() -> Self {
            Flat {
                common: ServiceSettings::new("127.0.0.1:8089", "flat"),
                port: 1,
                enabled: false,
                roots: vec!["/default".into()],
            }
        }
    }

    impl ServiceConfig for Flat {
        fn common(&self) -> &ServiceSettings {
            &self.common
        }

        fn validate_own(&self) -> Result<(), String> {
            match self.port {
                0 => Err("port must be positive".into()),
                _ => Ok(()),
            }
        }
    }

    const TOKEN: &str = "a-service-token-of-32-bytes-or-more";

    #[test]
    fn flattened_settings_load_from_the_environment() {
        figment::Jail::expect_with(|jail| {
            for (name, value) in [
                ("SERVICE_TOKEN", TOKEN),
                ("DATABASE_MAX_CONNECTIONS", "4"),
                ("NATS_STREAM_REPLICAS", "3"),
                ("NATS_USER", "flat"),
                ("NATS_PASSWORD", "nats-secret"),
                ("LOG__FORMAT", "json"),
                ("PORT", "8080"),
                ("ENABLED", "true"),
                ("ROOTS", "/a,/b"),
            ] {
                jail.set_env(format!("KANDEV_{name}"), value);
            }
            let flat: Flat = load(None).map_err(|e| e.to_string())?;
            let c = &flat.common;
            // The service's own defaults, not the shared struct's.
            assert_eq!(c.listen_addr, "127.0.0.1:8089");
            assert_eq!(c.database_schema, "flat");
            assert_eq!(c.database_max_connections, 4);
            assert_eq!(c.nats_stream_replicas, 3);
            assert_eq!(c.nats_user.as_deref(), Some("flat"));
            let password = c.nats_password.as_ref().map(NatsPassword::expose_secret);
            assert_eq!(password, Some("nats-secret"));
            let token = c.service_token.as_ref().map(ServiceToken::expose_secret);
            assert_eq!(token, Some(TOKEN));
            assert_eq!(c.log.format, LogFormat::Json);
            assert_eq!((flat.port, flat.enabled), (8080, true));
            assert_eq!(flat.roots, ["/a", "/b"]);
            // Secrets stay out of Debug output.
            let debug = format!("{flat:?}");
            assert!(!debug.contains("nats-secret") && !debug.contains(TOKEN));
            Ok(())
        });
    }

    #[test]
    fn flattened_settings_load_from_a_file_under_the_environment() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "kandev.toml",
                "listen_addr = \"0.0.0.0:9\"\ndatabase_url = \"sqlite:///tmp/f.db\"\n\
                 database_max_connections = 2\nnats_stream_replicas = 5\n\
                 service_token = \"a-service-token-of-32-bytes-or-more\"\n\
                 port = 7\nenabled = true\nroots = [\"/x\", \"/y,z\"]\n\
                 [log]\nfilter = \"debug\"\n",
            )?;
            jail.set_env("KANDEV_DATABASE_MAX_CONNECTIONS", "6");
            let flat: Flat = load(Some(Path::new("kandev.toml"))).map_err(|e| e.to_string())?;
            let c = &flat.common;
            assert_eq!(c.listen_addr, "0.0.0.0:9");
            assert!(c.uses_sqlite());
            assert_eq!(c.database_max_connections, 6, "the variable over the file");
            assert_eq!(c.nats_stream_replicas, 5);
            assert_eq!(c.log.filter, "debug");
            assert_eq!(c.log.format, LogFormat::Pretty);
            assert_eq!((flat.port, flat.enabled), (7, true));
            assert_eq!(flat.roots, ["/x", "/y,z"]);
            Ok(())
        });
    }

    /// The error of loading [`Flat`] with `KANDEV_<name>=<value>`.
    fn error_with(name: &str, value: &str) -> String {
        let mut out = String::new();
        figment::Jail::expect_with(|jail| {
            jail.set_env("KANDEV_SERVICE_TOKEN", TOKEN);
            jail.set_env(format!("KANDEV_{name}"), value);
            out = load::<Flat>(None).unwrap_err().to_string();
            Ok(())
        });
        out
    }

    #[test]
    fn a_malformed_shared_value_names_its_key() {
        // As it does for any other setting: the variable, and where it is.
        for (name, value, key) in [
            (
                "DATABASE_MAX_CONNECTIONS",
                "many",
                "database_max_connections",
            ),
            ("NATS_STREAM_REPLICAS", "-1", "nats_stream_replicas"),
            ("LOG__FORMAT", "xml", "log.format"),
            ("PORT", "many", "port"),
        ] {
            let err = error_with(name, value).to_lowercase();
            assert!(err.contains(key) && err.contains("kandev_"), "{err}");
        }
    }

    #[test]
    fn shared_checks_come_around_the_services_own() {
        let err = error_with("LISTEN_ADDR", "nowhere");
        assert!(err.contains("listen_addr \"nowhere\""), "{err}");
        let err = error_with("PORT", "0");
        assert!(err.contains("port must be positive"), "{err}");
        let err = error_with("NATS_USER", "flat");
        assert!(
            err.contains("nats_user is set but nats_password is not"),
            "{err}"
        );
        let err = error_with("NATS_STREAM_REPLICAS", "7");
        assert!(err.contains("nats_stream_replicas must be 1 to 5"), "{err}");
        let err = error_with("DATABASE_SCHEMA", "Flat");
        assert!(err.contains("database_schema must be lower-case"), "{err}");
        figment::Jail::expect_with(|_| {
            let err = load::<Flat>(None).unwrap_err();
            assert!(
                matches!(err, ConfigError::Invalid(ref m) if m.contains("KANDEV_SERVICE_TOKEN"))
            );
            Ok(())
        });
    }
}
