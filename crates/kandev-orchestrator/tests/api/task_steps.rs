//! The task-service calls and waits the queue, e2e, follow-up and tracker
//! tests share: a board, a task's state, the orchestrator's status of its
//! run, the launches recorded so far.

use kandev_orchestrator::Settings;
use kandev_proto::v1 as pb;
use serde_json::Value;
use uuid::Uuid;

use crate::helpers::{Options, TestApp, eventually, http, spawn_app_with};

/// The orchestrator with the task service in-process, its settings changed
/// by `tweak`.
pub async fn spawn_with_tasks(tweak: impl FnOnce(&mut Settings) + Send + 'static) -> TestApp {
    spawn_app_with(Options {
        with_task_service: true,
        tweak: Box::new(tweak),
        ..Options::default()
    })
    .await
}

/// A new board of `owner`'s named `name`.
pub async fn board_of(app: &TestApp, name: &str, owner: &str) -> String {
    app.tasks()
        .create_board(pb::CreateBoardRequest {
            name: name.into(),
            description: String::new(),
            owner: owner.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .id
}

/// A new board of Alice's.
pub async fn board(app: &TestApp) -> String {
    board_of(app, "Board", "alice").await
}

/// A task Alice files on `board` for the mock agent, the rest of it as
/// the caller's `..alices_task(…)` leaves it.
pub fn alices_task(board: &str, title: &str) -> pb::CreateTaskRequest {
    pb::CreateTaskRequest {
        board_id: board.into(),
        title: title.into(),
        agent_type: Some("mock-agent".into()),
        created_by: "alice".into(),
        ..Default::default()
    }
}

/// Files the task; its id.
pub async fn file_task(app: &TestApp, task: pb::CreateTaskRequest) -> String {
    app.tasks().create_task(task).await.unwrap().into_inner().id
}

pub async fn get_task(app: &TestApp, id: &str) -> pb::Task {
    app.tasks()
        .get_task(pb::GetTaskRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
}

/// Alice moves task `id` to `state`.
pub async fn move_task(app: &TestApp, id: &str, state: pb::TaskState) {
    app.tasks()
        .change_task_state(pb::ChangeTaskStateRequest {
            id: id.into(),
            state: state as i32,
            actor: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// The task once it is in `state`, waiting up to `secs` seconds.
pub async fn wait_state_within(
    app: &TestApp,
    id: &str,
    state: pb::TaskState,
    secs: u64,
) -> pb::Task {
    eventually(secs, &format!("task {id} in {state:?}"), || async {
        let t = get_task(app, id).await;
        (t.state == state as i32).then_some(t)
    })
    .await
}

/// The task once it is in `state` (15 s at most).
pub async fn wait_state(app: &TestApp, id: &str, state: pb::TaskState) -> pb::Task {
    wait_state_within(app, id, state, 15).await
}

/// The orchestrator's status of task `id`'s run.
pub async fn status(app: &TestApp, id: &str) -> Value {
    let (code, body) = http(
        "GET",
        &app.url(&format!("/api/v1/orchestrator/tasks/{id}/status")),
        None,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    body
}

/// The launches recorded, once there are at least `n`.
pub async fn wait_launches(app: &TestApp, n: usize) -> Vec<(String, Uuid, pb::LaunchAgentRequest)> {
    eventually(15, &format!("{n} launches"), || async {
        let l = app.agents.launches();
        (l.len() >= n).then_some(l)
    })
    .await
}

/// Waits for task `id`'s run to stop, then checks the task is cancelled.
pub async fn wait_stopped_cancelled(app: &TestApp, id: &str) {
    eventually(10, "execution stopped", || async {
        (status(app, id).await["state"] == "stopped").then_some(())
    })
    .await;
    assert_eq!(
        get_task(app, id).await.state,
        pb::TaskState::Cancelled as i32
    );
}

pub fn metadata(task: &pb::Task) -> Value {
    serde_json::from_str(&task.metadata_json).unwrap()
}
