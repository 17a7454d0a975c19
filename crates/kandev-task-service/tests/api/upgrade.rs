//! Upgrading an installation from before workflows (issue 41) keeps every
//! board and task where it was: a database migrated to the last migration
//! before columns, with boards and tasks in every state, is opened by this
//! version (the rest of the migrations run) and each board has the default
//! workflow, each task the column of its state. On Postgres and on SQLite.

use std::borrow::Cow;

use kandev_task_service::{domain::TaskState, startup::Storage};
use kandev_testkit::TestDb;
use sqlx::migrate::Migrator;
use uuid::Uuid;

use crate::helpers::{on_database, open_storage};

/// `full` without its migrations from the first one of workflows on.
fn before_workflows(full: Migrator, workflows: i64) -> Migrator {
    let kept: Vec<_> = full
        .migrations
        .iter()
        .filter(|m| m.version < workflows)
        .cloned()
        .collect();
    Migrator {
        migrations: Cow::Owned(kept),
        ..full
    }
}

/// Inserts a board with one task per state; returns the board and tasks.
/// `now` is how the database writes the time in SQL.
async fn old_rows<DB>(pool: &sqlx::Pool<DB>, now: &str) -> (Uuid, Vec<(Uuid, TaskState)>)
where
    DB: sqlx::Database,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'e> &'e sqlx::Pool<DB>: sqlx::Executor<'e, Database = DB>,
    Uuid: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let board = Uuid::now_v7();
    sqlx::query(&format!(
        "INSERT INTO boards (id, name, owner, created_at, updated_at) VALUES ($1, 'old', 'alice', {now}, {now})"
    ))
    .bind(board)
    .execute(pool)
    .await
    .unwrap();
    let mut tasks = vec![];
    for state in TaskState::ALL {
        let id = Uuid::now_v7();
        sqlx::query(&format!(
            "INSERT INTO tasks (id, board_id, title, state, created_at, updated_at) \
             VALUES ($1, $2, 'old task', $3, {now}, {now})"
        ))
        .bind(id)
        .bind(board)
        .bind(state.as_str().to_string())
        .execute(pool)
        .await
        .unwrap();
        tasks.push((id, state));
    }
    (board, tasks)
}

async fn every_task_is_in_its_state_column(
    storage: &Storage,
    board: Uuid,
    tasks: &[(Uuid, TaskState)],
) {
    let columns = storage.tasks.list_columns(board).await.unwrap();
    let states: Vec<TaskState> = columns.iter().map(|c| c.state).collect();
    assert_eq!(states, TaskState::ALL.to_vec(), "the default workflow");
    for (id, state) in tasks {
        let task = storage.tasks.get_task(*id).await.unwrap();
        assert_eq!(task.state, *state, "the state is kept");
        let column = columns.iter().find(|c| Some(c.id) == task.column_id);
        assert_eq!(
            column.map(|c| c.state),
            Some(*state),
            "{state}: its state's column"
        );
        assert!(!task.queued);
        // Subtasks and blockers (issue 41) came later too: none, so
        // nothing is held back.
        assert_eq!(task.parent_id, None);
        assert!(!task.blocked && task.blockers.is_empty() && task.subtasks.is_empty());
    }
    // And the upgraded tasks link like new ones.
    let (waiting, todo) = (tasks[0].0, tasks[1].0);
    let linked = storage
        .tasks
        .put_blockers(waiting, vec![todo], None, "alice".into())
        .await
        .unwrap();
    assert_eq!(linked.blockers.len(), 1);
}

#[tokio::test]
async fn upgrading_sqlite_keeps_every_board_and_task_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let pool = kandev_common::db::sqlite::connect(&url, 1).await.unwrap();
    before_workflows(sqlx::migrate!("./migrations-sqlite"), 2)
        .run(&pool)
        .await
        .unwrap();
    let (board, tasks) = old_rows(&pool, "'2026-01-01T00:00:00.000000Z'").await;
    pool.close().await;
    let storage = open_storage(&url).await;
    every_task_is_in_its_state_column(&storage, board, &tasks).await;
    storage.tasks.close().await;
}

#[tokio::test]
async fn upgrading_postgres_keeps_every_board_and_task_where_it_was() {
    let db = TestDb::create().await;
    let settings = on_database(&db.url);
    let pool = kandev_common::db::connect_schema(
        &settings.common.database_url,
        &settings.common.database_schema,
        2,
    )
    .await
    .unwrap();
    before_workflows(sqlx::migrate!("./migrations"), 4)
        .run(&pool)
        .await
        .unwrap();
    let (board, tasks) = old_rows(&pool, "now()").await;
    pool.close().await;
    let storage = open_storage(&db.url).await;
    every_task_is_in_its_state_column(&storage, board, &tasks).await;
    storage.tasks.close().await;
    db.drop_db().await;
}
