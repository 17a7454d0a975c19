//! A fresh orchestrator database of each kind for the storage contracts
//! (`contract`, `feed_items`), and `contract!`, which runs each of a
//! suite's checks on both.

use kandev_orchestrator::{
    Settings,
    startup::{connect_database, connect_sqlite},
};
use kandev_testkit::TestDb;
use sqlx::{PgPool, SqlitePool};

/// What a fresh database leaves to remove: a Postgres database, or the
/// directory of a SQLite file.
pub enum Scratch {
    Postgres(TestDb),
    Sqlite { _dir: tempfile::TempDir },
}

impl Scratch {
    /// A fresh migrated Postgres database.
    pub async fn postgres() -> (PgPool, Scratch) {
        let db = TestDb::create().await;
        let settings = Settings {
            common: kandev_common::config::ServiceSettings {
                database_url: db.url.clone(),
                ..Settings::default().common
            },
            ..Settings::default()
        };
        let pool = connect_database(&settings).await.expect("postgres opens");
        (pool, Scratch::Postgres(db))
    }

    /// A fresh migrated SQLite file.
    pub async fn sqlite() -> (SqlitePool, Scratch) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("orchestrator.db").display());
        let pool = connect_sqlite(&url).await.expect("sqlite opens");
        (pool, Scratch::Sqlite { _dir: dir })
    }

    pub async fn remove(self) {
        if let Scratch::Postgres(db) = self {
            db.drop_db().await;
        }
    }
}

/// Runs each named check (an `async fn(&Backend)`) on a fresh `Backend`
/// of each database (`Backend::postgres()`, `Backend::sqlite()`), removed
/// after it (`remove`): tests `postgres::check` and `sqlite::check`.
macro_rules! contract {
    ($backend:ident: $($check:ident),* $(,)?) => {
        contract!(@on postgres $backend: $($check),*);
        contract!(@on sqlite $backend: $($check),*);
    };
    (@on $db:ident $backend:ident: $($check:ident),*) => {
        mod $db {
            $(
                #[tokio::test]
                async fn $check() {
                    let backend = super::$backend::$db().await;
                    super::$check(&backend).await;
                    backend.remove().await;
                }
            )*
        }
    };
}
