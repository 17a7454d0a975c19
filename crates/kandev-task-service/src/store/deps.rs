//! The writes and reads of subtasks and "blocked by" links (see
//! [`crate::deps`]): a subtask's parent checked at creation, a task's
//! blockers replaced, and the `blocked` flag of the tasks waiting for a task
//! kept in the transaction of the change that moves it. Every one runs with
//! the board locked (all linked tasks are on one board), board then task.

use std::collections::{HashMap, HashSet};

use serde_json::json;
use uuid::Uuid;

use super::{
    ChangeRecord, Diff, TaskRow, check_version,
    dialect::{Dialect, Stmt, execute, fetch_one, fetch_optional},
    now, queries as q,
    sql::{SqlTaskStore, Tx},
};
use crate::{
    deps::{Blocker, check_blockers, cycle_error, find_cycle},
    domain::{NewTask, Result, Task, TaskError, TaskState, parse_state},
    workflow::WORKFLOW_ACTOR,
};

fn invalid(msg: String) -> TaskError {
    TaskError::InvalidArgument(msg)
}

impl<D: Dialect> SqlTaskStore<D> {
    /// Checks the parent of a new task: a task of the same board that is
    /// itself no subtask (one level).
    pub(super) async fn check_parent(tx: &mut Tx<D>, new: &NewTask) -> Result<()> {
        let Some(parent_id) = new.parent_id else {
            return Ok(());
        };
        let parent = Self::read_task(tx, parent_id)
            .await?
            .ok_or_else(|| TaskError::NotFound(format!("parent task {parent_id}")))?;
        if parent.board_id != new.board_id {
            return Err(invalid(format!(
                "parent task {parent_id} is not a task of this board"
            )));
        }
        if let Some(grandparent) = parent.parent_id {
            return Err(invalid(format!(
                "parent task {parent_id} is a subtask of {grandparent}: subtasks have no \
                 subtasks (one level)"
            )));
        }
        Ok(())
    }

    async fn read_task(tx: &mut Tx<D>, id: Uuid) -> Result<Option<Task>> {
        let row: Option<TaskRow> = fetch_optional::<D, _>(tx, Stmt::new(q::TASK).bind(id)).await?;
        row.map(Task::try_from).transpose()
    }

    /// Replaces the blockers of task `id` (the board is locked by the
    /// caller, the task is `old`): each a task of its board, no cycle.
    pub(super) async fn write_blockers(
        &self,
        tx: &mut Tx<D>,
        old: &Task,
        blockers: &[Uuid],
        expected_version: Option<i64>,
        actor: &str,
    ) -> Result<Task> {
        check_version(old, expected_version)?;
        check_blockers(old.id, blockers)?;
        for id in blockers {
            let blocker = Self::read_task(tx, *id)
                .await?
                .ok_or_else(|| TaskError::NotFound(format!("blocker task {id}")))?;
            if blocker.board_id != old.board_id {
                return Err(invalid(format!("blocker {id} is not a task of this board")));
            }
        }
        let links: Vec<(Uuid, Uuid)> =
            D::run(tx, Stmt::new(q::BOARD_LINKS).bind(old.board_id)).await?;
        if let Some(cycle) = find_cycle(old.id, blockers, &links) {
            let mut titles = HashMap::new();
            for id in cycle.iter().collect::<HashSet<_>>() {
                if let Some(t) = Self::read_task(tx, *id).await? {
                    titles.insert(*id, t.title);
                }
            }
            return Err(cycle_error(&cycle, &titles));
        }
        let before: Vec<Uuid> = links
            .iter()
            .filter(|(t, _)| *t == old.id)
            .map(|(_, b)| *b)
            .collect();
        if before.iter().collect::<HashSet<_>>() == blockers.iter().collect::<HashSet<_>>() {
            return Ok(old.clone());
        }
        execute::<D>(tx, Stmt::new(q::DELETE_BLOCKERS).bind(old.id)).await?;
        for id in blockers {
            let stmt = Stmt::new(q::INSERT_BLOCKER).bind(old.id).bind(*id);
            execute::<D>(tx, stmt).await?;
        }
        let blocked = Self::holds(tx, old.id).await?;
        let task = Self::set_blocked(tx, old.id, blocked).await?;
        let diff = Diff {
            changed: [
                Some("blocked_by"),
                (old.blocked != blocked).then_some("blocked"),
            ]
            .into_iter()
            .flatten()
            .map(String::from)
            .collect(),
            before: json!({"blocked_by": before, "blocked": old.blocked}),
            after: json!({"blocked_by": blockers, "blocked": blocked}),
        };
        Self::record(tx, ChangeRecord::updated(&task, actor, diff)).await?;
        Ok(task)
    }

