//! [`SqlTaskStore`]: the one [`TaskStore`] and [`OutboxStore`], for either
//! database ([`PgTaskStore`](super::PgTaskStore),
//! [`SqliteTaskStore`](super::SqliteTaskStore)). Each method runs the
//! statements of [`super::queries`]; what a change decides comes from the
//! functions of [`super`], what the database does differently from its
//! [`Dialect`].
//!
//! A change that places a task at the end of a column (adding it, moving
//! it to another state) first locks its board, so two tasks never take
//! the same place and a concurrent board deletion waits; then the task.
//! Locks are always taken board first, then task.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::Pool;
use tokio::sync::Notify;
use uuid::Uuid;

use super::{
    BoardRow, ChangeRecord, EventRow, OutboxBatch, OutboxStore, TaskRow, TaskStore, Update,
    check_version,
    dialect::{Dialect, Rows, Stmt, execute, fetch_one, fetch_optional, for_update},
    new_task, now, queries as q,
    sql::{SqlTaskStore, Tx},
    state_change,
    workflow::{no_column, without_prompt},
};
use crate::{
    domain::{
        Board, BoardPatch, NewBoard, NewTask, Page, Result, StateChange, Task, TaskError,
        TaskEventRecord, TaskPatch, TaskState,
    },
    workflow::{Column, WORKFLOW_ACTOR, column_of_state, default_columns},
};

/// Binds the fields a patch may change, last, in the order
/// [`q::INSERT_TASK`] and [`q::UPDATE_TASK`] number them.
fn bind_fields(stmt: Stmt, task: &Task) -> Stmt {
    stmt.bind(&task.title)
        .bind(&task.description)
        .bind(task.priority)
        .bind(&task.agent_type)
        .bind(&task.repository_url)
        .bind(&task.branch)
        .bind(&task.workspace_path)
        .bind(&task.metadata)
        .bind(task.max_retries)
        .bind(task.position)
        .bind(task.autostart)
}

fn no_task(id: Uuid) -> TaskError {
    TaskError::NotFound(format!("task {id}"))
}

fn no_board(id: Uuid) -> TaskError {
    TaskError::NotFound(format!("board {id}"))
}

impl<D: Dialect> SqlTaskStore<D> {
    /// The store over a pool of a migrated database.
    pub fn new(pool: Pool<D>, outbox_wake: Arc<Notify>) -> Self {
        SqlTaskStore {
            pool,
            outbox_wake,
            relay: Arc::default(),
        }
    }

    pub(super) fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    /// Runs a read outside any transaction.
    async fn read<T: Rows>(&self, stmt: Stmt) -> Result<Vec<T>, sqlx::Error> {
        D::run(&mut *self.pool.acquire().await?, stmt).await
    }

    async fn read_optional<T: Rows>(&self, stmt: Stmt) -> Result<Option<T>, sqlx::Error> {
        fetch_optional::<D, _>(&mut *self.pool.acquire().await?, stmt).await
    }

    async fn read_one<T: Rows>(&self, stmt: Stmt) -> Result<T, sqlx::Error> {
        fetch_one::<D, _>(&mut *self.pool.acquire().await?, stmt).await
    }

    /// The task, locked for the change until `tx` ends.
    pub(super) async fn lock_task(tx: &mut Tx<D>, id: Uuid) -> Result<Task> {
        let stmt = Stmt::new(for_update::<D>(q::TASK)).bind(id);
        let row: Option<TaskRow> = fetch_optional::<D, _>(tx, stmt).await?;
        row.ok_or_else(|| no_task(id))?.try_into()
    }

    /// Locks the board: who holds it places tasks at column ends.
    pub(super) async fn lock_board(tx: &mut Tx<D>, id: Uuid) -> Result<()> {
        let stmt = Stmt::new(for_update::<D>(q::BOARD_ID)).bind(id);
        let found: Option<(Uuid,)> = fetch_optional::<D, _>(tx, stmt).await?;
        found.map(drop).ok_or_else(|| no_board(id))
    }

