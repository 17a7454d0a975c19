use kandev_proto::v1 as pb;
use kandev_task_service::domain::TaskState;
use tonic::Code;

use crate::helpers::{TestApp, spawn_app};

/// Brings a fresh task to `state` along allowed transitions.
async fn task_in(app: &mut TestApp, board_id: &str, state: TaskState) -> pb::Task {
    let task = app.task(board_id, &format!("in {state}")).await;
    let path: &[TaskState] = match state {
        TaskState::Todo => &[],
        TaskState::InProgress | TaskState::Blocked | TaskState::Cancelled => &[state],
        TaskState::Review
        | TaskState::WaitingForInput
        | TaskState::Completed
        | TaskState::Failed => &[TaskState::InProgress, state],
    };
    let mut current = task;
    for step in path {
        current = app.set_state(&current.id, step.to_proto()).await.unwrap();
    }
    assert_eq!(current.state, state.to_proto() as i32);
    current
}

#[tokio::test]
async fn every_allowed_transition_and_a_forbidden_one_from_each_state() {
    let mut app = spawn_app().await;
    let board = app.board().await;
    for from in TaskState::ALL {
        for to in from.allowed_next() {
            let task = task_in(&mut app, &board.id, from).await;
            let moved = app
                .set_state(&task.id, to.to_proto())
                .await
                .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
            assert_eq!(moved.state, to.to_proto() as i32, "{from} -> {to}");
            assert_eq!(moved.version, task.version + 1);
        }
        // The first state not allowed from here (itself, at least, never is).
        let forbidden = TaskState::ALL
            .into_iter()
            .find(|to| !from.can_change_to(*to))
            .unwrap();
        let task = task_in(&mut app, &board.id, from).await;
        let err = app
            .set_state(&task.id, forbidden.to_proto())
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Code::FailedPrecondition,
            "{from} -> {forbidden}"
        );
        assert!(err.message().contains("not allowed"), "{}", err.message());
        let after = app.get_task(&task.id).await.unwrap();
        assert_eq!(after, task, "{from} -> {forbidden} changed nothing");
    }
    app.stop().await;
}

#[tokio::test]
async fn state_change_moves_card_to_end_of_column_and_is_audited() {
    let mut app = spawn_app().await;
    let board = app.board().await;
    let a = app.task(&board.id, "a").await;
    let b = app.task(&board.id, "b").await;
    let b = app
        .set_state(&b.id, pb::TaskState::InProgress)
        .await
        .unwrap();
    let a = app
        .client
        .change_task_state(pb::ChangeTaskStateRequest {
            id: a.id.clone(),
            state: pb::TaskState::InProgress as i32,
            actor: "orchestrator".into(),
            reason: "agent started".into(),
            metadata_patch_json: Some(r#"{"instance_id":"i-1"}"#.into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((b.position, a.position), (1, 2));
    assert!(a.metadata_json.contains("i-1"));
    let history = app.history(&a.id).await.unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.kind, "state_changed");
    assert_eq!(last.actor, "orchestrator");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&last.old_value_json).unwrap(),
        serde_json::json!({"state": "TODO"})
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&last.new_value_json).unwrap(),
        serde_json::json!({"state": "IN_PROGRESS", "reason": "agent started"})
    );
    app.stop().await;
}
