//! The engine's tables in Postgres.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    DIRECT_CLONES_DUE, DIRECT_RUN_ENDED, Enqueue, Execution, ExecutionStore, FORGET_DIRECT_CLONE,
    Result, SELECT_EXEC, ago,
};
use crate::domain::ExecState;

/// The orchestrator's executions and processed events, in Postgres.
#[derive(Debug, Clone)]
pub struct PgExecStore {
    pub(super) pool: PgPool,
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
        let last: Option<(i64,)> = sqlx::query_as(
            "SELECT last_seq FROM feed_chunks WHERE task_id = $1 ORDER BY first_seq DESC LIMIT 1",
        )
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(last.map_or(0, |(l,)| l))
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

    async fn direct_run_ended(&self, task_id: Uuid, at: DateTime<Utc>) -> Result<()> {
        sqlx::query(DIRECT_RUN_ENDED)
            .bind(task_id)
            .bind(at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn direct_clones_due(&self, retention_secs: f64, limit: i64) -> Result<Vec<Uuid>> {
        sqlx::query_scalar(DIRECT_CLONES_DUE)
            .bind(ago(retention_secs))
            .bind(limit)
            .fetch_all(&self.pool)
            .await
    }

    async fn forget_direct_clone(&self, task_id: Uuid) -> Result<()> {
        sqlx::query(FORGET_DIRECT_CLONE)
            .bind(task_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    // ---- the queue ----

    async fn enqueue(&self, q: &Enqueue<'_>) -> Result<()> {
        sqlx::query(
            "INSERT INTO executions (task_id, state, agent_type, priority, queue_order, attempts,
                                     max_retries, last_error, prompt, instance_id, retry_at, origin,
                                     traceparent, run_as)
             VALUES ($1, 'queued', $2, $3, nextval('queue_order'), 0, $4, '', $5, NULL, NULL, $6, $7,
                     $8)
             ON CONFLICT (task_id) DO UPDATE SET
                state = 'queued', agent_type = $2, priority = $3,
                queue_order = CASE WHEN executions.state = 'queued' THEN executions.queue_order
                                   ELSE nextval('queue_order') END,
                attempts = 0, max_retries = $4, last_error = '', prompt = $5,
                instance_id = NULL, retry_at = NULL, origin = $6, traceparent = $7,
                run_as = $8, workspace_removed = false, updated_at = now()",
        )
        .bind(q.task_id)
        .bind(q.agent_type)
        .bind(q.priority)
        .bind(q.max_retries.max(0))
        .bind(q.prompt)
        .bind(q.origin)
        .bind(q.traceparent)
        .bind(q.run_as)
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

    async fn set_run_as(&self, task_id: Uuid, run_as: &str) -> Result<()> {
        sqlx::query("UPDATE executions SET run_as = $2 WHERE task_id = $1")
            .bind(task_id)
            .bind(run_as)
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
