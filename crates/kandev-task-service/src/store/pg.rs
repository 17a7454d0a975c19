//! Storage of boards and tasks behind [`TaskStore`], and its Postgres
//! implementation.
//!
//! Each change commits in one transaction with its `task_events` audit row
//! and its outbox event, so an event exists exactly when its change does.
//! Writers lock the task row (`FOR UPDATE`), so concurrent changes serialise;
//! an `expected_version` makes the loser fail instead of applying blindly.

//! The Postgres [`TaskStore`] and [`OutboxStore`]: the services' deployment.
//!
//! Writers lock the task row (`FOR UPDATE`), so concurrent changes of one
//! task serialise. A change that places a task at the end of a column
//! (adding it, moving it to another state) first locks its board row, so
//! two tasks never take the same place and a concurrent board deletion
//! waits; locks are always taken board first, then task. The outbox relay
//! holds a transaction-scoped advisory lock while it publishes a batch, so
//! one relay at a time publishes when several replicas share the database.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{PgPool, Postgres, Transaction, types::Json};
use tokio::sync::Notify;
use uuid::Uuid;

use super::{
    BoardRow, ChangeRecord, EventRow, OutboxBatch, OutboxEvent, OutboxStore, TASK_COLUMNS, TaskRow,
    TaskStore, Update, check_version, state_change,
};
use crate::domain::{
    Board, BoardPatch, NewBoard, NewTask, Page, Result, StateChange, Task, TaskError,
    TaskEventRecord, TaskPatch, TaskState,
};

/// Arbitrary but fixed: the advisory lock key of the outbox relay.
const RELAY_LOCK: i64 = 0x006b_616e_6465_7601;

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

    /// Locks the board's row: who holds it places tasks at column ends.
    async fn lock_board(tx: &mut Tx, id: Uuid) -> Result<()> {
        let found: Option<Uuid> =
            sqlx::query_scalar("SELECT id FROM boards WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?;
        found
            .map(drop)
            .ok_or_else(|| TaskError::NotFound(format!("board {id}")))
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
    async fn record(tx: &mut Tx, change: ChangeRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO task_events (id, task_id, board_id, kind, actor, old_value, new_value) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(change.id)
        .bind(change.task_id)
        .bind(change.board_id)
        .bind(change.kind)
        .bind(&change.actor)
        .bind(Json(&change.old_value))
        .bind(Json(&change.new_value))
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "INSERT INTO outbox (event_id, subject, payload, traceparent) VALUES ($1, $2, $3, $4)",
        )
        .bind(change.event_id)
        .bind(change.subject)
        .bind(Json(&change.payload))
        .bind(&change.traceparent)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn commit(&self, tx: Tx) -> Result<()> {
        tx.commit().await?;
        self.outbox_wake.notify_one();
        Ok(())
    }
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
        Self::lock_board(&mut tx, id).await?;
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE board_id = $1 ORDER BY position, id FOR UPDATE"
        ))
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            Self::record(
                &mut tx,
                ChangeRecord::deleted(&Task::try_from(row)?, &actor),
            )
            .await?;
        }
        sqlx::query("DELETE FROM boards WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        self.commit(tx).await
    }

    async fn create_task(&self, new: NewTask) -> Result<Task> {
        let mut tx = self.pool.begin().await?;
        Self::lock_board(&mut tx, new.board_id).await?;
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
        Self::record(&mut tx, ChangeRecord::created(&task)).await?;
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
        check_version(&old, patch.expected_version)?;

        let actor = patch.actor.clone();
        let Some(Update { task: new, diff }) = Update::of(&old, patch) else {
            // Nothing to change: no new version, no event.
            return Ok(old);
        };

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
        Self::record(&mut tx, ChangeRecord::updated(&task, &actor, diff)).await?;
        self.commit(tx).await?;
        Ok(task)
    }

    async fn change_state(&self, id: Uuid, change: StateChange) -> Result<Task> {
        let mut tx = self.pool.begin().await?;
        // Board first (see the module's note): a task never changes board.
        let board_id: Option<Uuid> = sqlx::query_scalar("SELECT board_id FROM tasks WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        let board_id = board_id.ok_or_else(|| TaskError::NotFound(format!("task {id}")))?;
        Self::lock_board(&mut tx, board_id).await?;
        let old = Self::lock_task(&mut tx, id).await?;
        let metadata = state_change(&old, &change)?;
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
            ChangeRecord::state_changed(&task, old.state, &change),
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
        check_version(&task, expected_version)?;
        sqlx::query("DELETE FROM tasks WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        Self::record(&mut tx, ChangeRecord::deleted(&task, &actor)).await?;
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
        let events = rows.into_iter().map(TaskEventRecord::from).collect();
        Ok((events, token))
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

/// A batch claimed under the relay's advisory lock, held by its transaction.
struct PgBatch {
    tx: Tx,
    events: Vec<OutboxEvent>,
}

#[async_trait]
impl OutboxBatch for PgBatch {
    fn events(&self) -> &[OutboxEvent] {
        &self.events
    }

    async fn finish(self: Box<Self>, published: &[i64]) -> Result<(), sqlx::Error> {
        let mut tx = self.tx;
        if !published.is_empty() {
            sqlx::query("DELETE FROM outbox WHERE id = ANY($1)")
                .bind(published)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }
}

#[async_trait]
impl OutboxStore for PgTaskStore {
    async fn claim(&self, limit: i64) -> Result<Option<Box<dyn OutboxBatch>>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(RELAY_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        if !locked {
            return Ok(None);
        }
        let rows: Vec<(i64, Uuid, String, String, String)> = sqlx::query_as(
            "SELECT id, event_id, subject, payload::text, traceparent FROM outbox \
             ORDER BY id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let events = rows.into_iter().map(OutboxEvent::from).collect();
        Ok(Some(Box::new(PgBatch { tx, events })))
    }

    async fn pending(&self) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(&self.pool)
            .await
    }
}
