//! The users table in the gateway's own schema.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use uuid::Uuid;

/// A stored user.
#[derive(Debug, Clone)]
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

fn from_row(row: &sqlx::postgres::PgRow) -> Result<User, sqlx::Error> {
    Ok(User {
        id: row.try_get("id")?,
        username: row.try_get("username")?,
        password_hash: row.try_get("password_hash")?,
        is_admin: row.try_get("is_admin")?,
        created_at: row.try_get("created_at")?,
    })
}

pub async fn find(pool: &PgPool, username: &str) -> Result<Option<User>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT id, username, password_hash, is_admin, created_at FROM users WHERE username = $1",
    )
    .bind(username)
    .fetch_optional(pool)
    .await?;
    row.as_ref().map(from_row).transpose()
}

pub async fn insert(
    pool: &PgPool,
    username: &str,
    password_hash: &str,
    is_admin: bool,
) -> Result<User, UserError> {
    let row = sqlx::query(
        "INSERT INTO users (id, username, password_hash, is_admin) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (username) DO NOTHING \
         RETURNING id, username, password_hash, is_admin, created_at",
    )
    .bind(Uuid::now_v7())
    .bind(username)
    .bind(password_hash)
    .bind(is_admin)
    .fetch_optional(pool)
    .await?;
    match row {
        Some(row) => Ok(from_row(&row)?),
        None => Err(UserError::Exists(username.to_string())),
    }
}

pub async fn any_admin(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM users WHERE is_admin)")
        .fetch_one(pool)
        .await
}

pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1").execute(pool).await.map(|_| ())
}
