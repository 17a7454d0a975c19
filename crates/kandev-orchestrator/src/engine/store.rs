//! The orchestrator's tables as the engine uses them: `executions` (one row
//! per task: the queue, the run and its retries) and `processed_events`
//! (envelopes already applied). Every statement the engine runs is here,
//! named for what it does, behind [`ExecutionStore`]; the decisions stay in
//! the engine.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{domain::ExecState, feed};

const SELECT_EXEC: &str = "SELECT task_id, state, agent_type, priority, queue_order, instance_id, \
     attempts, max_retries, last_error, acp_session_id, prompt, retry_at, updated_at, origin, \
     traceparent, manager_id FROM executions";

type Result<T> = std::result::Result<T, sqlx::Error>;

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
}

/// The orchestrator's executions and processed events, in Postgres.
#[derive(Debug, Clone)]
pub struct PgExecStore {
    pool: PgPool,
}

/// What the engine keeps: its executions (the queue, the runs, their
/// retries), moved instances and applied events. [`PgExecStore`] keeps
/// them in Postgres; the engine holds a `dyn ExecutionStore`, so the queue
/// logic does not depend on where they live (a one-binary mode keeps them
/// in SQLite).
#[async_trait]
pub trait ExecutionStore: Send + Sync + 'static {
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

    /// Puts the task in the queue, or refreshes its entry: a task already
    /// queued keeps its place; any other run starts over as a new one.
    async fn enqueue(&self, q: &Enqueue<'_>) -> Result<()>;

    /// A queued run's priority and retries, changed by an edit of its task.
    async fn update_queued(&self, task_id: Uuid, priority: i32, max_retries: i32) -> Result<()>;

    /// The prompt a queued run starts with.
    async fn set_prompt(&self, task_id: Uuid, prompt: &str) -> Result<()>;

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

impl PgExecStore {
    pub fn new(pool: PgPool) -> Self {
        PgExecStore { pool }
    }
}

#[async_trait]
impl ExecutionStore for PgExecStore {
    // ---- reading executions ----

    async fn get(&self, task_id: Uuid) -> Result<Option<Execution>> {
        sqlx::query_as(&format!("{SELECT_EXEC} WHERE task_id = $1"))
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await
    }

    async fn get_many(&self, task_ids: &[Uuid]) -> Result<Vec<Execution>> {
        sqlx::query_as(&format!("{SELECT_EXEC} WHERE task_id = ANY($1)"))
            .bind(task_ids)
            .fetch_all(&self.pool)
            .await
    }

    async fn queued(&self) -> Result<Vec<Execution>> {
        sqlx::query_as(&format!(
            "{SELECT_EXEC} WHERE state = 'queued' ORDER BY priority DESC, queue_order"
        ))
        .fetch_all(&self.pool)
        .await
    }

    async fn launching(&self) -> Result<Vec<Execution>> {
        sqlx::query_as(&format!("{SELECT_EXEC} WHERE state = 'launching'"))
            .fetch_all(&self.pool)
            .await
    }

    async fn active_by_type(&self) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(
            "SELECT agent_type, count(*) FILTER (WHERE state IN ('launching', 'running'))
               FROM executions GROUP BY agent_type",
        )
        .fetch_all(&self.pool)
        .await
    }

    async fn queued_ahead(&self, priority: i32, queue_order: Option<i64>) -> Result<i64> {
        let (ahead,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM executions
             WHERE state = 'queued' AND (priority > $1 OR (priority = $1 AND queue_order < $2))",
        )
        .bind(priority)
        .bind(queue_order.unwrap_or(i64::MAX))
        .fetch_one(&self.pool)
        .await?;
        Ok(ahead)
    }

    async fn queue_positions(&self) -> Result<HashMap<Uuid, i64>> {
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT task_id, row_number() OVER (ORDER BY priority DESC, queue_order)
               FROM executions WHERE state = 'queued'",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn last_seq(&self, task_id: Uuid) -> Result<i64> {
        feed::store::last_seq(&self.pool, task_id).await
    }

    async fn last_seqs(&self, task_ids: &[Uuid]) -> Result<HashMap<Uuid, i64>> {
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT task_id, max(last_seq) FROM feed_chunks WHERE task_id = ANY($1)
              GROUP BY task_id",
        )
        .bind(task_ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn clones_due(&self, retention_secs: f64, limit: i64) -> Result<Vec<Uuid>> {
        let rows: Vec<(Uuid,)> = sqlx::query_as(
            "SELECT task_id FROM executions
              WHERE state IN ('completed', 'failed', 'stopped') AND NOT workspace_removed
                AND updated_at < now() - make_interval(secs => $1::double precision)
              ORDER BY updated_at LIMIT $2",
        )
        .bind(retention_secs)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    // ---- the queue ----

    async fn enqueue(&self, q: &Enqueue<'_>) -> Result<()> {
        sqlx::query(
            "INSERT INTO executions (task_id, state, agent_type, priority, queue_order, attempts,
                                     max_retries, last_error, prompt, instance_id, retry_at, origin,
                                     traceparent)
             VALUES ($1, 'queued', $2, $3, nextval('queue_order'), 0, $4, '', $5, NULL, NULL, $6, $7)
             ON CONFLICT (task_id) DO UPDATE SET
                state = 'queued', agent_type = $2, priority = $3,
                queue_order = CASE WHEN executions.state = 'queued' THEN executions.queue_order
                                   ELSE nextval('queue_order') END,
                attempts = 0, max_retries = $4, last_error = '', prompt = $5,
                instance_id = NULL, retry_at = NULL, origin = $6, traceparent = $7,
                workspace_removed = false, updated_at = now()",
        )
        .bind(q.task_id)
        .bind(q.agent_type)
        .bind(q.priority)
        .bind(q.max_retries.max(0))
        .bind(q.prompt)
        .bind(q.origin)
        .bind(q.traceparent)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn update_queued(&self, task_id: Uuid, priority: i32, max_retries: i32) -> Result<()> {
        sqlx::query("UPDATE executions SET priority = $2, max_retries = $3 WHERE task_id = $1")
            .bind(task_id)
            .bind(priority)
            .bind(max_retries.max(0))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn set_prompt(&self, task_id: Uuid, prompt: &str) -> Result<()> {
        sqlx::query("UPDATE executions SET prompt = $2 WHERE task_id = $1")
            .bind(task_id)
            .bind(prompt)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn requeue_due_retries(&self) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET state = 'queued', queue_order = nextval('queue_order'),
                                   retry_at = NULL, updated_at = now()
             WHERE state = 'retry_wait' AND retry_at <= now()",
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    // ---- a run's life ----

    async fn set_state(&self, task_id: Uuid, state: ExecState) -> Result<()> {
        sqlx::query("UPDATE executions SET state = $2, updated_at = now() WHERE task_id = $1")
            .bind(task_id)
            .bind(state.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn begin_launch(&self, task_id: Uuid, attempts: i32) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET state = 'launching', attempts = $2, queue_order = NULL,
                                   updated_at = now() WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(attempts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn drop_launch(&self, task_id: Uuid, attempts: i32) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET state = 'stopped', attempts = $2, updated_at = now()
             WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(attempts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn launched(
        &self,
        task_id: Uuid,
        instance: Option<Uuid>,
        manager_id: &str,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET state = 'running', instance_id = $2, prompt = '',
                                   manager_id = $3, updated_at = now() WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(instance)
        .bind(manager_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn adopt(&self, task_id: Uuid, instance: Uuid, manager_id: &str) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET state = 'running', instance_id = $2, manager_id = $3
             WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(instance)
        .bind(manager_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn placed_runs(&self) -> Result<Vec<Execution>> {
        sqlx::query_as(&format!(
            "{SELECT_EXEC} WHERE state IN ('launching', 'running') AND manager_id <> ''"
        ))
        .fetch_all(&self.pool)
        .await
    }

    async fn move_run(&self, exec: &Execution) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if let Some(instance) = exec.instance_id {
            sqlx::query(
                "INSERT INTO moved_instances (instance_id, task_id, manager_id)
                 VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(instance)
            .bind(exec.task_id)
            .bind(&exec.manager_id)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "UPDATE executions SET state = 'queued', attempts = greatest(attempts - 1, 0),
                    instance_id = NULL, manager_id = '', origin = 'manual',
                    queue_order = nextval('queue_order'),
                    updated_at = now() WHERE task_id = $1",
        )
        .bind(exec.task_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    async fn is_moved(&self, instance: Uuid) -> Result<bool> {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM moved_instances WHERE instance_id = $1)")
            .bind(instance)
            .fetch_one(&self.pool)
            .await
    }

    async fn requeue_interrupted(&self, task_id: Uuid) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET state = 'queued', attempts = greatest(attempts - 1, 0),
                                   queue_order = nextval('queue_order') WHERE task_id = $1",
        )
        .bind(task_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn retry_later(&self, task_id: Uuid, retry_at: DateTime<Utc>, error: &str) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET state = 'retry_wait', retry_at = $2, last_error = $3,
                                   updated_at = now() WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(retry_at)
        .bind(error)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn failed(&self, task_id: Uuid, error: &str) -> Result<()> {
        sqlx::query(
            "UPDATE executions SET state = 'failed', last_error = $2, updated_at = now()
             WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(error)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn set_session(&self, task_id: Uuid, session: &str) -> Result<()> {
        sqlx::query("UPDATE executions SET acp_session_id = $2 WHERE task_id = $1")
            .bind(task_id)
            .bind(session)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn workspace_removed(&self, task_id: Uuid) -> Result<()> {
        sqlx::query("UPDATE executions SET workspace_removed = true WHERE task_id = $1")
            .bind(task_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn delete(&self, task_id: Uuid) -> Result<()> {
        sqlx::query("DELETE FROM executions WHERE task_id = $1")
            .bind(task_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    // ---- processed events ----

    async fn seen(&self, id: Uuid) -> Result<bool> {
        let row: Option<(Uuid,)> = sqlx::query_as("SELECT id FROM processed_events WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    async fn mark_seen(&self, id: Uuid) -> Result<()> {
        sqlx::query("INSERT INTO processed_events (id) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn prune_seen(&self) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM processed_events WHERE processed_at < now() - interval '1 day'",
        )
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
