//! Postgres storage of agent types, instances and their logs.

use chrono::{DateTime, Utc};
use kandev_common::text::without_nul;
use kandev_events::agent::OutputCursor;
use sqlx::PgPool;
use uuid::Uuid;

use crate::credentials::SecretEntry;
use crate::domain::{
    AgentError, AgentInstance, AgentType, CredentialMounts, InstanceStatus, LogLine,
    PermissionPolicyKind, Result,
};

/// The agent manager's tables.
#[derive(Debug, Clone)]
pub struct Store {
    pool: PgPool,
    /// Instances are this manager's (see migration 0010).
    manager_id: String,
}

#[derive(sqlx::FromRow)]
struct TypeRow {
    id: String,
    name: String,
    description: String,
    image: String,
    command: Vec<String>,
    working_dir: String,
    memory_mb: i64,
    cpu_cores: f64,
    pids_limit: i64,
    timeout_seconds: i64,
    capabilities: Vec<String>,
    required_env: Vec<String>,
    optional_env: Vec<String>,
    mount_ssh: bool,
    mount_gitconfig: bool,
    mount_git_credentials: bool,
    network_mode: String,
    permission_policy: String,
    enabled: bool,
    home_volume: String,
    internal: bool,
    host_credentials: bool,
}

impl TryFrom<TypeRow> for AgentType {
    type Error = AgentError;

    fn try_from(r: TypeRow) -> Result<AgentType> {
        Ok(AgentType {
            id: r.id,
            name: r.name,
            description: r.description,
            image: r.image,
            command: r.command,
            working_dir: r.working_dir,
            memory_mb: r.memory_mb,
            cpu_cores: r.cpu_cores,
            pids_limit: r.pids_limit,
            timeout_seconds: r.timeout_seconds,
            capabilities: r.capabilities,
            required_env: r.required_env,
            optional_env: r.optional_env,
            credential_mounts: CredentialMounts {
                ssh: r.mount_ssh,
                gitconfig: r.mount_gitconfig,
                git_credentials: r.mount_git_credentials,
            },
            network_mode: r.network_mode,
            permission_policy: PermissionPolicyKind::parse(&r.permission_policy)
                .map_err(|e| AgentError::Internal(e.to_string()))?,
            enabled: r.enabled,
            home_volume: r.home_volume,
            internal: r.internal,
            host_credentials: r.host_credentials,
        })
    }
}

const TYPE_COLUMNS: &str = "id, name, description, image, command, working_dir, memory_mb, \
    cpu_cores, pids_limit, timeout_seconds, capabilities, required_env, optional_env, mount_ssh, \
    mount_gitconfig, mount_git_credentials, network_mode, permission_policy, enabled, home_volume, internal, \
    host_credentials";

#[derive(sqlx::FromRow)]
struct InstanceRow {
    id: Uuid,
    task_id: Uuid,
    agent_type: String,
    status: String,
    container_id: String,
    acp_session_id: String,
    workspace_path: String,
    workspace_owned: bool,
    exit_code: Option<i64>,
    error: String,
    stop_reason: String,
    progress: f64,
    last_seq: i64,
    turns: i64,
    stdout_lines: i64,
    stderr_lines: i64,
    sync_event: Option<serde_json::Value>,
    priority: i32,
    metadata: serde_json::Value,
    home_scope: String,
    created_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
}

impl TryFrom<InstanceRow> for AgentInstance {
    type Error = AgentError;

    fn try_from(r: InstanceRow) -> Result<AgentInstance> {
        Ok(AgentInstance {
            id: r.id,
            task_id: r.task_id,
            agent_type: r.agent_type,
            status: InstanceStatus::parse(&r.status)?,
            container_id: r.container_id,
            acp_session_id: r.acp_session_id,
            workspace_path: r.workspace_path,
            workspace_owned: r.workspace_owned,
            exit_code: r.exit_code,
            error: r.error,
            stop_reason: r.stop_reason,
            progress: r.progress,
            last_seq: r.last_seq,
            turns: r.turns,
            cursor: OutputCursor {
                stdout_lines: u64::try_from(r.stdout_lines).unwrap_or(0),
                stderr_lines: u64::try_from(r.stderr_lines).unwrap_or(0),
            },
            sync_event: r.sync_event,
            priority: r.priority,
            home_scope: r.home_scope,
            metadata: match r.metadata {
                serde_json::Value::Object(map) => map,
                other => {
                    return Err(AgentError::Internal(format!(
                        "instance metadata is not an object: {other}"
                    )));
                }
            },
            created_at: r.created_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
        })
    }
}

