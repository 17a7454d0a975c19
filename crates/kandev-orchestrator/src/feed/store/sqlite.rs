//! The feed in a SQLite file: the chunks of a batch and the compacted
//! view's rows written in one transaction, each compressed when it is not
//! small (`events_lz4`, `text_lz4`: SQLite stores text as it is, and the
//! feed's text was most of what a flood wrote).

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{SqliteConnection, SqliteExecutor, SqlitePool};
use uuid::Uuid;

use super::{
    CHUNK_COLUMNS, ChunkRow, FeedStore, Result, appended, chunk_starts, chunks, frames_of,
    items::{self, FeedPage, ItemsTx, Row, sql},
    pack, reads,
};
use crate::feed::Frame;

/// Item texts from this size on are stored compressed.
const PACK_FROM: usize = 512;

/// The orchestrator's feed tables in SQLite.
#[derive(Debug, Clone)]
pub struct SqliteFeedStore {
    pool: SqlitePool,
}

impl SqliteFeedStore {
    /// On a pool of the orchestrator's migrated SQLite file.
    pub fn new(pool: SqlitePool) -> Self {
        SqliteFeedStore { pool }
    }
}

#[async_trait]
impl FeedStore for SqliteFeedStore {
    async fn history(&self, task_id: Uuid, after: i64, limit: i64) -> Result<Vec<Frame>> {
        history(&self.pool, task_id, after, limit).await
    }

    async fn page(&self, task_id: Uuid, before: Option<i64>, limit: i64) -> Result<FeedPage> {
        if before.is_none() {
            self.repair(task_id).await?;
        }
        reads::page::<sqlx::Sqlite>(&self.pool, task_id, before, limit).await
    }

    async fn moved_instances(&self) -> Result<Vec<Uuid>> {
        reads::moved_instances::<sqlx::Sqlite>(&self.pool).await
    }

    async fn last_seq(&self, task_id: Uuid) -> Result<i64> {
        reads::last_seq::<sqlx::Sqlite>(&self.pool, task_id).await
    }

    async fn instance_last_seq(&self, instance_id: Uuid) -> Result<i64> {
        reads::instance_last_seq::<sqlx::Sqlite>(&self.pool, instance_id).await
    }

    async fn append(&self, frames: &[Arc<Frame>]) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let now = kandev_common::db::sqlite::now();
        for rows in chunks(frames).chunks(sql::CHUNKS_PER_INSERT) {
            let mut query = sqlx::query(sql::insert_chunks(rows.len()));
            for chunk in rows {
                query = query
                    .bind(chunk.task_id)
                    .bind(chunk.first_seq)
                    .bind(chunk.last_seq)
                    .bind(chunk.instance_id)
                    .bind(chunk.first_instance_seq)
                    .bind("")
                    .bind(match &chunk.batch {
                        Some(batch) => batch.to_vec(),
                        None => pack(&chunk.events),
                    })
                    .bind(now.clone());
            }
            query.execute(&mut *tx).await?;
        }
        items::append(&mut *tx, &items::by_task(frames)).await?;
        tx.commit().await?;
        appended(frames.len(), started);
        Ok(())
    }
}

impl SqliteFeedStore {
    /// Brings the task's compacted view up to its stored frames when it is
    /// behind, a step per transaction.
    async fn repair(&self, task_id: Uuid) -> Result<()> {
        let stored = self.last_seq(task_id).await?;
        let mut covered: i64 = sqlx::query_scalar(sql::COVERED)
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?
            .unwrap_or(0);
        while covered < stored {
            // Writers of the file take turns: the consumer's appends wait.
            let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
            let now = items::repair_step(&mut *tx, task_id, stored).await?;
            tx.commit().await?;
            if now == covered {
                break;
            }
            covered = now;
        }
        Ok(())
    }
}

/// Stored frames of a task with `seq > after`, at most `limit`.
async fn history<'e>(
    db: impl SqliteExecutor<'e>,
    task_id: Uuid,
    after: i64,
    limit: i64,
) -> Result<Vec<Frame>> {
    let (from, to) = chunk_starts(after, limit);
    let rows: Vec<ChunkRow> = sqlx::query_as(&format!(
        "SELECT {CHUNK_COLUMNS} FROM feed_chunks
         WHERE task_id = ?1 AND first_seq > ?2 AND first_seq <= ?3 AND last_seq > ?4
         ORDER BY first_seq"
    ))
    .bind(task_id)
    .bind(from)
    .bind(to)
    .bind(after)
    .fetch_all(db)
    .await?;
    frames_of(task_id, after, limit, rows)
}

#[async_trait]
impl ItemsTx for SqliteConnection {
    async fn last_row(&mut self, task_id: Uuid) -> Result<Option<Row>> {
        items::shared::last_row::<sqlx::Sqlite>(self, task_id).await
    }

    async fn last_rows(&mut self, tasks: &[Uuid]) -> Result<Vec<Row>> {
        items::shared::last_rows::<sqlx::Sqlite>(self, tasks).await
    }

    async fn item_text(&mut self, task_id: Uuid, item_seq: i64) -> Result<String> {
        items::shared::item_text::<sqlx::Sqlite>(self, task_id, item_seq).await
    }

    async fn delete_item(&mut self, task_id: Uuid, item_seq: i64) -> Result<()> {
        items::shared::delete_item::<sqlx::Sqlite>(self, task_id, item_seq).await
    }

    async fn insert(&mut self, rows: &[Row]) -> Result<()> {
        let mut query = sqlx::query(sql::insert(rows.len()));
        for r in rows {
            let (text, packed) = if r.text.len() >= PACK_FROM {
                ("", Some(pack(&r.text)))
            } else {
                (r.text.as_str(), None)
            };
            query = query
                .bind(r.task_id)
                .bind(r.first_seq)
                .bind(r.last_seq)
                .bind(r.item_seq)
                .bind(r.instance_id)
                .bind(r.first_instance_seq)
                .bind(r.kind.as_str())
                .bind(r.role.as_deref())
                .bind(r.message_id.as_deref())
                .bind(r.started_at.as_deref())
                .bind(r.item_bytes)
                .bind(r.pieces)
                .bind(text)
                .bind(packed);
        }
        query.execute(&mut *self).await?;
        Ok(())
    }

    async fn frames(&mut self, task_id: Uuid, after: i64, limit: i64) -> Result<Vec<Frame>> {
        history(&mut *self, task_id, after, limit).await
    }
}
