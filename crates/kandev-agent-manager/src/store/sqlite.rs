//! The SQLite [`AgentStore`]: one machine, one file. The same tables as
//! the Postgres migrations (`migrations-sqlite/`): lists as JSON text, ids
//! as 16-byte blobs, timestamps as fixed-width RFC 3339 text
//! ([`kandev_common::db::sqlite::time`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::sqlite::{now, time};
use kandev_events::agent::OutputCursor;
use sqlx::{SqlitePool, types::Json};
use uuid::Uuid;

use super::{
    AgentStore, Exchange, INSTANCE_COLUMNS, InstanceRow, LaunchFields, Outcome, TYPE_COLUMNS,
    TypeRow, lines,
};
use crate::credentials::SecretEntry;
use crate::domain::{AgentError, AgentInstance, AgentType, InstanceStatus, LogLine, Result};

/// The agent manager's tables in a SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteAgentStore {
    pool: SqlitePool,
    manager_id: String,
}

impl SqliteAgentStore {
    /// Opens (creating it when missing) the database at `url` and runs the
    /// SQLite migrations; instances are `manager_id`'s.
    pub async fn open(url: &str, manager_id: &str) -> Result<Self, sqlx::Error> {
        let pool = kandev_common::db::sqlite::connect(url, 4).await?;
        sqlx::migrate!("./migrations-sqlite").run(&pool).await?;
        Ok(SqliteAgentStore {
            pool,
            manager_id: manager_id.to_string(),
        })
    }
}

/// A registry row as SQLite holds it: lists as JSON arrays.
#[derive(sqlx::FromRow)]
struct SqliteTypeRow {
    id: String,
    name: String,
    description: String,
    image: String,
    command: Json<Vec<String>>,
    working_dir: String,
    memory_mb: i64,
    cpu_cores: f64,
    pids_limit: i64,
    timeout_seconds: i64,
    capabilities: Json<Vec<String>>,
    required_env: Json<Vec<String>>,
    optional_env: Json<Vec<String>>,
    mount_ssh: bool,
    mount_gitconfig: bool,
    mount_git_credentials: bool,
    network_mode: String,
    permission_policy: String,
    enabled: bool,
    home_volume: String,
    internal: bool,
    host_credentials: bool,
    state_paths: Json<Vec<String>>,
}

impl TryFrom<SqliteTypeRow> for AgentType {
    type Error = AgentError;

    fn try_from(r: SqliteTypeRow) -> Result<AgentType> {
        TypeRow {
            id: r.id,
            name: r.name,
            description: r.description,
            image: r.image,
            command: r.command.0,
            working_dir: r.working_dir,
            memory_mb: r.memory_mb,
            cpu_cores: r.cpu_cores,
            pids_limit: r.pids_limit,
            timeout_seconds: r.timeout_seconds,
            capabilities: r.capabilities.0,
            required_env: r.required_env.0,
            optional_env: r.optional_env.0,
            mount_ssh: r.mount_ssh,
            mount_gitconfig: r.mount_gitconfig,
            mount_git_credentials: r.mount_git_credentials,
            network_mode: r.network_mode,
            permission_policy: r.permission_policy,
            enabled: r.enabled,
            home_volume: r.home_volume,
            internal: r.internal,
            host_credentials: r.host_credentials,
            state_paths: r.state_paths.0,
        }
        .try_into()
    }
}

/// Instances of this manager, and those from before managers had ids.
const MINE: &str = "manager_id IN (?1, '')";

