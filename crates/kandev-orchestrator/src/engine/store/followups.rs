//! The follow-ups held while a task's run is busy with a turn
//! (`pending_prompts`): sent together when the turn ends, editable and
//! cancellable until then (see `engine::followups`). One statement text for
//! both databases (see [`kandev_common::db::dialect`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::Stmt;
use uuid::Uuid;

use super::{ExecDialect, Result, SqlExecStore};

/// One held follow-up.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PendingPrompt {
    pub id: Uuid,
    pub task_id: Uuid,
    pub text: String,
    /// The run's user who sent it: it goes only to a run of theirs.
    pub author: String,
    pub queued_at: DateTime<Utc>,
}

const INSERT: &str = "INSERT INTO pending_prompts (id, task_id, text, author, queued_at)
     VALUES ($1, $2, $3, $4, $5)";
const SELECT: &str = "SELECT id, task_id, text, author, queued_at FROM pending_prompts";
/// In the order they came: ids are UUIDv7s made one after the other by the
/// engine, under its lock.
const ORDER: &str = "ORDER BY id";
const UPDATE: &str = "UPDATE pending_prompts SET text = $3 WHERE task_id = $1 AND id = $2";
const DELETE_ONE: &str = "DELETE FROM pending_prompts WHERE task_id = $1 AND id = $2";
const DELETE_ALL: &str = "DELETE FROM pending_prompts WHERE task_id = $1";

/// What the engine keeps of held follow-ups. Every
/// [`super::ExecutionStore`] is one.
#[async_trait]
pub trait FollowUpStore: Send + Sync {
    /// Holds `text` by `author` as the task's next follow-up, after those
    /// already held.
    async fn hold_prompt(&self, task_id: Uuid, author: &str, text: &str) -> Result<PendingPrompt>;

    /// The task's held follow-ups, in the order they came.
    async fn pending_prompts(&self, task_id: Uuid) -> Result<Vec<PendingPrompt>>;

    /// Replaces the text of a held follow-up; `None` when the task holds
    /// no such follow-up (it was sent, or cancelled).
    async fn edit_pending_prompt(
        &self,
        task_id: Uuid,
        id: Uuid,
        text: &str,
    ) -> Result<Option<PendingPrompt>>;

    /// Forgets a held follow-up (cancelled, or sent); whether it was held.
    async fn drop_pending_prompt(&self, task_id: Uuid, id: Uuid) -> Result<bool>;

    /// The task is gone, and its held follow-ups with it.
    async fn drop_pending_prompts(&self, task_id: Uuid) -> Result<()>;
}

#[async_trait]
impl<D: ExecDialect> FollowUpStore for SqlExecStore<D> {
    #[tracing::instrument(skip_all)]
    async fn hold_prompt(&self, task_id: Uuid, author: &str, text: &str) -> Result<PendingPrompt> {
        let held = PendingPrompt {
            id: Uuid::now_v7(),
            task_id,
            text: text.to_string(),
            author: author.to_string(),
            queued_at: Utc::now(),
        };
        let stmt = Stmt::new(INSERT)
            .bind(held.id)
            .bind(task_id)
            .bind(&held.text)
            .bind(&held.author)
            .bind(held.queued_at);
        self.db().write(stmt).await?;
        Ok(held)
    }

    #[tracing::instrument(skip_all)]
    async fn pending_prompts(&self, task_id: Uuid) -> Result<Vec<PendingPrompt>> {
        let stmt = Stmt::new(format!("{SELECT} WHERE task_id = $1 {ORDER}")).bind(task_id);
        self.db().all(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn edit_pending_prompt(
        &self,
        task_id: Uuid,
        id: Uuid,
        text: &str,
    ) -> Result<Option<PendingPrompt>> {
        let stmt = Stmt::new(UPDATE).bind(task_id).bind(id).bind(text);
        self.db().write(stmt).await?;
        let stmt = Stmt::new(format!("{SELECT} WHERE task_id = $1 AND id = $2"))
            .bind(task_id)
            .bind(id);
        self.db().optional(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn drop_pending_prompt(&self, task_id: Uuid, id: Uuid) -> Result<bool> {
        let stmt = Stmt::new(DELETE_ONE).bind(task_id).bind(id);
        Ok(self.db().write(stmt).await? > 0)
    }

    #[tracing::instrument(skip_all)]
    async fn drop_pending_prompts(&self, task_id: Uuid) -> Result<()> {
        self.db().write(Stmt::new(DELETE_ALL).bind(task_id)).await?;
        Ok(())
    }
}
