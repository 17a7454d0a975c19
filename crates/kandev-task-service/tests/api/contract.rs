//! The storage contract: what every [`TaskStore`] and [`OutboxStore`] does,
//! checked against each database. Each check is one function over a
//! [`Storage`]; `contract!` runs it on Postgres (a fresh database) and on
//! SQLite (a fresh file), as quickwit's metastore suite does.

use std::{collections::HashSet, sync::Arc, time::Duration};

use kandev_events::{EventBus, MemoryBus, subjects};
use kandev_task_service::{
    TaskError,
    domain::{
        BoardName, BoardPatch, NewBoard, NewTask, Page, StateChange, Task, TaskPatch, TaskState,
        TaskTitle, json_object,
    },
    outbox::OutboxRelay,
    startup::Storage,
};
use kandev_testkit::{TestDb, eventually};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::{deps::*, helpers::open_storage, workflow::*};

/// A fresh database of one kind, and what removes it.
struct Backend {
    storage: Storage,
    db: Option<TestDb>,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    async fn postgres() -> Backend {
        let db = TestDb::create().await;
        Backend {
            storage: open_storage(&db.url).await,
            db: Some(db),
            _dir: None,
        }
    }

    async fn sqlite() -> Backend {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
        Backend {
            storage: open_storage(&url).await,
            db: None,
            _dir: Some(dir),
        }
    }

    async fn remove(self) {
        self.storage.tasks.close().await;
        if let Some(db) = self.db {
            db.drop_db().await;
        }
    }
}

/// Runs each named check against both databases.
macro_rules! contract {
    ($($check:ident),* $(,)?) => {
        contract!(@on postgres; $($check),*);
        contract!(@on sqlite; $($check),*);
    };
    // The checks as tests of one backend, in a module named after it.
    (@on $kind:ident; $($check:ident),*) => {
        mod $kind {
            $(
                #[tokio::test]
                async fn $check() {
                    let backend = super::Backend::$kind().await;
                    assert_eq!(backend.storage.kind, stringify!($kind));
                    super::$check(&backend.storage).await;
                    backend.remove().await;
                }
            )*
        }
    };
}

contract!(
    boards_are_created_listed_updated_and_deleted,
    a_task_is_version_one_at_the_end_of_its_column,
    metadata_at_the_edges_of_json_reads_back_as_written,
    an_update_records_only_what_changed,
    a_stale_version_is_refused,
    state_changes_follow_the_transition_table,
    tasks_are_listed_by_state_and_position_in_pages,
    history_outlives_the_task,
    deleting_a_board_deletes_each_task_as_an_event,
    every_change_leaves_one_event_in_commit_order,
    a_claimed_batch_keeps_other_relays_out,
    concurrent_writers_of_one_task_serialise,
    the_relay_publishes_in_commit_order_once,
    a_new_board_has_the_default_workflow_and_cards_follow_their_state,
    a_three_step_workflow_moves_a_card_and_a_wip_limit_queues,
    a_deleted_card_frees_its_slot_and_removed_columns_keep_their_cards,
    bad_moves_and_columns_are_refused,
    subtasks_are_one_level_on_one_board,
    a_task_blocked_by_two_goes_free_when_both_complete,
    bad_blockers_are_refused,
);

/// Postgres only: replicas share one database, so a relay's claim holds
/// against another process's relay too (SQLite serves one process).
#[tokio::test]
async fn postgres_replicas_claim_the_outbox_one_at_a_time() {
    let backend = Backend::postgres().await;
    let url = backend
        .db
        .as_ref()
        .expect("a Postgres database")
        .url
        .clone();
    let replica = open_storage(&url).await;
    a_task(&backend.storage).await;
    let held = backend.storage.outbox.claim(10).await.unwrap();
    let held = held.expect("the first replica's claim");
    assert!(
        replica.outbox.claim(10).await.unwrap().is_none(),
        "the other replica waits"
    );
    let published = [held.events()[0].id];
    held.finish(&published).await.unwrap();
    let next = eventually(5, "the other replica's claim", || async {
        replica.outbox.claim(10).await.unwrap()
    })
    .await;
    assert!(next.events().is_empty(), "published once");
    next.finish(&[]).await.unwrap();
    replica.tasks.close().await;
    backend.remove().await;
}

