//! [`SqlExecStore`]: the one [`ExecutionStore`], for either database
//! ([`PgExecStore`](super::PgExecStore),
//! [`SqliteExecStore`](super::SqliteExecStore)). Each statement is written
//! once; what the databases do differently is the shared
//! [`Dialect`] (how a change begins, how a time binds) and the queue's
//! next place ([`ExecDialect::NEXT_ORDER`]). Every time is bound by the
//! store, so neither database's clock decides one.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::dialect::{Dialect, Reader, Stmt, param_list};
use sqlx::{Database, Pool};
use uuid::Uuid;

use super::{Enqueue, Execution, ExecutionStore, Result, SELECT_EXEC};
use crate::domain::ExecState;

/// What the engine's tables need beyond the shared dialect.
pub trait ExecDialect: Dialect {
    /// The next place in the queue, as an SQL expression.
    const NEXT_ORDER: &'static str;
}

/// The orchestrator's executions, processed events, review comments and
/// held follow-ups in database `D`.
pub struct SqlExecStore<D: Database> {
    pub(super) pool: Pool<D>,
}

impl<D: Database> Clone for SqlExecStore<D> {
    fn clone(&self) -> Self {
        SqlExecStore {
            pool: self.pool.clone(),
        }
    }
}

impl<D: Database> std::fmt::Debug for SqlExecStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlExecStore")
            .field("database", &D::NAME)
            .finish_non_exhaustive()
    }
}

impl<D: ExecDialect> SqlExecStore<D> {
    /// On a pool of the orchestrator's migrated database.
    pub fn new(pool: Pool<D>) -> Self {
        SqlExecStore { pool }
    }

    pub(super) fn db(&self) -> Reader<'_, D> {
        Reader(&self.pool)
    }

    /// `sql` with its `NEXT_ORDER` the dialect's next place in the queue.
    fn queued_at_end(sql: &str) -> String {
        sql.replace("NEXT_ORDER", D::NEXT_ORDER)
    }

    /// Runs `stmt`, a write.
    async fn update(&self, stmt: Stmt) -> Result<()> {
        self.db().write(stmt).await.map(drop)
    }

    /// The rows of `SELECT_EXEC` whose task is one of `ids`.
    async fn for_tasks<T: kandev_common::db::Rows>(
        &self,
        sql: impl Fn(&str) -> String,
        ids: &[Uuid],
    ) -> Result<Vec<T>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let stmt = ids
            .iter()
            .fold(Stmt::new(sql(&param_list(1, ids.len()))), |s, id| {
                s.bind(*id)
            });
        self.db().all(stmt).await
    }
}

/// The time `secs` before now.
fn ago(secs: f64) -> DateTime<Utc> {
    Utc::now() - chrono::Duration::microseconds((secs.max(0.0) * 1e6) as i64)
}

const ENQUEUE: &str = "INSERT INTO executions (task_id, state, agent_type, priority, queue_order,
        attempts, max_retries, last_error, prompt, instance_id, retry_at, origin, traceparent,
        updated_at, run_as)
     VALUES ($1, 'queued', $2, $3, NEXT_ORDER, 0, $4, '', $5, NULL, NULL, $6, $7, $8, $9)
     ON CONFLICT (task_id) DO UPDATE SET
        state = 'queued', agent_type = $2, priority = $3,
        queue_order = CASE WHEN executions.state = 'queued' THEN executions.queue_order
                           ELSE NEXT_ORDER END,
        attempts = 0, max_retries = $4, last_error = '', prompt = $5,
        instance_id = NULL, retry_at = NULL, origin = $6, traceparent = $7,
        run_as = $9, workspace_removed = false, updated_at = $8";

/// A run back in the queue, its attempt not counted ($1 task, $2 now).
const REQUEUE: &str = "UPDATE executions SET state = 'queued',
        attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END,
        queue_order = NEXT_ORDER, updated_at = $2";

#[async_trait]
impl<D: ExecDialect> ExecutionStore for SqlExecStore<D> {
    // ---- reading executions ----

