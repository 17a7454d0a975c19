//! Domain types of the agent manager: agent types, instances, statuses,
//! log lines, and errors with their place in the common error table.

use chrono::{DateTime, Utc};
use kandev_common::{ErrorCode, ServiceError};
use kandev_events::agent::OutputCursor;
use uuid::Uuid;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unavailable(String),
    /// A per-run limit is reached (its follow-up queue is full).
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("storage error: {0}")]
    Storage(#[from] sqlx::Error),
    #[error("{0}")]
    Internal(String),
}

impl ServiceError for AgentError {
    fn error_code(&self) -> ErrorCode {
        match self {
            AgentError::InvalidArgument(_) => ErrorCode::Validation,
            AgentError::NotFound(_) => ErrorCode::NotFound,
            AgentError::PermissionDenied(_) => ErrorCode::Forbidden,
            AgentError::FailedPrecondition(_) => ErrorCode::FailedPrecondition,
            AgentError::Unavailable(_) => ErrorCode::Unavailable,
            AgentError::ResourceExhausted(_) => ErrorCode::RateLimited,
            AgentError::Storage(_) | AgentError::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl AgentError {
    /// Whether the same request may succeed when made again: a refusal
    /// (invalid, unknown, not allowed, a precondition such as a missing
    /// secret or repository) meets the same refusal; an unavailable engine,
    /// store or host, or a limit, may come back. A failed launch is retried
    /// only when this holds (the orchestrator reads it from the gRPC code
    /// of a refused launch, and from `agent.failed`'s `retryable`).
    pub fn retryable(&self) -> bool {
        match self {
            AgentError::InvalidArgument(_)
            | AgentError::NotFound(_)
            | AgentError::PermissionDenied(_)
            | AgentError::FailedPrecondition(_) => false,
            AgentError::Unavailable(_)
            | AgentError::ResourceExhausted(_)
            | AgentError::Storage(_)
            | AgentError::Internal(_) => true,
        }
    }
}

pub type Result<T, E = AgentError> = std::result::Result<T, E>;

pub fn invalid(msg: impl Into<String>) -> AgentError {
    AgentError::InvalidArgument(msg.into())
}

/// Parses a UUID field of a request.
pub fn parse_id(field: &str, value: &str) -> Result<Uuid> {
    Uuid::parse_str(value.trim()).map_err(|_| invalid(format!("{field} must be a UUID")))
}

/// How the manager answers `session/request_permission`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionPolicyKind {
    AutoApprove,
    Deny,
    /// Waits for `RespondPermission`, with a timeout.
    Ask,
}

impl PermissionPolicyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionPolicyKind::AutoApprove => "auto_approve",
            PermissionPolicyKind::Deny => "deny",
            PermissionPolicyKind::Ask => "ask",
        }
    }

    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "auto_approve" => Ok(PermissionPolicyKind::AutoApprove),
            "deny" => Ok(PermissionPolicyKind::Deny),
            "ask" => Ok(PermissionPolicyKind::Ask),
            other => Err(invalid(format!(
                "permission_policy {other:?} must be auto_approve, deny or ask"
            ))),
        }
    }
}

/// Which host credentials are mounted read-only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CredentialMounts {
    pub ssh: bool,
    pub gitconfig: bool,
    pub git_credentials: bool,
}

/// One registered kind of agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentType {
    pub id: String,
    pub name: String,
    pub description: String,
    pub image: String,
    /// Entrypoint and arguments; empty uses the image's own.
    pub command: Vec<String>,
    pub working_dir: String,
    pub memory_mb: i64,
    pub cpu_cores: f64,
    pub pids_limit: i64,
    pub timeout_seconds: i64,
    pub capabilities: Vec<String>,
    pub required_env: Vec<String>,
    pub optional_env: Vec<String>,
    pub credential_mounts: CredentialMounts,
    pub network_mode: String,
    pub permission_policy: PermissionPolicyKind,
    pub enabled: bool,
    /// A directory of the agent's home (absolute, in the container) kept
    /// across containers in a named volume per agent type and user; empty
    /// for none.
    pub home_volume: String,
    /// What the agent writes into the workspace for itself (a session
    /// store, its local settings): `.gitignore` patterns, relative to the
    /// repository's root, that Changes and delivery leave out as they leave
    /// out what the repository ignores (see [`crate::changes`]).
    pub state_paths: Vec<String>,
    /// For tests and demos: hidden from pickers by default.
    pub internal: bool,
    /// Whether the operator's credentials (the mounts above, the host's
    /// [`crate::config::HOST_PASSTHROUGH_ENV`]) reach this type's agents:
    /// an admin's explicit opt-in, off by default.
    pub host_credentials: bool,
}

