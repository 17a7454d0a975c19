//! Storage of agent types, instances, their logs and users' secrets
//! behind [`AgentStore`], implemented once ([`SqlAgentStore`], each
//! statement written for both databases) over Postgres ([`PgAgentStore`],
//! the services' deployment) and SQLite ([`SqliteAgentStore`], one
//! machine, one file).

mod pg;
mod profiles;
mod sql;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use kandev_common::db::TextList;
use kandev_events::agent::OutputCursor;
use uuid::Uuid;

pub use pg::PgAgentStore;
pub use sql::SqlAgentStore;
pub use sqlite::SqliteAgentStore;

use crate::domain::SecretEntry;
use crate::domain::{
    AgentError, AgentInstance, AgentType, CredentialMounts, InstanceStatus, LogLine,
    PermissionPolicyKind, Result,
};

/// The store a manager works with, whichever database is behind it.
pub type Store = Arc<dyn AgentStore>;

/// The agent manager's tables: the registry of agent types and users'
/// secrets (shared by every manager on the database), and this manager's
/// instances and their logs. [`SqlAgentStore`] keeps them in either
/// database, and `tests/api/contract.rs` checks both against one contract.
#[async_trait]
pub trait AgentStore: std::fmt::Debug + Send + Sync + 'static {
    async fn ping(&self) -> Result<()>;
    async fn list_types(&self, include_disabled: bool) -> Result<Vec<AgentType>>;
    async fn get_type(&self, id: &str) -> Result<AgentType>;
    async fn upsert_type(&self, t: &AgentType) -> Result<AgentType>;
    async fn create_instance(
        &self,
        id: Uuid,
        task_id: Uuid,
        agent_type: &str,
        launch: &LaunchFields<'_>,
    ) -> Result<AgentInstance>;
    async fn get_instance(&self, id: Uuid) -> Result<AgentInstance>;
    /// Instances of a task (all when `task_id` is `None`), oldest first.
    async fn list_instances(&self, task_id: Option<Uuid>) -> Result<Vec<AgentInstance>>;
    /// Instances that a container may still be running for.
    async fn active_instances(&self) -> Result<Vec<AgentInstance>>;
    /// How many of this manager's instances are active.
    async fn count_active(&self) -> Result<i64>;
    async fn set_workspace(&self, id: Uuid, path: &str, owned: bool) -> Result<()>;
    /// A turn starts: status `starting`, outcome cleared; returns the
    /// instance with its turn counter incremented.
    async fn begin_turn(&self, id: Uuid) -> Result<AgentInstance>;
    async fn set_container(&self, id: Uuid, container_id: &str) -> Result<()>;
    async fn set_running(&self, id: Uuid, session_id: &str) -> Result<()>;
    /// Stores where each of `positions`' instances stands, in one
    /// statement; a position older than the stored one changes nothing.
    async fn save_progress(&self, positions: &[Position]) -> Result<()>;
    /// Ends the instance (completed, failed or stopped) unless it already
    /// ended; returns whether this call ended it.
    async fn finish(&self, id: Uuid, status: InstanceStatus, outcome: &Outcome) -> Result<bool>;
    /// Stores a sync point before its batch is published: `last_seq`, the
    /// output position and the batch's envelope.
    async fn save_sync(
        &self,
        id: Uuid,
        last_seq: i64,
        progress: f64,
        cursor: OutputCursor,
        envelope: &serde_json::Value,
    ) -> Result<()>;
    /// Appends log lines and keeps only the newest `keep` of the instance.
    async fn append_logs(&self, id: Uuid, lines: &[LogLine], keep: i64) -> Result<()>;
    /// The last `tail` log lines, oldest first.
    async fn tail_logs(&self, id: Uuid, tail: i64) -> Result<Vec<LogLine>>;
    /// Records one prompt of a task's instance and the agent's last
    /// message after it, keeping only the task's newest `keep` exchanges.
    async fn record_exchange(
        &self,
        task_id: Uuid,
        instance_id: Uuid,
        exchange: &Exchange,
        keep: i64,
    ) -> Result<()>;
    /// A task's newest `limit` exchanges (across its instances), oldest
    /// first.
    async fn exchanges(&self, task_id: Uuid, limit: i64) -> Result<Vec<Exchange>>;
    async fn list_secrets(&self, scope: &str) -> Result<Vec<SecretEntry>>;
    /// Stores (or replaces) one sealed secret; refused when the user already
    /// keeps `max` others.
    async fn put_secret(
        &self,
        scope: &str,
        name: &str,
        nonce: &[u8],
        sealed: &[u8],
        max: i64,
    ) -> Result<SecretEntry>;
    /// Whether a secret was there to delete.
    async fn delete_secret(&self, scope: &str, name: &str) -> Result<bool>;
    /// `(name, nonce, ciphertext)` of each of a user's secrets.
    async fn sealed_secrets(&self, scope: &str) -> Result<Vec<(String, Vec<u8>, Vec<u8>)>>;
    /// The user's (`scope`) agent profiles and the shared ones, of one type
    /// or all: by type, shared first, then by name.
    async fn list_profiles(
        &self,
        scope: &str,
        agent_type: Option<&str>,
    ) -> Result<Vec<crate::profiles::spec::AgentProfile>>;
    async fn get_profile(&self, id: Uuid) -> Result<Option<crate::profiles::spec::AgentProfile>>;
    /// Inserts the profile, or replaces the one with its id (its owner and
    /// creation time stay); a name its owner already uses for the type is
    /// a validation error.
    async fn put_profile(&self, profile: &crate::profiles::spec::AgentProfile) -> Result<()>;
    /// Whether a profile was there to delete.
    async fn delete_profile(&self, id: Uuid) -> Result<bool>;
    /// Closes the database's connections (at shutdown).
    async fn close(&self);
}