    pub(super) async fn next_position(
        tx: &mut Tx<D>,
        board_id: Uuid,
        state: TaskState,
    ) -> Result<i64> {
        let stmt = Stmt::new(q::LAST_POSITION)
            .bind(board_id)
            .bind(state.as_str());
        let (max,): (Option<i64>,) = fetch_one::<D, _>(tx, stmt).await?;
        Ok(max.unwrap_or(0) + 1)
    }

    /// Writes the audit row and the outbox event of one change.
    pub(super) async fn record(tx: &mut Tx<D>, change: ChangeRecord) -> Result<()> {
        let at = now();
        let event = Stmt::new(q::INSERT_EVENT)
            .bind(change.id)
            .bind(change.task_id)
            .bind(change.board_id)
            .bind(change.kind)
            .bind(change.actor)
            .bind(change.old_value)
            .bind(change.new_value)
            .bind(at);
        execute::<D>(tx, event).await?;
        let outbox = Stmt::new(q::INSERT_OUTBOX)
            .bind(change.event_id)
            .bind(change.subject)
            .bind(change.payload)
            .bind(change.traceparent)
            .bind(at);
        Ok(execute::<D>(tx, outbox).await?)
    }

    /// Writes `task`'s row with `stmt` and its change's records, and commits.
    async fn write_task(
        &self,
        mut tx: Tx<D>,
        stmt: Stmt,
        change: impl FnOnce(&Task) -> ChangeRecord + Send,
    ) -> Result<Task> {
        let row: TaskRow = fetch_one::<D, _>(&mut tx, stmt).await?;
        let task = Task::try_from(row)?;
        Self::record(&mut tx, change(&task)).await?;
        self.commit(tx).await?;
        Ok(task)
    }

    /// The board of task `id`, read before locking the board.
    async fn board_of_task(tx: &mut Tx<D>, id: Uuid) -> Result<Uuid> {
        let board: Option<(Uuid,)> =
            fetch_optional::<D, _>(tx, Stmt::new(q::TASK_BOARD).bind(id)).await?;
        board.map(|(b,)| b).ok_or_else(|| no_task(id))
    }

    /// Task `id` locked for a change until `tx` ends, its board locked
    /// first (see the module's note; a task never changes board).
    async fn lock_board_and_task(tx: &mut Tx<D>, id: Uuid) -> Result<Task> {
        let board_id = Self::board_of_task(tx, id).await?;
        Self::lock_board(tx, board_id).await?;
        Self::lock_task(tx, id).await
    }

    pub(super) async fn commit(&self, tx: Tx<D>) -> Result<()> {
        tx.commit().await?;
        self.outbox_wake.notify_one();
        Ok(())
    }
}

/// Whether a run that finished in `old`'s column goes straight into
/// `next` (see [`TaskStore::change_state`]).
fn finishes_in(old: &Task, next: &Column) -> bool {
    !next.is_automated() && next.wip_limit.is_none() && old.state.can_change_to(next.state)
}

#[async_trait]
impl<D: Dialect> TaskStore for SqlTaskStore<D> {
    #[tracing::instrument(skip_all)]
    async fn create_board(&self, new: NewBoard) -> Result<Board> {
        let mut tx = D::begin(&self.pool).await?;
        let stmt = Stmt::new(q::INSERT_BOARD)
            .bind(Uuid::now_v7())
            .bind(new.name.as_str())
            .bind(new.description)
            .bind(new.owner)
            .bind(now());
        let row: BoardRow = fetch_one::<D, _>(&mut tx, stmt).await?;
        // A new board's workflow is the default one: today's board.
        Self::write_columns(&mut tx, &default_columns(row.id)).await?;
        tx.commit().await?;
        Ok(row.into())
    }

    #[tracing::instrument(skip_all)]
    async fn get_board(&self, id: Uuid) -> Result<Board> {
        let row: Option<BoardRow> = self.read_optional(Stmt::new(q::BOARD).bind(id)).await?;
        row.map(Board::from).ok_or_else(|| no_board(id))
    }

