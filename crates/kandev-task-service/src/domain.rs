//! Domain types of the task service: states and transitions, validated
//! inputs, and errors.

use chrono::{DateTime, Utc};
use kandev_common::{ErrorCode, ServiceError};
use serde_json::{Map, Value};
use uuid::Uuid;

pub const MAX_TITLE_CHARS: usize = 500;
pub const MAX_DESCRIPTION_BYTES: usize = 64 * 1024;
pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_FIELD_BYTES: usize = 4096;
pub const MAX_METADATA_BYTES: usize = 64 * 1024;
pub const MAX_RETRIES_LIMIT: i32 = 100;
pub const DEFAULT_MAX_RETRIES: i32 = 3;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("version conflict: expected version {expected}, the task is at version {actual}")]
    VersionConflict { expected: i64, actual: i64 },
    #[error("transition from {from} to {to} is not allowed")]
    ForbiddenTransition { from: TaskState, to: TaskState },
    #[error("storage error: {0}")]
    Storage(#[from] sqlx::Error),
}

impl ServiceError for TaskError {
    fn error_code(&self) -> ErrorCode {
        match self {
            TaskError::InvalidArgument(_) => ErrorCode::Validation,
            TaskError::NotFound(_) => ErrorCode::NotFound,
            TaskError::VersionConflict { .. } => ErrorCode::Conflict,
            TaskError::ForbiddenTransition { .. } => ErrorCode::FailedPrecondition,
            TaskError::Storage(_) => ErrorCode::Internal,
        }
    }
}

pub type Result<T, E = TaskError> = std::result::Result<T, E>;

fn invalid(msg: impl Into<String>) -> TaskError {
    TaskError::InvalidArgument(msg.into())
}

/// The state of a task, the one contract every service shares; its
/// transitions are the rules [`crate::store`] enforces.
pub use kandev_events::state::{TRANSITIONS, TaskState};

/// Parses a state name, refusing names that are not states.
pub fn parse_state(s: &str) -> Result<TaskState> {
    s.parse()
        .map_err(|e: kandev_events::UnknownTaskState| invalid(e.to_string()))
}

#[derive(Debug, Clone, PartialEq)]
pub struct Board {
    pub id: Uuid,
    pub name: String,
    pub description: String,
    pub owner: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: Uuid,
    pub board_id: Uuid,
    pub title: String,
    pub description: String,
    pub state: TaskState,
    pub priority: i32,
    pub agent_type: Option<String>,
    pub repository_url: String,
    pub branch: String,
    pub workspace_path: String,
    pub metadata: Map<String, Value>,
    pub max_retries: i32,
    /// Whether the orchestrator starts the agent by itself (see the proto).
    pub autostart: bool,
    pub created_by: String,
    pub position: i64,
    pub version: i64,
    /// Its column on the board (see [`crate::workflow`]); none when no
    /// column maps its state.
    pub column_id: Option<Uuid>,
    /// Whether it waits in its column's queue (the column's WIP limit).
    pub queued: bool,
    /// The task it is a subtask of (one level, same board).
    pub parent_id: Option<Uuid>,
    /// Whether a blocker of it is not COMPLETED: it is not started by
    /// itself (see [`crate::deps`]).
    pub blocked: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The tasks it waits for (filled in by reads; empty in events).
    pub blockers: Vec<Blocker>,
    /// Its subtasks, oldest first (filled in by reads; empty in events).
    pub subtasks: Vec<Uuid>,
}

/// One audited change.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEventRecord {
    pub id: Uuid,
    pub task_id: Uuid,
    pub board_id: Uuid,
    pub kind: String,
    pub actor: String,
    pub old_value: Value,
    pub new_value: Value,
    pub created_at: DateTime<Utc>,
}

/// Postgres stores no NUL character: refused with a clear message.
fn no_nul(field: &str, s: &str) -> Result<()> {
    if s.contains('\0') {
        return Err(invalid(format!("{field} must not contain NUL characters")));
    }
    Ok(())
}

