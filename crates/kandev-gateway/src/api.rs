//! The REST request and response types, their OpenAPI schemas, and their
//! conversions from and to the proto messages. Request bodies are parsed
//! into exactly these types, so the schema is what is validated.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use kandev_proto::{
    time::{Timestamp, to_chrono},
    v1 as pb,
};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;

fn time(ts: Option<Timestamp>) -> Option<DateTime<Utc>> {
    ts.as_ref().and_then(to_chrono)
}

/// Distinguishes an absent field (`None`) from an explicit `null`
/// (`Some(None)`).
fn double_option<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Parses a JSON object sent by a service; anything else reads as `{}`.
fn json_object(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

fn json_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

// ---------------------------------------------------------------- auth

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub username: String,
    pub password: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LoginResponse {
    /// An HS256 JWT; send it as `Authorization: Bearer <token>`.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub is_admin: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserResponse {
    pub username: String,
    pub is_admin: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<DateTime<Utc>>,
}

// ---------------------------------------------------------------- boards

#[derive(Debug, Serialize, ToSchema)]
pub struct Board {
    #[schema(format = Uuid)]
    pub id: String,
    pub name: String,
    pub description: String,
    /// The owner's username.
    pub owner: String,
    pub created_at: Option<DateTime<Utc>>,
}

impl From<pb::Board> for Board {
    fn from(b: pb::Board) -> Self {
        Board {
            id: b.id,
            name: b.name,
            description: b.description,
            owner: b.owner,
            created_at: time(b.created_at),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBoardRequest {
    pub name: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateBoardRequest {
    pub name: Option<String>,
    pub description: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BoardList {
    pub boards: Vec<Board>,
    /// Pass as `page_token` for the next page; absent on the last page.
    pub next_page_token: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Items per page (service default when absent).
    pub page_size: Option<i32>,
    pub page_token: Option<String>,
}

fn token(t: String) -> Option<String> {
    (!t.is_empty()).then_some(t)
}

// ---------------------------------------------------------------- tasks

/// The state of a task: the contract shared by every service and the UI.
pub use kandev_events::TaskState;

/// Parses a state name from a request; an unknown name is a validation error.
pub fn parse_state(s: &str) -> Result<TaskState, ApiError> {
    s.parse()
        .map_err(|e: kandev_events::UnknownTaskState| ApiError::validation(e.to_string()))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Task {
    #[schema(format = Uuid)]
    pub id: String,
    #[schema(format = Uuid)]
    pub board_id: String,
    pub title: String,
    pub description: String,
    pub state: Option<TaskState>,
    pub priority: i32,
    pub agent_type: Option<String>,
    pub repository_url: String,
    pub branch: String,
    pub workspace_path: String,
    /// A JSON object, e.g. `{"auggie_session_id": "..."}`.
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    pub max_retries: i32,
    /// Whether the orchestrator starts the agent by itself while the task
    /// is TODO with an agent type ("Create & start"); false waits for
    /// `POST /orchestrator/tasks/{id}/start` ("Create").
    pub autostart: bool,
    pub created_by: String,
    pub position: i64,
    /// Increases on every change; send it back as `version` to update only
    /// an unchanged task.
    pub version: i64,
    /// Its board column (`GET /boards/{id}/columns`); absent when no
    /// column maps its state.
    #[schema(format = Uuid)]
    pub column_id: Option<String>,
    /// Whether it waits in its column's queue (the column's WIP limit).
    pub queued: bool,
    /// The task it is a subtask of (one level, same board).
    #[schema(format = Uuid)]
    pub parent_id: Option<String>,
    /// Its subtasks' ids, oldest first.
    pub subtasks: Vec<String>,
    /// Whether a task it waits for is not COMPLETED: it is not started by
    /// itself, and starts when the last of them completes.
    pub blocked: bool,
    /// The tasks it waits for (`PUT /tasks/{id}/blockers`).
    pub blocked_by: Vec<TaskBlocker>,
    /// Why it is blocked, e.g. `waiting for 'build' (IN_PROGRESS); blocker
    /// 'lint' FAILED`; empty when it is not.
    pub blocked_reason: String,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// A task another waits for.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskBlocker {
    #[schema(format = Uuid)]
    pub id: String,
    pub title: String,
    pub state: Option<TaskState>,
}

/// The tasks a task waits for, replacing those it waited for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBlockersRequest {
    /// Ids of tasks of the same board; empty clears them.
    pub blocked_by: Vec<String>,
    /// When set, applies only if the task is still at this version.
    pub version: Option<i64>,
}

impl From<pb::Task> for Task {
    fn from(t: pb::Task) -> Self {
        Task {
            state: TaskState::from_proto(t.state).ok(),
            metadata: json_object(&t.metadata_json),
            id: t.id,
            board_id: t.board_id,
            title: t.title,
            description: t.description,
            priority: t.priority,
            agent_type: t.agent_type,
            repository_url: t.repository_url,
            branch: t.branch,
            workspace_path: t.workspace_path,
            max_retries: t.max_retries,
            autostart: t.autostart,
            created_by: t.created_by,
            position: t.position,
            version: t.version,
            column_id: Some(t.column_id).filter(|c| !c.is_empty()),
            queued: t.queued,
            parent_id: Some(t.parent_id).filter(|p| !p.is_empty()),
            subtasks: t.subtask_ids,
            blocked: t.blocked,
            blocked_by: t
                .blocked_by
                .into_iter()
                .map(|b| TaskBlocker {
                    id: b.id,
                    title: b.title,
                    state: TaskState::from_proto(b.state).ok(),
                })
                .collect(),
            blocked_reason: t.blocked_reason,
            created_at: time(t.created_at),
            updated_at: time(t.updated_at),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTaskRequest {
    pub title: String,
    #[serde(default)]
    pub description: String,
    pub agent_type: Option<String>,
    #[serde(default)]
    pub repository_url: String,
    #[serde(default)]
    pub branch: String,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub workspace_path: String,
    pub max_retries: Option<i32>,
    /// A JSON object stored with the task.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// Initial state; TODO when absent.
    pub state: Option<TaskState>,
    /// False creates the task without starting its agent; true (the
    /// default) lets the orchestrator queue it at once.
    pub autostart: Option<bool>,
    /// An agent profile (`/api/v1/agent-profiles`) of the task's agent type,
    /// the caller's own or shared; kept in the metadata as
    /// `agent_profile_id`.
    #[schema(format = Uuid)]
    pub profile_id: Option<String>,
    /// Makes it a subtask of this task: one on the same board that is
    /// itself no subtask (one level).
    #[schema(format = Uuid)]
    pub parent_id: Option<String>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTaskRequest {
    /// When set, the update only applies if the task is still at this
    /// version; otherwise 409 conflict.
    pub version: Option<i64>,
    pub title: Option<String>,
    pub description: Option<String>,
    pub priority: Option<i32>,
    /// `null` clears the agent type.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>, nullable)]
    pub agent_type: Option<Option<String>>,
    pub repository_url: Option<String>,
    pub branch: Option<String>,
    pub workspace_path: Option<String>,
    /// Merged key by key into the stored metadata; a `null` value removes
    /// the key.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    pub max_retries: Option<i32>,
    pub position: Option<i64>,
    pub autostart: Option<bool>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeStateRequest {
    pub state: TaskState,
    pub version: Option<i64>,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    pub tasks: Vec<Task>,
    pub next_page_token: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteTaskParams {
    /// Delete only if the task is still at this version.
    pub version: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskEvent {
    #[schema(format = Uuid)]
    pub id: String,
    #[schema(format = Uuid)]
    pub task_id: String,
    #[schema(format = Uuid)]
    pub board_id: String,
    /// created | updated | state_changed | deleted
    pub kind: String,
    pub actor: String,
    /// The task before the change; null for `created`.
    #[schema(value_type = Option<Object>)]
    pub old_value: Value,
    /// The task after the change; null for `deleted`.
    #[schema(value_type = Option<Object>)]
    pub new_value: Value,
    pub created_at: Option<DateTime<Utc>>,
}

impl From<pb::TaskEvent> for TaskEvent {
    fn from(e: pb::TaskEvent) -> Self {
        TaskEvent {
            old_value: json_value(&e.old_value_json),
            new_value: json_value(&e.new_value_json),
            id: e.id,
            task_id: e.task_id,
            board_id: e.board_id,
            kind: e.kind,
            actor: e.actor,
            created_at: time(e.created_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskEventList {
    pub events: Vec<TaskEvent>,
    pub next_page_token: Option<String>,
}

impl BoardList {
    pub fn from_proto(r: pb::ListBoardsResponse) -> Self {
        BoardList {
            boards: r.boards.into_iter().map(Board::from).collect(),
            next_page_token: token(r.next_page_token),
        }
    }
}

/// A board's cards: every task with its execution, in one answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct BoardCards {
    pub cards: Vec<Card>,
    /// True when the board holds more than the answer carries
    /// ([`MAX_CARDS`]); the oldest positions come first.
    pub truncated: bool,
}

/// One card: the task, and how the orchestrator runs it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Card {
    pub task: Task,
    pub execution: TaskExecution,
}

/// A message of a board's live stream (`GET /boards/{id}/stream`), by
/// `type`. `seq` counts the messages of one connection from 1; after a
/// reconnect the first message is a `snapshot` again, so nothing that
/// changed meanwhile is missed.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BoardPush {
    /// Every card of the board: the first message, and again whenever
    /// changes may have been missed. It replaces what the client shows.
    Snapshot {
        seq: u64,
        cards: Vec<Card>,
        truncated: bool,
    },
    /// One card as it is now (new, moved or changed).
    Card { seq: u64, card: Box<Card> },
    /// The task is gone from the board.
    Removed { seq: u64, task_id: String },
}

/// The most cards one `GET /boards/{id}/cards` returns.
pub const MAX_CARDS: usize = 2000;

impl TaskList {
    pub fn from_proto(r: pb::ListTasksResponse) -> Self {
        TaskList {
            tasks: r.tasks.into_iter().map(Task::from).collect(),
            next_page_token: token(r.next_page_token),
        }
    }
}

impl TaskEventList {
    pub fn from_proto(r: pb::ListTaskEventsResponse) -> Self {
        TaskEventList {
            events: r.events.into_iter().map(TaskEvent::from).collect(),
            next_page_token: token(r.next_page_token),
        }
    }
}

// ---------------------------------------------------------------- agents

fn agent_status(value: i32) -> String {
    use pb::AgentStatus as S;
    match S::try_from(value).unwrap_or(S::Unspecified) {
        S::Unspecified => "unknown",
        S::Pending => "pending",
        S::Starting => "starting",
        S::Running => "running",
        S::Completed => "completed",
        S::Failed => "failed",
        S::Stopped => "stopped",
    }
    .to_string()
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchAgentRequest {
    #[schema(format = Uuid)]
    pub task_id: String,
    pub agent_type: String,
    /// A host directory to work in; or give `repository_url` (and `branch`).
    pub workspace_path: Option<String>,
    pub repository_url: Option<String>,
    pub branch: Option<String>,
    #[serde(default)]
    pub env: HashMap<String, String>,
    #[serde(default)]
    pub priority: i32,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// The first prompt; when absent, `env.TASK_DESCRIPTION`, else the
    /// task's description.
    pub prompt: Option<String>,
    /// Resume this ACP session instead of creating one.
    pub resume_session_id: Option<String>,
    /// An agent profile of `agent_type` (the caller's own or shared); kept
    /// in the metadata as `agent_profile_id`.
    #[schema(format = Uuid)]
    pub profile_id: Option<String>,
}

/// An agent instance (a container running one agent for one task).
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentInstance {
    #[schema(format = Uuid)]
    pub id: String,
    #[schema(format = Uuid)]
    pub task_id: String,
    pub agent_type: String,
    pub container_id: String,
    /// pending | starting | running | completed | failed | stopped
    pub status: String,
    /// Completed plan entries, in percent (0 to 100).
    pub progress: f64,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub acp_session_id: Option<String>,
    /// The launch request's priority, as given.
    pub priority: i32,
    /// The launch request's metadata, as given (`{}` when none).
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    /// The user whose stored secrets and agent home volume the run uses:
    /// the one who launched or started it.
    pub run_as: Option<String>,
}

impl From<pb::AgentInstance> for AgentInstance {
    fn from(i: pb::AgentInstance) -> Self {
        AgentInstance {
            priority: i.priority,
            metadata: serde_json::from_str(&i.metadata_json)
                .ok()
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| serde_json::json!({})),
            status: agent_status(i.status),
            progress: (i.progress * 100.0).clamp(0.0, 100.0),
            started_at: time(i.started_at),
            finished_at: time(i.finished_at),
            error: token(i.error),
            acp_session_id: token(i.acp_session_id),
            id: i.id,
            task_id: i.task_id,
            agent_type: i.agent_type,
            container_id: i.container_id,
            exit_code: i.exit_code,
            run_as: token(i.run_as),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptRequest {
    pub message: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PromptResponse {
    pub accepted: bool,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CancelResponse {
    pub cancelled: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogsParams {
    /// The last N lines (1 to 10000); the service default when absent.
    pub tail: Option<i32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LogLine {
    pub timestamp: Option<DateTime<Utc>>,
    /// stderr | system
    pub stream: String,
    pub line: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LogsResponse {
    pub lines: Vec<LogLine>,
}

impl From<pb::GetLogsResponse> for LogsResponse {
    fn from(r: pb::GetLogsResponse) -> Self {
        LogsResponse {
            lines: r
                .lines
                .into_iter()
                .map(|l| LogLine {
                    timestamp: time(l.timestamp),
                    stream: l.stream,
                    line: l.line,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentSession {
    #[schema(format = Uuid)]
    pub instance_id: String,
    #[schema(format = Uuid)]
    pub task_id: String,
    pub session_id: String,
    pub status: String,
}

impl From<pb::AgentSession> for AgentSession {
    fn from(s: pb::AgentSession) -> Self {
        AgentSession {
            status: agent_status(s.status),
            instance_id: s.instance_id,
            task_id: s.task_id,
            session_id: s.session_id,
        }
    }
}

// ---------------------------------------------------------------- agent types

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialMounts {
    #[serde(default)]
    pub ssh: bool,
    #[serde(default)]
    pub gitconfig: bool,
    #[serde(default)]
    pub git_credentials: bool,
}

/// A registered agent type.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentType {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub image: String,
    /// Entrypoint and arguments; empty uses the image's own.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub working_dir: String,
    #[serde(default)]
    pub memory_mb: i64,
    #[serde(default)]
    pub cpu_cores: f64,
    #[serde(default)]
    pub pids_limit: i64,
    #[serde(default)]
    pub timeout_seconds: i64,
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default)]
    pub required_env: Vec<String>,
    #[serde(default)]
    pub optional_env: Vec<String>,
    #[serde(default)]
    pub credential_mounts: CredentialMounts,
    /// none | bridge | host | a network name
    #[serde(default)]
    pub network_mode: String,
    /// auto_approve | deny | ask
    #[serde(default)]
    pub permission_policy: String,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// A directory of the agent's home (absolute, in the container) kept
    /// across containers in a named volume per agent type and user, e.g.
    /// `/home/agent/.augment/sessions`; empty for none.
    #[serde(default)]
    pub home_volume: String,
    /// What the agent writes into the workspace for itself (a session
    /// store, its local settings): `.gitignore` patterns, relative to the
    /// repository's root, e.g. `.claude/settings.local.json` or
    /// `.kandev-mock/`. Changes and delivery leave them out as they leave
    /// out what the repository ignores (a file the repository tracks stays
    /// tracked). At most 32, each one line without `!` or `#` first.
    #[serde(default)]
    pub state_paths: Vec<String>,
    /// For tests and demos: hidden from the agent picker by default.
    #[serde(default)]
    pub internal: bool,
    /// Whether the operator's own credentials reach this type's agents: the
    /// `credential_mounts` (from the agent manager's credentials home) and
    /// the host's `GITHUB_TOKEN`, `GITLAB_TOKEN` and `GEMINI_API_KEY`. Off by
    /// default: then each user's agents get only that user's secrets and
    /// what the operator configured for everyone (`KANDEV_AGENT_ENV__*`).
    #[serde(default)]
    pub host_credentials: bool,
    /// Read only: the `required_env` names neither the server nor the
    /// caller's own secrets have a value for (set them as secrets, or pass
    /// them in a launch's `env`). Ignored on writes.
    #[serde(default)]
    pub missing_env: Vec<String>,
    /// Read only: where the type's image stands on the agent manager's
    /// Docker host: `present`, `building`, `failed` or `missing` (Kandev's
    /// own images are built from their recipe on first use). Ignored on
    /// writes.
    #[serde(default)]
    pub image_status: String,
    /// Read only: how long the image's last build took, or about how long
    /// the first one takes, in seconds.
    #[serde(default)]
    pub image_build_seconds: Option<f64>,
    /// Read only: why the image's last build failed.
    #[serde(default)]
    pub image_error: Option<String>,
}

fn yes() -> bool {
    true
}

/// `$to { field: $from.field, …, $rest }` for every field an agent type has
/// alike in its REST and proto shapes: the one list of them, for both
/// directions.
macro_rules! agent_type_from {
    ($($to:ident)::+, $from:ident, $($rest:tt)*) => {
        $($to)::+ {
            id: $from.id,
            name: $from.name,
            description: $from.description,
            image: $from.image,
            command: $from.command,
            working_dir: $from.working_dir,
            memory_mb: $from.memory_mb,
            cpu_cores: $from.cpu_cores,
            pids_limit: $from.pids_limit,
            timeout_seconds: $from.timeout_seconds,
            capabilities: $from.capabilities,
            required_env: $from.required_env,
            optional_env: $from.optional_env,
            network_mode: $from.network_mode,
            permission_policy: $from.permission_policy,
            enabled: $from.enabled,
            home_volume: $from.home_volume,
            state_paths: $from.state_paths,
            internal: $from.internal,
            host_credentials: $from.host_credentials,
            $($rest)*
        }
    };
}

impl From<pb::AgentType> for AgentType {
    fn from(t: pb::AgentType) -> Self {
        let mounts = t.credential_mounts.unwrap_or_default();
        agent_type_from!(AgentType, t,
            credential_mounts: CredentialMounts {
                ssh: mounts.ssh,
                gitconfig: mounts.gitconfig,
                git_credentials: mounts.git_credentials,
            },
            missing_env: t.missing_env,
            image_status: t.image_status,
            image_build_seconds: t.image_build_seconds,
            image_error: t.image_error,
        )
    }
}

impl From<AgentType> for pb::AgentType {
    fn from(t: AgentType) -> Self {
        let mounts = t.credential_mounts;
        agent_type_from!(pb::AgentType, t,
            credential_mounts: Some(pb::CredentialMounts {
                ssh: mounts.ssh,
                gitconfig: mounts.gitconfig,
                git_credentials: mounts.git_credentials,
            }),
            ..Default::default()
        )
    }
}

/// A partial update of an agent type: only the fields given change.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentTypePatch {
    pub name: Option<String>,
    pub description: Option<String>,
    pub image: Option<String>,
    pub command: Option<Vec<String>>,
    pub working_dir: Option<String>,
    pub memory_mb: Option<i64>,
    pub cpu_cores: Option<f64>,
    pub pids_limit: Option<i64>,
    pub timeout_seconds: Option<i64>,
    pub capabilities: Option<Vec<String>>,
    pub required_env: Option<Vec<String>>,
    pub optional_env: Option<Vec<String>>,
    pub credential_mounts: Option<CredentialMounts>,
    pub network_mode: Option<String>,
    pub permission_policy: Option<String>,
    pub enabled: Option<bool>,
    pub home_volume: Option<String>,
    pub state_paths: Option<Vec<String>>,
    pub internal: Option<bool>,
    pub host_credentials: Option<bool>,
}

impl AgentTypePatch {
    pub fn apply(self, t: &mut AgentType) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { t.$f = v; } )* };
        }
        set!(
            name,
            description,
            image,
            command,
            working_dir,
            memory_mb,
            cpu_cores,
            pids_limit,
            timeout_seconds,
            capabilities,
            required_env,
            optional_env,
            credential_mounts,
            network_mode,
            permission_policy,
            enabled,
            home_volume,
            state_paths,
            internal,
            host_credentials
        );
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentTypeList {
    pub agent_types: Vec<AgentType>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AgentTypeParams {
    /// Include disabled agent types.
    #[serde(default)]
    pub include_disabled: bool,
}

// ---------------------------------------------------------------- orchestrator

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartTaskRequest {
    /// A follow-up prompt; the task's description when absent.
    #[serde(default)]
    pub prompt: String,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StopTaskRequest {
    #[serde(default)]
    pub reason: String,
}

/// How the orchestrator is running a task.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskExecution {
    #[schema(format = Uuid)]
    pub task_id: String,
    /// idle | queued | launching | running | retry_wait | completed | failed | stopped
    pub state: String,
    #[schema(format = Uuid)]
    pub instance_id: Option<String>,
    pub attempts: i32,
    /// 1-based position in the launch queue; 0 when not queued.
    pub queue_position: i32,
    pub last_error: Option<String>,
    pub acp_session_id: Option<String>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The highest stream sequence number stored; resume with `?after=`.
    pub last_seq: i64,
    /// The user whose stored secrets and agent home volume the run uses:
    /// the one who started it (start, a follow-up that needed a new run,
    /// request changes), the creator for a task auto-started at creation,
    /// the board's owner for a run no person started. Absent when the task
    /// never ran.
    pub run_as: Option<String>,
}

/// The name [`TaskExecution::state`] gives an execution state (an unknown
/// number is `unknown`): the one list the REST API and the web UI use.
pub fn exec_state_name(state: pb::ExecutionState) -> &'static str {
    use pb::ExecutionState as E;
    match state {
        E::Unspecified => "unknown",
        E::Idle => "idle",
        E::Queued => "queued",
        E::Launching => "launching",
        E::Running => "running",
        E::RetryWait => "retry_wait",
        E::Completed => "completed",
        E::Failed => "failed",
        E::Stopped => "stopped",
    }
}

/// Every name of [`exec_state_name`], in the proto's order.
pub fn exec_state_names() -> Vec<&'static str> {
    (0..)
        .map_while(|n| pb::ExecutionState::try_from(n).ok())
        .map(exec_state_name)
        .collect()
}

/// The execution states as an ES module for the web UI (served within
/// `/js/states.js`): `EXEC_STATES`, the names [`TaskExecution::state`] takes.
pub fn exec_states_es_module() -> String {
    format!(
        "// Generated by the gateway from kandev_gateway::api::exec_state_name; do not edit.\n\
         export const EXEC_STATES = Object.freeze({});\n",
        serde_json::json!(exec_state_names())
    )
}

impl From<pb::TaskExecution> for TaskExecution {
    fn from(e: pb::TaskExecution) -> Self {
        let state =
            pb::ExecutionState::try_from(e.state).unwrap_or(pb::ExecutionState::Unspecified);
        TaskExecution {
            task_id: e.task_id,
            state: exec_state_name(state).to_string(),
            instance_id: token(e.instance_id),
            attempts: e.attempts,
            queue_position: e.queue_position,
            last_error: token(e.last_error),
            acp_session_id: token(e.acp_session_id),
            updated_at: time(e.updated_at),
            last_seq: e.last_seq,
            run_as: token(e.run_as),
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Replay stored messages after this sequence number, then follow live.
    pub after: Option<i64>,
}

// ---------------------------------------------------------------- secrets

/// One of the caller's stored secrets: its name only, never its value.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserSecret {
    /// The environment variable it fills in the caller's agents, e.g.
    /// `ANTHROPIC_API_KEY` or `GITHUB_TOKEN`.
    pub name: String,
    pub updated_at: Option<DateTime<Utc>>,
}

impl From<pb::UserSecret> for UserSecret {
    fn from(s: pb::UserSecret) -> Self {
        UserSecret {
            name: s.name,
            updated_at: time(s.updated_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserSecretList {
    pub secrets: Vec<UserSecret>,
}

/// The value of a secret (at most 16 KiB, no NUL).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSecretRequest {
    pub value: String,
}

impl std::fmt::Debug for SetSecretRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SetSecretRequest(..)")
    }
}
