//! Postgres as a [`Dialect`]: the services' deployment, where several
//! replicas may share the database.
//!
//! Writers lock the rows they change (`FOR UPDATE`), so concurrent changes
//! of one task serialise. The outbox relay holds a transaction-scoped
//! advisory lock while it publishes a batch, so one relay at a time
//! publishes when several replicas share the database.

use async_trait::async_trait;
use kandev_common::db::Dialect as _;
use sqlx::{PgPool, Postgres, Transaction};
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

use super::{
    OutboxBatch, OutboxEvent,
    dialect::{Dialect, Stmt},
    queries,
    sql::SqlTaskStore,
};

/// The store on Postgres.
pub type PgTaskStore = SqlTaskStore<Postgres>;

/// Arbitrary but fixed: the advisory lock key of the outbox relay.
const RELAY_LOCK: i64 = 0x006b_616e_6465_7601;

/// Removes the published events (`$1`, an array of ids).
const DELETE_PUBLISHED: &str = "DELETE FROM outbox WHERE id = ANY($1)";

#[async_trait]
impl Dialect for Postgres {
    async fn claim_outbox(
        pool: &PgPool,
        limit: i64,
        claim: OwnedMutexGuard<()>,
    ) -> Result<Option<Box<dyn OutboxBatch>>, sqlx::Error> {
        let mut tx = pool.begin().await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(RELAY_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        if !locked {
            return Ok(None);
        }
        let batch = Stmt::new(queries::OUTBOX_BATCH).bind(limit);
        let rows: Vec<(i64, Uuid, String, String, String)> = Self::run(&mut tx, batch).await?;
        let events = rows.into_iter().map(OutboxEvent::from).collect();
        Ok(Some(Box::new(PgBatch {
            tx,
            events,
            _claim: claim,
        })))
    }
}

/// A batch claimed under the relay's advisory lock, held by its transaction.
struct PgBatch {
    tx: Transaction<'static, Postgres>,
    events: Vec<OutboxEvent>,
    _claim: OwnedMutexGuard<()>,
}

#[async_trait]
impl OutboxBatch for PgBatch {
    fn events(&self) -> &[OutboxEvent] {
        &self.events
    }

    async fn finish(self: Box<Self>, published: &[i64]) -> Result<(), sqlx::Error> {
        let mut tx = self.tx;
        if !published.is_empty() {
            sqlx::query(DELETE_PUBLISHED)
                .bind(published)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }
}
