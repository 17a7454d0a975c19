//! Storage of boards and tasks behind [`TaskStore`], and its Postgres
//! implementation.
//!
//! Each change commits in one transaction with its `task_events` audit row
//! and its outbox event, so an event exists exactly when its change does.
//! Writers lock the task row (`FOR UPDATE`), so concurrent changes serialise;
//! an `expected_version` makes the loser fail instead of applying blindly.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_events::{
    Envelope, subjects,
    task::{TaskCreated, TaskDeleted, TaskSnapshot, TaskStateChanged, TaskUpdated},
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use sqlx::{PgPool, Postgres, Transaction, types::Json};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::domain::{
    Board, BoardPatch, NewBoard, NewTask, Page, Result, StateChange, Task, TaskError,
    TaskEventRecord, TaskPatch, TaskState, merge_metadata, parse_state,
};

/// Boards, tasks and their history. The gRPC adapter, and later a one-binary
/// mode with another database, work against this trait.
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
    async fn list_events(
        &self,
        task_id: Uuid,
        page: Page,
    ) -> Result<(Vec<TaskEventRecord>, String)>;

    /// Whether the database answers (for `/readyz`).
    async fn ping(&self) -> Result<()>;
}

/// The Postgres store. `outbox_wake` is poked after every commit that wrote
/// an event, so the relay publishes without waiting for its next poll.
#[derive(Clone)]
pub struct PgTaskStore {
    pool: PgPool,
    outbox_wake: Arc<Notify>,
}

impl std::fmt::Debug for PgTaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTaskStore").finish_non_exhaustive()
    }
}

#[derive(sqlx::FromRow)]
struct BoardRow {
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
struct TaskRow {
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
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct EventRow {
    id: Uuid,
    task_id: Uuid,
    board_id: Uuid,
    kind: String,
    actor: String,
    old_value: Option<Value>,
    new_value: Option<Value>,
    created_at: DateTime<Utc>,
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
        created_at: t.created_at,
        updated_at: t.updated_at,
    }
}

const TASK_COLUMNS: &str = "id, board_id, title, description, state, priority, agent_type, \
    repository_url, branch, workspace_path, metadata, max_retries, autostart, created_by, \
    position, version, created_at, updated_at";

type Tx = Transaction<'static, Postgres>;

impl PgTaskStore {
    pub fn new(pool: PgPool, outbox_wake: Arc<Notify>) -> Self {
        PgTaskStore { pool, outbox_wake }
    }