/// An environment variable name: letters, digits and `_`, not starting
/// with a digit.
pub(crate) fn env_name_ok(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn home_volume_ok(path: &str) -> bool {
    let trimmed = path.trim_end_matches('/');
    path.starts_with('/')
        && !trimmed.is_empty()
        && trimmed != "/workspace"
        && !trimmed.starts_with("/workspace/")
        && !path.contains([':', ',', '\0'])
        && !path.split('/').any(|part| part == ".." || part == ".")
}

/// The most state paths one agent type declares.
const MAX_STATE_PATHS: usize = 32;

/// Each state path is one `.gitignore` pattern that ignores (no `!`
/// negation, no comment, no line break, no surrounding blanks), at most
/// 256 bytes.
fn check_state_paths(paths: &[String]) -> Result<()> {
    if paths.len() > MAX_STATE_PATHS {
        return Err(invalid(format!(
            "state_paths holds at most {MAX_STATE_PATHS} patterns"
        )));
    }
    for path in paths {
        let malformed = path.is_empty()
            || path.len() > 256
            || path.trim() != path
            || path.starts_with(['!', '#'])
            || path.contains(['\n', '\r', '\0'])
            || ignore::gitignore::GitignoreBuilder::new("/")
                .add_line(None, path)
                .is_err();
        if malformed {
            return Err(invalid(format!(
                "state_paths: {path:?} is not a .gitignore pattern (one line, not empty, \
                 no '!' or '#' first, at most 256 bytes), e.g. \".claude/settings.local.json\" \
                 or \".kandev-mock/\""
            )));
        }
    }
    Ok(())
}

/// The named Docker volume of an agent type's home for one user: a hash
/// keeps names valid and does not spell the user out.
pub fn home_volume_name(agent_type: &str, scope: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{agent_type}\0{scope}").as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("kandev-home-{agent_type}-{hex}")
}

/// Whether `id` can be an agent type's id: 1-64 lower-case letters, digits,
/// '.', '_' or '-', not starting with a punctuation mark.
pub fn type_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && !id.starts_with(['.', '_', '-'])
}

impl AgentType {
    /// Checks an agent type from `UpsertAgentType`.
    pub fn validate(&self) -> Result<()> {
        if !type_id_ok(&self.id) {
            return Err(invalid(
                "id must be 1-64 lower-case letters, digits, '.', '_' or '-'",
            ));
        }
        if self.name.trim().is_empty() {
            return Err(invalid("name is required"));
        }
        if self.image.trim().is_empty() || self.image.starts_with('-') {
            return Err(invalid("image is required"));
        }
        if !self.working_dir.starts_with('/') {
            return Err(invalid("working_dir must be an absolute path"));
        }
        if self.memory_mb < 16 || self.cpu_cores <= 0.0 || self.pids_limit < 1 {
            return Err(invalid(
                "memory_mb must be at least 16, cpu_cores and pids_limit positive",
            ));
        }
        if self.timeout_seconds < 1 {
            return Err(invalid("timeout_seconds must be at least 1"));
        }
        if let Some(bad) = self
            .required_env
            .iter()
            .chain(&self.optional_env)
            .find(|n| !env_name_ok(n))
        {
            return Err(invalid(format!(
                "{bad:?} is not an environment variable name"
            )));
        }
        if !self.home_volume.is_empty() && !home_volume_ok(&self.home_volume) {
            return Err(invalid(
                "home_volume must be an absolute path in the container, without '..', ':' or \
                 ',', and not / or /workspace",
            ));
        }
        check_state_paths(&self.state_paths)?;
        if self.network_mode.trim().is_empty() {
            return Err(invalid(
                "network_mode is required (none, bridge, host or a network)",
            ));
        }
        Ok(())
    }
}

