//! The review comments a reviewer left with each "Request changes"
//! (`review_comments`), kept so the diff shows them on later rounds and
//! each can be resolved. One statement text for both databases (see
//! [`kandev_common::db::dialect`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::{Stmt, dialect::fetch_one};
use uuid::Uuid;

use super::{ExecDialect, Result, SqlExecStore};

/// Which side of the diff a line comment is on: the file after the change
/// (added and unchanged lines), or before it (removed lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    New,
    Old,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::New => "new",
            Side::Old => "old",
        }
    }

    /// The stored or wire form; anything else is an error.
    pub fn parse(s: &str) -> std::result::Result<Side, String> {
        match s {
            "new" => Ok(Side::New),
            "old" => Ok(Side::Old),
            other => Err(format!("side must be new or old, not {other:?}")),
        }
    }
}

impl TryFrom<String> for Side {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Side, String> {
        Side::parse(&s)
    }
}

/// One comment of a round, as the reviewer wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReviewComment {
    /// The file commented on; empty: the whole change.
    pub path: String,
    /// The line (1-based) on `side`; none: the whole file.
    pub line: Option<u32>,
    pub side: Side,
    /// The commented line's text when the comment was made (empty when
    /// unknown): a later diff whose line differs shows it as outdated.
    pub line_text: String,
    pub body: String,
}

/// A kept comment.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReviewCommentRow {
    pub id: Uuid,
    pub task_id: Uuid,
    /// 1 for the task's first "Request changes", then 2, …
    pub round: i32,
    pub path: String,
    pub line: Option<i32>,
    #[sqlx(try_from = "String")]
    pub side: Side,
    pub line_text: String,
    pub body: String,
    pub author: String,
    pub created_at: DateTime<Utc>,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<DateTime<Utc>>,
}

const NEXT_ROUND: &str =
    "SELECT coalesce(max(round), 0) + 1 FROM review_comments WHERE task_id = $1";
const INSERT: &str = "INSERT INTO review_comments
       (id, task_id, round, path, line, side, line_text, body, author, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
const SELECT: &str = "SELECT id, task_id, round, path, line, side, line_text, body, author,
            created_at, resolved_by, resolved_at FROM review_comments";
/// A round's comments in the order they were written: ids are UUIDv7s
/// made one after the other by one process.
const ORDER: &str = "ORDER BY round, id";
const RESOLVE: &str = "UPDATE review_comments SET resolved_by = $3, resolved_at = $4
     WHERE task_id = $1 AND id = $2 AND resolved_at IS NULL";
const UNRESOLVE: &str = "UPDATE review_comments SET resolved_by = NULL, resolved_at = NULL
     WHERE task_id = $1 AND id = $2";
const FORGET_ROUND: &str = "DELETE FROM review_comments WHERE task_id = $1 AND round = $2";
const DELETE_ALL: &str = "DELETE FROM review_comments WHERE task_id = $1";

/// What the engine keeps of reviews. Every [`super::ExecutionStore`] is one.
#[async_trait]
pub trait ReviewStore: Send + Sync {
    /// Keeps the comments of one "Request changes" by `author` as the
    /// task's next round, all or none; the round's number.
    async fn add_review_round(
        &self,
        task_id: Uuid,
        author: &str,
        comments: &[NewReviewComment],
    ) -> Result<i32>;

    /// Forgets a round whose request did not go through.
    async fn forget_review_round(&self, task_id: Uuid, round: i32) -> Result<()>;

    /// The task's comments, round by round, each round in writing order.
    async fn review_comments(&self, task_id: Uuid) -> Result<Vec<ReviewCommentRow>>;

    /// Marks the comment resolved by `by` at `at` (one already resolved
    /// keeps who resolved it and when), or, with `None`, open again; the
    /// comment, or `None` when the task has no such comment.
    async fn resolve_review_comment(
        &self,
        task_id: Uuid,
        id: Uuid,
        by: Option<(&str, DateTime<Utc>)>,
    ) -> Result<Option<ReviewCommentRow>>;

    /// The task is gone, and its comments with it.
    async fn delete_review_comments(&self, task_id: Uuid) -> Result<()>;
}

#[async_trait]
impl<D: ExecDialect> ReviewStore for SqlExecStore<D> {
    #[tracing::instrument(skip_all)]
    async fn add_review_round(
        &self,
        task_id: Uuid,
        author: &str,
        comments: &[NewReviewComment],
    ) -> Result<i32> {
        let mut tx = D::begin(&self.pool).await?;
        let (round,): (i32,) =
            fetch_one::<D, _>(&mut tx, Stmt::new(NEXT_ROUND).bind(task_id)).await?;
        let at = Utc::now();
        for c in comments {
            let stmt = Stmt::new(INSERT)
                .bind(Uuid::now_v7())
                .bind(task_id)
                .bind(round)
                .bind(&c.path)
                .bind(c.line.and_then(|l| i32::try_from(l).ok()))
                .bind(c.side.as_str())
                .bind(&c.line_text)
                .bind(&c.body)
                .bind(author)
                .bind(at);
            D::write(&mut tx, stmt).await?;
        }
        tx.commit().await?;
        Ok(round)
    }

    #[tracing::instrument(skip_all)]
    async fn forget_review_round(&self, task_id: Uuid, round: i32) -> Result<()> {
        let stmt = Stmt::new(FORGET_ROUND).bind(task_id).bind(round);
        self.db().write(stmt).await.map(drop)
    }

    #[tracing::instrument(skip_all)]
    async fn review_comments(&self, task_id: Uuid) -> Result<Vec<ReviewCommentRow>> {
        let stmt = Stmt::new(format!("{SELECT} WHERE task_id = $1 {ORDER}")).bind(task_id);
        self.db().all(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn resolve_review_comment(
        &self,
        task_id: Uuid,
        id: Uuid,
        by: Option<(&str, DateTime<Utc>)>,
    ) -> Result<Option<ReviewCommentRow>> {
        let change = match by {
            Some((who, at)) => Stmt::new(RESOLVE).bind(task_id).bind(id).bind(who).bind(at),
            None => Stmt::new(UNRESOLVE).bind(task_id).bind(id),
        };
        self.db().write(change).await?;
        let stmt = Stmt::new(format!("{SELECT} WHERE task_id = $1 AND id = $2"))
            .bind(task_id)
            .bind(id);
        self.db().optional(stmt).await
    }

    #[tracing::instrument(skip_all)]
    async fn delete_review_comments(&self, task_id: Uuid) -> Result<()> {
        self.db()
            .write(Stmt::new(DELETE_ALL).bind(task_id))
            .await
            .map(drop)
    }
}
