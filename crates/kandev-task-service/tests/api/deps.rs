//! The storage contract of subtasks and "blocked by" links (issue 41), run
//! on both databases by `contract!` in `contract.rs`: subtasks one level
//! deep on one board; a task blocked by two goes free only when both
//! complete (a failed one keeps it blocked, saying so); bad links refused.

use kandev_task_service::{
    TaskError,
    domain::{BoardName, NewBoard, NewTask, Page, StateChange, Task, TaskState, TaskTitle},
    startup::Storage,
};
use serde_json::json;
use uuid::Uuid;

async fn board(storage: &Storage, owner: &str) -> Uuid {
    let new = NewBoard {
        name: BoardName::parse("deps").unwrap(),
        description: String::new(),
        owner: owner.into(),
    };
    storage.tasks.create_board(new).await.unwrap().id
}

fn new(board_id: Uuid, title: &str, parent_id: Option<Uuid>) -> NewTask {
    NewTask {
        agent_type: Some("mock-agent".into()),
        max_retries: 0,
        parent_id,
        ..NewTask::new(board_id, TaskTitle::parse(title).unwrap(), "alice")
    }
}

async fn task(storage: &Storage, board_id: Uuid, title: &str) -> Task {
    storage
        .tasks
        .create_task(new(board_id, title, None))
        .await
        .unwrap()
}

async fn to(storage: &Storage, id: Uuid, state: TaskState) -> Task {
    let change = StateChange {
        to: state,
        expected_version: None,
        actor: "alice".into(),
        reason: String::new(),
        metadata_patch: None,
    };
    storage.tasks.change_state(id, change).await.unwrap()
}

async fn block(storage: &Storage, id: Uuid, by: &[Uuid]) -> Result<Task, TaskError> {
    storage
        .tasks
        .put_blockers(id, by.to_vec(), None, "alice".into())
        .await
}

fn invalid(result: Result<Task, TaskError>) -> String {
    match result {
        Err(TaskError::InvalidArgument(msg)) => msg,
        other => panic!("expected an invalid argument, got {other:?}"),
    }
}

fn not_found(result: Result<Task, TaskError>) {
    assert!(
        matches!(result, Err(TaskError::NotFound(_))),
        "expected not found, got {result:?}"
    );
}

pub async fn subtasks_are_one_level_on_one_board(storage: &Storage) {
    let b = board(storage, "alice").await;
    let parent = task(storage, b, "parent").await;
    let sub = storage
        .tasks
        .create_task(new(b, "sub", Some(parent.id)))
        .await
        .unwrap();
    assert_eq!(sub.parent_id, Some(parent.id));
    let read = storage.tasks.get_task(parent.id).await.unwrap();
    assert_eq!(read.subtasks, vec![sub.id]);
    let page = Page {
        offset: 0,
        limit: 10,
    };
    let (listed, _) = storage.tasks.list_tasks(b, vec![], page).await.unwrap();
    let listed_parent = listed.iter().find(|t| t.id == parent.id).unwrap();
    assert_eq!(listed_parent.subtasks, vec![sub.id]);

    // One level: a subtask has no subtasks.
    let deeper = storage.tasks.create_task(new(b, "x", Some(sub.id))).await;
    let msg = invalid(deeper);
    assert!(msg.contains("one level"), "{msg}");
    // Same board (another user's board is another board).
    let other = board(storage, "bob").await;
    let msg = invalid(
        storage
            .tasks
            .create_task(new(other, "x", Some(parent.id)))
            .await,
    );
    assert!(msg.contains("not a task of this board"), "{msg}");
    not_found(
        storage
            .tasks
            .create_task(new(b, "x", Some(Uuid::now_v7())))
            .await,
    );

    // The parent goes; its subtask stays, a task of its own.
    storage
        .tasks
        .delete_task(parent.id, None, "alice".into())
        .await
        .unwrap();
    let sub = storage.tasks.get_task(sub.id).await.unwrap();
    assert_eq!(sub.parent_id, None);
}

