//! The feed store over either database ([`DbFeedStore`]): one statement
//! text per query, what the two do differently isolated in [`FeedDb`].

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::dialect::{self, Dialect, Reader, Stmt};
use sqlx::Pool;
use uuid::Uuid;

use super::{
    Chunk, FeedStore, Result, appended, chunks,
    items::{self, FeedPage, ItemKey, ItemsTx, Row, TaskMeta, sql},
    reads,
};
use crate::feed::Frame;

/// What the feed's two databases do differently.
#[async_trait]
pub trait FeedDb: Dialect {
    /// Serializes the writers of these tasks' compacted views until the
    /// transaction ends.
    async fn lock_items(conn: &mut Self::Connection, tasks: &[Uuid]) -> Result<()>;

    /// Writes `rows` (at most [`sql::CHUNKS_PER_INSERT`]) in one
    /// [`sql::insert_chunks`], created at `now`.
    async fn insert_chunks(
        conn: &mut Self::Connection,
        rows: &[Chunk],
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// An item's text as `feed_items` keeps it: `(text, text_lz4)`.
    fn item_text(text: &str) -> (String, Option<Vec<u8>>);
}

/// The orchestrator's feed tables in a database `D`.
#[derive(Debug)]
pub struct DbFeedStore<D: sqlx::Database> {
    pool: Pool<D>,
}

impl<D: sqlx::Database> Clone for DbFeedStore<D> {
    fn clone(&self) -> Self {
        DbFeedStore {
            pool: self.pool.clone(),
        }
    }
}

impl<D: FeedDb> DbFeedStore<D> {
    /// On a pool of the orchestrator's migrated database.
    pub fn new(pool: Pool<D>) -> Self {
        DbFeedStore { pool }
    }

    /// Brings the task's compacted view up to its stored frames when it is
    /// behind, a step per transaction.
    async fn repair(&self, task_id: Uuid) -> Result<()> {
        let stored = self.last_seq(task_id).await?;
        let covered: Option<(i64,)> = Reader(&self.pool)
            .optional(Stmt::new(sql::COVERED).bind(task_id))
            .await?;
        let mut covered = covered.map_or(0, |(c,)| c);
        while covered < stored {
            // The consumer's appends to the task wait.
            let mut tx = D::begin(&self.pool).await?;
            D::lock_items(&mut *tx, &[task_id]).await?;
            let now = items::repair_step(&mut Tx::<D>(&mut *tx), task_id, stored).await?;
            tx.commit().await?;
            if now == covered {
                break;
            }
            covered = now;
        }
        Ok(())
    }
}

#[async_trait]
impl<D: FeedDb> FeedStore for DbFeedStore<D> {
    async fn history(&self, task_id: Uuid, after: i64, limit: i64) -> Result<Vec<Frame>> {
        reads::history::<D>(&mut *self.pool.acquire().await?, task_id, after, limit).await
    }

    async fn page(&self, task_id: Uuid, before: Option<i64>, limit: i64) -> Result<FeedPage> {
        if before.is_none() {
            self.repair(task_id).await?;
        }
        reads::page::<D>(&self.pool, task_id, before, limit).await
    }

    async fn moved_instances(&self) -> Result<Vec<Uuid>> {
        reads::moved_instances::<D>(&self.pool).await
    }

    async fn last_seq(&self, task_id: Uuid) -> Result<i64> {
        reads::last_seq::<D>(&self.pool, task_id).await
    }

    async fn instance_last_seq(&self, instance_id: Uuid) -> Result<i64> {
        reads::instance_last_seq::<D>(&self.pool, instance_id).await
    }

    async fn append(&self, frames: &[Arc<Frame>]) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let tasks = items::by_task(frames);
        let ids: Vec<Uuid> = tasks.iter().map(|t| t[0].task_id).collect();
        // One transaction: the compacted view never covers a seq that is
        // not stored. A retry after a failure (the same frames make the
        // same chunks) writes what was not committed.
        let mut tx = D::begin(&self.pool).await?;
        D::lock_items(&mut *tx, &ids).await?;
        let now = Utc::now();
        for rows in chunks(frames).chunks(sql::CHUNKS_PER_INSERT) {
            D::insert_chunks(&mut *tx, rows, now).await?;
        }
        items::append(&mut Tx::<D>(&mut *tx), &tasks).await?;
        tx.commit().await?;
        appended(frames.len(), started);
        Ok(())
    }
}

/// `stmt` with each item's task id and item seq bound in turn.
fn keyed(stmt: Stmt, items: &[ItemKey]) -> Stmt {
    items.iter().fold(stmt, |stmt, (task_id, item_seq)| {
        stmt.bind(*task_id).bind(*item_seq)
    })
}

/// A transaction of database `D`, as the compaction uses it.
struct Tx<'a, D: Dialect>(&'a mut D::Connection);

#[async_trait]
impl<D: FeedDb> ItemsTx for Tx<'_, D> {
    async fn last_row(&mut self, task_id: Uuid) -> Result<Option<Row>> {
        let stmt = Stmt::new(sql::LAST_ROW).bind(task_id);
        let meta: Option<items::Meta> = dialect::fetch_optional::<D, _>(self.0, stmt).await?;
        meta.map(|m| Row::from_meta(task_id, m, String::new()))
            .transpose()
    }

    async fn last_rows(&mut self, tasks: &[Uuid]) -> Result<Vec<Row>> {
        let stmt = tasks
            .iter()
            .fold(Stmt::new(sql::last_rows(tasks.len())), |stmt, task_id| {
                stmt.bind(*task_id)
            });
        let rows: Vec<TaskMeta> = D::run(self.0, stmt).await?;
        rows.into_iter().map(Row::from_task_meta).collect()
    }

    async fn item_texts(&mut self, items: &[ItemKey]) -> Result<Vec<String>> {
        let stmt = keyed(Stmt::new(sql::item_texts(items.len())), items);
        let rows: Vec<(i64, i64, String, Option<Vec<u8>>)> = D::run(self.0, stmt).await?;
        items::join_texts(items, rows)
    }

    async fn delete_items(&mut self, items: &[ItemKey]) -> Result<()> {
        let stmt = keyed(Stmt::new(sql::delete_items(items.len())), items);
        dialect::execute::<D>(self.0, stmt).await
    }

    async fn insert(&mut self, rows: &[Row]) -> Result<()> {
        let stmt = rows
            .iter()
            .fold(Stmt::new(sql::insert(rows.len())), |stmt, r| {
                let (text, packed) = D::item_text(&r.text);
                stmt.bind(r.task_id)
                    .bind(r.first_seq)
                    .bind(r.last_seq)
                    .bind(r.item_seq)
                    .bind(r.instance_id)
                    .bind(r.first_instance_seq)
                    .bind(r.kind.as_str())
                    .bind(&r.role)
                    .bind(&r.message_id)
                    .bind(&r.started_at)
                    .bind(r.item_bytes)
                    .bind(r.pieces)
                    .bind(text)
                    .bind(packed)
            });
        dialect::execute::<D>(self.0, stmt).await
    }

    async fn frames(&mut self, task_id: Uuid, after: i64, limit: i64) -> Result<Vec<Frame>> {
        reads::history::<D>(self.0, task_id, after, limit).await
    }
}
