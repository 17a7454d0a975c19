//! Payloads of `task.*` events.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::TaskState;

/// The actor of the moves a board's workflow makes by itself (issue 41):
/// no person, so a run it starts is the board owner's.
pub const WORKFLOW_ACTOR: &str = "workflow";

/// The task metadata key holding the prompt an automated workflow column
/// rendered for the run it starts.
pub const WORKFLOW_PROMPT: &str = "workflow_prompt";

/// The task metadata key set (`true`) when that run starts a new agent
/// session instead of continuing the task's (the column's `new_session`).
pub const WORKFLOW_NEW_SESSION: &str = "workflow_new_session";

/// The task metadata key naming the task's agent profile, which the agent
/// manager reads from a launch's metadata.
pub const AGENT_PROFILE: &str = "agent_profile_id";

/// The task metadata key naming the profile of the automated column the
/// task is in: that run launches with it in place of the task's own.
pub const WORKFLOW_PROFILE: &str = "workflow_profile_id";

/// A task as it stands after the change, as carried by `task.*` events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSnapshot {
    pub id: Uuid,
    pub board_id: Uuid,
    pub title: String,
    pub description: String,
    /// Sent by its upper-case name, e.g. `TODO`.
    pub state: TaskState,
    pub priority: i32,
    pub agent_type: Option<String>,
    pub repository_url: String,
    pub branch: String,
    pub workspace_path: String,
    pub metadata: serde_json::Value,
    pub max_retries: i32,
    /// Whether the orchestrator starts the agent by itself (absent in
    /// events from before the field: true).
    #[serde(default = "yes")]
    pub autostart: bool,
    pub created_by: String,
    pub position: i64,
    pub version: i64,
    /// Its board column (issue 41); absent in events from before columns.
    #[serde(default)]
    pub column_id: Option<Uuid>,
    /// Whether it waits in its column's queue (a full WIP limit).
    #[serde(default)]
    pub queued: bool,
    /// The task it is a subtask of; absent in events from before subtasks.
    #[serde(default)]
    pub parent_id: Option<Uuid>,
    /// Whether a blocker of it is not COMPLETED: the orchestrator does not
    /// start it by itself (absent in events from before blockers: false).
    #[serde(default)]
    pub blocked: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

fn yes() -> bool {
    true
}

/// `task.created`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCreated {
    pub actor: String,
    pub task: TaskSnapshot,
}

/// `task.updated`: fields other than the state changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskUpdated {
    pub actor: String,
    /// Names of the fields that changed.
    pub changed: Vec<String>,
    pub task: TaskSnapshot,
}

/// `task.state_changed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStateChanged {
    pub actor: String,
    pub from: TaskState,
    pub to: TaskState,
    pub reason: String,
    pub task: TaskSnapshot,
}

/// `task.deleted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDeleted {
    pub actor: String,
    pub task: TaskSnapshot,
}