#[async_trait]
impl AgentStore for SqliteAgentStore {
    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn list_types(&self, include_disabled: bool) -> Result<Vec<AgentType>> {
        let rows: Vec<SqliteTypeRow> = sqlx::query_as(&format!(
            "SELECT {TYPE_COLUMNS} FROM agent_types WHERE enabled OR ?1 ORDER BY id"
        ))
        .bind(include_disabled)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AgentType::try_from).collect()
    }

    async fn get_type(&self, id: &str) -> Result<AgentType> {
        let row: Option<SqliteTypeRow> = sqlx::query_as(&format!(
            "SELECT {TYPE_COLUMNS} FROM agent_types WHERE id = ?1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| AgentError::NotFound(format!("agent type {id:?}")))?
            .try_into()
    }

    async fn upsert_type(&self, t: &AgentType) -> Result<AgentType> {
        let row: SqliteTypeRow = sqlx::query_as(&format!(
            "INSERT INTO agent_types ({TYPE_COLUMNS}, created_at, updated_at) VALUES \
             (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?24) \
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, \
             description = excluded.description, image = excluded.image, \
             command = excluded.command, working_dir = excluded.working_dir, \
             memory_mb = excluded.memory_mb, cpu_cores = excluded.cpu_cores, \
             pids_limit = excluded.pids_limit, timeout_seconds = excluded.timeout_seconds, \
             capabilities = excluded.capabilities, required_env = excluded.required_env, \
             optional_env = excluded.optional_env, mount_ssh = excluded.mount_ssh, \
             mount_gitconfig = excluded.mount_gitconfig, \
             mount_git_credentials = excluded.mount_git_credentials, \
             network_mode = excluded.network_mode, \
             permission_policy = excluded.permission_policy, enabled = excluded.enabled, \
             home_volume = excluded.home_volume, internal = excluded.internal, \
             host_credentials = excluded.host_credentials, state_paths = excluded.state_paths, \
             updated_at = excluded.updated_at \
             RETURNING {TYPE_COLUMNS}"
        ))
        .bind(&t.id)
        .bind(&t.name)
        .bind(&t.description)
        .bind(&t.image)
        .bind(Json(&t.command))
        .bind(&t.working_dir)
        .bind(t.memory_mb)
        .bind(t.cpu_cores)
        .bind(t.pids_limit)
        .bind(t.timeout_seconds)
        .bind(Json(&t.capabilities))
        .bind(Json(&t.required_env))
        .bind(Json(&t.optional_env))
        .bind(t.credential_mounts.ssh)
        .bind(t.credential_mounts.gitconfig)
        .bind(t.credential_mounts.git_credentials)
        .bind(&t.network_mode)
        .bind(t.permission_policy.as_str())
        .bind(t.enabled)
        .bind(&t.home_volume)
        .bind(t.internal)
        .bind(t.host_credentials)
        .bind(Json(&t.state_paths))
        .bind(now())
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
             (id, task_id, agent_type, status, priority, metadata, home_scope, manager_id, \
              created_at, updated_at) \
             VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7, ?8, ?8) RETURNING {INSTANCE_COLUMNS}"
        ))
        .bind(id)
        .bind(task_id)
        .bind(agent_type)
        .bind(launch.priority)
        .bind(Json(launch.metadata))
        .bind(launch.home_scope)
        .bind(&self.manager_id)
        .bind(now())
        .fetch_one(&self.pool)
        .await?;
        row.try_into()
    }

    async fn get_instance(&self, id: Uuid) -> Result<AgentInstance> {
        let row: Option<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances WHERE {MINE} AND id = ?2"
        ))
        .bind(&self.manager_id)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| AgentError::NotFound(format!("agent instance {id}")))?
            .try_into()
    }

    async fn list_instances(&self, task_id: Option<Uuid>) -> Result<Vec<AgentInstance>> {
        let rows: Vec<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances \
             WHERE {MINE} AND (?2 IS NULL OR task_id = ?2) \
             ORDER BY created_at, id LIMIT 1000"
        ))
        .bind(&self.manager_id)
        .bind(task_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AgentInstance::try_from).collect()
    }

    async fn active_instances(&self) -> Result<Vec<AgentInstance>> {
        let rows: Vec<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances \
             WHERE {MINE} AND status IN ('pending', 'starting', 'running')"
        ))
        .bind(&self.manager_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AgentInstance::try_from).collect()
    }

    async fn count_active(&self) -> Result<i64> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT count(*) FROM agent_instances \
             WHERE {MINE} AND status IN ('pending', 'starting', 'running')"
        ))
        .bind(&self.manager_id)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn set_workspace(&self, id: Uuid, path: &str, owned: bool) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET workspace_path = ?2, workspace_owned = ?3, \
             updated_at = ?4 WHERE id = ?1",
        )
        .bind(id)
        .bind(path)
        .bind(owned)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn begin_turn(&self, id: Uuid) -> Result<AgentInstance> {
        let row: InstanceRow = sqlx::query_as(&format!(
            "UPDATE agent_instances SET status = 'starting', error = '', exit_code = NULL, \
             stop_reason = '', finished_at = NULL, started_at = coalesce(started_at, ?2), \
             stdout_lines = 0, stderr_lines = 0, sync_event = NULL, \
             turns = turns + 1, updated_at = ?2 WHERE id = ?1 RETURNING {INSTANCE_COLUMNS}"
        ))
        .bind(id)
        .bind(now())
        .fetch_one(&self.pool)
        .await?;
        row.try_into()
    }

    async fn set_container(&self, id: Uuid, container_id: &str) -> Result<()> {
        sqlx::query("UPDATE agent_instances SET container_id = ?2, updated_at = ?3 WHERE id = ?1")
            .bind(id)
            .bind(container_id)
            .bind(now())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn set_running(&self, id: Uuid, session_id: &str) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET status = 'running', acp_session_id = ?2, \
             updated_at = ?3 WHERE id = ?1",
        )
        .bind(id)
        .bind(session_id)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn save_progress(
        &self,
        id: Uuid,
        last_seq: i64,
        progress: f64,
        cursor: OutputCursor,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET last_seq = ?2, progress = ?3, stdout_lines = ?4, \
             stderr_lines = ?5, updated_at = ?6 WHERE id = ?1 AND last_seq <= ?2",
        )
        .bind(id)
        .bind(last_seq)
        .bind(progress)
        .bind(lines(cursor.stdout_lines))
        .bind(lines(cursor.stderr_lines))
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn finish(&self, id: Uuid, status: InstanceStatus, outcome: &Outcome) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE agent_instances SET status = ?2, error = ?3, \
             exit_code = coalesce(?4, exit_code), stop_reason = ?5, finished_at = ?6, \
             updated_at = ?6 WHERE id = ?1 AND status IN ('pending', 'starting', 'running')",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(&outcome.error)
        .bind(outcome.exit_code)
        .bind(&outcome.stop_reason)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn save_sync(
        &self,
        id: Uuid,
        last_seq: i64,
        progress: f64,
        cursor: OutputCursor,
        envelope: &serde_json::Value,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET last_seq = ?2, progress = ?3, stdout_lines = ?4, \
             stderr_lines = ?5, sync_event = ?6, updated_at = ?7 \
             WHERE id = ?1 AND last_seq <= ?2",
        )
        .bind(id)
        .bind(last_seq)
        .bind(progress)
        .bind(lines(cursor.stdout_lines))
        .bind(lines(cursor.stderr_lines))
        .bind(Json(envelope))
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn append_logs(&self, id: Uuid, lines: &[LogLine], keep: i64) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        for line in lines {
            sqlx::query(
                "INSERT INTO agent_logs (instance_id, at, stream, line) VALUES (?1, ?2, ?3, ?4)",
            )
            .bind(id)
            .bind(time(line.at))
            .bind(&line.stream)
            .bind(&line.line)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "DELETE FROM agent_logs WHERE instance_id = ?1 AND id <= \
             (SELECT id FROM agent_logs WHERE instance_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        )
        .bind(id)
        .bind(keep)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn tail_logs(&self, id: Uuid, tail: i64) -> Result<Vec<LogLine>> {
        let rows: Vec<(DateTime<Utc>, String, String)> = sqlx::query_as(
            "SELECT at, stream, line FROM (SELECT id, at, stream, line FROM agent_logs \
             WHERE instance_id = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id",
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

    async fn record_exchange(
        &self,
        task_id: Uuid,
        instance_id: Uuid,
        exchange: &Exchange,
        keep: i64,
    ) -> Result<()> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query(
            "INSERT INTO agent_exchanges (task_id, instance_id, prompt, reply) VALUES (?1, ?2, ?3, ?4)",
        )
        .bind(task_id)
        .bind(instance_id)
        .bind(&exchange.prompt)
        .bind(&exchange.reply)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM agent_exchanges WHERE task_id = ?1 AND id <= \
             (SELECT id FROM agent_exchanges WHERE task_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
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
             WHERE task_id = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id",
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
            "SELECT name, updated_at FROM user_secrets WHERE scope = ?1 ORDER BY name",
        )
        .bind(scope)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(name, updated_at)| SecretEntry { name, updated_at })
            .collect())
    }

    async fn put_secret(
        &self,
        scope: &str,
        name: &str,
        nonce: &[u8],
        sealed: &[u8],
        max: i64,
    ) -> Result<SecretEntry> {
        let row: Option<(String, DateTime<Utc>)> = sqlx::query_as(
            "INSERT INTO user_secrets (scope, name, nonce, ciphertext, updated_at) \
             SELECT ?1, ?2, ?3, ?4, ?6 WHERE (SELECT count(*) FROM user_secrets \
               WHERE scope = ?1 AND name <> ?2) < ?5 \
             ON CONFLICT (scope, name) DO UPDATE SET nonce = excluded.nonce, \
               ciphertext = excluded.ciphertext, updated_at = excluded.updated_at \
             RETURNING name, updated_at",
        )
        .bind(scope)
        .bind(name)
        .bind(nonce)
        .bind(sealed)
        .bind(max)
        .bind(now())
        .fetch_optional(&self.pool)
        .await?;
        let (name, updated_at) = row.ok_or_else(|| {
            AgentError::FailedPrecondition(format!("a user keeps at most {max} secrets"))
        })?;
        Ok(SecretEntry { name, updated_at })
    }

    async fn delete_secret(&self, scope: &str, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM user_secrets WHERE scope = ?1 AND name = ?2")
            .bind(scope)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn sealed_secrets(&self, scope: &str) -> Result<Vec<(String, Vec<u8>, Vec<u8>)>> {
        Ok(sqlx::query_as(
            "SELECT name, nonce, ciphertext FROM user_secrets WHERE scope = ?1 ORDER BY name",
        )
        .bind(scope)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