    /// Whether a blocker of task `id` is not COMPLETED.
    async fn holds(tx: &mut Tx<D>, id: Uuid) -> Result<bool> {
        let stmt = Stmt::new(q::HOLDING_BLOCKERS)
            .bind(id)
            .bind(TaskState::Completed.as_str());
        let (holding,): (i64,) = fetch_one::<D, _>(tx, stmt).await?;
        Ok(holding > 0)
    }

    async fn set_blocked(tx: &mut Tx<D>, id: Uuid, blocked: bool) -> Result<Task> {
        let stmt = Stmt::new(q::SET_BLOCKED).bind(id).bind(blocked).bind(now());
        let row: TaskRow = fetch_one::<D, _>(tx, stmt).await?;
        row.try_into()
    }

    /// The tasks waiting for task `id`.
    pub(super) async fn dependents(tx: &mut Tx<D>, id: Uuid) -> Result<Vec<Uuid>> {
        let rows: Vec<(Uuid,)> = D::run(tx, Stmt::new(q::DEPENDENTS).bind(id)).await?;
        Ok(rows.into_iter().map(|(t,)| t).collect())
    }

    /// After task `blocker` changed state (or went): each task waiting for
    /// it that is now blocked or free again says so, as an update by the
    /// workflow; a freed task with `autostart` is then started as any.
    pub(super) async fn recheck_dependents(tx: &mut Tx<D>, waiting: &[Uuid]) -> Result<()> {
        for id in waiting {
            let old = Self::lock_task(tx, *id).await?;
            let blocked = Self::holds(tx, *id).await?;
            if blocked == old.blocked {
                continue;
            }
            let task = Self::set_blocked(tx, *id, blocked).await?;
            let diff = Diff {
                changed: vec!["blocked".into()],
                before: json!({"blocked": old.blocked}),
                after: json!({"blocked": blocked}),
            };
            Self::record(tx, ChangeRecord::updated(&task, WORKFLOW_ACTOR, diff)).await?;
        }
        Ok(())
    }

    /// `tasks` with their blockers and subtasks filled in.
    pub(super) async fn linked(&self, mut tasks: Vec<Task>) -> Result<Vec<Task>> {
        let boards: HashSet<Uuid> = tasks.iter().map(|t| t.board_id).collect();
        let mut blockers: HashMap<Uuid, Vec<Blocker>> = HashMap::new();
        let mut subtasks: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
        let mut conn = self.pool().acquire().await?;
        for board in boards {
            let rows: Vec<(Uuid, Uuid, String, String)> =
                D::run(&mut conn, Stmt::new(q::BOARD_BLOCKERS).bind(board)).await?;
            for (task, id, title, state) in rows {
                let state = parse_state(&state)?;
                blockers
                    .entry(task)
                    .or_default()
                    .push(Blocker { id, title, state });
            }
            let rows: Vec<(Uuid, Uuid)> =
                D::run(&mut conn, Stmt::new(q::BOARD_SUBTASKS).bind(board)).await?;
            for (parent, id) in rows {
                subtasks.entry(parent).or_default().push(id);
            }
        }
        for t in &mut tasks {
            t.blockers = blockers.remove(&t.id).unwrap_or_default();
            t.subtasks = subtasks.remove(&t.id).unwrap_or_default();
        }
        Ok(tasks)
    }

    /// One task with its blockers and subtasks filled in.
    pub(super) async fn linked_one(&self, task: Task) -> Result<Task> {
        let mut tasks = self.linked(vec![task]).await?;
        Ok(tasks.remove(0))
    }
}
