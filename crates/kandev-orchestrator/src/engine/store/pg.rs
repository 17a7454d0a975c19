//! The engine's tables in Postgres: the queue's places come from the
//! `queue_order` sequence, which replicas sharing the database draw from
//! without two runs getting the same place.

use sqlx::Postgres;

use super::executions::{ExecDialect, SqlExecStore};

/// The orchestrator's executions and processed events, in Postgres.
pub type PgExecStore = SqlExecStore<Postgres>;

impl ExecDialect for Postgres {
    const NEXT_ORDER: &'static str = "nextval('queue_order')";
}
