//! The feed in Postgres: chunks written as the rows of one `INSERT` per
//! batch (per 32 chunks). A chunk's text is compressed by Postgres; a
//! chunk that is an agent manager's packed batch goes to `events_lz4` as it
//! came (stored as it is: see migration 0008).

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{Arguments as _, PgPool, postgres::PgArguments};
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
        // Rows as parameters of a `VALUES` list, not arrays to `UNNEST`:
        // Postgres copied each chunk's text five times on that way (the
        // array read, its elements, the function's result set). Statements
        // run in the chunks' order, so what a failure leaves written is a
        // prefix of each task's chunks, and the retry (the same frames make
        // the same chunks) skips it.
        for rows in chunks.chunks(ROWS_PER_INSERT) {
            // Sized once: grown as rows are added, the arguments would be
            // copied at each doubling.
            let mut args = PgArguments::default();
            let bytes = rows
                .iter()
                .map(|c| c.events.len() + c.batch.as_ref().map_or(0, |b| b.len()) + 64)
                .sum();
            args.reserve(rows.len() * COLUMNS, bytes);
            for c in rows {
                add(&mut args, c.task_id)?;
                add(&mut args, c.first_seq)?;
                add(&mut args, c.last_seq)?;
                add(&mut args, c.instance_id)?;
                add(&mut args, c.first_instance_seq)?;
                add(&mut args, c.events.as_str())?;
                add(&mut args, c.batch.as_deref())?;
            }
            sqlx::query_with(insert_sql(rows.len()), args)
                .execute(&self.pool)
                .await?;
        }
        appended(frames.len(), started);
        Ok(())
    }
}

/// Adds one parameter.
fn add<'q, T>(args: &mut PgArguments, value: T) -> Result<()>
where
    T: sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + 'q,
{
    args.add(value).map_err(sqlx::Error::Encode)
}

/// The most chunks one `INSERT` writes.
const ROWS_PER_INSERT: usize = 32;
/// Parameters of one chunk.
const COLUMNS: usize = 7;

/// `INSERT … VALUES` of `rows` chunks; one text per row count, made once.
fn insert_sql(rows: usize) -> &'static str {
    static SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        (0..=ROWS_PER_INSERT)
            .map(|n| {
                let values: Vec<String> = (0..n)
                    .map(|row| {
                        let params: Vec<String> =
                            (1..=COLUMNS).map(|k| format!("${}", row * COLUMNS + k)).collect();
                        format!("({})", params.join(", "))
                    })
                    .collect();
                format!(
                    "INSERT INTO feed_chunks (task_id, first_seq, last_seq, instance_id, first_instance_seq, events, events_lz4)
                     VALUES {} ON CONFLICT DO NOTHING",
                    values.join(", ")
                )
            })
            .collect()
    });
    &SQL[rows]
}
