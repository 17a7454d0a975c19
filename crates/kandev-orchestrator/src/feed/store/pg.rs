//! The feed in Postgres: chunks written as the rows of one `INSERT` per
//! batch (per 32 chunks), and the compacted view's rows, in one
//! transaction. A chunk's text is compressed by Postgres; a chunk that is
//! an agent manager's packed batch goes to `events_lz4` as it came (stored
//! as it is: see migration 0008).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Arguments as _, PgConnection, Postgres, postgres::PgArguments};
use uuid::Uuid;

use super::{
    Chunk, Result,
    db::{DbFeedStore, FeedDb},
    items::{self, sql},
};

/// The orchestrator's feed tables in Postgres.
pub type PgFeedStore = DbFeedStore<Postgres>;

#[async_trait]
impl FeedDb for Postgres {
    /// A transaction-scoped advisory lock per task.
    async fn lock_items(conn: &mut PgConnection, tasks: &[Uuid]) -> Result<()> {
        let mut keys: Vec<i64> = tasks.iter().copied().map(items::lock_key).collect();
        keys.sort_unstable();
        sqlx::query("SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k")
            .bind(keys)
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn insert_chunks(
        conn: &mut PgConnection,
        rows: &[Chunk],
        now: DateTime<Utc>,
    ) -> Result<()> {
        // Rows as parameters of a `VALUES` list, not arrays to `UNNEST`:
        // Postgres copied each chunk's text five times on that way (the
        // array read, its elements, the function's result set). Sized
        // once: grown as rows are added, the arguments would be copied at
        // each doubling.
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
            .execute(conn)
            .await?;
        Ok(())
    }

    /// Postgres compresses the text itself.
    fn item_text(text: &str) -> (String, Option<Vec<u8>>) {
        (text.to_owned(), None)
    }
}

/// Adds one parameter.
fn add<'q, T>(args: &mut PgArguments, value: T) -> Result<()>
where
    T: sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + 'q,
{
    args.add(value).map_err(sqlx::Error::Encode)
}