const PAGE: Page = Page {
    offset: 0,
    limit: 100,
};

fn new_board(name: &str, owner: &str) -> NewBoard {
    NewBoard {
        name: BoardName::parse(name).unwrap(),
        description: format!("{name}'s board"),
        owner: owner.into(),
    }
}

fn new_task(board_id: Uuid, title: &str) -> NewTask {
    NewTask {
        description: "do it".into(),
        priority: 2,
        agent_type: Some("mock-agent".into()),
        repository_url: "https://example.invalid/repo.git".into(),
        branch: "main".into(),
        metadata: object(json!({"k": "v", "n": 1})),
        max_retries: 3,
        autostart: false,
        ..NewTask::new(board_id, TaskTitle::parse(title).unwrap(), "alice")
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn patch(actor: &str) -> TaskPatch {
    TaskPatch {
        actor: actor.into(),
        ..TaskPatch::default()
    }
}

fn move_to(to: TaskState, expected_version: Option<i64>) -> StateChange {
    StateChange {
        to,
        expected_version,
        actor: "orchestrator".into(),
        reason: format!("to {to}"),
        metadata_patch: None,
    }
}

/// Task `id` moved to IN_PROGRESS.
async fn started(storage: &Storage, id: Uuid) -> Task {
    storage
        .tasks
        .change_state(id, move_to(TaskState::InProgress, None))
        .await
        .unwrap()
}

async fn a_task(storage: &Storage) -> Task {
    let board = storage
        .tasks
        .create_board(new_board("b", "alice"))
        .await
        .unwrap();
    storage
        .tasks
        .create_task(new_task(board.id, "t"))
        .await
        .unwrap()
}

async fn boards_are_created_listed_updated_and_deleted(storage: &Storage) {
    let store = &storage.tasks;
    let a = store.create_board(new_board("one", "alice")).await.unwrap();
    let b = store.create_board(new_board("two", "bob")).await.unwrap();
    let c = store
        .create_board(new_board("three", "alice"))
        .await
        .unwrap();
    assert_eq!(store.get_board(a.id).await.unwrap(), a);
    assert_eq!((a.name.as_str(), a.owner.as_str()), ("one", "alice"));

    let (all, token) = store.list_boards(None, PAGE).await.unwrap();
    assert_eq!(all, vec![a.clone(), b.clone(), c.clone()], "oldest first");
    assert_eq!(token, "");
    let (alices, _) = store.list_boards(Some("alice".into()), PAGE).await.unwrap();
    assert_eq!(alices, vec![a.clone(), c.clone()]);
    let first = Page {
        offset: 0,
        limit: 2,
    };
    let (page, token) = store.list_boards(None, first).await.unwrap();
    assert_eq!((page.len(), token.as_str()), (2, "2"));
    let (rest, token) = store
        .list_boards(None, Page::parse(2, "2").unwrap())
        .await
        .unwrap();
    assert_eq!((rest, token.as_str()), (vec![c.clone()], ""));

    let renamed = store
        .update_board(
            a.id,
            BoardPatch {
                name: Some(BoardName::parse("uno").unwrap()),
                description: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(renamed.name, "uno");
    assert_eq!(renamed.description, a.description, "untouched field kept");
    assert!(renamed.updated_at >= a.updated_at);
    assert_eq!(renamed.created_at, a.created_at);

    store.delete_board(b.id, "bob".into()).await.unwrap();
    for missing in [
        store.get_board(b.id).await.unwrap_err(),
        store
            .update_board(b.id, BoardPatch::default())
            .await
            .unwrap_err(),
        store.delete_board(b.id, "bob".into()).await.unwrap_err(),
        store
            .create_task(new_task(b.id, "orphan"))
            .await
            .unwrap_err(),
        store.list_tasks(b.id, vec![], PAGE).await.unwrap_err(),
    ] {
        assert!(matches!(missing, TaskError::NotFound(_)), "{missing}");
    }
}

async fn a_task_is_version_one_at_the_end_of_its_column(storage: &Storage) {
    let store = &storage.tasks;
    let board = store.create_board(new_board("b", "alice")).await.unwrap();
    let first = store
        .create_task(new_task(board.id, "first"))
        .await
        .unwrap();
    let second = store
        .create_task(new_task(board.id, "second"))
        .await
        .unwrap();
    let mut blocked = new_task(board.id, "blocked");
    blocked.state = TaskState::Blocked;
    let blocked = store.create_task(blocked).await.unwrap();

    assert_eq!((first.version, first.position), (1, 1));
    assert_eq!(second.position, 2);
    assert_eq!(blocked.position, 1, "each column counts on its own");
    assert_eq!(store.get_task(first.id).await.unwrap(), first);
    assert_eq!(first.metadata, object(json!({"k": "v", "n": 1})));
    assert_eq!(first.agent_type.as_deref(), Some("mock-agent"));
    assert!(!first.autostart);
    assert_eq!(first.created_at, first.updated_at);

    let err = store.get_task(Uuid::now_v7()).await.unwrap_err();
    assert!(matches!(err, TaskError::NotFound(_)), "{err}");
}

/// What schemathesis once sent: numbers at the ends of f64 (Postgres keeps
/// `-1.7976931348623157e308` as a 309-digit integer, which a parser that does
/// not round correctly reads back as out of range), control characters and
/// astral characters in keys and text. A task accepted is read back with
/// the same values, alone, in a list and in its event (Postgres may write a
/// number in another form: `-3.229106690147505e16` as `-32291066901475050`).
async fn metadata_at_the_edges_of_json_reads_back_as_written(storage: &Storage) {
    let store = &storage.tasks;
    let text = r#"{"m": -1.7976931348623157e+308, "max": 1.7976931348623157e308,
        "tiny": 5e-324, "small": -2.2250738585072014e-308, "big": 100000000000000000000,
        "u64": 18446744073709551615, "i64": -9223372036854775808, "f": -3.229106690147505e+16,
        "\ud807\ude16\u00b4My@B\\\u0087\u009a\u0012i": {"": false},
        "\u00ea\u000f\u00e0": [-303674, 101998, "g\u000b\u00c85\u007f"], "": [false, "\u00fb$"]}"#;
    let metadata = Value::Object(json_object("metadata", text).unwrap());
    let board = store.create_board(new_board("b", "alice")).await.unwrap();
    let mut new = new_task(board.id, "!\u{10f3c1}\u{92}I\u{71f3d}\u{bb}Cj\u{a0}");
    new.metadata = object(metadata.clone());
    let task = store.create_task(new).await.unwrap();
    let same_task = |read: Task| {
        assert_same_values(&Value::Object(read.metadata.clone()), &metadata);
        assert_eq!(
            Task {
                metadata: task.metadata.clone(),
                ..read
            },
            task
        );
    };

    same_task(store.get_task(task.id).await.unwrap());
    let (mut listed, _) = store.list_tasks(board.id, vec![], PAGE).await.unwrap();
    assert_eq!(listed.len(), 1);
    same_task(listed.remove(0));

    let batch = storage.outbox.claim(10).await.unwrap().unwrap();
    let event: Value = serde_json::from_str(&batch.events()[0].payload).unwrap();
    assert_same_values(&event["data"]["task"]["metadata"], &metadata);
    assert_eq!(event["data"]["task"]["title"], json!(task.title));
}

/// Equal JSON, numbers compared by value.
fn assert_same_values(left: &Value, right: &Value) {
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => match (x.as_i128(), y.as_i128()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| same(a, b)))
            }
            _ => a == b,
        }
    }
    assert!(same(left, right), "{left}\n  is not\n{right}");
}

