//! SQLite as a [`Dialect`]: one machine, one file (`kandev`'s data
//! directory), no server.
//!
//! SQLite has no row locks: every change runs in a `BEGIN IMMEDIATE`
//! transaction, which takes the database's write lock before it reads, so
//! changes serialise as the Postgres store's row locks make them (a writer
//! waits up to the busy timeout for another). Readers never wait, in WAL
//! mode. Timestamps are stored as RFC 3339 text with six fixed fractional
//! digits, which sorts as time does; ids as 16-byte blobs; JSON as text.
//!
//! One relay publishes the outbox (the process's own): its claim is the
//! process's, not a database lock.

use std::sync::Arc;

use async_trait::async_trait;
use kandev_common::db::Dialect as _;
use sqlx::{Sqlite, SqlitePool, types::Json};
use tokio::sync::{Notify, OwnedMutexGuard};
use uuid::Uuid;

use super::{
    OutboxBatch, OutboxEvent,
    dialect::{Dialect, Stmt},
    queries,
    sql::SqlTaskStore,
};

/// The store on SQLite.
pub type SqliteTaskStore = SqlTaskStore<Sqlite>;

/// Removes the published events (`$1`, a JSON array of ids).
const DELETE_PUBLISHED: &str = "DELETE FROM outbox WHERE id IN (SELECT value FROM json_each($1))";

impl SqlTaskStore<Sqlite> {
    /// Opens (creating it when missing) the database at `url`
    /// (`sqlite:///path/to/tasks.db` or `sqlite:relative.db`) and runs the
    /// SQLite migrations.
    pub async fn open(url: &str, outbox_wake: Arc<Notify>) -> Result<Self, sqlx::Error> {
        let pool = kandev_common::db::sqlite::connect(url, 4).await?;
        sqlx::migrate!("./migrations-sqlite").run(&pool).await?;
        Ok(SqlTaskStore::new(pool, outbox_wake))
    }
}

#[async_trait]
impl Dialect for Sqlite {
    async fn claim_outbox(
        pool: &SqlitePool,
        limit: i64,
        claim: OwnedMutexGuard<()>,
    ) -> Result<Option<Box<dyn OutboxBatch>>, sqlx::Error> {
        let batch = Stmt::new(queries::OUTBOX_BATCH).bind(limit);
        let rows: Vec<(i64, Uuid, String, String, String)> =
            Self::run(&mut *pool.acquire().await?, batch).await?;
        Ok(Some(Box::new(SqliteBatch {
            pool: pool.clone(),
            events: rows.into_iter().map(OutboxEvent::from).collect(),
            _claim: claim,
        })))
    }
}

/// A batch claimed under the process's relay lock.
struct SqliteBatch {
    pool: SqlitePool,
    events: Vec<OutboxEvent>,
    _claim: OwnedMutexGuard<()>,
}

#[async_trait]
impl OutboxBatch for SqliteBatch {
    fn events(&self) -> &[OutboxEvent] {
        &self.events
    }

    async fn finish(self: Box<Self>, published: &[i64]) -> Result<(), sqlx::Error> {
        if !published.is_empty() {
            sqlx::query(DELETE_PUBLISHED)
                .bind(Json(published))
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}