const INSTANCE_COLUMNS: &str = "id, task_id, agent_type, status, container_id, acp_session_id, \
    workspace_path, workspace_owned, exit_code, error, stop_reason, progress, last_seq, turns, \
    stdout_lines, stderr_lines, sync_event, priority, metadata, home_scope, created_at, started_at, finished_at";

/// What a launch request keeps on its new instance.
#[derive(Debug, Clone, Copy)]
pub struct LaunchFields<'a> {
    pub priority: i32,
    pub metadata: &'a serde_json::Map<String, serde_json::Value>,
    /// Whose agent home volume the instance uses.
    pub home_scope: &'a str,
}

/// How an instance ended.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub error: String,
    pub exit_code: Option<i64>,
    pub stop_reason: String,
}

impl Store {
    /// The store of the manager `manager_id`: the registry and secrets are
    /// shared by every manager on the schema, instances are its own.
    pub fn new(pool: PgPool, manager_id: &str) -> Self {
        Store {
            pool,
            manager_id: manager_id.to_string(),
        }
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn list_types(&self, include_disabled: bool) -> Result<Vec<AgentType>> {
        let rows: Vec<TypeRow> = sqlx::query_as(&format!(
            "SELECT {TYPE_COLUMNS} FROM agent_types WHERE enabled OR $1 ORDER BY id"
        ))
        .bind(include_disabled)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AgentType::try_from).collect()
    }

    pub async fn get_type(&self, id: &str) -> Result<AgentType> {
        let row: Option<TypeRow> = sqlx::query_as(&format!(
            "SELECT {TYPE_COLUMNS} FROM agent_types WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| AgentError::NotFound(format!("agent type {id:?}")))?
            .try_into()
    }

    pub async fn upsert_type(&self, t: &AgentType) -> Result<AgentType> {
        let row: TypeRow = sqlx::query_as(&format!(
            "INSERT INTO agent_types ({TYPE_COLUMNS}) VALUES \
             ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22) \
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
             host_credentials = EXCLUDED.host_credentials, updated_at = now() RETURNING {TYPE_COLUMNS}"
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
        .fetch_one(&self.pool)
        .await?;
        row.try_into()
    }

    pub async fn create_instance(
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

    pub async fn get_instance(&self, id: Uuid) -> Result<AgentInstance> {
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
    pub async fn list_instances(&self, task_id: Option<Uuid>) -> Result<Vec<AgentInstance>> {
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
    pub async fn active_instances(&self) -> Result<Vec<AgentInstance>> {
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
    pub async fn count_active(&self) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM agent_instances \
             WHERE status IN ('pending', 'starting', 'running') AND manager_id IN ($1, '')",
        )
        .bind(&self.manager_id)
        .fetch_one(&self.pool)
        .await?)
    }

    pub async fn set_workspace(&self, id: Uuid, path: &str, owned: bool) -> Result<()> {
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
    pub async fn begin_turn(&self, id: Uuid) -> Result<AgentInstance> {
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

    pub async fn set_container(&self, id: Uuid, container_id: &str) -> Result<()> {
        sqlx::query(
            "UPDATE agent_instances SET container_id = $2, updated_at = now() WHERE id = $1",
        )
        .bind(id)
        .bind(container_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn set_running(&self, id: Uuid, session_id: &str) -> Result<()> {
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
    pub async fn save_progress(
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
    pub async fn finish(
        &self,
        id: Uuid,
        status: InstanceStatus,
        outcome: &Outcome,
    ) -> Result<bool> {
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
    pub async fn save_sync(
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
    pub async fn append_logs(&self, id: Uuid, lines: &[LogLine], keep: i64) -> Result<()> {
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
    pub async fn tail_logs(&self, id: Uuid, tail: i64) -> Result<Vec<LogLine>> {
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

    pub async fn list_secrets(&self, scope: &str) -> Result<Vec<SecretEntry>> {
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
    pub async fn put_secret(
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
    pub async fn delete_secret(&self, scope: &str, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM user_secrets WHERE scope = $1 AND name = $2")
            .bind(scope)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// `(name, nonce, ciphertext)` of each of a user's secrets.
    pub async fn sealed_secrets(&self, scope: &str) -> Result<Vec<(String, Vec<u8>, Vec<u8>)>> {
        Ok(sqlx::query_as(
            "SELECT name, nonce, ciphertext FROM user_secrets WHERE scope = $1 ORDER BY name",
        )
        .bind(scope)
        .fetch_all(&self.pool)
        .await?)
    }
}

fn lines(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
