//! What Postgres and SQLite do differently for the task service: the
//! shared [`kandev_common::db::dialect`] (how a change begins, whether a
//! read locks, how a value binds), and how the outbox relay claims its
//! batch ([`Dialect::claim_outbox`], in `pg.rs` and `sqlite.rs`).
//!
//! | | Postgres | SQLite |
//! |---|---|---|
//! | the relay's claim | a transaction-scoped advisory lock (replicas share the database) | none beyond the process's own (one process per file) |
//! | published events removed by | `id = ANY($1)` (an array) | `id IN (SELECT value FROM json_each($1))` (JSON text) |

use async_trait::async_trait;
use sqlx::Pool;
use tokio::sync::OwnedMutexGuard;

pub use kandev_common::db::dialect::{Rows, Stmt, execute, fetch_one, fetch_optional, for_update};

use super::OutboxBatch;

/// A database as the task store uses it: the shared dialect and how its
/// relay claims a batch.
#[async_trait]
pub trait Dialect: kandev_common::db::Dialect {
    /// The oldest `limit` outbox events, under this process's `claim`
    /// and whatever else keeps other relays of the database out.
    async fn claim_outbox(
        pool: &Pool<Self>,
        limit: i64,
        claim: OwnedMutexGuard<()>,
    ) -> Result<Option<Box<dyn OutboxBatch>>, sqlx::Error>;
}
