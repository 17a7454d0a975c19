//! `kandev export`: moves a one-machine installation (the SQLite files of a
//! data directory) into the Postgres database of the four-service
//! deployment, for when a team outgrows one machine.
//!
//! Each part's tables are copied into that part's schema (`task_service`,
//! `agent_manager`, `orchestrator`, `gateway`, as the services use by
//! default) after the services' own Postgres migrations have made them. The
//! copy is generic: for every table of the SQLite file, every row, each
//! value converted to the Postgres column's type (ids stored as 16-byte
//! blobs become `uuid`, RFC 3339 text `timestamptz`, JSON arrays `text[]`,
//! 0/1 `boolean`). A SQLite column that Postgres lacks is an error, so the
//! two schemas cannot drift apart silently. Serial columns and the
//! orchestrator's queue sequence continue after the highest value copied.
//!
//! Nothing is written unless everything copies: each schema is filled in a
//! transaction of its own, and the four commit only after the last row of
//! the last part was inserted. The target must not hold data already (the
//! rows the migrations seed, the agent registry, are replaced) unless
//! `--replace` says to delete what it holds.
//!
//! Not copied: the streams (`streams.db`). What they hold has been consumed
//! when no run is in flight, which the export checks; the task service's
//! outbox, copied, publishes anything it had not yet.

use std::{collections::BTreeMap, path::Path, str::FromStr};

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use kandev_orchestrator::ExecState;
use sqlx::{
    Column, Postgres, Row, SqlitePool, TypeInfo, ValueRef,
    postgres::PgArguments,
    query::Query,
    sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteRow},
};

use crate::Part;

/// Rows per `INSERT` (Postgres takes up to 65,535 parameters a statement).
const BATCH: usize = 200;

/// What the copy needs to know of each part beyond its file.
struct Target {
    part: Part,
    schema: String,
    /// Tables whose rows the Postgres migrations insert (the export's rows
    /// replace them).
    seeded: &'static [&'static str],
    /// Sequences not owned by a column: (sequence, table, column).
    sequences: &'static [(&'static str, &'static str, &'static str)],
}

impl Target {
    fn of(part: Part) -> Target {
        let target = |schema: String| Target {
            part,
            schema,
            seeded: &[],
            sequences: &[],
        };
        match part {
            Part::TaskService => target(
                kandev_task_service::Settings::default()
                    .common
                    .database_schema,
            ),
            Part::AgentManager => Target {
                seeded: &["agent_types"],
                ..target(
                    kandev_agent_manager::Settings::default()
                        .common
                        .database_schema,
                )
            },
            Part::Orchestrator => Target {
                sequences: &[("queue_order", "executions", "queue_order")],
                ..target(
                    kandev_orchestrator::Settings::default()
                        .common
                        .database_schema,
                )
            },
            Part::Gateway => target(kandev_gateway::Settings::default().common.database_schema),
        }
    }
}

/// What was copied: rows per `schema.table`.
#[derive(Debug, Default)]
pub struct Report {
    pub rows: BTreeMap<String, u64>,
}

/// Copies the state of `data_dir` into the Postgres database `url`. With
/// `replace`, what the target's tables hold is deleted first; without, a
/// target holding data is an error.
pub async fn export(data_dir: &Path, url: &str, replace: bool) -> Result<Report> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        bail!("the target must be a postgres:// URL");
    }
    let _lock = crate::DataDirLock::acquire(data_dir)
        .map_err(|e| anyhow::anyhow!("{e}: stop kandev before exporting its data"))?;
    let targets = Part::ALL.map(Target::of);
    let mut sources = Vec::new();
    for target in &targets {
        sources.push(open_sqlite(&data_dir.join(target.part.file())).await?);
    }
    let (_, orchestrator) = targets
        .iter()
        .zip(&sources)
        .find(|(target, _)| target.part == Part::Orchestrator)
        .expect("the orchestrator is a part");
    let in_flight = in_flight(orchestrator).await?;
    if in_flight > 0 {
        bail!(
            "{in_flight} task(s) have a run in flight: start kandev, let the runs finish \
             (or cancel them), stop it, then export"
        );
    }

    let mut report = Report::default();
    let mut txs = Vec::new();
    for (target, source) in targets.iter().zip(&sources) {
        let pool = connect_target(target.part, url).await?;
        let mut tx = pool.begin().await?;
        copy_part(target, source, &mut tx, replace, &mut report)
            .await
            .with_context(|| format!("copying the {}", target.part.name()))?;
        txs.push(tx);
    }
    for tx in txs {
        tx.commit().await?;
    }
    for source in sources {
        source.close().await;
    }
    Ok(report)
}