/// Whether any string or key of `value` holds a NUL character.
fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// A trimmed, non-empty line of text of at most `max_chars` characters.
fn required_text(field: &str, s: &str, max_chars: usize) -> Result<String> {
    let s = s.trim();
    no_nul(field, s)?;
    if s.is_empty() {
        return Err(invalid(format!("{field} must not be empty")));
    }
    if s.chars().count() > max_chars {
        return Err(invalid(format!(
            "{field} is longer than {max_chars} characters"
        )));
    }
    Ok(s.to_string())
}

/// A validated board name.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardName(String);

impl BoardName {
    pub fn parse(s: &str) -> Result<Self> {
        required_text("board name", s, MAX_NAME_CHARS).map(BoardName)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A validated task title.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskTitle(String);

impl TaskTitle {
    pub fn parse(s: &str) -> Result<Self> {
        required_text("title", s, MAX_TITLE_CHARS).map(TaskTitle)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks a free-text field's size.
pub fn bounded(field: &str, value: &str, max_bytes: usize) -> Result<String> {
    no_nul(field, value)?;
    if value.len() > max_bytes {
        return Err(invalid(format!("{field} is longer than {max_bytes} bytes")));
    }
    Ok(value.to_string())
}

pub fn priority(value: i32) -> Result<i32> {
    if value < 0 {
        return Err(invalid("priority must not be negative"));
    }
    Ok(value)
}

pub fn max_retries(value: i32) -> Result<i32> {
    if !(0..=MAX_RETRIES_LIMIT).contains(&value) {
        return Err(invalid(format!(
            "max_retries must be between 0 and {MAX_RETRIES_LIMIT}"
        )));
    }
    Ok(value)
}

/// An agent type id: `[a-z0-9._-]`, 1 to 64 characters.
pub fn agent_type(value: &str) -> Result<String> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(invalid(format!(
            "agent_type {value:?} must be 1-64 characters of a-z, 0-9, '.', '_' or '-'"
        )));
    }
    Ok(value.to_string())
}

/// Parses a JSON object given as text; empty text is `{}`.
pub fn json_object(field: &str, text: &str) -> Result<Map<String, Value>> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    if text.len() > MAX_METADATA_BYTES {
        return Err(invalid(format!(
            "{field} is larger than {MAX_METADATA_BYTES} bytes"
        )));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => {
            if map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)) {
                return Err(invalid(format!("{field} must not contain NUL characters")));
            }
            Ok(map)
        }
        Ok(_) => Err(invalid(format!("{field} must be a JSON object"))),
        Err(e) => Err(invalid(format!("{field} is not valid JSON: {e}"))),
    }
}

/// Applies a merge patch of one level: `null` removes a key.
pub fn merge_metadata(target: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        if value.is_null() {
            target.remove(&key);
        } else {
            target.insert(key, value);
        }
    }
}

/// Parses an id.
pub fn parse_id(field: &str, s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|_| invalid(format!("{field} {s:?} is not a valid id")))
}

#[derive(Debug, Clone)]
pub struct NewBoard {
    pub name: BoardName,
    pub description: String,
    pub owner: String,
}

#[derive(Debug, Clone, Default)]
pub struct BoardPatch {
    pub name: Option<BoardName>,
    pub description: Option<String>,
}

#[derive(Debug, Clone)]
pub struct NewTask {
    pub board_id: Uuid,
    pub title: TaskTitle,
    pub description: String,
    pub state: TaskState,
    pub priority: i32,
    pub agent_type: Option<String>,
    pub repository_url: String,
    pub branch: String,
    pub workspace_path: String,
    pub metadata: Map<String, Value>,
    pub max_retries: i32,
    pub autostart: bool,
    pub created_by: String,
    /// The task it is a subtask of: on the same board, itself no subtask.
    pub parent_id: Option<Uuid>,
}

