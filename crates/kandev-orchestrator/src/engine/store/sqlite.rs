//! The engine's tables in a SQLite file (`migrations-sqlite/`). Postgres's
//! `queue_order` sequence becomes one more than the largest order in the
//! table: only the order among queued runs matters, and SQLite runs one
//! writer at a time, so two runs never get the same place.

use sqlx::Sqlite;

use super::executions::{ExecDialect, SqlExecStore};

/// The orchestrator's executions and processed events, in SQLite.
pub type SqliteExecStore = SqlExecStore<Sqlite>;

impl ExecDialect for Sqlite {
    const NEXT_ORDER: &'static str = "(SELECT coalesce(max(queue_order), 0) + 1 FROM executions)";
}
