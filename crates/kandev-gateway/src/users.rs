//! The gateway's users behind [`UserStore`]: in Postgres (the gateway's own
//! schema, [`PgUserStore`]) or in a SQLite file ([`SqliteUserStore`]), both
//! one [`SqlUserStore`].
//! `tests/api/contract.rs` checks both against one contract.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::db::{Dialect, Reader, Stmt};
use sqlx::{Database, PgPool, Pool, Postgres, Sqlite};
use uuid::Uuid;

/// A stored user.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct User {
    pub id: Uuid,
    pub username: String,
    pub password_hash: String,
    pub is_admin: bool,
    pub created_at: DateTime<Utc>,
}

/// Why a user could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("user {0:?} already exists")]
    Exists(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// The users, whichever database keeps them.
#[async_trait]
pub trait UserStore: Send + Sync + 'static {
    async fn find(&self, username: &str) -> Result<Option<User>, sqlx::Error>;
    /// Adds a user; [`UserError::Exists`] when the name is taken.
    async fn insert(
        &self,
        username: &str,
        password_hash: &str,
        is_admin: bool,
    ) -> Result<User, UserError>;
    async fn any_admin(&self) -> Result<bool, sqlx::Error>;
    /// Whether the database answers (for `/readyz`).
    async fn ping(&self) -> Result<(), sqlx::Error>;
    /// Closes the database's connections (at shutdown).
    async fn close(&self);
}

/// The shared store.
pub type Users = Arc<dyn UserStore>;

const COLUMNS: &str = "id, username, password_hash, is_admin, created_at";

/// The users in database `D` ([`PgUserStore`], [`SqliteUserStore`]): each
/// statement written once (`$N` parameters, which SQLite takes too), every
/// time bound by the store.
#[derive(Debug)]
pub struct SqlUserStore<D: Database> {
    pool: Pool<D>,
}

/// The users in Postgres (the gateway's own schema).
pub type PgUserStore = SqlUserStore<Postgres>;

impl SqlUserStore<Postgres> {
    pub fn new(pool: PgPool) -> Self {
        SqlUserStore { pool }
    }
}

/// The users in a SQLite file (`migrations-sqlite/`).
pub type SqliteUserStore = SqlUserStore<Sqlite>;

impl SqlUserStore<Sqlite> {
    /// Opens (creating it when missing) the database at `url` and migrates it.
    pub async fn open(url: &str) -> Result<Self, sqlx::Error> {
        let pool = kandev_common::db::sqlite::connect(url, 2).await?;
        sqlx::migrate!("./migrations-sqlite").run(&pool).await?;
        Ok(SqlUserStore { pool })
    }
}

#[async_trait]
impl<D: Dialect> UserStore for SqlUserStore<D> {
    #[tracing::instrument(skip_all)]
    async fn find(&self, username: &str) -> Result<Option<User>, sqlx::Error> {
        let stmt = Stmt::new(format!("SELECT {COLUMNS} FROM users WHERE username = $1"));
        Reader(&self.pool).optional(stmt.bind(username)).await
    }

    #[tracing::instrument(skip_all)]
    async fn insert(
        &self,
        username: &str,
        password_hash: &str,
        is_admin: bool,
    ) -> Result<User, UserError> {
        let stmt = Stmt::new(format!(
            "INSERT INTO users (id, username, password_hash, is_admin, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (username) DO NOTHING RETURNING {COLUMNS}"
        ))
        .bind(Uuid::now_v7())
        .bind(username)
        .bind(password_hash)
        .bind(is_admin)
        .bind(Utc::now());
        let user: Option<User> = Reader(&self.pool).optional(stmt).await?;
        user.ok_or_else(|| UserError::Exists(username.to_string()))
    }

    #[tracing::instrument(skip_all)]
    async fn any_admin(&self) -> Result<bool, sqlx::Error> {
        let stmt = Stmt::new("SELECT EXISTS (SELECT 1 FROM users WHERE is_admin)");
        let (any,): (bool,) = Reader(&self.pool).one(stmt).await?;
        Ok(any)
    }

    #[tracing::instrument(skip_all)]
    async fn ping(&self) -> Result<(), sqlx::Error> {
        Reader(&self.pool)
            .write(Stmt::new("SELECT 1"))
            .await
            .map(drop)
    }

    #[tracing::instrument(skip_all)]
    async fn close(&self) {
        self.pool.close().await;
    }
}
