//! "Blocked by" links (issue 41) driving starts: a task blocked by two
//! others is not started by itself while either is not COMPLETED, and
//! starts when the second completes, by the same path `autostart` takes.
//! The real task service (in-process, same Postgres, same NATS); launches
//! go to a recording `AgentControl`.

use kandev_proto::v1 as pb;

use crate::helpers::*;
use crate::task_steps::*;

async fn task(app: &TestApp, board: &str, title: &str, autostart: bool) -> String {
    let task = pb::CreateTaskRequest {
        workspace_path: "/tmp/kandev-test-ws".into(),
        max_retries: Some(0),
        autostart: Some(autostart),
        ..alices_task(board, title)
    };
    file_task(app, task).await
}

async fn complete(app: &TestApp, id: &str) {
    for state in [pb::TaskState::InProgress, pb::TaskState::Completed] {
        move_task(app, id, state).await;
    }
}

fn launched(app: &TestApp) -> Vec<String> {
    app.agents.launches().into_iter().map(|l| l.0).collect()
}

async fn wait_launched(app: &TestApp, n: usize) -> Vec<String> {
    eventually(15, &format!("{n} launches"), || async {
        let l = launched(app);
        (l.len() >= n).then_some(l)
    })
    .await
}

#[tokio::test]
async fn a_task_blocked_by_two_others_starts_only_after_both_complete() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board_of(&app, "Deps", "alice").await;
    let build = task(&app, &board, "build", false).await;
    let lint = task(&app, &board, "lint", false).await;
    let deploy = task(&app, &board, "deploy", false).await;
    let blocked = app
        .tasks()
        .put_task_blockers(pb::PutTaskBlockersRequest {
            id: deploy.clone(),
            blocker_ids: vec![build.clone(), lint.clone()],
            actor: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(blocked.blocked);
    // "Create & start" asked for now: it waits for its blockers.
    app.tasks()
        .update_task(pb::UpdateTaskRequest {
            id: deploy.clone(),
            autostart: Some(true),
            actor: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    complete(&app, &build).await;
    // A task started after the first completion is the barrier: its event
    // comes after those, so once it launched they were all decided.
    let barrier = task(&app, &board, "barrier", true).await;
    assert_eq!(wait_launched(&app, 1).await, vec![barrier.clone()]);
    let read = get_task(&app, &deploy).await;
    assert!(read.blocked, "one blocker is left");
    assert_eq!(read.blocked_reason, "waiting for 'lint' (TODO)");

    complete(&app, &lint).await;
    assert_eq!(wait_launched(&app, 2).await, vec![barrier, deploy.clone()]);
    let launch = &app.agents.launches()[1].2;
    assert_eq!(launch.prompt, "deploy", "started as autostart starts it");
    app.stop().await;
}