    #[tracing::instrument(skip_all)]
    async fn list_boards(&self, owner: Option<String>, page: Page) -> Result<(Vec<Board>, String)> {
        let stmt = Stmt::new(q::BOARDS)
            .bind(owner)
            .bind(page.limit)
            .bind(page.offset);
        let rows: Vec<BoardRow> = self.read(stmt).await?;
        let token = page.next_token(rows.len());
        Ok((rows.into_iter().map(Board::from).collect(), token))
    }

    #[tracing::instrument(skip_all)]
    async fn update_board(&self, id: Uuid, patch: BoardPatch) -> Result<Board> {
        let stmt = Stmt::new(q::UPDATE_BOARD)
            .bind(id)
            .bind(patch.name.map(|n| n.as_str().to_string()))
            .bind(patch.description)
            .bind(now());
        let row: Option<BoardRow> = self.read_optional(stmt).await?;
        row.map(Board::from).ok_or_else(|| no_board(id))
    }

    #[tracing::instrument(skip_all)]
    async fn delete_board(&self, id: Uuid, actor: String) -> Result<()> {
        let mut tx = D::begin(&self.pool).await?;
        Self::lock_board(&mut tx, id).await?;
        let stmt = Stmt::new(for_update::<D>(q::BOARD_TASKS)).bind(id);
        let rows: Vec<TaskRow> = D::run(&mut tx, stmt).await?;
        for row in rows {
            let deleted = ChangeRecord::deleted(&Task::try_from(row)?, &actor);
            Self::record(&mut tx, deleted).await?;
        }
        execute::<D>(&mut tx, Stmt::new(q::DELETE_BOARD).bind(id)).await?;
        self.commit(tx).await
    }

    #[tracing::instrument(skip_all)]
    async fn create_task(&self, new: NewTask) -> Result<Task> {
        let mut tx = D::begin(&self.pool).await?;
        Self::lock_board(&mut tx, new.board_id).await?;
        Self::check_parent(&mut tx, &new).await?;
        let position = Self::next_position(&mut tx, new.board_id, new.state).await?;
        let columns = Self::columns(&mut tx, new.board_id).await?;
        let column = column_of_state(&columns, new.state).map(|c| c.id);
        let task = new_task(new, position, now());
        let stmt = Stmt::new(q::INSERT_TASK)
            .bind(task.id)
            .bind(task.board_id)
            .bind(task.state.as_str())
            .bind(&task.created_by)
            .bind(task.version)
            .bind(task.created_at)
            .bind(column)
            .bind(task.parent_id);
        let stmt = bind_fields(stmt, &task);
        let task = self.write_task(tx, stmt, ChangeRecord::created).await?;
        self.linked_one(task).await
    }

    #[tracing::instrument(skip_all)]
    async fn get_task(&self, id: Uuid) -> Result<Task> {
        let row: Option<TaskRow> = self.read_optional(Stmt::new(q::TASK).bind(id)).await?;
        self.linked_one(row.ok_or_else(|| no_task(id))?.try_into()?)
            .await
    }

    #[tracing::instrument(skip_all)]
    async fn list_tasks(
        &self,
        board_id: Uuid,
        states: Vec<TaskState>,
        page: Page,
    ) -> Result<(Vec<Task>, String)> {
        self.get_board(board_id).await?;
        // No states asked for: all of them.
        let states = if states.is_empty() {
            TaskState::ALL.to_vec()
        } else {
            states
        };
        let mut stmt = Stmt::new(q::tasks_of_board(states.len()))
            .bind(board_id)
            .bind(page.limit)
            .bind(page.offset);
        for state in states {
            stmt = stmt.bind(state.as_str());
        }
        let rows: Vec<TaskRow> = self.read(stmt).await?;
        let token = page.next_token(rows.len());
        let tasks = rows
            .into_iter()
            .map(Task::try_from)
            .collect::<Result<_>>()?;
        Ok((self.linked(tasks).await?, token))
    }

