//! Settings of the orchestrator.

use std::collections::BTreeMap;

use kandev_common::config::{ServiceConfig, ServiceSettings};
use kandev_events::nats::NatsLogin;
use serde::{Deserialize, Serialize};

/// Loaded from defaults, the config file and `KANDEV_*` variables. Its
/// Debug output hides the secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Its port (gRPC and HTTP: REST, WebSocket, `/healthz`, `/readyz`),
    /// database, NATS, service token and logging: the keys every service
    /// has.
    #[serde(flatten)]
    pub common: ServiceSettings,
    /// `KANDEV_TASK_SERVICE_URL`.
    pub task_service_url: String,
    /// `KANDEV_AGENT_MANAGER_URL`.
    pub agent_manager_url: String,
    /// At most this many runs at once (launching or running), all types.
    pub max_concurrent: u32,
    /// At most this many runs at once per agent type
    /// (`KANDEV_PER_AGENT_TYPE_LIMITS='{mock-agent=1}'` or a TOML table).
    pub per_agent_type_limits: BTreeMap<String, u32>,
    /// A completed run moves its task to REVIEW instead of COMPLETED.
    pub complete_to_review: bool,
    /// A finished task's clone is removed this long after its run ended
    /// (`KANDEV_WORKSPACE_RETENTION_SECS`, default 7 days); never while the
    /// task can still resume (TODO, IN_PROGRESS, REVIEW, ...).
    pub workspace_retention_secs: u64,
    /// How often finished tasks' clones are looked at, in seconds.
    pub workspace_sweep_secs: u64,
    /// Remove the clone once an approval has pushed its branch (Kandev's
    /// own repository of the task stays, so the approved change can still
    /// be read, until the retention removes it).
    pub remove_workspace_after_delivery: bool,
    /// Forges where an approval opens a pull (merge) request for the
    /// pushed branch (`KANDEV_FORGES='[{repository_prefix = "https://github.com/",
    /// kind = "github", api_url = "https://api.github.com", token = "..."}]'`).
    pub forges: Vec<crate::forge::Forge>,
    /// The CI checks of a commit pushed to a forge are read this long after
    /// the push, in ms; the delay doubles after each read that finds them
    /// still running (`KANDEV_CHECKS_POLL_MS`).
    pub checks_poll_ms: u64,
    /// The longest delay between two reads of a commit's checks, in ms.
    pub checks_poll_max_ms: u64,
    /// A commit's checks are read at most this many times.
    pub checks_max_polls: u32,
    /// When a pushed commit's checks fail, their names and log tails go to
    /// the agent as a follow-up by themselves, once per commit
    /// (`KANDEV_AUTO_FIX_CI`); a task's `metadata.auto_fix_ci` turns it on
    /// for that task alone.
    pub auto_fix_ci: bool,
    /// How often each board linked to an issue tracker is reconciled with
    /// it (the deliveries a webhook missed), in seconds; a failing link
    /// waits longer each time, up to an hour.
    pub tracker_reconcile_secs: u64,
    /// Delay before the first retry of a failed run, in ms; doubles per retry.
    pub retry_backoff_ms: u64,
    /// The longest delay between retries, in ms.
    pub retry_backoff_max_ms: u64,
    /// Frames buffered per WebSocket client before it counts as lagging.
    pub ws_client_buffer: usize,
    /// How long a lagging client gets to take its close frame, in ms.
    pub ws_close_grace_ms: u64,
    /// Feed writes are flushed after this many ms...
    pub feed_flush_ms: u64,
    /// ...or this many messages, whichever comes first.
    pub feed_flush_max: usize,
    /// Replicas: how often a standing-by orchestrator tries to take the
    /// lead, and how often the leader checks it still holds it, in ms
    /// (`KANDEV_LEADER_POLL_MS`). See [`crate::leader`].
    pub leader_poll_ms: u64,
    /// A pool of agent managers: one not heard from for this long, in ms,
    /// is gone and its runs move to another (`KANDEV_MANAGER_GRACE_MS`).
    /// See [`crate::pool`].
    pub manager_grace_ms: u64,
    /// Durable consumer names and subject filters; tests on a shared NATS
    /// give each instance its own.
    pub consumers: ConsumerSettings,
    /// Serve gRPC reflection (`KANDEV_GRPC_REFLECTION`): off by default, so
    /// the port does not describe itself to whoever reaches it.
    pub grpc_reflection: bool,
}

