//! Boards linked to an issue tracker (`tracker_links`) and the task each
//! issue became (`tracker_issues`, one per board and issue number: a
//! webhook and the reconcile never make two). One statement text for both
//! databases (see [`kandev_common::db::dialect`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::Stmt;
use uuid::Uuid;

use super::{ExecDialect, Result, SqlExecStore};

/// A board's link. `webhook_secret` never leaves the orchestrator.
#[derive(Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TrackerLinkRow {
    pub board_id: Uuid,
    /// `github`.
    pub kind: String,
    pub repository_url: String,
    /// `owner/repo` on the forge.
    pub repository: String,
    pub label: String,
    pub agent_type: String,
    pub webhook_secret: String,
    /// The name of one of `created_by`'s secrets whose value is the
    /// forge token the link uses instead of `KANDEV_FORGES`'s; empty: the
    /// forge's. The name only: the value stays in the agent manager.
    pub token_secret: String,
    pub created_by: String,
    pub last_error: String,
    pub last_synced_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for TrackerLinkRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackerLinkRow")
            .field("board_id", &self.board_id)
            .field("kind", &self.kind)
            .field("repository", &self.repository)
            .field("label", &self.label)
            .field("webhook_secret", &"[redacted]")
            .field("token_secret", &self.token_secret)
            .field("last_error", &self.last_error)
            .finish_non_exhaustive()
    }
}

/// The task an issue became (none while it is being made).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TrackerIssueRow {
    pub board_id: Uuid,
    pub number: i64,
    pub task_id: Option<Uuid>,
    pub url: String,
}

const SELECT_LINK: &str = "SELECT board_id, kind, repository_url, repository, label, agent_type, \
     webhook_secret, token_secret, created_by, last_error, last_synced_at, created_at \
     FROM tracker_links";
const UPSERT_LINK: &str = "INSERT INTO tracker_links (board_id, kind, repository_url, repository, \
     label, agent_type, webhook_secret, token_secret, created_by, last_error, last_synced_at, \
     created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, '', NULL, $10)
     ON CONFLICT (board_id) DO UPDATE SET kind = excluded.kind,
         repository_url = excluded.repository_url, repository = excluded.repository,
         label = excluded.label, agent_type = excluded.agent_type,
         webhook_secret = excluded.webhook_secret, token_secret = excluded.token_secret,
         created_by = excluded.created_by,
         last_error = '', last_synced_at = NULL";
const SELECT_ISSUE: &str = "SELECT board_id, number, task_id, url FROM tracker_issues";

/// What the tracker keeps. Every [`super::ExecutionStore`] is one.
#[async_trait]
pub trait TrackerStore: Send + Sync {
    /// Links the board, or replaces its link (its sync starts over: no
    /// error, never synced). The issues it made tasks of stay theirs.
    async fn put_tracker_link(&self, link: &TrackerLinkRow) -> Result<TrackerLinkRow>;

    async fn tracker_link(&self, board_id: Uuid) -> Result<Option<TrackerLinkRow>>;

    /// Every link, oldest first.
    async fn tracker_links(&self) -> Result<Vec<TrackerLinkRow>>;

    /// Unlinks the board (its issues' tasks stay); whether it was linked.
    async fn delete_tracker_link(&self, board_id: Uuid) -> Result<bool>;

    /// The outcome of a sync: `error` empty when it went well.
    async fn tracker_synced(&self, board_id: Uuid, error: &str, at: DateTime<Utc>) -> Result<()>;

    /// Claims the issue for the board: true when no one had (the caller
    /// makes its task), false when it is claimed already.
    async fn claim_issue(&self, board_id: Uuid, number: i64, url: &str) -> Result<bool>;

    /// The task made of a claimed issue.
    async fn issue_task_made(&self, board_id: Uuid, number: i64, task_id: Uuid) -> Result<()>;

    /// Gives up a claim whose task could not be made.
    async fn release_issue(&self, board_id: Uuid, number: i64) -> Result<()>;

    async fn tracker_issue(&self, board_id: Uuid, number: i64) -> Result<Option<TrackerIssueRow>>;

