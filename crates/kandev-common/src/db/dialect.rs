//! One statement text for both databases: what Postgres and SQLite do
//! differently, named once ([`Dialect`], implemented here for both).
//!
//! A store runs each statement as a [`Stmt`]: its text and its parameters
//! as plain [`Param`] values. [`Dialect::run`] binds them the same way in
//! both databases but for a timestamp and a list of strings, and decodes
//! the rows with the one [`sqlx::FromRow`] of each row type, which both
//! databases' rows satisfy ([`Rows`]). So a store generic over `D:
//! Dialect` names neither database and needs none of sqlx's per-database
//! bounds; its statements and row mapping are written once. Parameters are
//! numbered `$1`, `$2`, … in both (sqlx's SQLite driver binds `$N` as
//! `?N`, and a number used twice is one parameter).
//!
//! | | Postgres | SQLite |
//! |---|---|---|
//! | a change's transaction | `BEGIN`; its reads lock rows (`FOR UPDATE`) | `BEGIN IMMEDIATE`: the database's write lock, from the start |
//! | a timestamp | `timestamptz` | RFC 3339 text, six fractional digits (sorts as time) |
//! | a list of strings ([`Param::TextList`]) | `text[]` | JSON text |
//!
//! What else a service's databases do differently (a sequence, an array
//! of ids) stays in that service, as a trait over this one.

use std::borrow::Cow;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::{
    Arguments as _, Database, Encode, FromRow, Pool, Postgres, Row, Sqlite, Type, postgres::PgRow,
    sqlite::SqliteRow, types::Json,
};
use uuid::Uuid;

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
    OptUuid(Option<Uuid>),
    Text(String),
    OptText(Option<String>),
    Int(i32),
    OptInt(Option<i32>),
    BigInt(i64),
    OptBigInt(Option<i64>),
    Float(f64),
    Bool(bool),
    Bytes(Vec<u8>),
    OptBytes(Option<Vec<u8>>),
    /// Stored as JSON (`jsonb` in Postgres, text in SQLite).
    Json(Value),
    OptJson(Option<Value>),
    /// Stored as the dialect stores time.
    Time(DateTime<Utc>),
    OptTime(Option<DateTime<Utc>>),
    /// Stored as the dialect stores a list (`text[]`, JSON text).
    TextList(Vec<String>),
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
    Uuid => Uuid, Option<Uuid> => OptUuid, String => Text, &str => Text, &String => Text,
    Option<String> => OptText, i32 => Int, Option<i32> => OptInt, i64 => BigInt, Option<i64> => OptBigInt, f64 => Float,
    bool => Bool, &[u8] => Bytes, Vec<u8> => Bytes, Option<Vec<u8>> => OptBytes, Value => Json, Option<Value> => OptJson,
    DateTime<Utc> => Time, Option<DateTime<Utc>> => OptTime, &[String] => TextList,
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