/// The three JetStream durable consumers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsumerSettings {
    pub task_durable: String,
    pub task_filter: String,
    pub agent_durable: String,
    pub agent_filter: String,
    pub acp_durable: String,
    pub acp_filter: String,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        ConsumerSettings {
            task_durable: "orchestrator-tasks".into(),
            task_filter: "task.>".into(),
            agent_durable: "orchestrator-agents".into(),
            agent_filter: "agent.>".into(),
            acp_durable: "orchestrator-acp".into(),
            acp_filter: "acp.message.>".into(),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            common: ServiceSettings::new("127.0.0.1:8082", "orchestrator"),
            task_service_url: "http://127.0.0.1:8081".into(),
            agent_manager_url: "http://127.0.0.1:8083".into(),
            max_concurrent: 4,
            per_agent_type_limits: BTreeMap::new(),
            complete_to_review: false,
            workspace_retention_secs: 7 * 24 * 3600,
            workspace_sweep_secs: 300,
            remove_workspace_after_delivery: true,
            forges: Vec::new(),
            checks_poll_ms: 15_000,
            checks_poll_max_ms: 300_000,
            checks_max_polls: 40,
            auto_fix_ci: false,
            tracker_reconcile_secs: 300,
            retry_backoff_ms: 2000,
            retry_backoff_max_ms: 60_000,
            ws_client_buffer: 16_384,
            ws_close_grace_ms: 5000,
            feed_flush_ms: 50,
            feed_flush_max: 500,
            leader_poll_ms: 500,
            manager_grace_ms: 15_000,
            consumers: ConsumerSettings::default(),
            grpc_reflection: false,
        }
    }
}

impl Settings {
    /// The retry delay after `attempts` runs (1-based): backoff, doubling.
    pub fn retry_delay(&self, attempts: i32) -> std::time::Duration {
        let shift = attempts.saturating_sub(1).clamp(0, 20) as u32;
        let ms = self
            .retry_backoff_ms
            .saturating_mul(1u64 << shift)
            .min(self.retry_backoff_max_ms);
        std::time::Duration::from_millis(ms)
    }
}

fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

impl ServiceConfig for Settings {
    fn common(&self) -> &ServiceSettings {
        &self.common
    }

    fn validate_own(&self) -> Result<(), String> {
        if !is_url(&self.task_service_url) {
            return Err("task_service_url must be an http(s):// URL".into());
        }
        if !is_url(&self.agent_manager_url) {
            return Err("agent_manager_url must be an http(s):// URL".into());
        }
        if self.max_concurrent == 0 {
            return Err("max_concurrent must be at least 1".into());
        }
        if self.ws_client_buffer == 0
            || self.feed_flush_max == 0
            || self.feed_flush_ms == 0
            || self.leader_poll_ms == 0
            || self.manager_grace_ms == 0
            || self.checks_poll_ms == 0
        {
            return Err(
                "ws_client_buffer, feed_flush_max, feed_flush_ms, leader_poll_ms, manager_grace_ms and checks_poll_ms must be positive".into(),
            );
        }
        let c = &self.consumers;
        for name in [&c.task_durable, &c.agent_durable, &c.acp_durable] {
            if name.is_empty() || name.contains(['.', '*', '>', ' ']) {
                return Err(format!("invalid durable consumer name {name:?}"));
            }
        }
        Ok(())
    }
}

