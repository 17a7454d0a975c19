//! Storage of boards and tasks behind [`TaskStore`], and of their pending
//! events behind [`OutboxStore`], in Postgres ([`PgTaskStore`], the
//! services' deployment) or SQLite ([`SqliteTaskStore`], one machine, one
//! file).
//!
//! Both keep the same contract, which `tests/api/contract.rs` checks against
//! each: every change commits in one transaction with its `task_events`
//! audit row and its outbox event, so an event exists exactly when its
//! change does; writers of one task serialise, and an `expected_version`
//! makes the loser fail instead of applying blindly. What a change does
//! (the new task, its audit values, its event) is decided here, once, by
//! plain functions; the store only reads and writes rows.
//!
//! # Layout
//! - here: the traits, the rows (one [`sqlx::FromRow`] each, for both
//!   databases) and what each change decides.
//! - `queries`: every statement, written once for both databases.
//! - `tasks`: [`SqlTaskStore`], the one implementation of both traits,
//!   generic over the database: the list of what the service stores.
//! - `deps`: subtasks' parents, blockers, and the `blocked` flag kept.
//! - `dialect`: what the two databases do differently, named once; `pg`
//!   and `sqlite` implement it.

mod deps;
mod dialect;
mod pg;
mod queries;
mod sql;
mod sqlite;
mod tasks;
mod workflow;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound as _, Utc};
use kandev_events::{
    Envelope, subjects,
    task::{TaskCreated, TaskDeleted, TaskSnapshot, TaskStateChanged, TaskUpdated},
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use sqlx::types::Json;
use uuid::Uuid;

pub use pg::PgTaskStore;
pub use sql::SqlTaskStore;
pub use sqlite::SqliteTaskStore;

use crate::{
    domain::{
        Board, BoardPatch, NewBoard, NewTask, Page, Result, StateChange, Task, TaskError,
        TaskEventRecord, TaskPatch, TaskState, merge_metadata, parse_state,
    },
    workflow::Column,
};

/// Boards, tasks and their history. The gRPC adapter works against this
/// trait, whichever database is behind it.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    async fn create_board(&self, new: NewBoard) -> Result<Board>;
    async fn get_board(&self, id: Uuid) -> Result<Board>;
    /// Boards of `owner` (all when `None`), oldest first, and the next page token.
    async fn list_boards(&self, owner: Option<String>, page: Page) -> Result<(Vec<Board>, String)>;
    async fn update_board(&self, id: Uuid, patch: BoardPatch) -> Result<Board>;
    /// Deletes the board and its tasks; each task's deletion is an event.
    async fn delete_board(&self, id: Uuid, actor: String) -> Result<()>;

    async fn create_task(&self, new: NewTask) -> Result<Task>;
    async fn get_task(&self, id: Uuid) -> Result<Task>;
    /// Tasks of a board (in `states`, all when empty) by column position.
    async fn list_tasks(
        &self,
        board_id: Uuid,
        states: Vec<TaskState>,
        page: Page,
    ) -> Result<(Vec<Task>, String)>;
    async fn update_task(&self, id: Uuid, patch: TaskPatch) -> Result<Task>;
    async fn change_state(&self, id: Uuid, change: StateChange) -> Result<Task>;
    async fn delete_task(
        &self,
        id: Uuid,
        expected_version: Option<i64>,
        actor: String,
    ) -> Result<()>;
    /// A task's history, oldest first; it outlives the task.
    async fn list_events(
        &self,
        task_id: Uuid,
        page: Page,
    ) -> Result<(Vec<TaskEventRecord>, String)>;

    /// The board's workflow columns, left to right.
    async fn list_columns(&self, board_id: Uuid) -> Result<Vec<Column>>;
    /// Replaces the board's columns with `columns` (already checked); the
    /// cards of a removed column go to the first column of their state, and
    /// a column whose limit grew lets its queue in.
    async fn put_columns(&self, board_id: Uuid, columns: Vec<Column>) -> Result<Vec<Column>>;
    /// Moves a card into a column of its board: it enters it (see
    /// [`crate::workflow`]). An unknown column, or one of another board, is
    /// not found.
    async fn move_task(
        &self,
        id: Uuid,
        column_id: Uuid,
        expected_version: Option<i64>,
        actor: String,
    ) -> Result<Task>;

    /// Replaces the tasks task `id` waits for ("blocked by"): tasks of its
    /// board, no cycle. Its `blocked` flag follows; a task is read with
    /// its blockers and subtasks.
    async fn put_blockers(
        &self,
        id: Uuid,
        blockers: Vec<Uuid>,
        expected_version: Option<i64>,
        actor: String,
    ) -> Result<Task>;

    /// Whether the database answers (for `/readyz`).
    async fn ping(&self) -> Result<()>;
    /// Closes the database's connections (at shutdown).
    async fn close(&self);
}

