//! The CI checks of each task's last pushed commit (`task_checks`, see
//! `engine::checks`): watched after a push, polled with backoff until they
//! are complete, read by the task's view. One statement text for both
//! databases (see [`kandev_common::db::dialect`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::Stmt;
use uuid::Uuid;

use super::{ExecDialect, Result, SqlExecStore};
use crate::checks::{Check, CheckState};

/// The checks of a commit as a row holds them (JSON text).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckList(pub Vec<Check>);

impl TryFrom<String> for CheckList {
    type Error = serde_json::Error;

    fn try_from(s: String) -> std::result::Result<Self, Self::Error> {
        serde_json::from_str(&s).map(CheckList)
    }
}

/// One row of `task_checks`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct TaskChecksRow {
    pub task_id: Uuid,
    /// Where the commit was pushed (its forge is looked up by it).
    pub repository_url: String,
    pub sha: String,
    #[sqlx(try_from = "String")]
    pub state: CheckState,
    #[sqlx(try_from = "String")]
    pub checks: CheckList,
    /// Why the last read failed, or empty.
    pub error: String,
    /// How many times the forge was read for this commit.
    pub polls: i32,
    /// When to read it next; `None`: no longer polled.
    pub next_poll_at: Option<DateTime<Utc>>,
    /// When a "Fix CI" follow-up was sent for this commit.
    pub fix_sent_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// The outcome of one read of a commit's checks.
#[derive(Debug, Clone)]
pub struct ChecksPoll<'a> {
    pub state: CheckState,
    pub checks: &'a [Check],
    pub error: &'a str,
    pub polls: i32,
    pub next_poll_at: Option<DateTime<Utc>>,
    pub at: DateTime<Utc>,
}

const COLUMNS: &str = "task_id, repository_url, sha, state, checks, error, polls, next_poll_at, \
     fix_sent_at, updated_at";
const WATCH: &str = "INSERT INTO task_checks (task_id, repository_url, sha, state, checks, error,
         polls, next_poll_at, fix_sent_at, updated_at)
     VALUES ($1, $2, $3, 'pending', '[]', '', 0, $4, NULL, $4)
     ON CONFLICT (task_id) DO UPDATE SET repository_url = excluded.repository_url,
         sha = excluded.sha, state = 'pending', checks = '[]', error = '', polls = 0,
         next_poll_at = excluded.next_poll_at, fix_sent_at = NULL,
         updated_at = excluded.updated_at";
const RECORD: &str = "UPDATE task_checks SET state = $3, checks = $4, error = $5, polls = $6,
         next_poll_at = $7, updated_at = $8
     WHERE task_id = $1 AND sha = $2";
const FIX_SENT: &str = "UPDATE task_checks SET fix_sent_at = $3 WHERE task_id = $1 AND sha = $2";
const DELETE: &str = "DELETE FROM task_checks WHERE task_id = $1";

/// What the engine keeps of tasks' CI checks. Every
/// [`super::ExecutionStore`] is one.
#[async_trait]
pub trait CheckStore: Send + Sync {
    /// Watches the checks of `sha`, just pushed from the task's branch to
    /// `repository_url`: pending, polled from `at`, no fix sent. A commit
    /// watched before is forgotten.
    async fn watch_checks(
        &self,
        task_id: Uuid,
        repository_url: &str,
        sha: &str,
        at: DateTime<Utc>,
    ) -> Result<()>;

    /// Watched commits whose next read is due at `now`, the most overdue
    /// first, at most `limit`.
    async fn checks_due(&self, now: DateTime<Utc>, limit: i64) -> Result<Vec<TaskChecksRow>>;

    /// Records a read of `sha`'s checks; nothing when the task watches
    /// another commit now. Whether it was recorded.
    async fn record_checks(&self, task_id: Uuid, sha: &str, poll: &ChecksPoll<'_>) -> Result<bool>;

    /// The task's watched commit and its checks, if any.
    async fn task_checks(&self, task_id: Uuid) -> Result<Option<TaskChecksRow>>;

    /// A "Fix CI" follow-up went for `sha` at `at`. With `first_only`,
    /// only when none went before (the automation sends one once):
    /// whether it was recorded.
    async fn fix_sent(
        &self,
        task_id: Uuid,
        sha: &str,
        at: DateTime<Utc>,
        first_only: bool,
    ) -> Result<bool>;

    /// The task is gone, and its checks with it.
    async fn drop_checks(&self, task_id: Uuid) -> Result<()>;
}

#[async_trait]
impl<D: ExecDialect> CheckStore for SqlExecStore<D> {
    #[tracing::instrument(skip_all)]
    async fn watch_checks(
        &self,
        task_id: Uuid,
        repository_url: &str,
        sha: &str,
        at: DateTime<Utc>,
    ) -> Result<()> {
        let stmt = Stmt::new(WATCH)
            .bind(task_id)
            .bind(repository_url)
            .bind(sha)
            .bind(at);
        self.db().write(stmt).await.map(drop)
    }

    #[tracing::instrument(skip_all)]
    async fn checks_due(&self, now: DateTime<Utc>, limit: i64) -> Result<Vec<TaskChecksRow>> {
        let stmt = Stmt::new(format!(
            "SELECT {COLUMNS} FROM task_checks
             WHERE next_poll_at IS NOT NULL AND next_poll_at <= $1
             ORDER BY next_poll_at, task_id LIMIT $2"
        ))
        .bind(now)
        .bind(limit);
        self.db().all(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn record_checks(&self, task_id: Uuid, sha: &str, poll: &ChecksPoll<'_>) -> Result<bool> {
        let checks =
            serde_json::to_string(poll.checks).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        let stmt = Stmt::new(RECORD)
            .bind(task_id)
            .bind(sha)
            .bind(poll.state.as_str())
            .bind(checks)
            .bind(poll.error)
            .bind(poll.polls)
            .bind(poll.next_poll_at)
            .bind(poll.at);
        Ok(self.db().write(stmt).await? > 0)
    }

    #[tracing::instrument(skip_all)]
    async fn task_checks(&self, task_id: Uuid) -> Result<Option<TaskChecksRow>> {
        let stmt = Stmt::new(format!(
            "SELECT {COLUMNS} FROM task_checks WHERE task_id = $1"
        ))
        .bind(task_id);
        self.db().optional(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn fix_sent(
        &self,
        task_id: Uuid,
        sha: &str,
        at: DateTime<Utc>,
        first_only: bool,
    ) -> Result<bool> {
        let sql = if first_only {
            format!("{FIX_SENT} AND fix_sent_at IS NULL")
        } else {
            FIX_SENT.to_string()
        };
        let stmt = Stmt::new(sql).bind(task_id).bind(sha).bind(at);
        Ok(self.db().write(stmt).await? > 0)
    }

    #[tracing::instrument(skip_all)]
    async fn drop_checks(&self, task_id: Uuid) -> Result<()> {
        self.db().write(Stmt::new(DELETE).bind(task_id)).await?;
        Ok(())
    }
}
