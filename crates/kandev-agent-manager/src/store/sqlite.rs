//! The SQLite [`AgentStore`](super::AgentStore): one machine, one file.
//! The same tables as the Postgres migrations (`migrations-sqlite/`):
//! lists as JSON text, ids as 16-byte blobs, timestamps as fixed-width
//! RFC 3339 text ([`kandev_common::db::sqlite::time`]).

use sqlx::Sqlite;

use super::SqlAgentStore;

/// The agent manager's tables in a SQLite file.
pub type SqliteAgentStore = SqlAgentStore<Sqlite>;

impl SqlAgentStore<Sqlite> {
    /// Opens (creating it when missing) the database at `url` and runs the
    /// SQLite migrations; instances are `manager_id`'s.
    pub async fn open(url: &str, manager_id: &str) -> Result<Self, sqlx::Error> {
        let pool = kandev_common::db::sqlite::connect(url, 4).await?;
        sqlx::migrate!("./migrations-sqlite").run(&pool).await?;
        Ok(SqlAgentStore::new(pool, manager_id))
    }
}