    #[tracing::instrument(skip_all)]
    async fn update_task(&self, id: Uuid, patch: TaskPatch) -> Result<Task> {
        let mut tx = D::begin(&self.pool).await?;
        let old = Self::lock_task(&mut tx, id).await?;
        check_version(&old, patch.expected_version)?;
        let actor = patch.actor.clone();
        let Some(Update { task: new, diff }) = Update::of(&old, patch) else {
            // Nothing to change: no new version, no event.
            return self.linked_one(old).await;
        };
        let stmt = Stmt::new(q::UPDATE_TASK).bind(id).bind(now());
        let stmt = bind_fields(stmt, &new);
        let updated = |task: &Task| ChangeRecord::updated(task, &actor, diff);
        let task = self.write_task(tx, stmt, updated).await?;
        self.linked_one(task).await
    }

    #[tracing::instrument(skip_all)]
    async fn change_state(&self, id: Uuid, change: StateChange) -> Result<Task> {
        let mut tx = D::begin(&self.pool).await?;
        let old = Self::lock_board_and_task(&mut tx, id).await?;
        let mut change = change;
        let mut metadata = state_change(&old, &change)?;
        let (mut column_id, mut queued, mut enter) = Self::follow(&mut tx, &old, change.to).await?;
        if let Some(next) = enter.take_if(|n| finishes_in(&old, n)) {
            // A finished run's next step is a column without automation or
            // limit: the change goes straight to its state (IN_PROGRESS →
            // REVIEW, where COMPLETED → REVIEW is no transition).
            change.to = next.state;
            (column_id, queued) = (Some(next.id), false);
        }
        if column_id != old.column_id {
            without_prompt(&mut metadata);
        }
        let position = Self::next_position(&mut tx, old.board_id, change.to).await?;
        let stmt = Stmt::new(q::PLACE_TASK)
            .bind(id)
            .bind(change.to.as_str())
            .bind(position)
            .bind(&metadata)
            .bind(&old.agent_type)
            .bind(old.autostart)
            .bind(column_id)
            .bind(queued)
            .bind(now());
        let row: TaskRow = fetch_one::<D, _>(&mut tx, stmt).await?;
        let mut task = Task::try_from(row)?;
        Self::record(
            &mut tx,
            ChangeRecord::state_changed(&task, old.state, &change),
        )
        .await?;
        self.left(&mut tx, &old, &task).await?;
        let waiting = Self::dependents(&mut tx, id).await?;
        Self::recheck_dependents(&mut tx, &waiting).await?;
        if let Some(next) = enter {
            // The run of an automated column ended: on to its next step.
            task = self
                .enter(&mut tx, &task, &next, WORKFLOW_ACTOR, false)
                .await?;
        }
        self.commit(tx).await?;
        self.linked_one(task).await
    }

    #[tracing::instrument(skip_all)]
    async fn delete_task(
        &self,
        id: Uuid,
        expected_version: Option<i64>,
        actor: String,
    ) -> Result<()> {
        let mut tx = D::begin(&self.pool).await?;
        let task = Self::lock_board_and_task(&mut tx, id).await?;
        let board_id = task.board_id;
        check_version(&task, expected_version)?;
        // Its links go with it: who waited for it only may go free.
        let waiting = Self::dependents(&mut tx, id).await?;
        execute::<D>(&mut tx, Stmt::new(q::DELETE_TASK).bind(id)).await?;
        Self::record(&mut tx, ChangeRecord::deleted(&task, &actor)).await?;
        Self::recheck_dependents(&mut tx, &waiting).await?;
        if let Some(column) = task.column_id.filter(|_| !task.queued) {
            // Its slot frees: the column's queue moves up.
            self.fill(&mut tx, board_id, column).await?;
        }
        self.commit(tx).await
    }

    #[tracing::instrument(skip_all)]
    async fn list_events(
        &self,
        task_id: Uuid,
        page: Page,
    ) -> Result<(Vec<TaskEventRecord>, String)> {
        let stmt = Stmt::new(q::EVENTS)
            .bind(task_id)
            .bind(page.limit)
            .bind(page.offset);
        let rows: Vec<EventRow> = self.read(stmt).await?;
        if rows.is_empty() && page.offset == 0 {
            // The history outlives the task; no history means no such task.
            return Err(no_task(task_id));
        }
        let token = page.next_token(rows.len());
        let events = rows.into_iter().map(TaskEventRecord::from).collect();
        Ok((events, token))
    }