/// One committed event waiting to be published.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEvent {
    /// Its place in commit order.
    pub id: i64,
    /// The bus message id (the envelope's id): a republished event keeps it.
    pub event_id: Uuid,
    pub subject: String,
    /// The JSON envelope.
    pub payload: String,
    /// The trace of the request that made the change (may be empty).
    pub traceparent: String,
}

impl From<(i64, Uuid, String, String, String)> for OutboxEvent {
    fn from(
        (id, event_id, subject, payload, traceparent): (i64, Uuid, String, String, String),
    ) -> Self {
        OutboxEvent {
            id,
            event_id,
            subject,
            payload,
            traceparent,
        }
    }
}

/// The events of the outbox, for the relay ([`crate::outbox`]).
#[async_trait]
pub trait OutboxStore: Send + Sync + 'static {
    /// The oldest `limit` events in commit order, claimed: no other relay
    /// sharing the database gets a batch until this one is finished or
    /// dropped. `None` while another relay holds its batch.
    async fn claim(&self, limit: i64) -> Result<Option<Box<dyn OutboxBatch>>, sqlx::Error>;
    /// How many events wait.
    async fn pending(&self) -> Result<i64, sqlx::Error>;
}

/// A claimed batch of outbox events.
#[async_trait]
pub trait OutboxBatch: Send {
    fn events(&self) -> &[OutboxEvent];
    /// Removes the events published (by [`OutboxEvent::id`]) and releases
    /// the claim; the others stay, first in line.
    async fn finish(self: Box<Self>, published: &[i64]) -> Result<(), sqlx::Error>;
}

