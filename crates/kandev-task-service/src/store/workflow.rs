//! The workflow's writes (see [`crate::workflow`]): a board's columns, a
//! card entering a column (its automation, its WIP limit), and a column's
//! queue moving up when a slot frees. Every one runs in the transaction of
//! the change that causes it, with the board locked, so two cards never
//! take the last slot of a column and a queue never skips a card.

use serde_json::Value;
use uuid::Uuid;

use super::{
    ChangeRecord, TaskRow,
    dialect::{Dialect, Stmt, execute, fetch_one, fetch_optional, for_update},
    diff, now, queries as q, snapshot,
    sql::{SqlTaskStore, Tx},
};
use crate::{
    domain::{Result, StateChange, Task, TaskError, TaskState, parse_state},
    workflow::{
        Column, WORKFLOW_ACTOR, WORKFLOW_NEW_SESSION, WORKFLOW_PROFILE, WORKFLOW_PROMPT,
        render_prompt,
    },
};

#[derive(sqlx::FromRow)]
pub(crate) struct ColumnRow {
    id: Uuid,
    board_id: Uuid,
    name: String,
    position: i32,
    colour: String,
    state: String,
    wip_limit: Option<i32>,
    agent_type: Option<String>,
    prompt_template: String,
    on_success: Option<Uuid>,
    on_failure: Option<Uuid>,
    new_session: bool,
    profile_id: Option<Uuid>,
}

impl TryFrom<ColumnRow> for Column {
    type Error = TaskError;

    fn try_from(r: ColumnRow) -> Result<Self> {
        Ok(Column {
            id: r.id,
            board_id: r.board_id,
            name: r.name,
            position: r.position,
            colour: r.colour,
            state: parse_state(&r.state)?,
            wip_limit: r.wip_limit,
            agent_type: r.agent_type,
            prompt_template: r.prompt_template,
            on_success: r.on_success,
            on_failure: r.on_failure,
            new_session: r.new_session,
            profile_id: r.profile_id,
        })
    }
}

pub(crate) fn no_column(id: Uuid) -> TaskError {
    TaskError::NotFound(format!("column {id}"))
}

/// Why a card moves: the reason of its event.
fn entered(column: &Column, queued: bool) -> String {
    if queued {
        format!("queued for column {} (WIP limit reached)", column.name)
    } else {
        format!("entered column {}", column.name)
    }
}

impl<D: Dialect> SqlTaskStore<D> {
    /// The board's columns, left to right.
    pub(super) async fn columns(tx: &mut D::Connection, board_id: Uuid) -> Result<Vec<Column>> {
        let rows: Vec<ColumnRow> = D::run(tx, Stmt::new(q::COLUMNS).bind(board_id)).await?;
        rows.into_iter().map(Column::try_from).collect()
    }

    /// Writes `columns` (new ones added, existing ones changed).
    pub(super) async fn write_columns(tx: &mut Tx<D>, columns: &[Column]) -> Result<()> {
        for c in columns {
            let stmt = Stmt::new(q::UPSERT_COLUMN)
                .bind(c.id)
                .bind(c.board_id)
                .bind(&c.name)
                .bind(c.position)
                .bind(&c.colour)
                .bind(c.state.as_str())
                .bind(c.wip_limit)
                .bind(&c.agent_type)
                .bind(&c.prompt_template)
                .bind(c.on_success)
                .bind(c.on_failure)
                .bind(c.new_session)
                .bind(c.profile_id);
            execute::<D>(tx, stmt).await?;
        }
        Ok(())
    }

    /// Refuses a new column id that another board's column has.
    pub(super) async fn check_column_ids(
        tx: &mut Tx<D>,
        board_id: Uuid,
        columns: &[Column],
    ) -> Result<()> {
        for c in columns {
            let stmt = Stmt::new(q::COLUMN_BOARD).bind(c.id);
            let owner: Option<(Uuid,)> = fetch_optional::<D, _>(tx, stmt).await?;
            if owner.is_some_and(|(b,)| b != board_id) {
                return Err(TaskError::InvalidArgument(format!(
                    "column id {} belongs to another board",
                    c.id
                )));
            }
        }
        Ok(())
    }

    /// Writes `new` (a move of `old` across columns) and its event: a state
    /// change when the state changes, else an update.
    pub(super) async fn write_place(
        &self,
        tx: &mut Tx<D>,
        old: &Task,
        new: Task,
        actor: &str,
        reason: &str,
    ) -> Result<Task> {
        let position = if new.state == old.state {
            old.position
        } else {
            Self::next_position(tx, old.board_id, new.state).await?
        };
        let stmt = Stmt::new(q::PLACE_TASK)
            .bind(old.id)
            .bind(new.state.as_str())
            .bind(position)
            .bind(&new.metadata)
            .bind(&new.agent_type)
            .bind(new.autostart)
            .bind(new.column_id)
            .bind(new.queued)
            .bind(now());
        let row: TaskRow = fetch_one::<D, _>(tx, stmt).await?;
        let task = Task::try_from(row)?;
        let record = if task.state == old.state {
            ChangeRecord::updated(&task, actor, diff(&snapshot(old), &snapshot(&task)))
        } else {
            let change = StateChange {
                to: task.state,
                expected_version: None,
                actor: actor.to_string(),
                reason: reason.to_string(),
                metadata_patch: None,
            };
            ChangeRecord::state_changed(&task, old.state, &change)
        };
        Self::record(tx, record).await?;
        if task.state != old.state {
            let waiting = Self::dependents(tx, task.id).await?;
            Self::recheck_dependents(tx, &waiting).await?;
        }
        Ok(task)
    }