pub async fn a_task_blocked_by_two_goes_free_when_both_complete(storage: &Storage) {
    let b = board(storage, "alice").await;
    let build = task(storage, b, "build").await;
    let lint = task(storage, b, "lint").await;
    let deploy = task(storage, b, "deploy").await;
    let blocked = block(storage, deploy.id, &[build.id, lint.id])
        .await
        .unwrap();
    assert!(blocked.blocked);
    assert_eq!(blocked.version, deploy.version + 1);
    let ids: Vec<Uuid> = blocked.blockers.iter().map(|x| x.id).collect();
    assert_eq!(ids, vec![build.id, lint.id]);

    to(storage, build.id, TaskState::InProgress).await;
    to(storage, build.id, TaskState::Completed).await;
    let read = storage.tasks.get_task(deploy.id).await.unwrap();
    assert!(read.blocked, "one blocker left");
    to(storage, lint.id, TaskState::InProgress).await;
    to(storage, lint.id, TaskState::Failed).await;
    let read = storage.tasks.get_task(deploy.id).await.unwrap();
    assert!(read.blocked, "a failed blocker keeps it blocked");
    assert_eq!(
        kandev_task_service::deps::blocked_reason(&read.blockers),
        "blocker 'lint' FAILED"
    );

    to(storage, lint.id, TaskState::InProgress).await;
    to(storage, lint.id, TaskState::Completed).await;
    let free = storage.tasks.get_task(deploy.id).await.unwrap();
    assert!(!free.blocked, "both completed");
    assert_eq!(free.state, TaskState::Todo);
    // Freed by the workflow, as an update the orchestrator acts on.
    let (events, _) = storage
        .tasks
        .list_events(
            deploy.id,
            Page {
                offset: 0,
                limit: 50,
            },
        )
        .await
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.kind.as_str(), last.actor.as_str()),
        ("updated", "workflow")
    );
    assert_eq!(last.new_value, json!({"blocked": false}));

    // A blocker reopened blocks it again; its deletion frees it.
    to(storage, build.id, TaskState::Todo).await;
    assert!(storage.tasks.get_task(deploy.id).await.unwrap().blocked);
    storage
        .tasks
        .delete_task(build.id, None, "alice".into())
        .await
        .unwrap();
    let read = storage.tasks.get_task(deploy.id).await.unwrap();
    assert!(!read.blocked);
    assert_eq!(read.blockers.len(), 1);
}

pub async fn bad_blockers_are_refused(storage: &Storage) {
    let b = board(storage, "alice").await;
    let a = task(storage, b, "a").await;
    let bb = task(storage, b, "b").await;
    let c = task(storage, b, "c").await;
    let msg = invalid(block(storage, a.id, &[a.id]).await);
    assert!(msg.contains("itself"), "{msg}");
    let msg = invalid(block(storage, a.id, &[bb.id, bb.id]).await);
    assert!(msg.contains("twice"), "{msg}");
    not_found(block(storage, a.id, &[Uuid::now_v7()]).await);
    let other = board(storage, "bob").await;
    let theirs = task(storage, other, "theirs").await;
    let msg = invalid(block(storage, a.id, &[theirs.id]).await);
    assert!(msg.contains(&theirs.id.to_string()), "{msg}");
    not_found(block(storage, Uuid::now_v7(), &[a.id]).await);

    // a waits for b, b for c: c waiting for a closes a cycle, named.
    block(storage, a.id, &[bb.id]).await.unwrap();
    block(storage, bb.id, &[c.id]).await.unwrap();
    let msg = invalid(block(storage, c.id, &[a.id]).await);
    assert!(msg.contains("cycle"), "{msg}");
    assert!(
        msg.contains("'a'") && msg.contains("'b'") && msg.contains("'c'"),
        "{msg}"
    );
    // Nothing was written by the refusals.
    let read = storage.tasks.get_task(c.id).await.unwrap();
    assert!(read.blockers.is_empty() && !read.blocked);

    // The same set again is no change; an empty set clears them.
    let a_now = storage.tasks.get_task(a.id).await.unwrap();
    let same = block(storage, a.id, &[bb.id]).await.unwrap();
    assert_eq!(same.version, a_now.version);
    let cleared = block(storage, a.id, &[]).await.unwrap();
    assert!(cleared.blockers.is_empty() && !cleared.blocked);
    // A stale version is refused.
    let stale = storage
        .tasks
        .put_blockers(a.id, vec![c.id], Some(1), "alice".into())
        .await;
    assert!(
        matches!(stale, Err(TaskError::VersionConflict { .. })),
        "{stale:?}"
    );
}
