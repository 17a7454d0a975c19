//! The follow-ups held while a task's run is busy with a turn
//! (`pending_prompts`): sent together when the turn ends, editable and
//! cancellable until then (see `engine::followups`). One statement text for
//! both databases (SQLite reads `$n` as the n-th bound value); only the
//! bound time differs: Postgres takes `timestamptz`, SQLite the text
//! [`time`] stores.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::sqlite::time;
use uuid::Uuid;

use super::{PgExecStore, Result, SqliteExecStore};

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

/// The store's methods over one pool type; `$stamp` turns a time into what
/// the database binds.
macro_rules! follow_up_store {
    ($store:ty, $stamp:expr) => {
        #[async_trait]
        impl FollowUpStore for $store {
            async fn hold_prompt(
                &self,
                task_id: Uuid,
                author: &str,
                text: &str,
            ) -> Result<PendingPrompt> {
                let held = PendingPrompt {
                    id: Uuid::now_v7(),
                    task_id,
                    text: text.to_string(),
                    author: author.to_string(),
                    queued_at: Utc::now(),
                };
                sqlx::query(INSERT)
                    .bind(held.id)
                    .bind(task_id)
                    .bind(&held.text)
                    .bind(&held.author)
                    .bind(($stamp)(held.queued_at))
                    .execute(&self.pool)
                    .await?;
                Ok(held)
            }

            async fn pending_prompts(&self, task_id: Uuid) -> Result<Vec<PendingPrompt>> {
                sqlx::query_as(&format!("{SELECT} WHERE task_id = $1 {ORDER}"))
                    .bind(task_id)
                    .fetch_all(&self.pool)
                    .await
            }

            async fn edit_pending_prompt(
                &self,
                task_id: Uuid,
                id: Uuid,
                text: &str,
            ) -> Result<Option<PendingPrompt>> {
                sqlx::query(UPDATE)
                    .bind(task_id)
                    .bind(id)
                    .bind(text)
                    .execute(&self.pool)
                    .await?;
                sqlx::query_as(&format!("{SELECT} WHERE task_id = $1 AND id = $2"))
                    .bind(task_id)
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await
            }

            async fn drop_pending_prompt(&self, task_id: Uuid, id: Uuid) -> Result<bool> {
                let done = sqlx::query(DELETE_ONE)
                    .bind(task_id)
                    .bind(id)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn drop_pending_prompts(&self, task_id: Uuid) -> Result<()> {
                sqlx::query(DELETE_ALL)
                    .bind(task_id)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }
        }
    };
}

follow_up_store!(PgExecStore, |at: DateTime<Utc>| at);
follow_up_store!(SqliteExecStore, time);
