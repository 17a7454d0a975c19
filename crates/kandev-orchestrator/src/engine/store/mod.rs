//! The orchestrator's tables as the engine uses them: `executions` (one row
//! per task: the queue, the run and its retries), `processed_events`
//! (envelopes already applied), `review_comments` (see [`ReviewStore`]),
//! `pending_prompts` (see [`FollowUpStore`]), `task_checks` (see
//! [`CheckStore`]), `tracker_links` and `tracker_issues` (see
//! [`TrackerStore`]).
//! Every statement the engine runs is here, named for what it does, behind
//! [`ExecutionStore`]; the decisions stay in the engine.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

mod checks;
mod executions;
mod followups;
mod pg;
mod review;
mod sqlite;
mod trackers;

pub use checks::{CheckList, CheckStore, ChecksPoll, TaskChecksRow};
pub use executions::{ExecDialect, SqlExecStore};
pub use followups::{FollowUpStore, PendingPrompt};
pub use pg::PgExecStore;
pub use review::{NewReviewComment, ReviewCommentRow, ReviewStore, Side};
pub use sqlite::SqliteExecStore;
pub use trackers::{TrackerIssueRow, TrackerLinkRow, TrackerStore};

use crate::domain::ExecState;

pub(crate) const SELECT_EXEC: &str = "SELECT task_id, state, agent_type, priority, queue_order, instance_id, \
     attempts, max_retries, last_error, acp_session_id, prompt, retry_at, updated_at, origin, \
     traceparent, manager_id, run_as FROM executions";

pub(crate) type Result<T> = std::result::Result<T, sqlx::Error>;

/// One row of `executions`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Execution {
    pub task_id: Uuid,
    #[sqlx(try_from = "String")]
    pub state: ExecState,
    pub agent_type: String,
    pub priority: i32,
    pub queue_order: Option<i64>,
    pub instance_id: Option<Uuid>,
    pub attempts: i32,
    pub max_retries: i32,
    pub last_error: String,
    pub acp_session_id: String,
    pub prompt: String,
    pub retry_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// `eligible` or `manual`.
    pub origin: String,
    /// The trace of what queued the run (W3C `traceparent`), or empty.
    pub traceparent: String,
    /// The agent manager the run was placed on ('' before the pool).
    pub manager_id: String,
    /// Whose secrets and agent home volume the run uses (a username; ''
    /// in rows from before the column).
    pub run_as: String,
}

impl Execution {
    pub fn state(&self) -> ExecState {
        self.state
    }
}

/// What queues a run (see [`ExecutionStore::enqueue`]).
#[derive(Debug)]
pub struct Enqueue<'a> {
    pub task_id: Uuid,
    pub agent_type: &'a str,
    pub priority: i32,
    pub max_retries: i32,
    pub prompt: &'a str,
    /// `eligible` or `manual`.
    pub origin: &'a str,
    /// The trace of what queued it, or empty.
    pub traceparent: &'a str,
    /// Whose secrets and agent home volume the run uses.
    pub run_as: &'a str,
}

