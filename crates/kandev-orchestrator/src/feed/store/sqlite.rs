//! The feed in a SQLite file: the chunks of a batch written in one
//! transaction, each compressed (`events_lz4`: SQLite stores text as it
//! is, and the feed's text was most of what a flood wrote).

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::SqlitePool;
use uuid::Uuid;

use super::{
    CHUNK_COLUMNS, ChunkRow, FeedStore, Result, appended, chunk_starts, chunks, frames_of, pack,
};
use crate::feed::Frame;

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
        .fetch_all(&self.pool)
        .await?;
        frames_of(task_id, after, limit, rows)
    }

    async fn moved_instances(&self) -> Result<Vec<Uuid>> {
        sqlx::query_scalar("SELECT instance_id FROM moved_instances")
            .fetch_all(&self.pool)
            .await
    }

    async fn last_seq(&self, task_id: Uuid) -> Result<i64> {
        let last: Option<(i64,)> = sqlx::query_as(
            "SELECT last_seq FROM feed_chunks WHERE task_id = ?1 ORDER BY first_seq DESC LIMIT 1",
        )
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(last.map_or(0, |(l,)| l))
    }

    async fn instance_last_seq(&self, instance_id: Uuid) -> Result<i64> {
        let last: Option<(i64,)> = sqlx::query_as(
            "SELECT first_instance_seq + (last_seq - first_seq) FROM feed_chunks
             WHERE instance_id = ?1 ORDER BY first_instance_seq DESC LIMIT 1",
        )
        .bind(instance_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(last.map_or(0, |(l,)| l))
    }

    async fn append(&self, frames: &[Arc<Frame>]) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        for chunk in chunks(frames) {
            sqlx::query(
                "INSERT INTO feed_chunks
                   (task_id, first_seq, last_seq, instance_id, first_instance_seq, events,
                    events_lz4, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, '', ?6, ?7) ON CONFLICT DO NOTHING",
            )
            .bind(chunk.task_id)
            .bind(chunk.first_seq)
            .bind(chunk.last_seq)
            .bind(chunk.instance_id)
            .bind(chunk.first_instance_seq)
            .bind(match &chunk.batch {
                Some(batch) => batch.to_vec(),
                None => pack(&chunk.events),
            })
            .bind(kandev_common::db::sqlite::now())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        appended(frames.len(), started);
        Ok(())
    }
}
