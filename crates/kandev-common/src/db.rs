//! Each service owns one Postgres schema: its tables and its migrations
//! table live there, and its connections see nothing else by default.

use std::{str::FromStr, time::Duration};

use sqlx::{
    Executor, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Creates `schema` when missing and returns a pool whose connections have
/// `search_path` set to it. The caller runs its own migrations on the pool
/// (`sqlx::migrate!` needs the service crate's path). `schema` must be a
/// plain identifier; services validate it with their settings.
pub async fn connect_schema(
    database_url: &str,
    schema: &str,
    max_connections: u32,
) -> Result<PgPool, sqlx::Error> {
    let base = PgConnectOptions::from_str(database_url)?;
    // The schema must exist before the pool pins search_path to it.
    let bootstrap = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(base.clone())
        .await?;
    bootstrap
        .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
        .await?;
    bootstrap.close().await;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(base.options([("search_path", schema)]))
        .await
}