async fn an_update_records_only_what_changed(storage: &Storage) {
    let store = &storage.tasks;
    let task = a_task(storage).await;

    let unchanged = store
        .update_task(
            task.id,
            TaskPatch {
                title: Some(TaskTitle::parse("t").unwrap()),
                ..patch("bob")
            },
        )
        .await
        .unwrap();
    assert_eq!(
        unchanged, task,
        "a patch that changes nothing is no version"
    );

    let updated = store
        .update_task(
            task.id,
            TaskPatch {
                expected_version: Some(1),
                title: Some(TaskTitle::parse("renamed").unwrap()),
                agent_type: Some(None),
                metadata_patch: Some(object(json!({"k": null, "new": [1, 2]}))),
                ..patch("bob")
            },
        )
        .await
        .unwrap();
    assert_eq!(updated.version, 2);
    assert_eq!(updated.title, "renamed");
    assert_eq!(updated.agent_type, None);
    assert_eq!(updated.metadata, object(json!({"n": 1, "new": [1, 2]})));
    assert_eq!(updated.description, task.description);
    assert!(updated.updated_at >= task.updated_at);
    assert_eq!(store.get_task(task.id).await.unwrap(), updated);

    let (events, _) = store.list_events(task.id, PAGE).await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["created", "updated"], "no event for the no-op");
    let update = &events[1];
    assert_eq!(update.actor, "bob");
    assert_eq!(
        update.old_value,
        json!({"title": "t", "agent_type": "mock-agent", "metadata": {"k": "v", "n": 1}})
    );
    assert_eq!(
        update.new_value,
        json!({"title": "renamed", "agent_type": null, "metadata": {"n": 1, "new": [1, 2]}})
    );
}