/// What the engine keeps: its executions (the queue, the runs, their
/// retries), moved instances and applied events. [`SqlExecStore`] keeps
/// them in Postgres ([`PgExecStore`]) or a SQLite file
/// ([`SqliteExecStore`]), each statement written once; the engine holds a
/// `dyn ExecutionStore`, so the queue logic does not depend on where they
/// live. `tests/api/contract.rs` checks both against one contract.
#[async_trait]
pub trait ExecutionStore:
    ReviewStore + FollowUpStore + CheckStore + TrackerStore + Send + Sync + 'static
{
    async fn get(&self, task_id: Uuid) -> Result<Option<Execution>>;

    async fn get_many(&self, task_ids: &[Uuid]) -> Result<Vec<Execution>>;

    /// The queue, in launch order: highest priority first, then first come.
    async fn queued(&self) -> Result<Vec<Execution>>;

    /// Runs whose launch was under way.
    async fn launching(&self) -> Result<Vec<Execution>>;

    /// Launching or running runs per agent type.
    async fn active_by_type(&self) -> Result<Vec<(String, i64)>>;

    /// How many queued runs launch before one of `priority` queued at
    /// `queue_order`.
    async fn queued_ahead(&self, priority: i32, queue_order: Option<i64>) -> Result<i64>;

    /// Every queued task's position (1 launches next).
    async fn queue_positions(&self) -> Result<HashMap<Uuid, i64>>;

    /// The last stored feed `seq` of a task (0 when none).
    async fn last_seq(&self, task_id: Uuid) -> Result<i64>;

    /// The last stored feed `seq` of each of `task_ids` that has one.
    async fn last_seqs(&self, task_ids: &[Uuid]) -> Result<HashMap<Uuid, i64>>;

    /// Finished runs older than `retention_secs` whose clone is still there,
    /// oldest first.
    async fn clones_due(&self, retention_secs: f64, limit: i64) -> Result<Vec<Uuid>>;

    /// A run launched directly (no execution here) ended at `at`: the
    /// task's clone becomes due after the retention.
    async fn direct_run_ended(&self, task_id: Uuid, at: DateTime<Utc>) -> Result<()>;

    /// Tasks whose direct run ended more than `retention_secs` ago and whose
    /// clone is still there, oldest first.
    async fn direct_clones_due(&self, retention_secs: f64, limit: i64) -> Result<Vec<Uuid>>;

    /// The task's direct clone is gone, in use again, or its task deleted:
    /// it is no longer due.
    async fn forget_direct_clone(&self, task_id: Uuid) -> Result<()>;

    /// Puts the task in the queue, or refreshes its entry: a task already
    /// queued keeps its place; any other run starts over as a new one.
    async fn enqueue(&self, q: &Enqueue<'_>) -> Result<()>;

    /// A queued run's priority and retries, changed by an edit of its task.
    async fn update_queued(&self, task_id: Uuid, priority: i32, max_retries: i32) -> Result<()>;

    /// The prompt a queued run starts with.
    async fn set_prompt(&self, task_id: Uuid, prompt: &str) -> Result<()>;

    /// Whose secrets and agent home volume a queued run will use.
    async fn set_run_as(&self, task_id: Uuid, run_as: &str) -> Result<()>;

    /// Runs whose retry time has come go back to the end of the queue.
    async fn requeue_due_retries(&self) -> Result<()>;

    async fn set_state(&self, task_id: Uuid, state: ExecState) -> Result<()>;

    /// The run leaves the queue to launch, as attempt `attempts`.
    async fn begin_launch(&self, task_id: Uuid, attempts: i32) -> Result<()>;

    /// A launch dropped before it started: stopped, its attempt not counted.
    async fn drop_launch(&self, task_id: Uuid, attempts: i32) -> Result<()>;

    /// The agent manager `manager_id` took the launch: the run is
    /// `instance`'s.
    async fn launched(&self, task_id: Uuid, instance: Option<Uuid>, manager_id: &str)
    -> Result<()>;

    /// After a restart, a launch that was cut short adopts the instance the
    /// agent manager started for it.
    async fn adopt(&self, task_id: Uuid, instance: Uuid, manager_id: &str) -> Result<()>;

    /// Runs placed on a manager of the pool (launching or running).
    async fn placed_runs(&self) -> Result<Vec<Execution>>;

    /// The run's manager is gone: its instance is fenced off and the run
    /// goes back to the queue, its attempt not counted, as a run that was
    /// started (`manual`: launched whatever the task's state now).
    async fn move_run(&self, exec: &Execution) -> Result<()>;

    /// Whether `instance`'s run moved to another manager.
    async fn is_moved(&self, instance: Uuid) -> Result<bool>;

    /// After a restart, a launch that never reached the agent manager goes
    /// back to the queue, its attempt not counted.
    async fn requeue_interrupted(&self, task_id: Uuid) -> Result<()>;

    /// A failed run waits until `retry_at` for its next attempt.
    async fn retry_later(&self, task_id: Uuid, retry_at: DateTime<Utc>, error: &str) -> Result<()>;

    /// A run failed for good.
    async fn failed(&self, task_id: Uuid, error: &str) -> Result<()>;

    /// The ACP session the run's agent reported, for a later resume.
    async fn set_session(&self, task_id: Uuid, session: &str) -> Result<()>;

    /// The task's clone is gone.
    async fn workspace_removed(&self, task_id: Uuid) -> Result<()>;

    /// The task is gone, and its execution with it.
    async fn delete(&self, task_id: Uuid) -> Result<()>;

    /// Whether the envelope `id` was applied already.
    async fn seen(&self, id: Uuid) -> Result<bool>;

    async fn mark_seen(&self, id: Uuid) -> Result<()>;

    /// Forgets envelope ids applied more than a day ago; how many.
    async fn prune_seen(&self) -> Result<u64>;
}
