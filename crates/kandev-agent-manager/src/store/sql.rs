//! [`SqlAgentStore`]: the one [`AgentStore`], for either database
//! ([`PgAgentStore`](super::PgAgentStore),
//! [`SqliteAgentStore`](super::SqliteAgentStore)). Each statement is
//! written once (`$N` parameters, which SQLite takes too); what the
//! databases do differently is the shared [`Dialect`]: how a change
//! begins, how a time and a list bind. Every time is bound by the store,
//! so neither database's clock or column default decides one.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::{
    db::{Dialect, Reader, Stmt, dialect::param_list},
    text::without_nul,
};
use kandev_events::agent::OutputCursor;
use sqlx::{Database, Pool};
use uuid::Uuid;

use super::{
    AgentStore, Exchange, INSTANCE_COLUMNS, LaunchFields, Outcome, Position, TYPE_COLUMNS, TypeRow,
    lines,
};
use crate::domain::SecretEntry;
use crate::domain::{AgentError, AgentInstance, AgentType, InstanceStatus, LogLine, Result};

/// The agent manager's tables in database `D`.
pub struct SqlAgentStore<D: Database> {
    pub(super) pool: Pool<D>,
    /// Instances are this manager's (see migration 0010).
    manager_id: String,
}

impl<D: Database> Clone for SqlAgentStore<D> {
    fn clone(&self) -> Self {
        SqlAgentStore {
            pool: self.pool.clone(),
            manager_id: self.manager_id.clone(),
        }
    }
}

impl<D: Database> std::fmt::Debug for SqlAgentStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlAgentStore")
            .field("database", &D::NAME)
            .field("manager_id", &self.manager_id)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlAgentStore<D> {
    /// The store of the manager `manager_id` over a pool of a migrated
    /// database: the registry and secrets are shared by every manager on
    /// it, instances are its own.
    pub fn new(pool: Pool<D>, manager_id: &str) -> Self {
        SqlAgentStore {
            pool,
            manager_id: manager_id.to_string(),
        }
    }

    pub(super) fn db(&self) -> Reader<'_, D> {
        Reader(&self.pool)
    }

    async fn instance(&self, stmt: Stmt) -> Result<AgentInstance> {
        Ok(self.db().one(stmt).await?)
    }

    async fn instances(&self, stmt: Stmt) -> Result<Vec<AgentInstance>> {
        Ok(self.db().all(stmt).await?)
    }

    async fn write(&self, stmt: Stmt) -> Result<()> {
        self.db().write(stmt).await?;
        Ok(())
    }
}

/// Instances of this manager (`$1`), and those from before managers had ids.
const MINE: &str = "manager_id IN ($1, '')";

const UPSERT_TYPE: &str = "ON CONFLICT (id) DO UPDATE SET name = excluded.name, \
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
     updated_at = excluded.updated_at";

/// Keeps the newest `$2` rows of `table` whose `column` is `$1`.
fn keep_newest(table: &str, column: &str) -> String {
    format!(
        "DELETE FROM {table} WHERE {column} = $1 AND id <= \
         (SELECT id FROM {table} WHERE {column} = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)"
    )
}

/// Log lines per `INSERT`: well under both databases' parameter limits.
const LOG_ROWS_PER_INSERT: usize = 500;