    #[tracing::instrument(skip_all)]
    async fn list_columns(&self, board_id: Uuid) -> Result<Vec<Column>> {
        self.get_board(board_id).await?;
        Self::columns(&mut *self.pool.acquire().await?, board_id).await
    }

    #[tracing::instrument(skip_all)]
    async fn put_columns(&self, board_id: Uuid, columns: Vec<Column>) -> Result<Vec<Column>> {
        let mut tx = D::begin(&self.pool).await?;
        Self::lock_board(&mut tx, board_id).await?;
        Self::check_column_ids(&mut tx, board_id, &columns).await?;
        let old = Self::columns(&mut tx, board_id).await?;
        for gone in old.iter().filter(|o| !columns.iter().any(|c| c.id == o.id)) {
            execute::<D>(
                &mut tx,
                Stmt::new(q::UNPLACE_COLUMN).bind(gone.id).bind(false),
            )
            .await?;
            execute::<D>(&mut tx, Stmt::new(q::DELETE_COLUMN).bind(gone.id)).await?;
        }
        Self::write_columns(&mut tx, &columns).await?;
        execute::<D>(
            &mut tx,
            Stmt::new(q::PLACE_UNPLACED).bind(board_id).bind(false),
        )
        .await?;
        for c in columns.iter().filter(|c| c.wip_limit.is_some()) {
            self.fill(&mut tx, board_id, c.id).await?;
        }
        let saved = Self::columns(&mut tx, board_id).await?;
        self.commit(tx).await?;
        Ok(saved)
    }

    #[tracing::instrument(skip_all)]
    async fn move_task(
        &self,
        id: Uuid,
        column_id: Uuid,
        expected_version: Option<i64>,
        actor: String,
    ) -> Result<Task> {
        let mut tx = D::begin(&self.pool).await?;
        let old = Self::lock_board_and_task(&mut tx, id).await?;
        let board_id = old.board_id;
        check_version(&old, expected_version)?;
        let columns = Self::columns(&mut tx, board_id).await?;
        let column = columns
            .into_iter()
            .find(|c| c.id == column_id)
            .ok_or_else(|| no_column(column_id))?;
        if old.column_id == Some(column_id) && !old.queued {
            return self.linked_one(old).await;
        }
        let task = self.enter(&mut tx, &old, &column, &actor, true).await?;
        self.commit(tx).await?;
        self.linked_one(task).await
    }

    #[tracing::instrument(skip_all)]
    async fn put_blockers(
        &self,
        id: Uuid,
        blockers: Vec<Uuid>,
        expected_version: Option<i64>,
        actor: String,
    ) -> Result<Task> {
        let mut tx = D::begin(&self.pool).await?;
        let old = Self::lock_board_and_task(&mut tx, id).await?;
        let task = self
            .write_blockers(&mut tx, &old, &blockers, expected_version, &actor)
            .await?;
        self.commit(tx).await?;
        self.linked_one(task).await
    }

    #[tracing::instrument(skip_all)]
    async fn ping(&self) -> Result<()> {
        Ok(execute::<D>(&mut *self.pool.acquire().await?, Stmt::new(q::PING)).await?)
    }

    #[tracing::instrument(skip_all)]
    async fn close(&self) {
        self.pool.close().await;
    }
}

#[async_trait]
impl<D: Dialect> OutboxStore for SqlTaskStore<D> {
    #[tracing::instrument(skip_all)]
    async fn claim(&self, limit: i64) -> Result<Option<Box<dyn OutboxBatch>>, sqlx::Error> {
        let Ok(claim) = self.relay.clone().try_lock_owned() else {
            return Ok(None);
        };
        D::claim_outbox(&self.pool, limit, claim).await
    }

    #[tracing::instrument(skip_all)]
    async fn pending(&self) -> Result<i64, sqlx::Error> {
        let (count,): (i64,) = self.read_one(Stmt::new(q::OUTBOX_PENDING)).await?;
        Ok(count)
    }
}