async fn open_sqlite(path: &Path) -> Result<SqlitePool> {
    if !path.is_file() {
        bail!(
            "{} is missing: is this a kandev data directory?",
            path.display()
        );
    }
    let options =
        SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?.read_only(true);
    Ok(SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?)
}

/// Runs of the orchestrator's executions that hold or will take a
/// container.
async fn in_flight(orchestrator: &SqlitePool) -> Result<i64> {
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM executions GROUP BY state")
            .fetch_all(orchestrator)
            .await?;
    let mut in_flight = 0;
    for (state, count) in states {
        let state = ExecState::parse(&state).map_err(anyhow::Error::msg)?;
        if state.is_in_flight() {
            in_flight += count;
        }
    }
    Ok(in_flight)
}

/// The part's schema, made and migrated by the service's own code.
async fn connect_target(part: Part, url: &str) -> Result<sqlx::PgPool> {
    let (defaults, migrations) = match part {
        Part::TaskService => (
            kandev_task_service::Settings::default().common,
            &kandev_task_service::startup::MIGRATIONS,
        ),
        Part::AgentManager => (
            kandev_agent_manager::Settings::default().common,
            &kandev_agent_manager::startup::MIGRATIONS,
        ),
        Part::Orchestrator => (
            kandev_orchestrator::Settings::default().common,
            &kandev_orchestrator::startup::MIGRATIONS,
        ),
        Part::Gateway => (
            kandev_gateway::Settings::default().common,
            &kandev_gateway::startup::MIGRATIONS,
        ),
    };
    let settings = kandev_common::config::ServiceSettings {
        database_url: url.to_string(),
        database_max_connections: 1,
        ..defaults
    };
    Ok(kandev_common::startup::connect_database(&settings, migrations).await?)
}

/// The part's tables, each after the tables it references (a column added
/// by a later migration may reference a table created after its own), in
/// creation order otherwise.
async fn tables(source: &SqlitePool) -> Result<Vec<String>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         AND name <> '_sqlx_migrations' ORDER BY rowid",
    )
    .fetch_all(source)
    .await?;
    let mut references = BTreeMap::new();
    for name in &names {
        let targets: Vec<String> =
            sqlx::query_scalar("SELECT DISTINCT \"table\" FROM pragma_foreign_key_list(?)")
                .bind(name)
                .fetch_all(source)
                .await?;
        references.insert(name.clone(), targets);
    }
    referenced_first(&names, &references)
}

/// `names` ordered so that each comes after the names it references (only
/// those among `names`), keeping their order where free; a cycle is an error.
fn referenced_first(
    names: &[String],
    references: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>> {
    let mut placed: Vec<String> = Vec::with_capacity(names.len());
    while placed.len() < names.len() {
        let next = names.iter().find(|n| {
            !placed.contains(n)
                && references
                    .get(*n)
                    .into_iter()
                    .flatten()
                    .all(|r| r == *n || placed.contains(r) || !names.contains(r))
        });
        let Some(next) = next else {
            bail!("the tables' foreign keys form a cycle: {names:?}");
        };
        placed.push(next.clone());
    }
    Ok(placed)
}

/// A Postgres column's name and type (`format_type`: `uuid`, `text[]`,
/// `timestamp with time zone`, ...).
async fn target_columns(
    tx: &mut sqlx::PgConnection,
    schema: &str,
    table: &str,
) -> Result<BTreeMap<String, String>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
         FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid \
         JOIN pg_namespace n ON c.relnamespace = n.oid \
         WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'r' \
           AND a.attnum > 0 AND NOT a.attisdropped",
    )
    .bind(schema)
    .bind(table)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.into_iter().collect())
}