fn type_stmt(t: &AgentType) -> Stmt {
    let values = param_list(1, 24);
    Stmt::new(format!(
        "INSERT INTO agent_types ({TYPE_COLUMNS}, created_at, updated_at) VALUES ({values}, $24) \
         {UPSERT_TYPE} RETURNING {TYPE_COLUMNS}"
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
    .bind(Utc::now())
}

#[async_trait]
impl<D: Dialect> AgentStore for SqlAgentStore<D> {
    #[tracing::instrument(skip_all)]
    async fn ping(&self) -> Result<()> {
        let _: Vec<(i32,)> = self.db().all(Stmt::new("SELECT 1")).await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn list_types(&self, include_disabled: bool) -> Result<Vec<AgentType>> {
        let stmt = Stmt::new(format!(
            "SELECT {TYPE_COLUMNS} FROM agent_types WHERE enabled OR $1 ORDER BY id"
        ))
        .bind(include_disabled);
        let rows: Vec<TypeRow> = self.db().all(stmt).await?;
        rows.into_iter().map(AgentType::try_from).collect()
    }

    #[tracing::instrument(skip_all)]
    async fn get_type(&self, id: &str) -> Result<AgentType> {
        // An id no type can have (a NUL, say) is not looked up.
        if !crate::domain::type_id_ok(id) {
            return Err(AgentError::NotFound(format!("agent type {id:?}")));
        }
        let stmt = Stmt::new(format!(
            "SELECT {TYPE_COLUMNS} FROM agent_types WHERE id = $1"
        ))
        .bind(id);
        let row: Option<TypeRow> = self.db().optional(stmt).await?;
        row.ok_or_else(|| AgentError::NotFound(format!("agent type {id:?}")))?
            .try_into()
    }

    #[tracing::instrument(skip_all)]
    async fn upsert_type(&self, t: &AgentType) -> Result<AgentType> {
        let row: TypeRow = self.db().one(type_stmt(t)).await?;
        row.try_into()
    }

    #[tracing::instrument(skip_all)]
    async fn create_instance(
        &self,
        id: Uuid,
        task_id: Uuid,
        agent_type: &str,
        launch: &LaunchFields<'_>,
    ) -> Result<AgentInstance> {
        let stmt = Stmt::new(format!(
            "INSERT INTO agent_instances \
             (manager_id, id, task_id, agent_type, status, priority, metadata, home_scope, \
              created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, $8) RETURNING {INSTANCE_COLUMNS}"
        ))
        .bind(&self.manager_id)
        .bind(id)
        .bind(task_id)
        .bind(agent_type)
        .bind(launch.priority)
        .bind(launch.metadata)
        .bind(launch.home_scope)
        .bind(Utc::now());
        self.instance(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn get_instance(&self, id: Uuid) -> Result<AgentInstance> {
        let stmt = Stmt::new(format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances WHERE {MINE} AND id = $2"
        ))
        .bind(&self.manager_id)
        .bind(id);
        self.db()
            .optional(stmt)
            .await?
            .ok_or_else(|| AgentError::NotFound(format!("agent instance {id}")))
    }

    #[tracing::instrument(skip_all)]
    async fn list_instances(&self, task_id: Option<Uuid>) -> Result<Vec<AgentInstance>> {
        let stmt = Stmt::new(format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances \
             WHERE {MINE} AND ($2 IS NULL OR task_id = $2) \
             ORDER BY created_at, id LIMIT 1000"
        ))
        .bind(&self.manager_id)
        .bind(task_id);
        self.instances(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn active_instances(&self) -> Result<Vec<AgentInstance>> {
        let stmt = Stmt::new(format!(
            "SELECT {INSTANCE_COLUMNS} FROM agent_instances \
             WHERE {MINE} AND status IN ('pending', 'starting', 'running')"
        ))
        .bind(&self.manager_id);
        self.instances(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn count_active(&self) -> Result<i64> {
        let stmt = Stmt::new(format!(
            "SELECT count(*) FROM agent_instances \
             WHERE {MINE} AND status IN ('pending', 'starting', 'running')"
        ))
        .bind(&self.manager_id);
        let (count,): (i64,) = self.db().one(stmt).await?;
        Ok(count)
    }

    #[tracing::instrument(skip_all)]
    async fn set_workspace(&self, id: Uuid, path: &str, owned: bool) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE agent_instances SET workspace_path = $2, workspace_owned = $3, \
             updated_at = $4 WHERE id = $1",
        )
        .bind(id)
        .bind(path)
        .bind(owned)
        .bind(Utc::now());
        self.write(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn begin_turn(&self, id: Uuid) -> Result<AgentInstance> {
        let stmt = Stmt::new(format!(
            "UPDATE agent_instances SET status = 'starting', error = '', exit_code = NULL, \
             stop_reason = '', finished_at = NULL, started_at = coalesce(started_at, $2), \
             stdout_lines = 0, stderr_lines = 0, sync_event = NULL, \
             turns = turns + 1, updated_at = $2 WHERE id = $1 RETURNING {INSTANCE_COLUMNS}"
        ))
        .bind(id)
        .bind(Utc::now());
        self.instance(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn set_container(&self, id: Uuid, container_id: &str) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE agent_instances SET container_id = $2, updated_at = $3 WHERE id = $1",
        )
        .bind(id)
        .bind(container_id)
        .bind(Utc::now());
        self.write(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn set_running(&self, id: Uuid, session_id: &str) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE agent_instances SET status = 'running', acp_session_id = $2, \
             updated_at = $3 WHERE id = $1",
        )
        .bind(id)
        .bind(session_id)
        .bind(Utc::now());
        self.write(stmt).await
    }

    #[tracing::instrument(skip_all, fields(instances = positions.len()))]
    async fn save_progress(&self, positions: &[Position]) -> Result<()> {
        for some in positions.chunks(POSITIONS_PER_UPDATE) {
            let stmt = some.iter().fold(
                Stmt::new(save_progress(some.len())).bind(Utc::now()),
                |stmt, p| {
                    stmt.bind(p.id)
                        .bind(p.last_seq)
                        .bind(p.progress)
                        .bind(lines(p.cursor.stdout_lines))
                        .bind(lines(p.cursor.stderr_lines))
                },
            );
            self.write(stmt).await?;
        }
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn finish(&self, id: Uuid, status: InstanceStatus, outcome: &Outcome) -> Result<bool> {
        let stmt = Stmt::new(
            "UPDATE agent_instances SET status = $2, error = $3, \
             exit_code = coalesce($4, exit_code), stop_reason = $5, finished_at = $6, \
             updated_at = $6 WHERE id = $1 AND status IN ('pending', 'starting', 'running')",
        )
        .bind(id)
        .bind(status.as_str())
        // An agent's error text may hold NUL, which Postgres refuses.
        .bind(without_nul(&outcome.error).into_owned())
        .bind(outcome.exit_code)
        .bind(without_nul(&outcome.stop_reason).into_owned())
        .bind(Utc::now());
        Ok(self.db().write(stmt).await? == 1)
    }

    #[tracing::instrument(skip_all)]
    async fn save_sync(
        &self,
        id: Uuid,
        last_seq: i64,
        progress: f64,
        cursor: OutputCursor,
        envelope: &serde_json::Value,
    ) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE agent_instances SET last_seq = $2, progress = $3, stdout_lines = $4, \
             stderr_lines = $5, sync_event = $6, updated_at = $7 \
             WHERE id = $1 AND last_seq <= $2",
        )
        .bind(id)
        .bind(last_seq)
        .bind(progress)
        .bind(lines(cursor.stdout_lines))
        .bind(lines(cursor.stderr_lines))
        .bind(envelope)
        .bind(Utc::now());
        self.write(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn append_logs(&self, id: Uuid, lines: &[LogLine], keep: i64) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut tx = D::begin(&self.pool).await?;
        for chunk in lines.chunks(LOG_ROWS_PER_INSERT) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| format!("($1, {})", param_list(2 + 3 * i, 3)))
                .collect();
            let sql = format!(
                "INSERT INTO agent_logs (instance_id, at, stream, line) VALUES {}",
                rows.join(", ")
            );
            let stmt = chunk.iter().fold(Stmt::new(sql).bind(id), |s, l| {
                s.bind(l.at)
                    .bind(l.stream.as_str())
                    .bind(without_nul(&l.line).into_owned())
            });
            D::write(&mut tx, stmt).await?;
        }
        let trim = Stmt::new(keep_newest("agent_logs", "instance_id"))
            .bind(id)
            .bind(keep);
        D::write(&mut tx, trim).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn tail_logs(&self, id: Uuid, tail: i64) -> Result<Vec<LogLine>> {
        let stmt = Stmt::new(
            "SELECT at, stream, line FROM (SELECT id, at, stream, line FROM agent_logs \
             WHERE instance_id = $1 ORDER BY id DESC LIMIT $2) t ORDER BY id",
        )
        .bind(id)
        .bind(tail);
        let rows: Vec<(DateTime<Utc>, String, String)> = self.db().all(stmt).await?;
        Ok(rows
            .into_iter()
            .map(|(at, stream, line)| LogLine { at, stream, line })
            .collect())
    }

    #[tracing::instrument(skip_all)]
    async fn record_exchange(
        &self,
        task_id: Uuid,
        instance_id: Uuid,
        exchange: &Exchange,
        keep: i64,
    ) -> Result<()> {
        let mut tx = D::begin(&self.pool).await?;
        let stmt = Stmt::new(
            "INSERT INTO agent_exchanges (task_id, instance_id, prompt, reply) VALUES ($1, $2, $3, $4)",
        )
        .bind(task_id)
        .bind(instance_id)
        .bind(without_nul(&exchange.prompt).into_owned())
        .bind(without_nul(&exchange.reply).into_owned());
        D::write(&mut tx, stmt).await?;
        let trim = Stmt::new(keep_newest("agent_exchanges", "task_id"))
            .bind(task_id)
            .bind(keep);
        D::write(&mut tx, trim).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn exchanges(&self, task_id: Uuid, limit: i64) -> Result<Vec<Exchange>> {
        let stmt = Stmt::new(
            "SELECT prompt, reply FROM (SELECT id, prompt, reply FROM agent_exchanges \
             WHERE task_id = $1 ORDER BY id DESC LIMIT $2) t ORDER BY id",
        )
        .bind(task_id)
        .bind(limit);
        let rows: Vec<(String, String)> = self.db().all(stmt).await?;
        Ok(rows
            .into_iter()
            .map(|(prompt, reply)| Exchange { prompt, reply })
            .collect())
    }

    // ---- users' secrets (sealed by `credentials`) ----

    #[tracing::instrument(skip_all)]
    async fn list_secrets(&self, scope: &str) -> Result<Vec<SecretEntry>> {
        let stmt =
            Stmt::new("SELECT name, updated_at FROM user_secrets WHERE scope = $1 ORDER BY name")
                .bind(scope);
        let rows: Vec<(String, DateTime<Utc>)> = self.db().all(stmt).await?;
        Ok(rows
            .into_iter()
            .map(|(name, updated_at)| SecretEntry { name, updated_at })
            .collect())
    }

    #[tracing::instrument(skip_all)]
    async fn put_secret(
        &self,
        scope: &str,
        name: &str,
        nonce: &[u8],
        sealed: &[u8],
        max: i64,
    ) -> Result<SecretEntry> {
        let stmt = Stmt::new(
            "INSERT INTO user_secrets (scope, name, nonce, ciphertext, updated_at) \
             SELECT $1, $2, $3, $4, $6 WHERE (SELECT count(*) FROM user_secrets \
               WHERE scope = $1 AND name <> $2) < $5 \
             ON CONFLICT (scope, name) DO UPDATE SET nonce = excluded.nonce, \
               ciphertext = excluded.ciphertext, updated_at = excluded.updated_at \
             RETURNING name, updated_at",
        )
        .bind(scope)
        .bind(name)
        .bind(nonce)
        .bind(sealed)
        .bind(max)
        .bind(Utc::now());
        let row: Option<(String, DateTime<Utc>)> = self.db().optional(stmt).await?;
        let (name, updated_at) = row.ok_or_else(|| {
            AgentError::FailedPrecondition(format!("a user keeps at most {max} secrets"))
        })?;
        Ok(SecretEntry { name, updated_at })
    }

    #[tracing::instrument(skip_all)]
    async fn delete_secret(&self, scope: &str, name: &str) -> Result<bool> {
        let stmt = Stmt::new("DELETE FROM user_secrets WHERE scope = $1 AND name = $2")
            .bind(scope)
            .bind(name);
        Ok(self.db().write(stmt).await? > 0)
    }

    #[tracing::instrument(skip_all)]
    async fn sealed_secrets(&self, scope: &str) -> Result<Vec<(String, Vec<u8>, Vec<u8>)>> {
        let stmt = Stmt::new(
            "SELECT name, nonce, ciphertext FROM user_secrets WHERE scope = $1 ORDER BY name",
        )
        .bind(scope);
        Ok(self.db().all(stmt).await?)
    }

    #[tracing::instrument(skip_all)]
    async fn list_profiles(
        &self,
        scope: &str,
        agent_type: Option<&str>,
    ) -> Result<Vec<crate::profiles::spec::AgentProfile>> {
        self.profiles_list(scope, agent_type).await
    }

    #[tracing::instrument(skip_all)]
    async fn get_profile(&self, id: Uuid) -> Result<Option<crate::profiles::spec::AgentProfile>> {
        self.profiles_get(id).await
    }

    #[tracing::instrument(skip_all)]
    async fn put_profile(&self, profile: &crate::profiles::spec::AgentProfile) -> Result<()> {
        self.profiles_put(profile).await
    }

    #[tracing::instrument(skip_all)]
    async fn delete_profile(&self, id: Uuid) -> Result<bool> {
        self.profiles_delete(id).await
    }

    #[tracing::instrument(skip_all)]
    async fn close(&self) {
        self.pool.close().await;
    }
}

/// How many positions one statement stores (5 parameters each, far below
/// either database's limit).
const POSITIONS_PER_UPDATE: usize = 500;

/// The statement storing `rows` positions: `$1` the time, then five
/// parameters per instance (id, seq, progress, stdout and stderr lines).
/// A `VALUES` list's columns are `column1`… in both databases.
fn save_progress(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| format!("({})", param_list(2 + r * 5, 5)))
        .collect();
    format!(
        "UPDATE agent_instances SET last_seq = v.column2, progress = v.column3, \
         stdout_lines = v.column4, stderr_lines = v.column5, updated_at = $1 \
         FROM (VALUES {}) AS v \
         WHERE agent_instances.id = v.column1 AND agent_instances.last_seq <= v.column2",
        values.join(", ")
    )
}
