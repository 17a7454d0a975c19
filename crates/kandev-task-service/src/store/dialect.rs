//! What Postgres and SQLite do differently, named once: [`Dialect`], with
//! its two implementations in `pg.rs` and `sqlite.rs`.
//!
//! The store ([`super::tasks`]) runs each statement of [`super::queries`]
//! as a [`Stmt`]: its text and its parameters as plain [`Param`] values.
//! [`Dialect::run`] binds them with the one [`arguments`] (every value the
//! same way in both databases, but a timestamp) and decodes the rows with
//! the one [`sqlx::FromRow`] of each row type, which both databases' rows
//! satisfy ([`Rows`]). So the store's code names neither database and
//! needs none of sqlx's per-database bounds; the statements and the row
//! mapping are written once.
//!
//! | | Postgres | SQLite |
//! |---|---|---|
//! | a change's transaction | `BEGIN`; its reads lock rows (`FOR UPDATE`) | `BEGIN IMMEDIATE`: the database's write lock, from the start |
//! | a timestamp | `timestamptz` | RFC 3339 text, six fractional digits (sorts as time) |
//! | the relay's claim | a transaction-scoped advisory lock (replicas share the database) | none beyond the process's own (one process per file) |
//! | published events removed by | `id = ANY($1)` (an array) | `id IN (SELECT value FROM json_each($1))` (JSON text) |

use std::borrow::Cow;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::{
    Arguments as _, Database, Encode, FromRow, Pool, Row, Type, postgres::PgRow, sqlite::SqliteRow,
    types::Json,
};
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

use super::OutboxBatch;

/// A row type both databases decode, with the one `FromRow` it derives.
pub trait Rows: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin {}

impl<T> Rows for T where
    T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin
{
}

/// One value bound to a statement.
#[derive(Debug, Clone)]
pub enum Param {
    Uuid(Uuid),
    Text(String),
    OptText(Option<String>),
    Int(i32),
    BigInt(i64),
    Bool(bool),
    /// Stored as JSON (`jsonb` in Postgres, text in SQLite).
    Json(Value),
    /// Stored as the dialect stores time.
    Time(DateTime<Utc>),
}

macro_rules! param_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for Param {
            fn from(v: $t) -> Self {
                Param::$variant(v.into())
            }
        })*
    };
}

param_from!(
    Uuid => Uuid, String => Text, &str => Text, &String => Text, Option<String> => OptText,
    i32 => Int, i64 => BigInt, bool => Bool, Value => Json, DateTime<Utc> => Time,
);

impl From<&Option<String>> for Param {
    fn from(v: &Option<String>) -> Self {
        Param::OptText(v.clone())
    }
}

impl From<&Map<String, Value>> for Param {
    fn from(v: &Map<String, Value>) -> Self {
        Param::Json(Value::Object(v.clone()))
    }
}

impl From<&Value> for Param {
    fn from(v: &Value) -> Self {
        Param::Json(v.clone())
    }
}

/// A statement and its parameters, in the order of their numbers.
#[derive(Debug)]
pub struct Stmt {
    pub sql: Cow<'static, str>,
    pub params: Vec<Param>,
}

impl Stmt {
    pub fn new(sql: impl Into<Cow<'static, str>>) -> Self {
        Stmt {
            sql: sql.into(),
            params: Vec::new(),
        }
    }

    /// Binds the next parameter.
    pub fn bind(mut self, value: impl Into<Param>) -> Self {
        self.params.push(value.into());
        self
    }
}

/// `sql`, locking the rows it reads until the transaction ends, where the
/// database locks rows (see [`Dialect::FOR_UPDATE`]).
pub fn for_update<D: Dialect>(sql: &'static str) -> Cow<'static, str> {
    match D::FOR_UPDATE {
        "" => Cow::Borrowed(sql),
        lock => Cow::Owned(format!("{sql} {lock}")),
    }
}

/// A database as the store uses it: how it begins a change, whether its
/// reads lock, how it runs a statement and how its relay claims a batch.
#[async_trait]
pub trait Dialect: Database {
    /// What a read that the change then writes ends with: `FOR UPDATE` in
    /// Postgres; nothing in SQLite, whose change holds the write lock.
    const FOR_UPDATE: &'static str;

    /// Begins the transaction of a change.
    async fn begin(pool: &Pool<Self>) -> Result<sqlx::Transaction<'static, Self>, sqlx::Error>;

    /// Runs `stmt` on a connection (a pool's or a transaction's) and
    /// returns its rows: none for a write without `RETURNING`. Binds with
    /// [`arguments`].
    async fn run<T: Rows>(conn: &mut Self::Connection, stmt: Stmt) -> Result<Vec<T>, sqlx::Error>;

    /// The oldest `limit` outbox events, under this process's `claim`
    /// and whatever else keeps other relays of the database out.
    async fn claim_outbox(
        pool: &Pool<Self>,
        limit: i64,
        claim: OwnedMutexGuard<()>,
    ) -> Result<Option<Box<dyn OutboxBatch>>, sqlx::Error>;
}

/// `params` as database `D`'s arguments: every value as its Rust type
/// binds, but a timestamp, which `time` turns into what `D` stores.
pub fn arguments<'q, D, Time>(
    params: Vec<Param>,
    time: fn(DateTime<Utc>) -> Time,
) -> Result<D::Arguments<'q>, sqlx::Error>
where
    D: Database,
    Uuid: Encode<'q, D> + Type<D>,
    String: Encode<'q, D> + Type<D>,
    Option<String>: Encode<'q, D> + Type<D>,
    i32: Encode<'q, D> + Type<D>,
    i64: Encode<'q, D> + Type<D>,
    bool: Encode<'q, D> + Type<D>,
    Json<Value>: Encode<'q, D> + Type<D>,
    Time: 'q + Encode<'q, D> + Type<D>,
{
    let mut args = D::Arguments::default();
    for param in params {
        match param {
            Param::Uuid(v) => args.add(v),
            Param::Text(v) => args.add(v),
            Param::OptText(v) => args.add(v),
            Param::Int(v) => args.add(v),
            Param::BigInt(v) => args.add(v),
            Param::Bool(v) => args.add(v),
            Param::Json(v) => args.add(Json(v)),
            Param::Time(v) => args.add(time(v)),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(args)
}

/// A row of a statement that returns none.
struct NoRow;

impl<R: Row> FromRow<'_, R> for NoRow {
    fn from_row(_: &R) -> Result<Self, sqlx::Error> {
        Ok(NoRow)
    }
}

/// Runs `stmt`, a write that returns no rows.
pub async fn execute<D: Dialect>(conn: &mut D::Connection, stmt: Stmt) -> Result<(), sqlx::Error> {
    D::run::<NoRow>(conn, stmt).await.map(drop)
}

/// The row `stmt` returns, if any.
pub async fn fetch_optional<D: Dialect, T: Rows>(
    conn: &mut D::Connection,
    stmt: Stmt,
) -> Result<Option<T>, sqlx::Error> {
    Ok(D::run(conn, stmt).await?.into_iter().next())
}

/// The one row `stmt` returns.
pub async fn fetch_one<D: Dialect, T: Rows>(
    conn: &mut D::Connection,
    stmt: Stmt,
) -> Result<T, sqlx::Error> {
    fetch_optional::<D, T>(conn, stmt)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}