async fn a_stale_version_is_refused(storage: &Storage) {
    let store = &storage.tasks;
    let task = a_task(storage).await;
    store
        .update_task(
            task.id,
            TaskPatch {
                priority: Some(5),
                ..patch("a")
            },
        )
        .await
        .unwrap();
    let stale = Some(task.version);
    let errors = [
        store
            .update_task(
                task.id,
                TaskPatch {
                    expected_version: stale,
                    priority: Some(7),
                    ..patch("b")
                },
            )
            .await
            .unwrap_err(),
        store
            .change_state(task.id, move_to(TaskState::InProgress, stale))
            .await
            .unwrap_err(),
        store
            .delete_task(task.id, stale, "c".into())
            .await
            .unwrap_err(),
    ];
    for err in errors {
        assert!(
            matches!(
                err,
                TaskError::VersionConflict {
                    expected: 1,
                    actual: 2
                }
            ),
            "{err}"
        );
    }
    let now = store.get_task(task.id).await.unwrap();
    assert_eq!(
        (now.version, now.priority, now.state),
        (2, 5, TaskState::Todo)
    );
}

async fn state_changes_follow_the_transition_table(storage: &Storage) {
    let store = &storage.tasks;
    let task = a_task(storage).await;
    let other = store
        .create_task(new_task(task.board_id, "other"))
        .await
        .unwrap();
    started(storage, other.id).await;

    let err = store
        .change_state(task.id, move_to(TaskState::Completed, None))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TaskError::ForbiddenTransition {
                from: TaskState::Todo,
                to: TaskState::Completed
            }
        ),
        "{err}"
    );

    let change = StateChange {
        metadata_patch: Some(object(json!({"session": "s1", "k": null}))),
        ..move_to(TaskState::InProgress, Some(1))
    };
    let moved = store.change_state(task.id, change).await.unwrap();
    assert_eq!(moved.state, TaskState::InProgress);
    assert_eq!(moved.version, 2);
    assert_eq!(moved.position, 2, "at the end of its new column");
    assert_eq!(moved.metadata, object(json!({"n": 1, "session": "s1"})));

    let (events, _) = store.list_events(task.id, PAGE).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "state_changed");
    assert_eq!(last.actor, "orchestrator");
    assert_eq!(last.old_value, json!({"state": "TODO"}));
    assert_eq!(
        last.new_value,
        json!({"state": "IN_PROGRESS", "reason": "to IN_PROGRESS"})
    );
}