#[derive(sqlx::FromRow)]
pub(crate) struct TypeRow {
    pub id: String,
    pub name: String,
    pub description: String,
    pub image: String,
    pub command: TextList,
    pub working_dir: String,
    pub memory_mb: i64,
    pub cpu_cores: f64,
    pub pids_limit: i64,
    pub timeout_seconds: i64,
    pub capabilities: TextList,
    pub required_env: TextList,
    pub optional_env: TextList,
    pub mount_ssh: bool,
    pub mount_gitconfig: bool,
    pub mount_git_credentials: bool,
    pub network_mode: String,
    pub permission_policy: String,
    pub enabled: bool,
    pub home_volume: String,
    pub internal: bool,
    pub host_credentials: bool,
    pub state_paths: TextList,
}

impl TryFrom<TypeRow> for AgentType {
    type Error = AgentError;

    fn try_from(r: TypeRow) -> Result<AgentType> {
        Ok(AgentType {
            id: r.id,
            name: r.name,
            description: r.description,
            image: r.image,
            command: r.command.0,
            working_dir: r.working_dir,
            memory_mb: r.memory_mb,
            cpu_cores: r.cpu_cores,
            pids_limit: r.pids_limit,
            timeout_seconds: r.timeout_seconds,
            capabilities: r.capabilities.0,
            required_env: r.required_env.0,
            optional_env: r.optional_env.0,
            credential_mounts: CredentialMounts {
                ssh: r.mount_ssh,
                gitconfig: r.mount_gitconfig,
                git_credentials: r.mount_git_credentials,
            },
            network_mode: r.network_mode,
            permission_policy: PermissionPolicyKind::parse(&r.permission_policy)
                .map_err(|e| AgentError::Internal(e.to_string()))?,
            enabled: r.enabled,
            home_volume: r.home_volume,
            state_paths: r.state_paths.0,
            internal: r.internal,
            host_credentials: r.host_credentials,
        })
    }
}

pub(crate) const TYPE_COLUMNS: &str = "id, name, description, image, command, working_dir, memory_mb, \
    cpu_cores, pids_limit, timeout_seconds, capabilities, required_env, optional_env, mount_ssh, \
    mount_gitconfig, mount_git_credentials, network_mode, permission_policy, enabled, home_volume, internal, \
    host_credentials, state_paths";

pub(crate) const INSTANCE_COLUMNS: &str = "id, task_id, agent_type, status, container_id, acp_session_id, \
    workspace_path, workspace_owned, exit_code, error, stop_reason, progress, last_seq, turns, \
    stdout_lines, stderr_lines, sync_event, priority, metadata, home_scope, created_at, started_at, finished_at";

/// What a launch request keeps on its new instance.
#[derive(Debug, Clone, Copy)]
pub struct LaunchFields<'a> {
    pub priority: i32,
    pub metadata: &'a serde_json::Map<String, serde_json::Value>,
    /// Whose agent home volume the instance uses.
    pub home_scope: &'a str,
}

/// One prompt sent to a task's agent and the agent's last message after
/// it (empty when it wrote none): the conversation a new session is told
/// about when the old one cannot be loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchange {
    pub prompt: String,
    pub reply: String,
}

/// Where an instance's publishing stands: the last published `seq`, the
/// output position that goes with it, and the plan progress.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Position {
    pub id: Uuid,
    pub last_seq: i64,
    pub progress: f64,
    pub cursor: OutputCursor,
}

/// How an instance ended.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub error: String,
    pub exit_code: Option<i64>,
    pub stop_reason: String,
}

pub(crate) fn lines(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