/// The lifecycle of an agent instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceStatus {
    Pending,
    Starting,
    Running,
    Completed,
    Failed,
    Stopped,
}

impl InstanceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceStatus::Pending => "pending",
            InstanceStatus::Starting => "starting",
            InstanceStatus::Running => "running",
            InstanceStatus::Completed => "completed",
            InstanceStatus::Failed => "failed",
            InstanceStatus::Stopped => "stopped",
        }
    }

    pub fn parse(value: &str) -> Result<Self> {
        Ok(match value {
            "pending" => InstanceStatus::Pending,
            "starting" => InstanceStatus::Starting,
            "running" => InstanceStatus::Running,
            "completed" => InstanceStatus::Completed,
            "failed" => InstanceStatus::Failed,
            "stopped" => InstanceStatus::Stopped,
            other => return Err(AgentError::Internal(format!("unknown status {other}"))),
        })
    }

    /// No container runs for the instance any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            InstanceStatus::Completed | InstanceStatus::Failed | InstanceStatus::Stopped
        )
    }
}

/// A stored status; an unknown one fails the row's read.
impl TryFrom<String> for InstanceStatus {
    type Error = AgentError;

    fn try_from(value: String) -> Result<Self> {
        InstanceStatus::parse(&value)
    }
}

/// One run of an agent for a task (one or more prompt turns), read from
/// its row of `agent_instances`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AgentInstance {
    pub id: Uuid,
    pub task_id: Uuid,
    pub agent_type: String,
    #[sqlx(try_from = "String")]
    pub status: InstanceStatus,
    pub container_id: String,
    pub acp_session_id: String,
    pub workspace_path: String,
    pub workspace_owned: bool,
    pub exit_code: Option<i64>,
    pub error: String,
    pub stop_reason: String,
    pub progress: f64,
    pub last_seq: i64,
    pub turns: i64,
    /// Where `last_seq` stands in the agent's output.
    #[sqlx(flatten)]
    pub cursor: OutputCursor,
    /// The envelope of the last sync-point event, stored before publishing.
    pub sync_event: Option<serde_json::Value>,
    /// The launch request's priority and metadata, kept as given.
    pub priority: i32,
    #[sqlx(json)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Whose agent home volume the instance uses (empty: shared).
    pub home_scope: String,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// One stored log line of an instance.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub at: DateTime<Utc>,
    /// `stderr` or `system`.
    pub stream: String,
    pub line: String,
}

/// The environment variable that carries the task to the agent (the seed's
/// launch contract); the first prompt when none is given.
pub const TASK_DESCRIPTION: &str = "TASK_DESCRIPTION";

/// The environment variable that names a session to resume (the seed's
/// session resumption).
pub const AUGGIE_SESSION_ID: &str = "AUGGIE_SESSION_ID";

/// Variables Kandev sets itself: a stored secret may not shadow them.
const RESERVED: &[&str] = &[TASK_DESCRIPTION, AUGGIE_SESSION_ID, "HOME", "PATH"];
/// Checks a secret's name: an environment variable name Kandev does not set
/// itself.
pub fn check_name(name: &str) -> Result<()> {
    if !env_name_ok(name) || name.len() > 128 {
        return Err(invalid(
            "a secret's name is an environment variable name: 1-128 letters, digits and _, \
             not starting with a digit",
        ));
    }
    if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name)) {
        return Err(invalid(format!("{name} is set by Kandev itself")));
    }
    Ok(())
}

/// One stored secret as listed: its name and when it was last set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretEntry {
    pub name: String,
    pub updated_at: DateTime<Utc>,
}

/// The names of `KEY=VALUE` pairs, for a `Debug` that never shows values.
pub fn env_names(env: &[String]) -> Vec<&str> {
    env.iter()
        .filter_map(|pair| pair.split_once('=').map(|(name, _)| name))
        .collect()
}