    async fn lock_task(tx: &mut Tx, id: Uuid) -> Result<Task> {
        let row: Option<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1 FOR UPDATE"
        ))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
        row.ok_or_else(|| TaskError::NotFound(format!("task {id}")))?
            .try_into()
    }

    fn check_version(task: &Task, expected: Option<i64>) -> Result<()> {
        match expected {
            Some(expected) if expected != task.version => Err(TaskError::VersionConflict {
                expected,
                actual: task.version,
            }),
            _ => Ok(()),
        }
    }

    async fn next_position(tx: &mut Tx, board_id: Uuid, state: TaskState) -> Result<i64> {
        let max: Option<i64> = sqlx::query_scalar(
            "SELECT max(position) FROM tasks WHERE board_id = $1 AND state = $2",
        )
        .bind(board_id)
        .bind(state.as_str())
        .fetch_one(&mut **tx)
        .await?;
        Ok(max.unwrap_or(0) + 1)
    }

    /// Writes the audit row and the outbox event of one change.
    #[allow(clippy::too_many_arguments)]
    async fn record<T: Serialize>(
        tx: &mut Tx,
        task: &Task,
        kind: &str,
        actor: &str,
        old_value: Value,
        new_value: Value,
        subject: &str,
        data: T,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO task_events (id, task_id, board_id, kind, actor, old_value, new_value) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(Uuid::now_v7())
        .bind(task.id)
        .bind(task.board_id)
        .bind(kind)
        .bind(actor)
        .bind(Json(old_value))
        .bind(Json(new_value))
        .execute(&mut **tx)
        .await?;
        let envelope = Envelope::new(subject, data);
        sqlx::query(
            "INSERT INTO outbox (event_id, subject, payload, traceparent) VALUES ($1, $2, $3, $4)",
        )
        .bind(envelope.id)
        .bind(subject)
        .bind(Json(&envelope))
        .bind(kandev_common::trace::current().unwrap_or_default())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn record_deleted(tx: &mut Tx, task: &Task, actor: &str) -> Result<()> {
        let snap = snapshot(task);
        Self::record(
            tx,
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
        .await
    }

    async fn commit(&self, tx: Tx) -> Result<()> {
        tx.commit().await?;
        self.outbox_wake.notify_one();
        Ok(())
    }
}

/// Old and new values of the fields a patch really changes.
fn diff(old: &TaskSnapshot, new: &TaskSnapshot) -> (Vec<String>, Value, Value) {
    let (Value::Object(old), Value::Object(new)) = (json!(old), json!(new)) else {
        return (vec![], Value::Null, Value::Null);
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
    (changed, Value::Object(before), Value::Object(after))
}

#[async_trait]
impl TaskStore for PgTaskStore {
    async fn create_board(&self, new: NewBoard) -> Result<Board> {
        let row: BoardRow = sqlx::query_as(
            "INSERT INTO boards (id, name, description, owner) VALUES ($1, $2, $3, $4) \
             RETURNING id, name, description, owner, created_at, updated_at",
        )
        .bind(Uuid::now_v7())
        .bind(new.name.as_str())
        .bind(&new.description)
        .bind(&new.owner)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.into())
    }

    async fn get_board(&self, id: Uuid) -> Result<Board> {
        let row: Option<BoardRow> = sqlx::query_as(
            "SELECT id, name, description, owner, created_at, updated_at FROM boards WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(Board::from)
            .ok_or_else(|| TaskError::NotFound(format!("board {id}")))
    }

    async fn list_boards(&self, owner: Option<String>, page: Page) -> Result<(Vec<Board>, String)> {
        let rows: Vec<BoardRow> = sqlx::query_as(
            "SELECT id, name, description, owner, created_at, updated_at FROM boards \
             WHERE ($1::text IS NULL OR owner = $1) ORDER BY created_at, id LIMIT $2 OFFSET $3",
        )
        .bind(owner)
        .bind(page.limit)
        .bind(page.offset)
        .fetch_all(&self.pool)
        .await?;
        let token = page.next_token(rows.len());
        Ok((rows.into_iter().map(Board::from).collect(), token))
    }

    async fn update_board(&self, id: Uuid, patch: BoardPatch) -> Result<Board> {
        let row: Option<BoardRow> = sqlx::query_as(
            "UPDATE boards SET name = coalesce($2, name), description = coalesce($3, description), \
             updated_at = now() WHERE id = $1 \
             RETURNING id, name, description, owner, created_at, updated_at",
        )
        .bind(id)
        .bind(patch.name.as_ref().map(|n| n.as_str()))
        .bind(patch.description)
        .fetch_optional(&self.pool)
        .await?;
        row.map(Board::from)
            .ok_or_else(|| TaskError::NotFound(format!("board {id}")))
    }

    async fn delete_board(&self, id: Uuid, actor: String) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let found: Option<Uuid> =
            sqlx::query_scalar("SELECT id FROM boards WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        if found.is_none() {
            return Err(TaskError::NotFound(format!("board {id}")));
        }
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE board_id = $1 ORDER BY position, id FOR UPDATE"
        ))
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            Self::record_deleted(&mut tx, &Task::try_from(row)?, &actor).await?;
        }
        sqlx::query("DELETE FROM boards WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        self.commit(tx).await
    }

    async fn create_task(&self, new: NewTask) -> Result<Task> {
        let mut tx = self.pool.begin().await?;
        // The board row lock keeps a concurrent board deletion out.
        let board: Option<Uuid> =
            sqlx::query_scalar("SELECT id FROM boards WHERE id = $1 FOR SHARE")
                .bind(new.board_id)
                .fetch_optional(&mut *tx)
                .await?;
        if board.is_none() {
            return Err(TaskError::NotFound(format!("board {}", new.board_id)));
        }
        let position = Self::next_position(&mut tx, new.board_id, new.state).await?;
        let row: TaskRow = sqlx::query_as(&format!(
            "INSERT INTO tasks (id, board_id, title, description, state, priority, agent_type, \
             repository_url, branch, workspace_path, metadata, max_retries, created_by, position, \
             autostart) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
             RETURNING {TASK_COLUMNS}"
        ))
        .bind(Uuid::now_v7())
        .bind(new.board_id)
        .bind(new.title.as_str())
        .bind(&new.description)
        .bind(new.state.as_str())
        .bind(new.priority)
        .bind(&new.agent_type)
        .bind(&new.repository_url)
        .bind(&new.branch)
        .bind(&new.workspace_path)
        .bind(Json(&new.metadata))
        .bind(new.max_retries)
        .bind(&new.created_by)
        .bind(position)
        .bind(new.autostart)
        .fetch_one(&mut *tx)
        .await?;
        let task = Task::try_from(row)?;
        let snap = snapshot(&task);
        Self::record(
            &mut tx,
            &task,
            "created",
            &new.created_by,
            Value::Null,
            json!(snap),
            subjects::TASK_CREATED,
            TaskCreated {
                actor: new.created_by.clone(),
                task: snap.clone(),
            },
        )
        .await?;
        self.commit(tx).await?;
        Ok(task)
    }

    async fn get_task(&self, id: Uuid) -> Result<Task> {
        let row: Option<TaskRow> =
            sqlx::query_as(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"))
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        row.ok_or_else(|| TaskError::NotFound(format!("task {id}")))?
            .try_into()
    }

    async fn list_tasks(
        &self,
        board_id: Uuid,
        states: Vec<TaskState>,
        page: Page,
    ) -> Result<(Vec<Task>, String)> {
        self.get_board(board_id).await?;
        let states: Option<Vec<String>> =
            (!states.is_empty()).then(|| states.iter().map(|s| s.as_str().to_string()).collect());
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE board_id = $1 \
             AND ($2::text[] IS NULL OR state = ANY($2)) \
             ORDER BY position, created_at, id LIMIT $3 OFFSET $4"
        ))
        .bind(board_id)
        .bind(states)
        .bind(page.limit)
        .bind(page.offset)
        .fetch_all(&self.pool)
        .await?;
        let token = page.next_token(rows.len());
        let tasks = rows
            .into_iter()
            .map(Task::try_from)
            .collect::<Result<_>>()?;
        Ok((tasks, token))
    }

    async fn update_task(&self, id: Uuid, patch: TaskPatch) -> Result<Task> {
        let mut tx = self.pool.begin().await?;
        let old = Self::lock_task(&mut tx, id).await?;
        Self::check_version(&old, patch.expected_version)?;

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
        let (changed, before, after) = diff(&snapshot(&old), &snapshot(&new));
        if changed.is_empty() {
            // Nothing to change: no new version, no event.
            return Ok(old);
        }

        let row: TaskRow = sqlx::query_as(&format!(
            "UPDATE tasks SET title = $2, description = $3, priority = $4, agent_type = $5, \
             repository_url = $6, branch = $7, workspace_path = $8, metadata = $9, \
             max_retries = $10, position = $11, autostart = $12, version = version + 1, \
             updated_at = now() \
             WHERE id = $1 RETURNING {TASK_COLUMNS}"
        ))
        .bind(id)
        .bind(&new.title)
        .bind(&new.description)
        .bind(new.priority)
        .bind(&new.agent_type)
        .bind(&new.repository_url)
        .bind(&new.branch)
        .bind(&new.workspace_path)
        .bind(Json(&new.metadata))
        .bind(new.max_retries)
        .bind(new.position)
        .bind(new.autostart)
        .fetch_one(&mut *tx)
        .await?;
        let task = Task::try_from(row)?;
        Self::record(
            &mut tx,
            &task,
            "updated",
            &patch.actor,
            before,
            after,
            subjects::TASK_UPDATED,
            TaskUpdated {
                actor: patch.actor.clone(),
                changed,
                task: snapshot(&task),
            },
        )
        .await?;
        self.commit(tx).await?;
        Ok(task)
    }

    async fn change_state(&self, id: Uuid, change: StateChange) -> Result<Task> {
        let mut tx = self.pool.begin().await?;
        let old = Self::lock_task(&mut tx, id).await?;
        Self::check_version(&old, change.expected_version)?;
        if !old.state.can_change_to(change.to) {
            return Err(TaskError::ForbiddenTransition {
                from: old.state,
                to: change.to,
            });
        }
        let mut metadata = old.metadata.clone();
        if let Some(p) = change.metadata_patch {
            merge_metadata(&mut metadata, p);
        }
        let position = Self::next_position(&mut tx, old.board_id, change.to).await?;
        let row: TaskRow = sqlx::query_as(&format!(
            "UPDATE tasks SET state = $2, position = $3, metadata = $4, version = version + 1, \
             updated_at = now() WHERE id = $1 RETURNING {TASK_COLUMNS}"
        ))
        .bind(id)
        .bind(change.to.as_str())
        .bind(position)
        .bind(Json(&metadata))
        .fetch_one(&mut *tx)
        .await?;
        let task = Task::try_from(row)?;
        Self::record(
            &mut tx,
            &task,
            "state_changed",
            &change.actor,
            json!({"state": old.state.as_str()}),
            json!({"state": task.state.as_str(), "reason": change.reason}),
            subjects::TASK_STATE_CHANGED,
            TaskStateChanged {
                actor: change.actor.clone(),
                from: old.state,
                to: task.state,
                reason: change.reason.clone(),
                task: snapshot(&task),
            },
        )
        .await?;
        self.commit(tx).await?;
        Ok(task)
    }

    async fn delete_task(
        &self,
        id: Uuid,
        expected_version: Option<i64>,
        actor: String,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let task = Self::lock_task(&mut tx, id).await?;
        Self::check_version(&task, expected_version)?;
        sqlx::query("DELETE FROM tasks WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        Self::record_deleted(&mut tx, &task, &actor).await?;
        self.commit(tx).await
    }

    async fn list_events(
        &self,
        task_id: Uuid,
        page: Page,
    ) -> Result<(Vec<TaskEventRecord>, String)> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT id, task_id, board_id, kind, actor, old_value, new_value, created_at \
             FROM task_events WHERE task_id = $1 ORDER BY seq LIMIT $2 OFFSET $3",
        )
        .bind(task_id)
        .bind(page.limit)
        .bind(page.offset)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() && page.offset == 0 {
            // The history outlives the task; no history means no such task.
            return Err(TaskError::NotFound(format!("task {task_id}")));
        }
        let token = page.next_token(rows.len());
        let events = rows
            .into_iter()
            .map(|r| TaskEventRecord {
                id: r.id,
                task_id: r.task_id,
                board_id: r.board_id,
                kind: r.kind,
                actor: r.actor,
                old_value: r.old_value.unwrap_or(Value::Null),
                new_value: r.new_value.unwrap_or(Value::Null),
                created_at: r.created_at,
            })
            .collect();
        Ok((events, token))
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