    #[tracing::instrument(skip_all)]
    async fn get(&self, task_id: Uuid) -> Result<Option<Execution>> {
        let stmt = Stmt::new(format!("{SELECT_EXEC} WHERE task_id = $1")).bind(task_id);
        self.db().optional(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn get_many(&self, task_ids: &[Uuid]) -> Result<Vec<Execution>> {
        let sql = |set: &str| format!("{SELECT_EXEC} WHERE task_id IN ({set})");
        self.for_tasks(sql, task_ids).await
    }

    #[tracing::instrument(skip_all)]
    async fn queued(&self) -> Result<Vec<Execution>> {
        let sql =
            format!("{SELECT_EXEC} WHERE state = 'queued' ORDER BY priority DESC, queue_order");
        self.db().all(Stmt::new(sql)).await
    }

    #[tracing::instrument(skip_all)]
    async fn launching(&self) -> Result<Vec<Execution>> {
        let sql = format!("{SELECT_EXEC} WHERE state = 'launching'");
        self.db().all(Stmt::new(sql)).await
    }

    #[tracing::instrument(skip_all)]
    async fn active_by_type(&self) -> Result<Vec<(String, i64)>> {
        let sql = "SELECT agent_type, count(*) FILTER (WHERE state IN ('launching', 'running'))
               FROM executions GROUP BY agent_type";
        self.db().all(Stmt::new(sql)).await
    }

    #[tracing::instrument(skip_all)]
    async fn queued_ahead(&self, priority: i32, queue_order: Option<i64>) -> Result<i64> {
        let stmt = Stmt::new(
            "SELECT count(*) FROM executions
             WHERE state = 'queued' AND (priority > $1 OR (priority = $1 AND queue_order < $2))",
        )
        .bind(priority)
        .bind(queue_order.unwrap_or(i64::MAX));
        let (ahead,): (i64,) = self.db().one(stmt).await?;
        Ok(ahead)
    }

    #[tracing::instrument(skip_all)]
    async fn queue_positions(&self) -> Result<HashMap<Uuid, i64>> {
        let sql = "SELECT task_id, row_number() OVER (ORDER BY priority DESC, queue_order)
               FROM executions WHERE state = 'queued'";
        let rows: Vec<(Uuid, i64)> = self.db().all(Stmt::new(sql)).await?;
        Ok(rows.into_iter().collect())
    }

    #[tracing::instrument(skip_all)]
    async fn last_seq(&self, task_id: Uuid) -> Result<i64> {
        let stmt = Stmt::new(
            "SELECT last_seq FROM feed_chunks WHERE task_id = $1 ORDER BY first_seq DESC LIMIT 1",
        )
        .bind(task_id);
        let last: Option<(i64,)> = self.db().optional(stmt).await?;
        Ok(last.map_or(0, |(l,)| l))
    }

    #[tracing::instrument(skip_all)]
    async fn last_seqs(&self, task_ids: &[Uuid]) -> Result<HashMap<Uuid, i64>> {
        let sql = |set: &str| {
            format!(
                "SELECT task_id, max(last_seq) FROM feed_chunks WHERE task_id IN ({set})
                  GROUP BY task_id"
            )
        };
        let rows: Vec<(Uuid, i64)> = self.for_tasks(sql, task_ids).await?;
        Ok(rows.into_iter().collect())
    }

    #[tracing::instrument(skip_all)]
    async fn clones_due(&self, retention_secs: f64, limit: i64) -> Result<Vec<Uuid>> {
        let stmt = Stmt::new(
            "SELECT task_id FROM executions
              WHERE state IN ('completed', 'failed', 'stopped') AND NOT workspace_removed
                AND updated_at < $1
              ORDER BY updated_at LIMIT $2",
        )
        .bind(ago(retention_secs))
        .bind(limit);
        let rows: Vec<(Uuid,)> = self.db().all(stmt).await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    #[tracing::instrument(skip_all)]
    async fn direct_run_ended(&self, task_id: Uuid, at: DateTime<Utc>) -> Result<()> {
        let stmt = Stmt::new(
            "INSERT INTO direct_clones (task_id, finished_at) VALUES ($1, $2)
             ON CONFLICT (task_id) DO UPDATE SET finished_at = excluded.finished_at",
        )
        .bind(task_id)
        .bind(at);
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn direct_clones_due(&self, retention_secs: f64, limit: i64) -> Result<Vec<Uuid>> {
        let stmt = Stmt::new(
            "SELECT task_id FROM direct_clones WHERE finished_at < $1 ORDER BY finished_at LIMIT $2",
        )
        .bind(ago(retention_secs))
        .bind(limit);
        let rows: Vec<(Uuid,)> = self.db().all(stmt).await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    #[tracing::instrument(skip_all)]
    async fn forget_direct_clone(&self, task_id: Uuid) -> Result<()> {
        let stmt = Stmt::new("DELETE FROM direct_clones WHERE task_id = $1").bind(task_id);
        self.update(stmt).await
    }

    // ---- the queue ----

    #[tracing::instrument(skip_all)]
    async fn enqueue(&self, q: &Enqueue<'_>) -> Result<()> {
        let stmt = Stmt::new(Self::queued_at_end(ENQUEUE))
            .bind(q.task_id)
            .bind(q.agent_type)
            .bind(q.priority)
            .bind(q.max_retries.max(0))
            .bind(q.prompt)
            .bind(q.origin)
            .bind(q.traceparent)
            .bind(Utc::now())
            .bind(q.run_as);
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn update_queued(&self, task_id: Uuid, priority: i32, max_retries: i32) -> Result<()> {
        let stmt =
            Stmt::new("UPDATE executions SET priority = $2, max_retries = $3 WHERE task_id = $1")
                .bind(task_id)
                .bind(priority)
                .bind(max_retries.max(0));
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn set_prompt(&self, task_id: Uuid, prompt: &str) -> Result<()> {
        let stmt = Stmt::new("UPDATE executions SET prompt = $2 WHERE task_id = $1")
            .bind(task_id)
            .bind(prompt);
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn set_run_as(&self, task_id: Uuid, run_as: &str) -> Result<()> {
        let stmt = Stmt::new("UPDATE executions SET run_as = $2 WHERE task_id = $1")
            .bind(task_id)
            .bind(run_as);
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn requeue_due_retries(&self) -> Result<()> {
        // One at a time in retry order: each takes the next place.
        let stmt = Stmt::new(
            "SELECT task_id FROM executions WHERE state = 'retry_wait' AND retry_at <= $1
              ORDER BY retry_at, task_id",
        )
        .bind(Utc::now());
        let due: Vec<(Uuid,)> = self.db().all(stmt).await?;
        let sql = Self::queued_at_end(
            "UPDATE executions SET state = 'queued', queue_order = NEXT_ORDER,
                    retry_at = NULL, updated_at = $2
              WHERE task_id = $1 AND state = 'retry_wait'",
        );
        for (task_id,) in due {
            let stmt = Stmt::new(sql.clone()).bind(task_id).bind(Utc::now());
            self.update(stmt).await?;
        }
        Ok(())
    }

    // ---- a run's life ----

    #[tracing::instrument(skip_all)]
    async fn set_state(&self, task_id: Uuid, state: ExecState) -> Result<()> {
        let stmt =
            Stmt::new("UPDATE executions SET state = $2, updated_at = $3 WHERE task_id = $1")
                .bind(task_id)
                .bind(state.as_str())
                .bind(Utc::now());
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn begin_launch(&self, task_id: Uuid, attempts: i32) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE executions SET state = 'launching', attempts = $2, queue_order = NULL,
                                   updated_at = $3 WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(attempts)
        .bind(Utc::now());
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn drop_launch(&self, task_id: Uuid, attempts: i32) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE executions SET state = 'stopped', attempts = $2, updated_at = $3
             WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(attempts)
        .bind(Utc::now());
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn launched(
        &self,
        task_id: Uuid,
        instance: Option<Uuid>,
        manager_id: &str,
    ) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE executions SET state = 'running', instance_id = $2, prompt = '',
                                   manager_id = $3, updated_at = $4 WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(instance)
        .bind(manager_id)
        .bind(Utc::now());
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn adopt(&self, task_id: Uuid, instance: Uuid, manager_id: &str) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE executions SET state = 'running', instance_id = $2, manager_id = $3
             WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(instance)
        .bind(manager_id);
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn placed_runs(&self) -> Result<Vec<Execution>> {
        let sql =
            format!("{SELECT_EXEC} WHERE state IN ('launching', 'running') AND manager_id <> ''");
        self.db().all(Stmt::new(sql)).await
    }

    #[tracing::instrument(skip_all)]
    async fn move_run(&self, exec: &Execution) -> Result<()> {
        let mut tx = D::begin(&self.pool).await?;
        if let Some(instance) = exec.instance_id {
            let stmt = Stmt::new(
                "INSERT INTO moved_instances (instance_id, task_id, manager_id, moved_at)
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            )
            .bind(instance)
            .bind(exec.task_id)
            .bind(&exec.manager_id)
            .bind(Utc::now());
            D::write(&mut tx, stmt).await?;
        }
        let sql = format!(
            "{REQUEUE}, instance_id = NULL, manager_id = '', origin = 'manual' WHERE task_id = $1"
        );
        let stmt = Stmt::new(Self::queued_at_end(&sql))
            .bind(exec.task_id)
            .bind(Utc::now());
        D::write(&mut tx, stmt).await?;
        tx.commit().await
    }

    #[tracing::instrument(skip_all)]
    async fn is_moved(&self, instance: Uuid) -> Result<bool> {
        let stmt =
            Stmt::new("SELECT EXISTS (SELECT 1 FROM moved_instances WHERE instance_id = $1)")
                .bind(instance);
        let (moved,): (bool,) = self.db().one(stmt).await?;
        Ok(moved)
    }

    #[tracing::instrument(skip_all)]
    async fn requeue_interrupted(&self, task_id: Uuid) -> Result<()> {
        let sql = Self::queued_at_end(&format!("{REQUEUE} WHERE task_id = $1"));
        self.update(Stmt::new(sql).bind(task_id).bind(Utc::now()))
            .await
    }

    #[tracing::instrument(skip_all)]
    async fn retry_later(&self, task_id: Uuid, retry_at: DateTime<Utc>, error: &str) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE executions SET state = 'retry_wait', retry_at = $2, last_error = $3,
                                   updated_at = $4 WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(retry_at)
        .bind(error)
        .bind(Utc::now());
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn failed(&self, task_id: Uuid, error: &str) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE executions SET state = 'failed', last_error = $2, updated_at = $3
             WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(error)
        .bind(Utc::now());
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn set_session(&self, task_id: Uuid, session: &str) -> Result<()> {
        let stmt = Stmt::new("UPDATE executions SET acp_session_id = $2 WHERE task_id = $1")
            .bind(task_id)
            .bind(session);
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn workspace_removed(&self, task_id: Uuid) -> Result<()> {
        let stmt = Stmt::new("UPDATE executions SET workspace_removed = true WHERE task_id = $1")
            .bind(task_id);
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn delete(&self, task_id: Uuid) -> Result<()> {
        let stmt = Stmt::new("DELETE FROM executions WHERE task_id = $1").bind(task_id);
        self.update(stmt).await
    }

    // ---- processed events ----

    #[tracing::instrument(skip_all)]
    async fn seen(&self, id: Uuid) -> Result<bool> {
        let stmt =
            Stmt::new("SELECT EXISTS (SELECT 1 FROM processed_events WHERE id = $1)").bind(id);
        let (seen,): (bool,) = self.db().one(stmt).await?;
        Ok(seen)
    }

    #[tracing::instrument(skip_all)]
    async fn mark_seen(&self, id: Uuid) -> Result<()> {
        let stmt = Stmt::new(
            "INSERT INTO processed_events (id, processed_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(Utc::now());
        self.update(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn prune_seen(&self) -> Result<u64> {
        let stmt = Stmt::new("DELETE FROM processed_events WHERE processed_at < $1")
            .bind(ago(24.0 * 3600.0));
        self.db().write(stmt).await
    }
}