impl From<&Vec<String>> for Param {
    fn from(v: &Vec<String>) -> Self {
        Param::TextList(v.clone())
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

/// `$first, $first+1, …`: `count` numbered parameters, for an `IN (…)`
/// list that reads the same in both databases (where an array parameter
/// would not: Postgres `= ANY($1)`, SQLite `json_each`).
pub fn param_list(first: usize, count: usize) -> String {
    let set: Vec<String> = (first..first + count).map(|n| format!("${n}")).collect();
    set.join(", ")
}

/// A database as a store uses it: how it begins a change, whether its
/// reads lock, and how it runs a statement.
#[async_trait]
pub trait Dialect: Database {
    /// What a read that the change then writes ends with: `FOR UPDATE` in
    /// Postgres; nothing in SQLite, whose change holds the write lock.
    const FOR_UPDATE: &'static str;

    /// Begins the transaction of a change.
    async fn begin(pool: &Pool<Self>) -> Result<sqlx::Transaction<'static, Self>, sqlx::Error>;

    /// Runs `stmt` on a connection (a pool's or a transaction's) and
    /// returns its rows: none for a write without `RETURNING`.
    async fn run<T: Rows>(conn: &mut Self::Connection, stmt: Stmt) -> Result<Vec<T>, sqlx::Error>;

    /// Runs `stmt`, a write; how many rows it changed.
    async fn write(conn: &mut Self::Connection, stmt: Stmt) -> Result<u64, sqlx::Error>;
}

#[async_trait]
impl Dialect for Postgres {
    const FOR_UPDATE: &'static str = "FOR UPDATE";

    async fn begin(
        pool: &Pool<Postgres>,
    ) -> Result<sqlx::Transaction<'static, Postgres>, sqlx::Error> {
        pool.begin().await
    }

    async fn run<T: Rows>(
        conn: &mut sqlx::PgConnection,
        stmt: Stmt,
    ) -> Result<Vec<T>, sqlx::Error> {
        let args = arguments::<Postgres, _, _>(stmt.params, |at| at, |list| list)?;
        sqlx::query_as_with(&stmt.sql, args).fetch_all(conn).await
    }

    async fn write(conn: &mut sqlx::PgConnection, stmt: Stmt) -> Result<u64, sqlx::Error> {
        let args = arguments::<Postgres, _, _>(stmt.params, |at| at, |list| list)?;
        let done = sqlx::query_with(&stmt.sql, args).execute(conn).await?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl Dialect for Sqlite {
    const FOR_UPDATE: &'static str = "";

    /// A transaction that holds the write lock from its first statement.
    async fn begin(pool: &Pool<Sqlite>) -> Result<sqlx::Transaction<'static, Sqlite>, sqlx::Error> {
        pool.begin_with("BEGIN IMMEDIATE").await
    }

    async fn run<T: Rows>(
        conn: &mut sqlx::SqliteConnection,
        stmt: Stmt,
    ) -> Result<Vec<T>, sqlx::Error> {
        let args = arguments::<Sqlite, _, _>(stmt.params, super::sqlite::time, Json)?;
        sqlx::query_as_with(&stmt.sql, args).fetch_all(conn).await
    }

    async fn write(conn: &mut sqlx::SqliteConnection, stmt: Stmt) -> Result<u64, sqlx::Error> {
        let args = arguments::<Sqlite, _, _>(stmt.params, super::sqlite::time, Json)?;
        let done = sqlx::query_with(&stmt.sql, args).execute(conn).await?;
        Ok(done.rows_affected())
    }
}

/// `params` as database `D`'s arguments: every value as its Rust type
/// binds, but a timestamp, which `time` turns into what `D` stores, and a
/// list, which `list` does.
fn arguments<'q, D, Time, List>(
    params: Vec<Param>,
    time: fn(DateTime<Utc>) -> Time,
    list: fn(Vec<String>) -> List,
) -> Result<D::Arguments<'q>, sqlx::Error>
where
    D: Database,
    Uuid: Encode<'q, D> + Type<D>,
    Option<Uuid>: Encode<'q, D> + Type<D>,
    String: Encode<'q, D> + Type<D>,
    Option<String>: Encode<'q, D> + Type<D>,
    i32: Encode<'q, D> + Type<D>,
    Option<i32>: Encode<'q, D> + Type<D>,
    i64: Encode<'q, D> + Type<D>,
    Option<i64>: Encode<'q, D> + Type<D>,
    f64: Encode<'q, D> + Type<D>,
    bool: Encode<'q, D> + Type<D>,
    Vec<u8>: Encode<'q, D> + Type<D>,
    Option<Vec<u8>>: Encode<'q, D> + Type<D>,
    Json<Value>: Encode<'q, D> + Type<D>,
    Option<Json<Value>>: Encode<'q, D> + Type<D>,
    Time: 'q + Encode<'q, D> + Type<D>,
    Option<Time>: 'q + Encode<'q, D> + Type<D>,
    List: 'q + Encode<'q, D> + Type<D>,
{
    let mut args = D::Arguments::default();
    for param in params {
        match param {
            Param::Uuid(v) => args.add(v),
            Param::OptUuid(v) => args.add(v),
            Param::Text(v) => args.add(v),
            Param::OptText(v) => args.add(v),
            Param::Int(v) => args.add(v),
            Param::OptInt(v) => args.add(v),
            Param::BigInt(v) => args.add(v),
            Param::OptBigInt(v) => args.add(v),
            Param::Float(v) => args.add(v),
            Param::Bool(v) => args.add(v),
            Param::Bytes(v) => args.add(v),
            Param::OptBytes(v) => args.add(v),
            Param::Json(v) => args.add(Json(v)),
            Param::OptJson(v) => args.add(v.map(Json)),
            Param::Time(v) => args.add(time(v)),
            Param::OptTime(v) => args.add(v.map(time)),
            Param::TextList(v) => args.add(list(v)),
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

/// Runs statements on a pool's connections, outside any transaction.
#[derive(Debug)]
pub struct Reader<'a, D: Database>(pub &'a Pool<D>);

impl<D: Dialect> Reader<'_, D> {
    /// Every row of `stmt`.
    pub async fn all<T: Rows>(&self, stmt: Stmt) -> Result<Vec<T>, sqlx::Error> {
        D::run(&mut *self.0.acquire().await?, stmt).await
    }

    /// The row of `stmt`, if any.
    pub async fn optional<T: Rows>(&self, stmt: Stmt) -> Result<Option<T>, sqlx::Error> {
        Ok(self.all(stmt).await?.into_iter().next())
    }

    /// The one row of `stmt`.
    pub async fn one<T: Rows>(&self, stmt: Stmt) -> Result<T, sqlx::Error> {
        self.optional(stmt).await?.ok_or(sqlx::Error::RowNotFound)
    }

    /// Runs `stmt`, a write; how many rows it changed.
    pub async fn write(&self, stmt: Stmt) -> Result<u64, sqlx::Error> {
        D::write(&mut *self.0.acquire().await?, stmt).await
    }
}

/// A list of strings in a row, as each database stores one: `text[]` in
/// Postgres, a JSON array in SQLite (bind one as [`Param::TextList`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextList(pub Vec<String>);

impl Type<Postgres> for TextList {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <Vec<String> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <Vec<String> as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, Postgres> for TextList {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        <Vec<String> as sqlx::Decode<'r, Postgres>>::decode(value).map(TextList)
    }
}

impl Type<Sqlite> for TextList {
    fn type_info() -> sqlx::sqlite::SqliteTypeInfo {
        <Json<Vec<String>> as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &sqlx::sqlite::SqliteTypeInfo) -> bool {
        <Json<Vec<String>> as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, Sqlite> for TextList {
    fn decode(value: sqlx::sqlite::SqliteValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        <Json<Vec<String>> as sqlx::Decode<'r, Sqlite>>::decode(value).map(|list| TextList(list.0))
    }
}
