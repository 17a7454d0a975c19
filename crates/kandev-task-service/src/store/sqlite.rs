//! The SQLite [`TaskStore`] and [`OutboxStore`]: one machine, one file
//! (`kandev`'s data directory), no server.
//!
//! SQLite has no row locks: every change runs in a `BEGIN IMMEDIATE`
//! transaction, which takes the database's write lock before it reads, so
//! changes serialise as the Postgres store's row locks make them (a writer
//! waits up to the busy timeout for another). Readers never wait, in WAL
//! mode. Timestamps are stored as RFC 3339 text with six fixed fractional
//! digits, which sorts as time does; ids as 16-byte blobs; JSON as text.
//!
//! One relay publishes the outbox (the process's own): a claim is an
//! in-process lock, not a database one.

use std::sync::Arc;

use async_trait::async_trait;
use kandev_common::db::sqlite::time as ts;
use sqlx::{Sqlite, SqlitePool, Transaction, types::Json};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard};
use uuid::Uuid;

use super::{
    BoardRow, ChangeRecord, EventRow, OutboxBatch, OutboxEvent, OutboxStore, TASK_COLUMNS, TaskRow,
    TaskStore, Update, check_version, now, state_change,
};
use crate::domain::{
    Board, BoardPatch, NewBoard, NewTask, Page, Result, StateChange, Task, TaskError,
    TaskEventRecord, TaskPatch, TaskState,
};

const BOARD_COLUMNS: &str = "id, name, description, owner, created_at, updated_at";

type Tx = Transaction<'static, Sqlite>;

/// The SQLite store. `outbox_wake` is poked after every commit that wrote
/// an event, so the relay publishes without waiting for its next poll.
#[derive(Clone)]
pub struct SqliteTaskStore {
    pool: SqlitePool,
    outbox_wake: Arc<Notify>,
    relay: Arc<Mutex<()>>,
}

impl std::fmt::Debug for SqliteTaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTaskStore").finish_non_exhaustive()
    }
}

impl SqliteTaskStore {
    /// Opens (creating it when missing) the database at `url`
    /// (`sqlite:///path/to/tasks.db` or `sqlite:relative.db`) and runs the
    /// SQLite migrations.
    pub async fn open(url: &str, outbox_wake: Arc<Notify>) -> Result<Self, sqlx::Error> {
        let pool = kandev_common::db::sqlite::connect(url, 4).await?;
        sqlx::migrate!("./migrations-sqlite").run(&pool).await?;
        Ok(SqliteTaskStore {
            pool,
            outbox_wake,
            relay: Arc::default(),
        })
    }