async fn tasks_are_listed_by_state_and_position_in_pages(storage: &Storage) {
    let store = &storage.tasks;
    let board = store.create_board(new_board("b", "alice")).await.unwrap();
    let mut ids = vec![];
    for i in 0..5 {
        ids.push(
            store
                .create_task(new_task(board.id, &format!("t{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    for id in &ids[..2] {
        started(storage, *id).await;
    }
    // Moved to the top of the column.
    store
        .update_task(
            ids[4],
            TaskPatch {
                position: Some(0),
                ..patch("a")
            },
        )
        .await
        .unwrap();

    let titles = |tasks: Vec<Task>| tasks.into_iter().map(|t| t.title).collect::<Vec<_>>();
    let (todo, _) = store
        .list_tasks(board.id, vec![TaskState::Todo], PAGE)
        .await
        .unwrap();
    assert_eq!(titles(todo), ["t4", "t2", "t3"]);
    let (both, _) = store
        .list_tasks(
            board.id,
            vec![TaskState::InProgress, TaskState::Completed],
            PAGE,
        )
        .await
        .unwrap();
    assert_eq!(titles(both), ["t0", "t1"]);
    let page_from = |offset| store.list_tasks(board.id, vec![], Page { offset, limit: 4 });
    let (all, token) = page_from(0).await.unwrap();
    assert_eq!((all.len(), token.as_str()), (4, "4"));
    let (rest, token) = page_from(4).await.unwrap();
    assert_eq!((rest.len(), token.as_str()), (1, ""));
}

async fn history_outlives_the_task(storage: &Storage) {
    let store = &storage.tasks;
    let task = a_task(storage).await;
    started(storage, task.id).await;
    store
        .delete_task(task.id, Some(2), "alice".into())
        .await
        .unwrap();
    let err = store.get_task(task.id).await.unwrap_err();
    assert!(matches!(err, TaskError::NotFound(_)), "{err}");

    let (events, token) = store.list_events(task.id, PAGE).await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["created", "state_changed", "deleted"]);
    assert_eq!(token, "");
    assert!(
        events
            .iter()
            .all(|e| e.task_id == task.id && e.board_id == task.board_id)
    );
    assert!(
        events
            .windows(2)
            .all(|w| w[0].created_at <= w[1].created_at)
    );
    assert_eq!(events[0].old_value, Value::Null);
    assert_eq!(events[0].new_value["title"], "t");
    assert_eq!(events[2].old_value["state"], "IN_PROGRESS");
    assert_eq!(events[2].new_value, Value::Null);
    let (second, _) = store
        .list_events(
            task.id,
            Page {
                offset: 1,
                limit: 1,
            },
        )
        .await
        .unwrap();
    assert_eq!(second, vec![events[1].clone()]);

    let err = store.list_events(Uuid::now_v7(), PAGE).await.unwrap_err();
    assert!(matches!(err, TaskError::NotFound(_)), "{err}");
}

async fn deleting_a_board_deletes_each_task_as_an_event(storage: &Storage) {
    let store = &storage.tasks;
    let board = store.create_board(new_board("b", "alice")).await.unwrap();
    let keep = store.create_board(new_board("k", "alice")).await.unwrap();
    let kept = store.create_task(new_task(keep.id, "kept")).await.unwrap();
    let mut gone = vec![];
    for i in 0..3 {
        gone.push(
            store
                .create_task(new_task(board.id, &format!("t{i}")))
                .await
                .unwrap(),
        );
    }
    store.delete_board(board.id, "carol".into()).await.unwrap();
    for task in &gone {
        assert!(store.get_task(task.id).await.is_err());
        let (events, _) = store.list_events(task.id, PAGE).await.unwrap();
        let last = events.last().unwrap();
        assert_eq!(
            (last.kind.as_str(), last.actor.as_str()),
            ("deleted", "carol")
        );
    }
    assert_eq!(store.get_task(kept.id).await.unwrap(), kept);
    let batch = storage.outbox.claim(100).await.unwrap().unwrap();
    let deleted: Vec<_> = batch
        .events()
        .iter()
        .filter(|e| e.subject == subjects::TASK_DELETED)
        .map(|e| {
            serde_json::from_str::<Value>(&e.payload).unwrap()["data"]["task"]["title"].clone()
        })
        .collect();
    assert_eq!(deleted, [json!("t0"), json!("t1"), json!("t2")]);
}

async fn every_change_leaves_one_event_in_commit_order(storage: &Storage) {
    let store = &storage.tasks;
    assert_eq!(storage.outbox.pending().await.unwrap(), 0);
    let task = a_task(storage).await;
    store
        .update_task(
            task.id,
            TaskPatch {
                priority: Some(9),
                ..patch("a")
            },
        )
        .await
        .unwrap();
    started(storage, task.id).await;
    // Refused changes leave nothing behind.
    let _ = store
        .change_state(task.id, move_to(TaskState::Todo, Some(1)))
        .await
        .unwrap_err();
    store.delete_task(task.id, None, "a".into()).await.unwrap();
    assert_eq!(storage.outbox.pending().await.unwrap(), 4);

    let batch = storage.outbox.claim(100).await.unwrap().unwrap();
    let events = batch.events().to_vec();
    let subjects: Vec<_> = events.iter().map(|e| e.subject.as_str()).collect();
    assert_eq!(
        subjects,
        [
            subjects::TASK_CREATED,
            subjects::TASK_UPDATED,
            subjects::TASK_STATE_CHANGED,
            subjects::TASK_DELETED
        ]
    );
    assert!(events.windows(2).all(|w| w[0].id < w[1].id));
    for event in &events {
        let envelope: Value = serde_json::from_str(&event.payload).unwrap();
        assert_eq!(envelope["id"], json!(event.event_id), "{envelope}");
        assert_eq!(envelope["type"], json!(event.subject));
        assert_eq!(envelope["data"]["task"]["id"], json!(task.id));
    }
    let versions: Vec<_> = events
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(&e.payload).unwrap()["data"]["task"]["version"].clone()
        })
        .collect();
    assert_eq!(versions, [json!(1), json!(2), json!(3), json!(3)]);

    // Finishing with the first two published leaves the others first in line.
    batch.finish(&[events[0].id, events[1].id]).await.unwrap();
    assert_eq!(storage.outbox.pending().await.unwrap(), 2);
    let batch = storage.outbox.claim(1).await.unwrap().unwrap();
    assert_eq!(batch.events(), &events[2..3]);
    batch.finish(&[]).await.unwrap();
    assert_eq!(storage.outbox.pending().await.unwrap(), 2);
}

async fn a_claimed_batch_keeps_other_relays_out(storage: &Storage) {
    a_task(storage).await;
    let held = storage.outbox.claim(10).await.unwrap().expect("the claim");
    assert_eq!(held.events().len(), 1);
    assert!(
        storage.outbox.claim(10).await.unwrap().is_none(),
        "a second relay waits"
    );
    // Writers are not held up by a relay publishing.
    a_task(storage).await;
    held.finish(&[]).await.unwrap();
    let next = storage.outbox.claim(10).await.unwrap().expect("free again");
    assert_eq!(next.events().len(), 2);
    drop(next);
    // (On Postgres the rollback of a dropped transaction runs just after.)
    eventually(5, "a dropped batch to release its claim", || async {
        storage.outbox.claim(10).await.unwrap().map(drop)
    })
    .await;
}

/// What the spawned `tasks` returned, as a set (each must not panic).
async fn joined(tasks: impl Iterator<Item = tokio::task::JoinHandle<i64>>) -> HashSet<i64> {
    futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// `writers` updates of task `id` spawned at once, the `i`th with
/// `patch_of(i)`.
fn spawn_updates(
    storage: &Storage,
    id: Uuid,
    writers: i32,
    patch_of: impl Fn(i32) -> TaskPatch,
) -> Vec<tokio::task::JoinHandle<Result<Task, TaskError>>> {
    (0..writers)
        .map(|i| {
            let store = storage.tasks.clone();
            let patch = patch_of(i);
            tokio::spawn(async move { store.update_task(id, patch).await })
        })
        .collect()
}

async fn concurrent_writers_of_one_task_serialise(storage: &Storage) {
    let task = a_task(storage).await;
    const WRITERS: i32 = 12;

    // All expect version 1: exactly one wins, the others are told why.
    let attempts = spawn_updates(storage, task.id, WRITERS, |i| TaskPatch {
        expected_version: Some(1),
        priority: Some(10 + i),
        ..patch("racer")
    });
    let results = futures::future::join_all(attempts).await;
    let won = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
    let lost = results
        .iter()
        .filter(|r| matches!(r, Ok(Err(TaskError::VersionConflict { .. }))))
        .count();
    assert_eq!((won, lost), (1, WRITERS as usize - 1), "{results:?}");

    // Without a version every change applies, each on the one before.
    let changes = spawn_updates(storage, task.id, WRITERS, |i| TaskPatch {
        metadata_patch: Some(object(json!({ format!("w{i}"): i }))),
        ..patch("writer")
    });
    let versions: HashSet<i64> = futures::future::join_all(changes)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap().version)
        .collect();
    assert_eq!(versions, (3..3 + WRITERS as i64).collect());
    let last = storage.tasks.get_task(task.id).await.unwrap();
    assert_eq!(last.version, 2 + WRITERS as i64);
    assert_eq!(last.metadata.len(), 2 + WRITERS as usize, "no change lost");

    // Tasks added at once each get their own place in the column.
    let adds = (0..WRITERS).map(|i| {
        let store = storage.tasks.clone();
        tokio::spawn(async move {
            store
                .create_task(new_task(task.board_id, &format!("n{i}")))
                .await
                .unwrap()
                .position
        })
    });
    let positions = joined(adds).await;
    assert_eq!(positions, (2..2 + WRITERS as i64).collect());
    assert_eq!(
        storage.outbox.pending().await.unwrap(),
        2 + 2 * WRITERS as i64,
        "one event per change that applied"
    );
}

async fn the_relay_publishes_in_commit_order_once(storage: &Storage) {
    let bus = MemoryBus::new(1024);
    let mut seen = bus.subscribe();
    let relay = OutboxRelay::new(
        storage.outbox.clone(),
        Arc::new(bus.clone()) as Arc<dyn EventBus>,
        Arc::new(Notify::new()),
        Duration::from_millis(50),
    );
    let mut created = vec![];
    for _ in 0..3 {
        created.push(a_task(storage).await.id);
    }
    assert_eq!(relay.drain_once().await.unwrap(), 3);
    assert_eq!(relay.drain_once().await.unwrap(), 0, "published once");
    assert_eq!(relay.pending().await.unwrap(), 0);
    for id in created {
        let event = seen.recv().await.unwrap();
        assert_eq!(event.subject, subjects::TASK_CREATED);
        let envelope: Value = serde_json::from_slice(&event.payload).unwrap();
        assert_eq!(envelope["id"], json!(event.id));
        assert_eq!(envelope["data"]["task"]["id"], json!(id));
    }
    assert!(seen.try_recv().is_err());
}
