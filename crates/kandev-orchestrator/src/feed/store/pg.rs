//! The feed in Postgres: chunks written in one `UNNEST` statement per batch.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    CHUNK_COLUMNS, ChunkRow, FeedStore, Result, appended, chunk_starts, chunks, frames_of,
};
use crate::feed::Frame;

/// The orchestrator's feed tables in Postgres.
#[derive(Debug, Clone)]
pub struct PgFeedStore {
    pool: PgPool,
}

impl PgFeedStore {
    pub fn new(pool: PgPool) -> Self {
        PgFeedStore { pool }
    }
}

#[async_trait]
impl FeedStore for PgFeedStore {
    async fn history(&self, task_id: Uuid, after: i64, limit: i64) -> Result<Vec<Frame>> {
        let (from, to) = chunk_starts(after, limit);
        let rows: Vec<ChunkRow> = sqlx::query_as(&format!(
            "SELECT {CHUNK_COLUMNS} FROM feed_chunks
             WHERE task_id = $1 AND first_seq > $2 AND first_seq <= $3 AND last_seq > $4
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
            "SELECT last_seq FROM feed_chunks WHERE task_id = $1 ORDER BY first_seq DESC LIMIT 1",
        )
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(last.map_or(0, |(l,)| l))
    }

    async fn instance_last_seq(&self, instance_id: Uuid) -> Result<i64> {
        let last: Option<(i64,)> = sqlx::query_as(
            "SELECT first_instance_seq + (last_seq - first_seq) FROM feed_chunks
             WHERE instance_id = $1 ORDER BY first_instance_seq DESC LIMIT 1",
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
        let chunks = chunks(frames);
        let col = |f: fn(&super::Chunk) -> i64| chunks.iter().map(f).collect::<Vec<i64>>();
        let task_ids: Vec<Uuid> = chunks.iter().map(|c| c.task_id).collect();
        let instance_ids: Vec<Uuid> = chunks.iter().map(|c| c.instance_id).collect();
        let events: Vec<&str> = chunks.iter().map(|c| c.events.as_str()).collect();
        sqlx::query(
            "INSERT INTO feed_chunks (task_id, first_seq, last_seq, instance_id, first_instance_seq, events)
             SELECT * FROM UNNEST($1::uuid[], $2::int8[], $3::int8[], $4::uuid[], $5::int8[], $6::text[])
             ON CONFLICT DO NOTHING",
        )
        .bind(task_ids)
        .bind(col(|c| c.first_seq))
        .bind(col(|c| c.last_seq))
        .bind(instance_ids)
        .bind(col(|c| c.first_instance_seq))
        .bind(events)
        .execute(&self.pool)
        .await?;
        appended(frames.len(), started);
        Ok(())
    }
}
