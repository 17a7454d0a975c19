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

/// SQLite, for one machine: a service's tables in one file.
pub mod sqlite {
    use std::{str::FromStr, time::Duration};

    use chrono::{DateTime, SecondsFormat, Utc};
    use sqlx::{
        SqlitePool,
        sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
    };

    /// How long a writer waits for another's transaction before failing.
    const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

    /// Opens the database file of `url` (`sqlite:///abs/path.db` or
    /// `sqlite:relative.db`), creating it when missing, in WAL mode (readers
    /// never wait for the writer) with foreign keys enforced. The caller
    /// runs its own migrations on the pool.
    pub async fn connect(url: &str, max_connections: u32) -> Result<SqlitePool, sqlx::Error> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
    }

    /// How a timestamp is stored: RFC 3339 with six fixed fractional
    /// digits, so text order is time order (and microseconds, as Postgres).
    pub fn time(at: DateTime<Utc>) -> String {
        at.to_rfc3339_opts(SecondsFormat::Micros, true)
    }

    /// The current time as [`time`] stores it.
    pub fn now() -> String {
        time(Utc::now())
    }

    #[cfg(test)]
    mod tests {
        use chrono::TimeZone as _;

        use super::*;

        #[test]
        fn stored_times_sort_as_time_does() {
            let early = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
            let later = early + chrono::Duration::microseconds(1);
            let much_later = early + chrono::Duration::seconds(1);
            assert_eq!(time(early), "2026-01-02T03:04:05.000000Z");
            assert!(time(early) < time(later) && time(later) < time(much_later));
        }
    }
}
