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

    /// How often the write-ahead log is copied back into the database.
    const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

    /// Opens the database file of `url` (`sqlite:///abs/path.db` or
    /// `sqlite:relative.db`), creating it when missing, in WAL mode (readers
    /// never wait for the writer) with foreign keys enforced. The caller
    /// runs its own migrations on the pool.
    ///
    /// The log is checkpointed by a task of the pool's own every second,
    /// not by whichever commit crosses SQLite's threshold: a checkpoint
    /// writes and syncs the database file, and in a commit it stalls that
    /// writer (the agent stream's, say) for tens of milliseconds. The task
    /// ends when the pool is closed.
    pub async fn connect(url: &str, max_connections: u32) -> Result<SqlitePool, sqlx::Error> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .pragma("wal_autocheckpoint", "0");
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        tokio::spawn(checkpoints(pool.clone()));
        Ok(pool)
    }

    /// Checkpoints `pool`'s log every [`CHECKPOINT_EVERY`] (passively: it
    /// copies what no reader still needs and never blocks a writer) until
    /// the pool closes.
    async fn checkpoints(pool: SqlitePool) {
        let mut every = tokio::time::interval(CHECKPOINT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if pool.is_closed() {
                return;
            }
            if let Err(err) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&pool)
                .await
            {
                if pool.is_closed() {
                    return;
                }
                tracing::warn!(%err, "checkpointing a SQLite log failed");
            }
        }
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

        #[tokio::test]
        async fn the_log_is_checkpointed_off_the_writers_path() {
            let dir = tempfile::tempdir().expect("temp dir");
            let file = dir.path().join("t.db");
            let pool = connect(&format!("sqlite://{}", file.display()), 2)
                .await
                .expect("opens");
            let auto: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
                .fetch_one(&pool)
                .await
                .expect("pragma");
            assert_eq!(auto, 0, "no commit checkpoints");
            sqlx::query("CREATE TABLE t (b BLOB NOT NULL)")
                .execute(&pool)
                .await
                .expect("table");
            // 4 MiB, more than SQLite's own threshold (1,000 pages).
            for _ in 0..64 {
                sqlx::query("INSERT INTO t (b) VALUES (zeroblob(65536))")
                    .execute(&pool)
                    .await
                    .expect("insert");
            }
            // The rows reach the database file itself: the pool's task
            // copied the log there.
            kandev_testkit::eventually(10, "the log checkpointed", || async {
                let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
                (size >= 4 << 20).then_some(())
            })
            .await;
            pool.close().await;
        }
    }
}