async fn copy_part(
    part: &Target,
    source: &SqlitePool,
    tx: &mut sqlx::PgConnection,
    replace: bool,
    report: &mut Report,
) -> Result<()> {
    let tables = tables(source).await?;
    let mut plans = Vec::new();
    let mut holding = Vec::new();
    for table in &tables {
        let target = target_columns(tx, &part.schema, table).await?;
        if target.is_empty() {
            bail!(
                "table {table} has no twin in the Postgres schema {}",
                part.schema
            );
        }
        let columns: Vec<String> =
            sqlx::query_scalar("SELECT name FROM pragma_table_info(?) ORDER BY cid")
                .bind(table)
                .fetch_all(source)
                .await?;
        let mut typed = Vec::new();
        for column in columns {
            let Some(ty) = target.get(&column) else {
                bail!("column {table}.{column} has no twin in Postgres");
            };
            typed.push((column, ty.clone()));
        }
        let held: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&mut *tx)
            .await?;
        if held > 0 && !replace && !part.seeded.contains(&table.as_str()) {
            holding.push(format!("{}.{table} ({held} rows)", part.schema));
        }
        plans.push((table.clone(), typed));
    }
    if !holding.is_empty() {
        bail!(
            "the target already holds data: {}; export into a fresh database, \
             or pass --replace to delete it",
            holding.join(", ")
        );
    }
    for (table, _) in plans.iter().rev() {
        sqlx::query(&format!("DELETE FROM {table}"))
            .execute(&mut *tx)
            .await?;
    }
    for (table, columns) in &plans {
        let rows = copy_table(source, tx, table, columns)
            .await
            .with_context(|| format!("table {table}"))?;
        report.rows.insert(format!("{}.{table}", part.schema), rows);
        for (column, _) in columns {
            let owned: Option<String> = sqlx::query_scalar("SELECT pg_get_serial_sequence($1, $2)")
                .bind(format!("{}.{table}", part.schema))
                .bind(column)
                .fetch_one(&mut *tx)
                .await?;
            if let Some(sequence) = owned {
                continue_after(tx, &sequence, table, column).await?;
            }
        }
    }
    for (sequence, table, column) in part.sequences {
        continue_after(tx, sequence, table, column).await?;
    }
    Ok(())
}

/// Makes `sequence` hand out values above every `table.column`.
async fn continue_after(
    tx: &mut sqlx::PgConnection,
    sequence: &str,
    table: &str,
    column: &str,
) -> Result<()> {
    sqlx::query(&format!(
        "SELECT setval($1, COALESCE(MAX({column}), 0) + 1, false) FROM {table}"
    ))
    .bind(sequence)
    .fetch_one(&mut *tx)
    .await?;
    Ok(())
}

/// A SQLite value, by its storage class.
#[derive(Debug)]
enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

fn value(row: &SqliteRow, i: usize) -> Result<Value> {
    let raw = row.try_get_raw(i)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    let class = raw.type_info().name().to_string();
    Ok(match class.as_str() {
        "INTEGER" => Value::Int(row.try_get_unchecked(i)?),
        "REAL" => Value::Real(row.try_get_unchecked(i)?),
        "TEXT" => Value::Text(row.try_get_unchecked(i)?),
        "BLOB" => Value::Blob(row.try_get_unchecked(i)?),
        other => bail!(
            "column {} holds a value of type {other}",
            row.column(i).name()
        ),
    })
}