    /// A transaction that holds the write lock from its first statement.
    async fn begin(&self) -> Result<Tx> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    async fn read_task(tx: &mut Tx, id: Uuid) -> Result<Task> {
        let row: Option<TaskRow> =
            sqlx::query_as(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?;
        row.ok_or_else(|| TaskError::NotFound(format!("task {id}")))?
            .try_into()
    }

    async fn next_position(tx: &mut Tx, board_id: Uuid, state: TaskState) -> Result<i64> {
        let max: Option<i64> = sqlx::query_scalar(
            "SELECT max(position) FROM tasks WHERE board_id = ?1 AND state = ?2",
        )
        .bind(board_id)
        .bind(state.as_str())
        .fetch_one(&mut **tx)
        .await?;
        Ok(max.unwrap_or(0) + 1)
    }

    /// Writes the audit row and the outbox event of one change.
    async fn record(tx: &mut Tx, change: ChangeRecord) -> Result<()> {
        let at = ts(now());
        sqlx::query(
            "INSERT INTO task_events \
             (id, task_id, board_id, kind, actor, old_value, new_value, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .bind(change.id)
        .bind(change.task_id)
        .bind(change.board_id)
        .bind(change.kind)
        .bind(&change.actor)
        .bind(Json(&change.old_value))
        .bind(Json(&change.new_value))
        .bind(&at)
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "INSERT INTO outbox (event_id, subject, payload, traceparent, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .bind(change.event_id)
        .bind(change.subject)
        .bind(Json(&change.payload))
        .bind(&change.traceparent)
        .bind(&at)
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
impl TaskStore for SqliteTaskStore {
    async fn create_board(&self, new: NewBoard) -> Result<Board> {
        let at = ts(now());
        let row: BoardRow = sqlx::query_as(&format!(
            "INSERT INTO boards (id, name, description, owner, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?5) RETURNING {BOARD_COLUMNS}"
        ))
        .bind(Uuid::now_v7())
        .bind(new.name.as_str())
        .bind(&new.description)
        .bind(&new.owner)
        .bind(&at)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.into())
    }

    async fn get_board(&self, id: Uuid) -> Result<Board> {
        let row: Option<BoardRow> =
            sqlx::query_as(&format!("SELECT {BOARD_COLUMNS} FROM boards WHERE id = ?1"))
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(Board::from)
            .ok_or_else(|| TaskError::NotFound(format!("board {id}")))
    }

    async fn list_boards(&self, owner: Option<String>, page: Page) -> Result<(Vec<Board>, String)> {
        let rows: Vec<BoardRow> = sqlx::query_as(&format!(
            "SELECT {BOARD_COLUMNS} FROM boards WHERE (?1 IS NULL OR owner = ?1) \
             ORDER BY created_at, id LIMIT ?2 OFFSET ?3"
        ))
        .bind(owner)
        .bind(page.limit)
        .bind(page.offset)
        .fetch_all(&self.pool)
        .await?;
        let token = page.next_token(rows.len());
        Ok((rows.into_iter().map(Board::from).collect(), token))
    }

    async fn update_board(&self, id: Uuid, patch: BoardPatch) -> Result<Board> {
        let row: Option<BoardRow> = sqlx::query_as(&format!(
            "UPDATE boards SET name = coalesce(?2, name), description = coalesce(?3, description), \
             updated_at = ?4 WHERE id = ?1 RETURNING {BOARD_COLUMNS}"
        ))
        .bind(id)
        .bind(patch.name.as_ref().map(|n| n.as_str()))
        .bind(patch.description)
        .bind(ts(now()))
        .fetch_optional(&self.pool)
        .await?;
        row.map(Board::from)
            .ok_or_else(|| TaskError::NotFound(format!("board {id}")))
    }

    async fn delete_board(&self, id: Uuid, actor: String) -> Result<()> {
        let mut tx = self.begin().await?;
        let found: Option<Uuid> = sqlx::query_scalar("SELECT id FROM boards WHERE id = ?1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        if found.is_none() {
            return Err(TaskError::NotFound(format!("board {id}")));
        }
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE board_id = ?1 ORDER BY position, id"
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
        // The tasks go with the board (ON DELETE CASCADE).
        sqlx::query("DELETE FROM boards WHERE id = ?1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        self.commit(tx).await
    }

    async fn create_task(&self, new: NewTask) -> Result<Task> {
        let mut tx = self.begin().await?;
        let board: Option<Uuid> = sqlx::query_scalar("SELECT id FROM boards WHERE id = ?1")
            .bind(new.board_id)
            .fetch_optional(&mut *tx)
            .await?;
        if board.is_none() {
            return Err(TaskError::NotFound(format!("board {}", new.board_id)));
        }
        let position = Self::next_position(&mut tx, new.board_id, new.state).await?;
        let at = ts(now());
        let row: TaskRow = sqlx::query_as(&format!(
            "INSERT INTO tasks (id, board_id, title, description, state, priority, agent_type, \
             repository_url, branch, workspace_path, metadata, max_retries, created_by, position, \
             autostart, version, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 1, ?16, ?16) \
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
        .bind(&at)
        .fetch_one(&mut *tx)
        .await?;
        let task = Task::try_from(row)?;
        Self::record(&mut tx, ChangeRecord::created(&task)).await?;
        self.commit(tx).await?;
        Ok(task)
    }

    async fn get_task(&self, id: Uuid) -> Result<Task> {
        let row: Option<TaskRow> =
            sqlx::query_as(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))
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
        // The states as a JSON array, which json_each turns into rows.
        let states: Option<String> = (!states.is_empty()).then(|| {
            serde_json::Value::from(states.iter().map(|s| s.as_str()).collect::<Vec<_>>())
                .to_string()
        });
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE board_id = ?1 \
             AND (?2 IS NULL OR state IN (SELECT value FROM json_each(?2))) \
             ORDER BY position, created_at, id LIMIT ?3 OFFSET ?4"
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
        let mut tx = self.begin().await?;
        let old = Self::read_task(&mut tx, id).await?;
        check_version(&old, patch.expected_version)?;
        let actor = patch.actor.clone();
        let Some(Update { task: new, diff }) = Update::of(&old, patch) else {
            // Nothing to change: no new version, no event.
            return Ok(old);
        };
        let row: TaskRow = sqlx::query_as(&format!(
            "UPDATE tasks SET title = ?2, description = ?3, priority = ?4, agent_type = ?5, \
             repository_url = ?6, branch = ?7, workspace_path = ?8, metadata = ?9, \
             max_retries = ?10, position = ?11, autostart = ?12, version = version + 1, \
             updated_at = ?13 \
             WHERE id = ?1 RETURNING {TASK_COLUMNS}"
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
        .bind(ts(now()))
        .fetch_one(&mut *tx)
        .await?;
        let task = Task::try_from(row)?;
        Self::record(&mut tx, ChangeRecord::updated(&task, &actor, diff)).await?;
        self.commit(tx).await?;
        Ok(task)
    }

    async fn change_state(&self, id: Uuid, change: StateChange) -> Result<Task> {
        let mut tx = self.begin().await?;
        let old = Self::read_task(&mut tx, id).await?;
        let metadata = state_change(&old, &change)?;
        let position = Self::next_position(&mut tx, old.board_id, change.to).await?;
        let row: TaskRow = sqlx::query_as(&format!(
            "UPDATE tasks SET state = ?2, position = ?3, metadata = ?4, version = version + 1, \
             updated_at = ?5 WHERE id = ?1 RETURNING {TASK_COLUMNS}"
        ))
        .bind(id)
        .bind(change.to.as_str())
        .bind(position)
        .bind(Json(&metadata))
        .bind(ts(now()))
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
        let mut tx = self.begin().await?;
        let task = Self::read_task(&mut tx, id).await?;
        check_version(&task, expected_version)?;
        sqlx::query("DELETE FROM tasks WHERE id = ?1")
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
             FROM task_events WHERE task_id = ?1 ORDER BY seq LIMIT ?2 OFFSET ?3",
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

/// A batch claimed under the process's relay lock.
struct SqliteBatch {
    pool: SqlitePool,
    events: Vec<OutboxEvent>,
    _claim: OwnedMutexGuard<()>,
}

#[async_trait]
impl OutboxBatch for SqliteBatch {
    fn events(&self) -> &[OutboxEvent] {
        &self.events
    }

    async fn finish(self: Box<Self>, published: &[i64]) -> Result<(), sqlx::Error> {
        if !published.is_empty() {
            sqlx::query("DELETE FROM outbox WHERE id IN (SELECT value FROM json_each(?1))")
                .bind(Json(published))
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl OutboxStore for SqliteTaskStore {
    async fn claim(&self, limit: i64) -> Result<Option<Box<dyn OutboxBatch>>, sqlx::Error> {
        let Ok(claim) = self.relay.clone().try_lock_owned() else {
            return Ok(None);
        };
        let rows: Vec<(i64, Uuid, String, String, String)> = sqlx::query_as(
            "SELECT id, event_id, subject, payload, traceparent FROM outbox ORDER BY id LIMIT ?1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(Some(Box::new(SqliteBatch {
            pool: self.pool.clone(),
            events: rows.into_iter().map(OutboxEvent::from).collect(),
            _claim: claim,
        })))
    }

    async fn pending(&self) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(&self.pool)
            .await
    }
}