    /// The issue a task was made of, if any.
    async fn issue_of_task(&self, task_id: Uuid) -> Result<Option<TrackerIssueRow>>;
}

#[async_trait]
impl<D: ExecDialect> TrackerStore for SqlExecStore<D> {
    #[tracing::instrument(skip_all)]
    async fn put_tracker_link(&self, link: &TrackerLinkRow) -> Result<TrackerLinkRow> {
        let stmt = Stmt::new(UPSERT_LINK)
            .bind(link.board_id)
            .bind(&link.kind)
            .bind(&link.repository_url)
            .bind(&link.repository)
            .bind(&link.label)
            .bind(&link.agent_type)
            .bind(&link.webhook_secret)
            .bind(&link.token_secret)
            .bind(&link.created_by)
            .bind(link.created_at);
        self.db().write(stmt).await?;
        let stmt = Stmt::new(format!("{SELECT_LINK} WHERE board_id = $1")).bind(link.board_id);
        self.db().one(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn tracker_link(&self, board_id: Uuid) -> Result<Option<TrackerLinkRow>> {
        let stmt = Stmt::new(format!("{SELECT_LINK} WHERE board_id = $1")).bind(board_id);
        self.db().optional(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn tracker_links(&self) -> Result<Vec<TrackerLinkRow>> {
        let stmt = Stmt::new(format!("{SELECT_LINK} ORDER BY created_at, board_id"));
        self.db().all(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn delete_tracker_link(&self, board_id: Uuid) -> Result<bool> {
        let stmt = Stmt::new("DELETE FROM tracker_links WHERE board_id = $1").bind(board_id);
        Ok(self.db().write(stmt).await? > 0)
    }

    #[tracing::instrument(skip_all)]
    async fn tracker_synced(&self, board_id: Uuid, error: &str, at: DateTime<Utc>) -> Result<()> {
        let stmt = Stmt::new(
            "UPDATE tracker_links SET last_error = $2, last_synced_at = $3 WHERE board_id = $1",
        )
        .bind(board_id)
        .bind(error)
        .bind(at);
        self.db().write(stmt).await.map(drop)
    }

    #[tracing::instrument(skip_all)]
    async fn claim_issue(&self, board_id: Uuid, number: i64, url: &str) -> Result<bool> {
        let stmt = Stmt::new(
            "INSERT INTO tracker_issues (board_id, number, task_id, url, claimed_at)
             VALUES ($1, $2, NULL, $3, $4) ON CONFLICT (board_id, number) DO NOTHING",
        )
        .bind(board_id)
        .bind(number)
        .bind(url)
        .bind(Utc::now());
        Ok(self.db().write(stmt).await? > 0)
    }

    #[tracing::instrument(skip_all)]
    async fn issue_task_made(&self, board_id: Uuid, number: i64, task_id: Uuid) -> Result<()> {
        let stmt =
            Stmt::new("UPDATE tracker_issues SET task_id = $3 WHERE board_id = $1 AND number = $2")
                .bind(board_id)
                .bind(number)
                .bind(task_id);
        self.db().write(stmt).await.map(drop)
    }

    #[tracing::instrument(skip_all)]
    async fn release_issue(&self, board_id: Uuid, number: i64) -> Result<()> {
        let stmt = Stmt::new(
            "DELETE FROM tracker_issues WHERE board_id = $1 AND number = $2 AND task_id IS NULL",
        )
        .bind(board_id)
        .bind(number);
        self.db().write(stmt).await.map(drop)
    }

    #[tracing::instrument(skip_all)]
    async fn tracker_issue(&self, board_id: Uuid, number: i64) -> Result<Option<TrackerIssueRow>> {
        let stmt = Stmt::new(format!(
            "{SELECT_ISSUE} WHERE board_id = $1 AND number = $2"
        ))
        .bind(board_id)
        .bind(number);
        self.db().optional(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn issue_of_task(&self, task_id: Uuid) -> Result<Option<TrackerIssueRow>> {
        let stmt = Stmt::new(format!("{SELECT_ISSUE} WHERE task_id = $1")).bind(task_id);
        self.db().optional(stmt).await
    }
}
