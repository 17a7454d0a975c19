//! The Postgres [`AgentStore`]: the services' deployment. Several managers
//! may share the schema; instances are scoped to their manager.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::text::without_nul;
use kandev_events::agent::OutputCursor;
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    AgentStore, Exchange, INSTANCE_COLUMNS, InstanceRow, LaunchFields, Outcome, TYPE_COLUMNS,
    TypeRow, lines,
};
use crate::credentials::SecretEntry;
use crate::domain::{AgentError, AgentInstance, AgentType, InstanceStatus, LogLine, Result};

/// The agent manager's tables on Postgres.
#[derive(Debug, Clone)]
pub struct PgAgentStore {
    pool: PgPool,
    /// Instances are this manager's (see migration 0010).
    manager_id: String,
}

impl PgAgentStore {
    /// The store of the manager `manager_id`: the registry and secrets are
    /// shared by every manager on the schema, instances are its own.
    pub fn new(pool: PgPool, manager_id: &str) -> Self {
        PgAgentStore {
            pool,
            manager_id: manager_id.to_string(),
        }
    }
}

#[async_trait]
impl AgentStore for PgAgentStore {
    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn list_types(&self, include_disabled: bool) -> Result<Vec<AgentType>> {
        let rows: Vec<TypeRow> = sqlx::query_as(&format!(
            "SELECT {TYPE_COLUMNS} FROM agent_types WHERE enabled OR $1 ORDER BY id"
        ))
        .bind(include_disabled)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AgentType::try_from).collect()
    }

    async fn get_type(&self, id: &str) -> Result<AgentType> {
        let row: Option<TypeRow> = sqlx::query_as(&format!(
            "SELECT {TYPE_COLUMNS} FROM agent_types WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| AgentError::NotFound(format!("agent type {id:?}")))?
            .try_into()
    }

    async fn upsert_type(&self, t: &AgentType) -> Result<AgentType> {
        let row: TypeRow = sqlx::query_as(&format!(
            "INSERT INTO agent_types ({TYPE_COLUMNS}) VALUES \
             ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23) \
             ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, \
             description = EXCLUDED.description, image = EXCLUDED.image, \
             command = EXCLUDED.command, working_dir = EXCLUDED.working_dir, \
             memory_mb = EXCLUDED.memory_mb, cpu_cores = EXCLUDED.cpu_cores, \
             pids_limit = EXCLUDED.pids_limit, timeout_seconds = EXCLUDED.timeout_seconds, \
             capabilities = EXCLUDED.capabilities, required_env = EXCLUDED.required_env, \
             optional_env = EXCLUDED.optional_env, mount_ssh = EXCLUDED.mount_ssh, \
             mount_gitconfig = EXCLUDED.mount_gitconfig, \
             mount_git_credentials = EXCLUDED.mount_git_credentials, \
             network_mode = EXCLUDED.network_mode, \
             permission_policy = EXCLUDED.permission_policy, enabled = EXCLUDED.enabled, \
             home_volume = EXCLUDED.home_volume, internal = EXCLUDED.internal, \
             host_credentials = EXCLUDED.host_credentials, state_paths = EXCLUDED.state_paths, \
             updated_at = now() RETURNING {TYPE_COLUMNS}"
        ))
        .bind(&t.id)
        .bind(&t.name)
        .bind(&t.description)
        .bind(&t.image)
        .bind(&t.command)
        .bind(&t.working_dir)
        .bind(t.memory_mb)
        .bind(t.cpu_cores)
        .bind(t.pids_limit)
        .bind(t.timeout_seconds)
        .bind(&t.capabilities)
        .bind(&t.required_env)
        .bind(&t.optional_env)
        .bind(t.credential_mounts.ssh)
        .bind(t.credential_mounts.gitconfig)
        .bind(t.credential_mounts.git_credentials)
        .bind(&t.network_mode)
        .bind(t.permission_policy.as_str())
        .bind(t.enabled)
        .bind(&t.home_volume)
        .bind(t.internal)
        .bind(t.host_credentials)
        .bind(&t.state_paths)
        .fetch_one(&self.pool)
        .await?;
        row.try_into()
    }

    async fn create_instance(
        &self,
        id: Uuid,
        task_id: Uuid,
        agent_type: &str,
        launch: &LaunchFields<'_>,
    ) -> Result<AgentInstance> {
        let row: InstanceRow = sqlx::query_as(&format!(
            "INSERT INTO agent_instances \
             (id, task_id, agent_type, status, priority, metadata, home_scope, manager_id) \
             VALUES ($1, $2, $3, 'pending', $4, $5, $6, $7) RETURNING {INSTANCE_COLUMNS}"
        ))
        .bind(id)
        .bind(task_id)
        .bind(agent_type)
        .bind(launch.priority)
        .bind(sqlx::types::Json(launch.metadata))
        .bind(launch.home_scope)
        .bind(&self.manager_id)
        .fetch_one(&self.pool)
        .await?;
        row.try_into()
    }

    async fn get_instance(&self, id: Uuid) -> Result<AgentInstance> {
        let row: Option<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances \
             WHERE id = $1 AND manager_id IN ($2, '')"
        ))
        .bind(id)
        .bind(&self.manager_id)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| AgentError::NotFound(format!("agent instance {id}")))?
            .try_into()
    }

    /// Instances of a task (all when `task_id` is `None`), oldest first.
    async fn list_instances(&self, task_id: Option<Uuid>) -> Result<Vec<AgentInstance>> {
        let rows: Vec<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances \
             WHERE ($1::uuid IS NULL OR task_id = $1) AND manager_id IN ($2, '') \
             ORDER BY created_at, id LIMIT 1000"
        ))
        .bind(task_id)
        .bind(&self.manager_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AgentInstance::try_from).collect()
    }

    /// Instances that a container may still be running for.
    async fn active_instances(&self) -> Result<Vec<AgentInstance>> {
        let rows: Vec<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances \
             WHERE status IN ('pending', 'starting', 'running') AND manager_id IN ($1, '')"
        ))
        .bind(&self.manager_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AgentInstance::try_from).collect()
    }

    /// How many of this manager's instances are active.
    async fn count_active(&self) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM agent_instances \
             WHERE status IN ('pending', 'starting', 'running') AND manager_id IN ($1, '')",
        )
        .bind(&self.manager_id)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn set_workspace(&self, id: Uuid, path: &str, owned: bool) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET workspace_path = $2, workspace_owned = $3, \
             updated_at = now() WHERE id = $1",
        )
        .bind(id)
        .bind(path)
        .bind(owned)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A turn starts: status `starting`, outcome cleared; returns the
    /// instance with its turn counter incremented.
    async fn begin_turn(&self, id: Uuid) -> Result<AgentInstance> {
        let row: InstanceRow = sqlx::query_as(&format!(
            "UPDATE agent_instances SET status = 'starting', error = '', exit_code = NULL, \
             stop_reason = '', finished_at = NULL, started_at = coalesce(started_at, now()), \
             stdout_lines = 0, stderr_lines = 0, sync_event = NULL, \
             turns = turns + 1, updated_at = now() WHERE id = $1 RETURNING {INSTANCE_COLUMNS}"
        ))
        .bind(id)
        .fetch_one(&self.pool)
        .await?;
        row.try_into()
    }

    async fn set_container(&self, id: Uuid, container_id: &str) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET container_id = $2, updated_at = now() WHERE id = $1",
        )
        .bind(id)
        .bind(container_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn set_running(&self, id: Uuid, session_id: &str) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET status = 'running', acp_session_id = $2, \
             updated_at = now() WHERE id = $1",
        )
        .bind(id)
        .bind(session_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Stores the last published `seq`, the output position that goes with
    /// it, and the plan progress.
    async fn save_progress(
        &self,
        id: Uuid,
        last_seq: i64,
        progress: f64,
        cursor: OutputCursor,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET last_seq = $2, progress = $3, stdout_lines = $4, \
             stderr_lines = $5, updated_at = now() WHERE id = $1 AND last_seq <= $2",
        )
        .bind(id)
        .bind(last_seq)
        .bind(progress)
        .bind(lines(cursor.stdout_lines))
        .bind(lines(cursor.stderr_lines))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Ends the instance (completed, failed or stopped) unless it already
    /// ended; returns whether this call ended it.
    async fn finish(&self, id: Uuid, status: InstanceStatus, outcome: &Outcome) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE agent_instances SET status = $2, error = $3, \
             exit_code = coalesce($4, exit_code), stop_reason = $5, finished_at = now(), \
             updated_at = now() WHERE id = $1 AND status IN ('pending', 'starting', 'running')",
        )
        .bind(id)
        .bind(status.as_str())
        // An agent's error text may hold NUL, which Postgres refuses.
        .bind(without_nul(&outcome.error))
        .bind(outcome.exit_code)
        .bind(without_nul(&outcome.stop_reason))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Stores a sync point before its batch is published: `last_seq`, the
    /// output position and the batch's envelope.
    async fn save_sync(
        &self,
        id: Uuid,
        last_seq: i64,
        progress: f64,
        cursor: OutputCursor,
        envelope: &serde_json::Value,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET last_seq = $2, progress = $3, stdout_lines = $4, \
             stderr_lines = $5, sync_event = $6, updated_at = now() \
             WHERE id = $1 AND last_seq <= $2",
        )
        .bind(id)
        .bind(last_seq)
        .bind(progress)
        .bind(lines(cursor.stdout_lines))
        .bind(lines(cursor.stderr_lines))
        .bind(envelope)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Appends log lines and keeps only the newest `keep` of the instance.
    async fn append_logs(&self, id: Uuid, lines: &[LogLine], keep: i64) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let at: Vec<DateTime<Utc>> = lines.iter().map(|l| l.at).collect();
        let streams: Vec<&str> = lines.iter().map(|l| l.stream.as_str()).collect();
        let text: Vec<String> = lines
            .iter()
            .map(|l| without_nul(&l.line).into_owned())
            .collect();
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO agent_logs (instance_id, at, stream, line) \
             SELECT $1, * FROM unnest($2::timestamptz[], $3::text[], $4::text[])",
        )
        .bind(id)
        .bind(&at)
        .bind(&streams)
        .bind(&text)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM agent_logs WHERE instance_id = $1 AND id <= \
             (SELECT id FROM agent_logs WHERE instance_id = $1 ORDER BY id DESC OFFSET $2 LIMIT 1)",
        )
        .bind(id)
        .bind(keep)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The last `tail` log lines, oldest first.
    async fn tail_logs(&self, id: Uuid, tail: i64) -> Result<Vec<LogLine>> {
        let rows: Vec<(DateTime<Utc>, String, String)> = sqlx::query_as(
            "SELECT at, stream, line FROM (SELECT id, at, stream, line FROM agent_logs \
             WHERE instance_id = $1 ORDER BY id DESC LIMIT $2) t ORDER BY id",
        )
        .bind(id)
        .bind(tail)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(at, stream, line)| LogLine { at, stream, line })
            .collect())
    }

    // ---- users' secrets (sealed by `credentials`) ----

    async fn record_exchange(
        &self,
        task_id: Uuid,
        instance_id: Uuid,
        exchange: &Exchange,
        keep: i64,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO agent_exchanges (task_id, instance_id, prompt, reply) VALUES ($1, $2, $3, $4)",
        )
        .bind(task_id)
        .bind(instance_id)
        .bind(without_nul(&exchange.prompt))
        .bind(without_nul(&exchange.reply))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM agent_exchanges WHERE task_id = $1 AND id <= \
             (SELECT id FROM agent_exchanges WHERE task_id = $1 ORDER BY id DESC OFFSET $2 LIMIT 1)",
        )
        .bind(task_id)
        .bind(keep)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn exchanges(&self, task_id: Uuid, limit: i64) -> Result<Vec<Exchange>> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT prompt, reply FROM (SELECT id, prompt, reply FROM agent_exchanges \
             WHERE task_id = $1 ORDER BY id DESC LIMIT $2) t ORDER BY id",
        )
        .bind(task_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(prompt, reply)| Exchange { prompt, reply })
            .collect())
    }

    async fn list_secrets(&self, scope: &str) -> Result<Vec<SecretEntry>> {
        let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT name, updated_at FROM user_secrets WHERE scope = $1 ORDER BY name",
        )
        .bind(scope)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(name, updated_at)| SecretEntry { name, updated_at })
            .collect())
    }

    /// Stores (or replaces) one sealed secret; refused when the user already
    /// keeps `max` others.
    async fn put_secret(
        &self,
        scope: &str,
        name: &str,
        nonce: &[u8],
        sealed: &[u8],
        max: i64,
    ) -> Result<SecretEntry> {
        let row: Option<(String, DateTime<Utc>)> = sqlx::query_as(
            "INSERT INTO user_secrets (scope, name, nonce, ciphertext) \
             SELECT $1, $2, $3, $4 WHERE (SELECT count(*) FROM user_secrets \
               WHERE scope = $1 AND name <> $2) < $5 \
             ON CONFLICT (scope, name) DO UPDATE SET nonce = EXCLUDED.nonce, \
               ciphertext = EXCLUDED.ciphertext, updated_at = now() \
             RETURNING name, updated_at",
        )
        .bind(scope)
        .bind(name)
        .bind(nonce)
        .bind(sealed)
        .bind(max)
        .fetch_optional(&self.pool)
        .await?;
        let (name, updated_at) = row.ok_or_else(|| {
            AgentError::FailedPrecondition(format!("a user keeps at most {max} secrets"))
        })?;
        Ok(SecretEntry { name, updated_at })
    }

    /// Whether a secret was there to delete.
    async fn delete_secret(&self, scope: &str, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM user_secrets WHERE scope = $1 AND name = $2")
            .bind(scope)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// `(name, nonce, ciphertext)` of each of a user's secrets.
    async fn sealed_secrets(&self, scope: &str) -> Result<Vec<(String, Vec<u8>, Vec<u8>)>> {
        Ok(sqlx::query_as(
            "SELECT name, nonce, ciphertext FROM user_secrets WHERE scope = $1 ORDER BY name",
        )
        .bind(scope)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