#[derive(sqlx::FromRow)]
pub(crate) struct BoardRow {
    id: Uuid,
    name: String,
    description: String,
    owner: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<BoardRow> for Board {
    fn from(r: BoardRow) -> Self {
        Board {
            id: r.id,
            name: r.name,
            description: r.description,
            owner: r.owner,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct TaskRow {
    id: Uuid,
    board_id: Uuid,
    title: String,
    description: String,
    state: String,
    priority: i32,
    agent_type: Option<String>,
    repository_url: String,
    branch: String,
    workspace_path: String,
    metadata: Json<Map<String, Value>>,
    max_retries: i32,
    autostart: bool,
    created_by: String,
    position: i64,
    version: i64,
    column_id: Option<Uuid>,
    queued: bool,
    parent_id: Option<Uuid>,
    blocked: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<TaskRow> for Task {
    type Error = TaskError;

    fn try_from(r: TaskRow) -> Result<Self> {
        Ok(Task {
            id: r.id,
            board_id: r.board_id,
            title: r.title,
            description: r.description,
            state: parse_state(&r.state)?,
            priority: r.priority,
            agent_type: r.agent_type,
            repository_url: r.repository_url,
            branch: r.branch,
            workspace_path: r.workspace_path,
            metadata: r.metadata.0,
            max_retries: r.max_retries,
            autostart: r.autostart,
            created_by: r.created_by,
            position: r.position,
            version: r.version,
            column_id: r.column_id,
            queued: r.queued,
            parent_id: r.parent_id,
            blocked: r.blocked,
            created_at: r.created_at,
            updated_at: r.updated_at,
            blockers: vec![],
            subtasks: vec![],
        })
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    id: Uuid,
    task_id: Uuid,
    board_id: Uuid,
    kind: String,
    actor: String,
    old_value: Option<Value>,
    new_value: Option<Value>,
    created_at: DateTime<Utc>,
}

impl From<EventRow> for TaskEventRecord {
    fn from(r: EventRow) -> Self {
        TaskEventRecord {
            id: r.id,
            task_id: r.task_id,
            board_id: r.board_id,
            kind: r.kind,
            actor: r.actor,
            old_value: r.old_value.unwrap_or(Value::Null),
            new_value: r.new_value.unwrap_or(Value::Null),
            created_at: r.created_at,
        }
    }
}

/// The event payload form of a task.
pub fn snapshot(t: &Task) -> TaskSnapshot {
    TaskSnapshot {
        id: t.id,
        board_id: t.board_id,
        title: t.title.clone(),
        description: t.description.clone(),
        state: t.state,
        priority: t.priority,
        agent_type: t.agent_type.clone(),
        repository_url: t.repository_url.clone(),
        branch: t.branch.clone(),
        workspace_path: t.workspace_path.clone(),
        metadata: Value::Object(t.metadata.clone()),
        max_retries: t.max_retries,
        autostart: t.autostart,
        created_by: t.created_by.clone(),
        position: t.position,
        version: t.version,
        column_id: t.column_id,
        queued: t.queued,
        parent_id: t.parent_id,
        blocked: t.blocked,
        created_at: t.created_at,
        updated_at: t.updated_at,
    }
}

/// The time a change happens at, to the microsecond both databases keep.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// Fails when the caller expected another version of the task.
pub(crate) fn check_version(task: &Task, expected: Option<i64>) -> Result<()> {
    match expected {
        Some(expected) if expected != task.version => Err(TaskError::VersionConflict {
            expected,
            actual: task.version,
        }),
        _ => Ok(()),
    }
}

/// The audit row and the outbox event of one change, ready to be written
/// in the change's transaction.
#[derive(Debug)]
pub(crate) struct ChangeRecord {
    /// The audit row's id.
    pub id: Uuid,
    pub task_id: Uuid,
    pub board_id: Uuid,
    pub kind: &'static str,
    pub actor: String,
    pub old_value: Value,
    pub new_value: Value,
    pub subject: &'static str,
    /// The envelope's id, the bus message id.
    pub event_id: Uuid,
    /// The JSON envelope.
    pub payload: Value,
    pub traceparent: String,
}

impl ChangeRecord {
    #[allow(clippy::too_many_arguments)]
    fn new<T: Serialize>(
        task: &Task,
        kind: &'static str,
        actor: &str,
        old_value: Value,
        new_value: Value,
        subject: &'static str,
        data: T,
    ) -> Self {
        let envelope = Envelope::new(subject, data);
        ChangeRecord {
            id: Uuid::now_v7(),
            task_id: task.id,
            board_id: task.board_id,
            kind,
            actor: actor.to_string(),
            old_value,
            new_value,
            subject,
            event_id: envelope.id,
            payload: json!(envelope),
            traceparent: kandev_common::trace::current().unwrap_or_default(),
        }
    }

    pub fn created(task: &Task) -> Self {
        let snap = snapshot(task);
        Self::new(
            task,
            "created",
            &task.created_by,
            Value::Null,
            json!(snap),
            subjects::TASK_CREATED,
            TaskCreated {
                actor: task.created_by.clone(),
                task: snap.clone(),
            },
        )
    }

    pub fn deleted(task: &Task, actor: &str) -> Self {
        let snap = snapshot(task);
        Self::new(
            task,
            "deleted",
            actor,
            json!(snap),
            Value::Null,
            subjects::TASK_DELETED,
            TaskDeleted {
                actor: actor.to_string(),
                task: snap.clone(),
            },
        )
    }

    /// `task` after an update that changed what `diff` says.
    pub fn updated(task: &Task, actor: &str, diff: Diff) -> Self {
        Self::new(
            task,
            "updated",
            actor,
            diff.before,
            diff.after,
            subjects::TASK_UPDATED,
            TaskUpdated {
                actor: actor.to_string(),
                changed: diff.changed,
                task: snapshot(task),
            },
        )
    }

    /// `task` after it moved from `from` by `change`.
    pub fn state_changed(task: &Task, from: TaskState, change: &StateChange) -> Self {
        Self::new(
            task,
            "state_changed",
            &change.actor,
            json!({"state": from.as_str()}),
            json!({"state": task.state.as_str(), "reason": change.reason}),
            subjects::TASK_STATE_CHANGED,
            TaskStateChanged {
                actor: change.actor.clone(),
                from,
                to: task.state,
                reason: change.reason.clone(),
                task: snapshot(task),
            },
        )
    }
}

/// The task `new` becomes at `position` in its column, at version 1.
pub(crate) fn new_task(new: NewTask, position: i64, at: DateTime<Utc>) -> Task {
    Task {
        id: Uuid::now_v7(),
        board_id: new.board_id,
        title: new.title.as_str().to_string(),
        description: new.description,
        state: new.state,
        priority: new.priority,
        agent_type: new.agent_type,
        repository_url: new.repository_url,
        branch: new.branch,
        workspace_path: new.workspace_path,
        metadata: new.metadata,
        max_retries: new.max_retries,
        autostart: new.autostart,
        created_by: new.created_by,
        position,
        version: 1,
        column_id: None,
        queued: false,
        parent_id: new.parent_id,
        blocked: false,
        created_at: at,
        updated_at: at,
        blockers: vec![],
        subtasks: vec![],
    }
}

/// What an update really changes: the task as it becomes, and what differs.
#[derive(Debug)]
pub(crate) struct Update {
    pub task: Task,
    pub diff: Diff,
}

/// The fields a change touched, with their old and new values.
#[derive(Debug)]
pub(crate) struct Diff {
    pub changed: Vec<String>,
    pub before: Value,
    pub after: Value,
}

impl Update {
    /// `old` with `patch` applied; `None` when the patch changes nothing
    /// (no new version, no event).
    pub fn of(old: &Task, patch: TaskPatch) -> Option<Update> {
        let mut new = old.clone();
        if let Some(title) = patch.title {
            new.title = title.as_str().to_string();
        }
        if let Some(v) = patch.description {
            new.description = v;
        }
        if let Some(v) = patch.priority {
            new.priority = v;
        }
        if let Some(v) = patch.agent_type {
            new.agent_type = v;
        }
        if let Some(v) = patch.repository_url {
            new.repository_url = v;
        }
        if let Some(v) = patch.branch {
            new.branch = v;
        }
        if let Some(v) = patch.workspace_path {
            new.workspace_path = v;
        }
        if let Some(p) = patch.metadata_patch {
            merge_metadata(&mut new.metadata, p);
        }
        if let Some(v) = patch.max_retries {
            new.max_retries = v;
        }
        if let Some(v) = patch.autostart {
            new.autostart = v;
        }
        if let Some(v) = patch.position {
            new.position = v;
        }
        let diff = diff(&snapshot(old), &snapshot(&new));
        (!diff.changed.is_empty()).then_some(Update { task: new, diff })
    }
}

/// The metadata a state change leaves on the task, or why it may not happen.
pub(crate) fn state_change(old: &Task, change: &StateChange) -> Result<Map<String, Value>> {
    check_version(old, change.expected_version)?;
    if !old.state.can_change_to(change.to) {
        return Err(TaskError::ForbiddenTransition {
            from: old.state,
            to: change.to,
        });
    }
    let mut metadata = old.metadata.clone();
    if let Some(p) = change.metadata_patch.clone() {
        merge_metadata(&mut metadata, p);
    }
    Ok(metadata)
}

/// Old and new values of the fields a patch really changes.
pub(crate) fn diff(old: &TaskSnapshot, new: &TaskSnapshot) -> Diff {
    let (Value::Object(old), Value::Object(new)) = (json!(old), json!(new)) else {
        return Diff {
            changed: vec![],
            before: Value::Null,
            after: Value::Null,
        };
    };
    let mut changed = vec![];
    let (mut before, mut after) = (Map::new(), Map::new());
    for (key, value) in &new {
        if matches!(key.as_str(), "version" | "updated_at") {
            continue;
        }
        let previous = old.get(key).cloned().unwrap_or(Value::Null);
        if previous != *value {
            changed.push(key.clone());
            before.insert(key.clone(), previous);
            after.insert(key.clone(), value.clone());
        }
    }
    Diff {
        changed,
        before: Value::Object(before),
        after: Value::Object(after),
    }
}