impl Settings {
    /// The delay before the next read of a commit's checks, after `polls`
    /// reads: backoff, doubling.
    pub fn checks_delay(&self, polls: u32) -> std::time::Duration {
        let shift = polls.min(20);
        let ms = self
            .checks_poll_ms
            .saturating_mul(1u64 << shift)
            .min(self.checks_poll_max_ms.max(self.checks_poll_ms));
        std::time::Duration::from_millis(ms)
    }

    /// Who this service is to NATS.
    pub fn nats_login(&self) -> NatsLogin {
        NatsLogin::configured("kandev-orchestrator", &self.common)
    }
}

#[cfg(test)]
mod tests {
    use kandev_common::config::Validate;

    use super::*;

    #[test]
    fn defaults_validate_and_backoff_doubles_up_to_the_cap() {
        let s = Settings {
            common: ServiceSettings {
                service_token: Some("t".repeat(32).into()),
                ..Settings::default().common
            },
            ..Settings::default()
        };
        s.validate().unwrap();
        // Without the service token the start is refused, naming it.
        let err = Settings::default().validate().unwrap_err();
        assert!(err.contains("KANDEV_SERVICE_TOKEN"), "{err}");
        assert_eq!(s.retry_delay(1).as_millis(), 2000);
        assert_eq!(s.retry_delay(2).as_millis(), 4000);
        assert_eq!(s.retry_delay(30).as_millis(), 60_000);
    }

    #[test]
    // figment's Jail API returns its own large error type.
    #[allow(clippy::result_large_err)]
    fn environment_sets_limits_and_consumer_names() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("KANDEV_PER_AGENT_TYPE_LIMITS", "{mock-agent=1,auggie=2}");
            jail.set_env("KANDEV_MAX_CONCURRENT", "3");
            jail.set_env("KANDEV_COMPLETE_TO_REVIEW", "true");
            jail.set_env("KANDEV_CONSUMERS__ACP_DURABLE", "orch-acp-2");
            jail.set_env("KANDEV_AGENT_MANAGER_URL", "http://am:8083");
            jail.set_env("KANDEV_NATS_USER", "orchestrator");
            jail.set_env("KANDEV_NATS_PASSWORD", "s3cret-nats");
            jail.set_env("KANDEV_SERVICE_TOKEN", "s3cret-service-token-of-32-bytes!");
            let s: Settings = kandev_common::config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(s.common.nats_user.as_deref(), Some("orchestrator"));
            let login = s.nats_login();
            assert_eq!(login.name, "kandev-orchestrator");
            assert_eq!(
                login.password.as_ref().map(|p| p.expose_secret()),
                Some("s3cret-nats")
            );
            assert!(!format!("{s:?}").contains("s3cret"));
            assert_eq!(
                s.common.service_token.as_ref().map(|t| t.expose_secret()),
                Some("s3cret-service-token-of-32-bytes!")
            );
            assert_eq!(s.per_agent_type_limits.get("mock-agent"), Some(&1));
            assert_eq!(s.per_agent_type_limits.get("auggie"), Some(&2));
            assert_eq!(s.max_concurrent, 3);
            assert!(s.complete_to_review);
            assert_eq!(s.consumers.acp_durable, "orch-acp-2");
            assert_eq!(s.consumers.task_durable, "orchestrator-tasks");
            assert_eq!(s.agent_manager_url, "http://am:8083");
            Ok(())
        });
    }

    #[test]
    fn bad_values_are_refused() {
        let s = Settings {
            max_concurrent: 0,
            ..Settings::default()
        };
        assert!(s.validate().is_err());
        let mut s = Settings::default();
        s.consumers.acp_durable = "a.b".into();
        assert!(s.validate().is_err());
        // A NATS user without its password (or the reverse).
        let mut s = Settings::default();
        s.common.nats_user = Some("orchestrator".into());
        assert!(s.validate().unwrap_err().contains("nats_password"));
    }
}