/// What one value binds as, and its placeholder's SQL.
enum Param {
    Text(Option<String>),
    Uuid(uuid::Uuid),
    Bytes(Vec<u8>),
    Bool(bool),
    Array(Vec<String>),
}

/// Converts `v` for a Postgres column of type `ty`.
fn param(v: Value, ty: &str) -> Result<(Param, bool)> {
    // (the parameter, whether its placeholder needs a cast from text)
    Ok(match (v, ty) {
        (Value::Null, _) => (Param::Text(None), true),
        (Value::Blob(b), "uuid") => (
            Param::Uuid(uuid::Uuid::from_slice(&b).context("an id that is not 16 bytes")?),
            false,
        ),
        (Value::Blob(b), "bytea") => (Param::Bytes(b), false),
        (Value::Text(t), "bytea") => (Param::Bytes(t.into_bytes()), false),
        (Value::Int(i), "boolean") => (Param::Bool(i != 0), false),
        (Value::Text(t), "text[]") => (
            Param::Array(serde_json::from_str(&t).context("a list that is not a JSON array")?),
            false,
        ),
        (Value::Blob(_), other) => bail!("a blob for a column of type {other}"),
        (Value::Int(i), _) => (Param::Text(Some(i.to_string())), true),
        (Value::Real(r), _) => (Param::Text(Some(r.to_string())), true),
        (Value::Text(t), _) => (Param::Text(Some(t)), true),
    })
}

fn bind(query: Query<'_, Postgres, PgArguments>, p: Param) -> Query<'_, Postgres, PgArguments> {
    match p {
        Param::Text(t) => query.bind(t),
        Param::Uuid(u) => query.bind(u),
        Param::Bytes(b) => query.bind(b),
        Param::Bool(b) => query.bind(b),
        Param::Array(a) => query.bind(a),
    }
}

/// Copies every row of `table`; how many.
async fn copy_table(
    source: &SqlitePool,
    tx: &mut sqlx::PgConnection,
    table: &str,
    columns: &[(String, String)],
) -> Result<u64> {
    let names: Vec<&str> = columns.iter().map(|(c, _)| c.as_str()).collect();
    let select = format!("SELECT {} FROM {table} ORDER BY rowid", names.join(", "));
    let mut batches = sqlx::query(&select).fetch(source).try_chunks(BATCH);
    let mut copied = 0;
    while let Some(batch) = batches.try_next().await.map_err(|e| e.1)? {
        let mut params = Vec::with_capacity(batch.len() * columns.len());
        let mut tuples = Vec::with_capacity(batch.len());
        for row in &batch {
            let mut placeholders = Vec::with_capacity(columns.len());
            for (i, (column, ty)) in columns.iter().enumerate() {
                let (p, cast) =
                    param(value(row, i)?, ty).with_context(|| format!("column {column}"))?;
                params.push(p);
                let n = params.len();
                placeholders.push(if cast {
                    format!("CAST(${n} AS {ty})")
                } else {
                    format!("${n}")
                });
            }
            tuples.push(format!("({})", placeholders.join(", ")));
        }
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES {}",
            names.join(", "),
            tuples.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for p in params {
            query = bind(query, p);
        }
        query.execute(&mut *tx).await?;
        copied += batch.len() as u64;
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    fn refs(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(n, r)| (n.to_string(), r.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_table_comes_after_the_tables_it_references() {
        let names: Vec<String> = ["tasks", "boards", "columns"].map(String::from).to_vec();
        let references = refs(&[
            ("tasks", &["boards", "columns"]),
            ("columns", &["boards"]),
            ("boards", &[]),
        ]);
        let order = super::referenced_first(&names, &references).unwrap();
        assert_eq!(order, ["boards", "columns", "tasks"]);
        let cycle = refs(&[("tasks", &["boards"]), ("boards", &["tasks"])]);
        assert!(super::referenced_first(&names[..2], &cycle).is_err());
    }
}
