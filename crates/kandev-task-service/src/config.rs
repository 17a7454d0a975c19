//! Settings of the task service.

use kandev_common::config::{ServiceConfig, ServiceSettings};
use kandev_events::nats::NatsLogin;
use serde::{Deserialize, Serialize};

/// Loaded from defaults, the config file and `KANDEV_*` variables. Its
/// Debug output hides the secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Its port (gRPC and HTTP: `/healthz`, `/readyz`), database, NATS,
    /// service token and logging: the keys every service has.
    #[serde(flatten)]
    pub common: ServiceSettings,
    /// How often the outbox relay polls when nothing wakes it, in ms.
    pub outbox_poll_ms: u64,
    /// Serve gRPC reflection (`KANDEV_GRPC_REFLECTION`): off by default, so
    /// the port does not describe itself to whoever reaches it.
    pub grpc_reflection: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            common: ServiceSettings::new("127.0.0.1:8081", "task_service"),
            outbox_poll_ms: 1000,
            grpc_reflection: false,
        }
    }
}

impl ServiceConfig for Settings {
    fn common(&self) -> &ServiceSettings {
        &self.common
    }

    fn validate_own(&self) -> Result<(), String> {
        if self.outbox_poll_ms == 0 {
            return Err("outbox_poll_ms must be at least 1".into());
        }
        Ok(())
    }
}

impl Settings {
    /// Who this service is to NATS.
    pub fn nats_login(&self) -> NatsLogin {
        NatsLogin::configured("kandev-task-service", &self.common)
    }
}
