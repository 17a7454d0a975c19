//! The feed in Postgres: chunks written as the rows of one `INSERT` per
//! batch (per 32 chunks), and the compacted view's rows, in one
//! transaction. A chunk's text is compressed by Postgres; a chunk that is
//! an agent manager's packed batch goes to `events_lz4` as it came (stored
//! as it is: see migration 0008).

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{Arguments as _, PgConnection, PgExecutor, PgPool, postgres::PgArguments};
use uuid::Uuid;

use super::{
    CHUNK_COLUMNS, ChunkRow, FeedStore, Result, appended, chunk_starts, chunks, frames_of,
    items::{self, FeedPage, ItemsTx, Row, sql},
    reads,
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
        history(&self.pool, task_id, after, limit).await
    }

    async fn page(&self, task_id: Uuid, before: Option<i64>, limit: i64) -> Result<FeedPage> {
        if before.is_none() {
            self.repair(task_id).await?;
        }
        reads::page::<sqlx::Postgres>(&self.pool, task_id, before, limit).await
    }

    async fn moved_instances(&self) -> Result<Vec<Uuid>> {
        reads::moved_instances::<sqlx::Postgres>(&self.pool).await
    }

    async fn last_seq(&self, task_id: Uuid) -> Result<i64> {
        reads::last_seq::<sqlx::Postgres>(&self.pool, task_id).await
    }

    async fn instance_last_seq(&self, instance_id: Uuid) -> Result<i64> {
        reads::instance_last_seq::<sqlx::Postgres>(&self.pool, instance_id).await
    }

    async fn append(&self, frames: &[Arc<Frame>]) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let chunks = chunks(frames);
        let tasks = items::by_task(frames);
        // One transaction: the compacted view never covers a seq that is
        // not stored. A retry after a failure (the same frames make the
        // same chunks) writes what was not committed.
        let mut tx = self.pool.begin().await?;
        lock_items(&mut tx, tasks.iter().map(|t| t[0].task_id)).await?;
        // Rows as parameters of a `VALUES` list, not arrays to `UNNEST`:
        // Postgres copied each chunk's text five times on that way (the
        // array read, its elements, the function's result set).
        let now = chrono::Utc::now();
        for rows in chunks.chunks(sql::CHUNKS_PER_INSERT) {
            // Sized once: grown as rows are added, the arguments would be
            // copied at each doubling.
            let mut args = PgArguments::default();
            let bytes = rows
                .iter()
                .map(|c| c.events.len() + c.batch.as_ref().map_or(0, |b| b.len()) + 64)
                .sum();
            args.reserve(rows.len() * sql::CHUNK_PARAMS, bytes);
            for c in rows {
                add(&mut args, c.task_id)?;
                add(&mut args, c.first_seq)?;
                add(&mut args, c.last_seq)?;
                add(&mut args, c.instance_id)?;
                add(&mut args, c.first_instance_seq)?;
                add(&mut args, c.events.as_str())?;
                add(&mut args, c.batch.as_deref())?;
                add(&mut args, now)?;
            }
            sqlx::query_with(sql::insert_chunks(rows.len()), args)
                .execute(&mut *tx)
                .await?;
        }
        items::append(&mut *tx, &tasks).await?;
        tx.commit().await?;
        appended(frames.len(), started);
        Ok(())
    }
}

impl PgFeedStore {
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
            let mut tx = self.pool.begin().await?;
            lock_items(&mut tx, [task_id]).await?;
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

/// Serializes the writers of these tasks' compacted views until the
/// transaction ends.
async fn lock_items(tx: &mut PgConnection, tasks: impl IntoIterator<Item = Uuid>) -> Result<()> {
    let mut keys: Vec<i64> = tasks.into_iter().map(items::lock_key).collect();
    keys.sort_unstable();
    sqlx::query("SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k")
        .bind(keys)
        .execute(tx)
        .await?;
    Ok(())
}

/// Stored frames of a task with `seq > after`, at most `limit`.
async fn history<'e>(
    db: impl PgExecutor<'e>,
    task_id: Uuid,
    after: i64,
    limit: i64,
) -> Result<Vec<Frame>> {
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
    .fetch_all(db)
    .await?;
    frames_of(task_id, after, limit, rows)
}

#[async_trait]
impl ItemsTx for PgConnection {
    async fn last_row(&mut self, task_id: Uuid) -> Result<Option<Row>> {
        items::shared::last_row::<sqlx::Postgres>(self, task_id).await
    }

    async fn last_rows(&mut self, tasks: &[Uuid]) -> Result<Vec<Row>> {
        items::shared::last_rows::<sqlx::Postgres>(self, tasks).await
    }

    async fn item_text(&mut self, task_id: Uuid, item_seq: i64) -> Result<String> {
        items::shared::item_text::<sqlx::Postgres>(self, task_id, item_seq).await
    }

    async fn delete_item(&mut self, task_id: Uuid, item_seq: i64) -> Result<()> {
        items::shared::delete_item::<sqlx::Postgres>(self, task_id, item_seq).await
    }

    async fn insert(&mut self, rows: &[Row]) -> Result<()> {
        let mut query = sqlx::query(sql::insert(rows.len()));
        for r in rows {
            // Postgres compresses the text itself.
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
                .bind(r.text.as_str())
                .bind(None::<Vec<u8>>);
        }
        query.execute(&mut *self).await?;
        Ok(())
    }

    async fn frames(&mut self, task_id: Uuid, after: i64, limit: i64) -> Result<Vec<Frame>> {
        history(&mut *self, task_id, after, limit).await
    }
}

/// Adds one parameter.
fn add<'q, T>(args: &mut PgArguments, value: T) -> Result<()>
where
    T: sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + 'q,
{
    args.add(value).map_err(sqlx::Error::Encode)
}