impl NewTask {
    /// A `TODO` card with only a title: no description, agent or
    /// repository, priority 0, the default retries, started by itself
    /// once it has an agent type (as a `CreateTask` without those fields).
    pub fn new(board_id: Uuid, title: TaskTitle, created_by: impl Into<String>) -> NewTask {
        NewTask {
            board_id,
            title,
            description: String::new(),
            state: TaskState::Todo,
            priority: 0,
            agent_type: None,
            repository_url: String::new(),
            branch: String::new(),
            workspace_path: String::new(),
            metadata: Map::new(),
            max_retries: DEFAULT_MAX_RETRIES,
            autostart: true,
            created_by: created_by.into(),
            parent_id: None,
        }
    }
}

/// Field changes; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct TaskPatch {
    pub expected_version: Option<i64>,
    pub title: Option<TaskTitle>,
    pub description: Option<String>,
    pub priority: Option<i32>,
    /// `Some(None)` clears the agent type.
    pub agent_type: Option<Option<String>>,
    pub repository_url: Option<String>,
    pub branch: Option<String>,
    pub workspace_path: Option<String>,
    pub metadata_patch: Option<Map<String, Value>>,
    pub max_retries: Option<i32>,
    pub autostart: Option<bool>,
    pub position: Option<i64>,
    pub actor: String,
}

#[derive(Debug, Clone)]
pub struct StateChange {
    pub to: TaskState,
    pub expected_version: Option<i64>,
    pub actor: String,
    pub reason: String,
    pub metadata_patch: Option<Map<String, Value>>,
}

/// Paging by opaque token (an offset, encoded as text).
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub offset: i64,
    pub limit: i64,
}

pub const DEFAULT_PAGE_SIZE: i64 = 50;
pub const MAX_PAGE_SIZE: i64 = 500;

impl Page {
    pub fn parse(page_size: i32, token: &str) -> Result<Page> {
        let limit = match page_size {
            n if n < 0 => return Err(invalid("page_size must not be negative")),
            0 => DEFAULT_PAGE_SIZE,
            n => i64::from(n).min(MAX_PAGE_SIZE),
        };
        let offset = if token.is_empty() {
            0
        } else {
            token
                .parse::<i64>()
                .ok()
                .filter(|o| *o >= 0)
                .ok_or_else(|| invalid("malformed page_token"))?
        };
        Ok(Page { offset, limit })
    }

    /// The token of the next page, when `returned` filled this one.
    pub fn next_token(&self, returned: usize) -> String {
        if returned as i64 >= self.limit {
            (self.offset + self.limit).to_string()
        } else {
            String::new()
        }
    }
}

/// One task a task waits for, as the task shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Blocker {
    pub id: Uuid,
    pub title: String,
    pub state: TaskState,
}

impl Blocker {
    /// Whether it still holds its task back.
    pub fn holds(&self) -> bool {
        self.state != TaskState::Completed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(TaskTitle::parse("  ").is_err());
        assert!(TaskTitle::parse(&"x".repeat(501)).is_err());
        assert_eq!(TaskTitle::parse(" fix ").unwrap().as_str(), "fix");
        assert!(priority(-1).is_err());
        assert!(parse_state("DONE").is_err());
        assert!(json_object("metadata", "[1]").is_err());
        assert!(json_object("metadata", "{").is_err());
        assert!(agent_type("Mock Agent").is_err());
        assert!(Page::parse(10, "abc").is_err());
        assert_eq!(Page::parse(0, "").unwrap().limit, DEFAULT_PAGE_SIZE);
    }

    #[test]
    fn nul_characters_are_refused() {
        assert!(TaskTitle::parse("a\0b").is_err());
        assert!(BoardName::parse("\0").is_err());
        assert!(bounded("description", "x\0", 100).is_err());
        assert!(json_object("metadata", r#"{"k":"v\u0000"}"#).is_err());
        assert!(json_object("metadata", r#"{"k\u0000":1}"#).is_err());
        assert!(json_object("metadata", r#"{"k":["\\u0000"]}"#).is_ok());
    }

    #[test]
    fn metadata_merge_removes_nulls() {
        let mut m = json_object("m", r#"{"a":1,"b":2}"#).unwrap();
        merge_metadata(&mut m, json_object("p", r#"{"a":null,"c":3}"#).unwrap());
        assert_eq!(Value::Object(m), serde_json::json!({"b":2,"c":3}));
    }
}
