//! A board's workflow driving runs by itself (issue 41), end to end: the
//! orchestrator, the task service and the agent manager in-process, the
//! mock agent in Docker. Backlog → Plan (WIP 1) → Implement → Review: a
//! card moved into Plan runs there, and each finished run moves it on and
//! starts the next step's; a second card waits in Plan's queue and starts
//! when the first leaves.

use kandev_proto::v1 as pb;
use serde_json::Value;

use crate::helpers::*;
use crate::task_steps::{board_of, get_task};

fn e2e() -> Options {
    Options {
        with_task_service: true,
        with_agent_manager: true,
        tweak: Box::new(|_| {}),
    }
}

async fn task(app: &TestApp, board: &str, title: &str, description: &str) -> pb::Task {
    app.tasks()
        .create_task(pb::CreateTaskRequest {
            board_id: board.into(),
            title: title.into(),
            description: description.into(),
            created_by: "alice".into(),
            max_retries: Some(0),
            autostart: Some(false),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

fn column(id: &str, name: &str, state: pb::TaskState) -> pb::Column {
    pb::Column {
        id: id.into(),
        name: name.into(),
        state: state as i32,
        ..Default::default()
    }
}

fn automated(id: &str, name: &str, template: &str, next: &str) -> pb::Column {
    pb::Column {
        agent_type: Some("mock-agent".into()),
        prompt_template: template.into(),
        on_success: Some(next.into()),
        ..column(id, name, pb::TaskState::InProgress)
    }
}

async fn move_to(app: &TestApp, task: &str, column: &str) -> pb::Task {
    app.tasks()
        .move_task(pb::MoveTaskRequest {
            id: task.into(),
            column_id: column.into(),
            actor: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// The reasons of the task's state changes, in order.
async fn moves(app: &TestApp, id: &str) -> Vec<String> {
    let events = app
        .tasks()
        .list_task_events(pb::ListTaskEventsRequest {
            task_id: id.into(),
            page_size: 500,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    events
        .iter()
        .filter(|e| e.kind == "state_changed")
        .filter_map(|e| {
            let v: Value = serde_json::from_str(&e.new_value_json).ok()?;
            Some(format!(
                "{} {}",
                v["state"].as_str()?,
                v["reason"].as_str()?
            ))
        })
        .collect()
}

#[tokio::test]
async fn e2e_a_three_step_workflow_moves_cards_by_itself_and_a_wip_limit_queues() {
    let app = spawn_app_with(e2e()).await;
    let board = board_of(&app, "Flow", "alice").await;
    let ids: Vec<String> = (0..4).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    let mut plan = automated(&ids[1], "Plan", "{description}", &ids[2]);
    plan.wip_limit = Some(1);
    let columns = vec![
        column(&ids[0], "Backlog", pb::TaskState::Todo),
        plan,
        automated(
            &ids[2],
            "Implement",
            "{description}\n\nthe plan: {summary}",
            &ids[3],
        ),
        column(&ids[3], "Review", pb::TaskState::Review),
    ];
    app.tasks()
        .put_columns(pb::PutColumnsRequest {
            board_id: board.clone(),
            columns,
        })
        .await
        .unwrap();

    let first = task(&app, &board, "first", "scenario: slow 20 100").await;
    let second = task(&app, &board, "second", "scenario: echo second").await;
    assert_eq!(
        first.column_id, ids[0],
        "created in the backlog, not started"
    );

    let a = move_to(&app, &first.id, &ids[1]).await;
    assert!(!a.queued && a.autostart, "{a:?}");
    let b = move_to(&app, &second.id, &ids[1]).await;
    assert!(
        b.queued && !b.autostart,
        "the WIP limit of 1 holds the second card"
    );
    // Held while the first runs in Plan.
    eventually(60, "the first card runs in Plan", || async {
        let a = get_task(&app, &first.id).await;
        (a.state == pb::TaskState::InProgress as i32 && a.column_id == ids[1]).then_some(())
    })
    .await;
    let b = get_task(&app, &second.id).await;
    assert!(b.queued && b.state == pb::TaskState::Todo as i32, "{b:?}");

    // Each finished run moves the card on by itself; both end in Review.
    for id in [&first.id, &second.id] {
        let done = eventually(180, &format!("task {id} reaches Review"), || async {
            let t = get_task(&app, id).await;
            (t.column_id == ids[3]).then_some(t)
        })
        .await;
        assert_eq!(done.state, pb::TaskState::Review as i32);
        assert!(!done.queued);
    }
    // Plan's and Implement's runs, then straight to Review.
    for id in [&first.id, &second.id] {
        let m = moves(&app, id).await;
        assert!(
            m.iter().any(|m| m == "TODO entered column Implement"),
            "{m:?}"
        );
        assert_eq!(
            m.last().map(String::as_str),
            Some("REVIEW agent completed"),
            "{m:?}"
        );
    }
    app.stop().await;
}
