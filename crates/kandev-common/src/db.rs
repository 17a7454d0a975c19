//! Each service owns one Postgres schema: its tables and its migrations
//! table live there, and its connections see nothing else by default.

pub mod dialect;

pub use dialect::{Dialect, Param, Reader, Rows, Stmt, TextList};

use std::{str::FromStr, time::Duration};

use sqlx::{
    Executor, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The texts of a multi-row statement, one per row count from 0 to
/// `most`: `head`, then `rows` tuples of `columns` parameters numbered
/// `$1`, `$2`, … (both databases read them), then `tail`. Made once by a
/// caller's `LazyLock`, so a batch of any size is one prepared text.
pub fn multi_row(head: &str, columns: usize, most: usize, tail: &str) -> Vec<String> {
    (0..=most)
        .map(|rows| {
            let values: Vec<String> = (0..rows)
                .map(|row| {
                    let params: Vec<String> = (1..=columns)
                        .map(|k| format!("${}", row * columns + k))
                        .collect();
                    format!("({})", params.join(", "))
                })
                .collect();
            format!("{head} {}{tail}", values.join(", "))
        })
        .collect()
}

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
    use tracing::Instrument as _;

    /// How long a writer waits for another's transaction before failing.
    const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

    /// How often the write-ahead log is copied back into the database.
    /// A checkpoint's sync stalls the file system's other writers (the
    /// stream's commits) for as long as it takes, which grows with what it
    /// copies: measured on one disk under a paced stream, every 5 s gave a
    /// p99 of 19–43 ms, every second 11–14 ms, every 250 ms 5–8 ms.
    const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

    /// Log frames (pages) past which a checkpoint also restarts the log.
    /// A passive checkpoint never catches up with a writer that never
    /// pauses, and SQLite only reuses the log from its start once a
    /// checkpoint has: under a flood the log would grow without end, every
    /// write extending the file and every lookup searching a larger index.
    const RESTART_AT_FRAMES: i64 = 8192;

    /// The log's size SQLite truncates it back to after a restart.
    const LOG_SIZE_LIMIT: &str = "67108864";

    /// Opens the database file of `url` (`sqlite:///abs/path.db` or
    /// `sqlite:relative.db`), creating it when missing, in WAL mode (readers
    /// never wait for the writer) with foreign keys enforced. The caller
    /// runs its own migrations on the pool.
    ///
    /// The log is checkpointed by a task of the pool's own (every 250 ms),
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
            .pragma("wal_autocheckpoint", "0")
            .pragma("journal_size_limit", LOG_SIZE_LIMIT);
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        tokio::spawn(checkpoints(pool.clone()));
        Ok(pool)
    }

    /// Checkpoints `pool`'s log every [`CHECKPOINT_EVERY`] until the pool
    /// closes: passively (it copies what no reader still needs and never
    /// blocks a writer), then, when the log holds more than
    /// [`RESTART_AT_FRAMES`], once more in `RESTART` mode, which copies the
    /// little the passive pass left (writers wait for that much) so the
    /// next writer starts the log over.
    async fn checkpoints(pool: SqlitePool) {
        let mut every = tokio::time::interval(CHECKPOINT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if pool.is_closed() {
                return;
            }
            if let Err(err) = checkpoint(&pool).await {
                if pool.is_closed() {
                    return;
                }
                tracing::warn!(%err, "checkpointing a SQLite log failed");
            }
        }
    }

    async fn checkpoint(pool: &SqlitePool) -> Result<(), sqlx::Error> {
        // (busy, frames in the log, frames copied)
        let (_, log, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(pool)
            .await?;
        if log > RESTART_AT_FRAMES {
            let span = tracing::debug_span!("sqlite_log_restart", frames = log);
            sqlx::query("PRAGMA wal_checkpoint(RESTART)")
                .execute(pool)
                .instrument(span)
                .await?;
        }
        Ok(())
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

        #[tokio::test]
        async fn the_log_starts_over_while_a_writer_never_pauses() {
            let dir = tempfile::tempdir().expect("temp dir");
            let file = dir.path().join("t.db");
            let log = dir.path().join("t.db-wal");
            let pool = connect(&format!("sqlite://{}", file.display()), 4)
                .await
                .expect("opens");
            sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)")
                .execute(&pool)
                .await
                .expect("table");
            // A reader that never stops, as a stream's consumers do.
            let reader = {
                let pool = pool.clone();
                tokio::spawn(async move {
                    loop {
                        let _: Option<i64> = sqlx::query_scalar("SELECT max(id) FROM t")
                            .fetch_one(&pool)
                            .await
                            .expect("read");
                        tokio::task::yield_now().await;
                    }
                })
            };
            // 768 MiB written, the oldest rows deleted as a stream prunes.
            let mut largest = 0;
            for i in 0..12288_i64 {
                sqlx::query("INSERT INTO t (id, b) VALUES (?1, zeroblob(65536))")
                    .bind(i)
                    .execute(&pool)
                    .await
                    .expect("insert");
                sqlx::query("DELETE FROM t WHERE id < ?1")
                    .bind(i - 64)
                    .execute(&pool)
                    .await
                    .expect("delete");
                largest = largest.max(std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0));
            }
            reader.abort();
            // 8,192 pages of 4 KiB and what a second or two of writing
            // adds (about 200 MiB here); without restarts the log holds
            // all that was written, more than 768 MiB.
            assert!(largest < 384 << 20, "the log grew to {} MiB", largest >> 20);
            pool.close().await;
        }
    }
}