    /// `old` enters `column`: queued when the column is full; otherwise an
    /// automated column starts its run (TODO, its agent type, autostart and
    /// the rendered prompt), any other gives the card its state.
    pub(super) async fn enter(
        &self,
        tx: &mut Tx<D>,
        old: &Task,
        column: &Column,
        actor: &str,
        strict: bool,
    ) -> Result<Task> {
        let stmt = Stmt::new(q::COLUMN_OCCUPANCY).bind(column.id).bind(old.id);
        let (occupied,): (i64,) = fetch_one::<D, _>(tx, stmt).await?;
        let full = column
            .wip_limit
            .is_some_and(|limit| occupied >= i64::from(limit));
        let mut new = old.clone();
        new.column_id = Some(column.id);
        new.queued = full;
        without_prompt(&mut new.metadata);
        match (&column.agent_type, full) {
            (Some(_), true) => {
                new.state = TaskState::Todo;
                new.autostart = false;
            }
            (Some(agent), false) => {
                new.state = TaskState::Todo;
                new.agent_type = Some(agent.clone());
                new.autostart = true;
                let prompt = render_prompt(&column.prompt_template, old.into());
                new.metadata
                    .insert(WORKFLOW_PROMPT.into(), Value::String(prompt));
                if let Some(profile) = column.profile_id {
                    new.metadata
                        .insert(WORKFLOW_PROFILE.into(), Value::String(profile.to_string()));
                }
                if column.new_session {
                    new.metadata
                        .insert(WORKFLOW_NEW_SESSION.into(), Value::Bool(true));
                }
            }
            (None, true) => {}
            (None, false) => new.state = column.state,
        }
        if new.state != old.state && !old.state.can_change_to(new.state) {
            if strict {
                return Err(TaskError::ForbiddenTransition {
                    from: old.state,
                    to: new.state,
                });
            }
            // A move the workflow makes by itself never fails the change
            // that caused it: the card goes to the column as it is.
            new.state = old.state;
        }
        let reason = entered(column, full);
        let task = self.write_place(tx, old, new, actor, &reason).await?;
        self.left(tx, old, &task).await?;
        Ok(task)
    }

    /// After `old` became `new`: when it gave up a slot of a column with a
    /// WIP limit, that column's queue moves up.
    pub(super) async fn left(&self, tx: &mut Tx<D>, old: &Task, new: &Task) -> Result<()> {
        let Some(from) = old.column_id else {
            return Ok(());
        };
        if old.queued || new.column_id == Some(from) {
            return Ok(());
        }
        self.fill(tx, old.board_id, from).await
    }

    /// Lets the queue of column `id` in while it has free slots.
    pub(super) async fn fill(&self, tx: &mut Tx<D>, board_id: Uuid, id: Uuid) -> Result<()> {
        let columns = Self::columns(tx, board_id).await?;
        let Some(column) = columns.iter().find(|c| c.id == id) else {
            return Ok(());
        };
        if column.wip_limit.is_none() {
            return Ok(());
        }
        loop {
            let stmt = Stmt::new(for_update::<D>(q::QUEUE_HEAD)).bind(id);
            let head: Option<TaskRow> = fetch_optional::<D, _>(tx, stmt).await?;
            let Some(head) = head else {
                return Ok(());
            };
            let head = Task::try_from(head)?;
            // Boxed: entering may free no slot, so this recursion is one deep.
            let task = Box::pin(self.enter(tx, &head, column, WORKFLOW_ACTOR, false)).await?;
            if task.queued {
                return Ok(());
            }
        }
    }

    /// The column a state change places a task in, and whether it then
    /// enters another one (see [`crate::workflow::follow`]).
    pub(super) async fn follow(
        tx: &mut Tx<D>,
        old: &Task,
        to: TaskState,
    ) -> Result<(Option<Uuid>, bool, Option<Column>)> {
        use crate::workflow::{Next, follow};
        let columns = Self::columns(tx, old.board_id).await?;
        Ok(match follow(&columns, old.column_id, old.state, to) {
            Next::Stay => (old.column_id, old.queued, None),
            Next::Place(id) => (Some(id), false, None),
            Next::Enter(id) => {
                let next = columns.into_iter().find(|c| c.id == id);
                (old.column_id, old.queued, next)
            }
        })
    }
}

/// The metadata of a card that is no longer in an automated column.
pub(super) fn without_prompt(metadata: &mut serde_json::Map<String, Value>) {
    metadata.remove(WORKFLOW_PROMPT);
    metadata.remove(WORKFLOW_NEW_SESSION);
    metadata.remove(WORKFLOW_PROFILE);
}
