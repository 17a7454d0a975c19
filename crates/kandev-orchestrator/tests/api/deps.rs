//! "Blocked by" links (issue 41) driving starts: a task blocked by two
//! others is not started by itself while either is not COMPLETED, and
//! starts when the second completes, by the same path `autostart` takes.
//! The real task service (in-process, same Postgres, same NATS); launches
//! go to a recording `AgentControl`.

use kandev_proto::v1 as pb;

use crate::helpers::*;
use crate::task_steps::*;

async fn task(app: &TestApp, board: &str, title: &str, autostart: bool) -> String {
    app.tasks()
        .create_task(pb::CreateTaskRequest {
            board_id: board.into(),
            title: title.into(),
            agent_type: Some("mock-agent".into()),
            workspace_path: "/tmp/kandev-test-ws".into(),
            max_retries: Some(0),
            created_by: "alice".into(),
            autostart: Some(autostart),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id
}

async fn complete(app: &TestApp, id: &str) {
    for state in [pb::TaskState::InProgress, pb::TaskState::Completed] {
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
    let board = app
        .tasks()
        .create_board(pb::CreateBoardRequest {
            name: "Deps".into(),
            description: String::new(),
            owner: "alice".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .id;
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
    let read = app
        .tasks()
        .get_task(pb::GetTaskRequest { id: deploy.clone() })
        .await
        .unwrap()
        .into_inner();
    assert!(read.blocked, "one blocker is left");
    assert_eq!(read.blocked_reason, "waiting for 'lint' (TODO)");

    complete(&app, &lint).await;
    assert_eq!(wait_launched(&app, 2).await, vec![barrier, deploy.clone()]);
    let launch = &app.agents.launches()[1].2;
    assert_eq!(launch.prompt, "deploy", "started as autostart starts it");
    app.stop().await;
}
