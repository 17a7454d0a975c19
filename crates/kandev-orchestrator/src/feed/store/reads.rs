//! The feed's reads that both databases run as they are: one statement
//! text each, over a pool of either ([`Dialect`]).

use kandev_common::db::dialect::{self, Dialect, Stmt};
use sqlx::Pool;
use uuid::Uuid;

use super::{
    ChunkRow, Result, chunk_starts, frames_of,
    items::{self, FeedPage, Row, StoredRow, sql},
};
use crate::feed::Frame;

/// A page of the task's compacted items before `before` (the newest
/// when `None`), at most `limit` of them.
pub(super) async fn page<D: Dialect>(
    pool: &Pool<D>,
    task_id: Uuid,
    before: Option<i64>,
    limit: i64,
) -> Result<FeedPage> {
    let mut conn = pool.acquire().await?;
    let heads: Vec<(i64, i64)> = D::run(
        &mut conn,
        Stmt::new(sql::PAGE_HEADS)
            .bind(task_id)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit + 1),
    )
    .await?;
    let Some((lo, hi, more)) = items::page_bounds(&heads, limit) else {
        return Ok(FeedPage::default());
    };
    let rows: Vec<StoredRow> = D::run(
        &mut conn,
        Stmt::new(sql::PAGE_ROWS).bind(task_id).bind(lo).bind(hi),
    )
    .await?;
    let rows = rows
        .into_iter()
        .map(|r| Row::read(task_id, r))
        .collect::<Result<Vec<_>>>()?;
    items::page(rows, more)
}

/// Stored frames of a task with `seq > after`, at most `limit`.
pub(super) async fn history<D: Dialect>(
    conn: &mut D::Connection,
    task_id: Uuid,
    after: i64,
    limit: i64,
) -> Result<Vec<Frame>> {
    let (from, to) = chunk_starts(after, limit);
    let stmt = Stmt::new(sql::HISTORY)
        .bind(task_id)
        .bind(from)
        .bind(to)
        .bind(after);
    let rows: Vec<ChunkRow> = D::run(conn, stmt).await?;
    frames_of(task_id, after, limit, rows)
}

/// The instances whose runs moved to another agent manager.
pub(super) async fn moved_instances<D: Dialect>(pool: &Pool<D>) -> Result<Vec<Uuid>> {
    let mut conn = pool.acquire().await?;
    let rows: Vec<(Uuid,)> = D::run(
        &mut conn,
        Stmt::new("SELECT instance_id FROM moved_instances"),
    )
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// The task's last stored seq (0: none).
pub(super) async fn last_seq<D: Dialect>(pool: &Pool<D>, task_id: Uuid) -> Result<i64> {
    let mut conn = pool.acquire().await?;
    let last: Option<(i64,)> = dialect::fetch_optional::<D, _>(
        &mut conn,
        Stmt::new(
            "SELECT last_seq FROM feed_chunks WHERE task_id = $1 ORDER BY first_seq DESC LIMIT 1",
        )
        .bind(task_id),
    )
    .await?;
    Ok(last.map_or(0, |(l,)| l))
}

/// The instance's last stored seq, numbered in the instance (0: none).
pub(super) async fn instance_last_seq<D: Dialect>(
    pool: &Pool<D>,
    instance_id: Uuid,
) -> Result<i64> {
    let mut conn = pool.acquire().await?;
    let last: Option<(i64,)> = dialect::fetch_optional::<D, _>(
        &mut conn,
        Stmt::new(
            "SELECT first_instance_seq + (last_seq - first_seq) FROM feed_chunks
             WHERE instance_id = $1 ORDER BY first_instance_seq DESC LIMIT 1",
        )
        .bind(instance_id),
    )
    .await?;
    Ok(last.map_or(0, |(l,)| l))
}
