use kandev_proto::v1 as pb;
use tonic::Code;
use uuid::Uuid;

use crate::helpers::{spawn_app, task_request};

#[tokio::test]
async fn task_crud_and_history() {
    let mut app = spawn_app().await;
    let board = app.board().await;
    let task = app.task(&board.id, "Fix login bug").await;
    assert_eq!(task.state, pb::TaskState::Todo as i32);
    assert_eq!(task.version, 1);
    assert_eq!(task.position, 1);
    assert_eq!(task.max_retries, 3);
    assert_eq!(task.agent_type.as_deref(), Some("mock-agent"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&task.metadata_json).unwrap(),
        serde_json::json!({"labels": ["x"]})
    );
    let second = app.task(&board.id, "Second").await;
    assert_eq!(second.position, 2);

    let got = app.get_task(&task.id).await.unwrap();
    assert_eq!(got, task);

    let updated = app
        .update(pb::UpdateTaskRequest {
            id: task.id.clone(),
            title: Some("Fix login bug for email users".into()),
            priority: Some(7),
            metadata_patch_json: Some(r#"{"acp_session_id":"s-1","labels":null}"#.into()),
            actor: "bob".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(updated.version, 2);
    assert_eq!(updated.priority, 7);
    assert_eq!(updated.description, "do the thing");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&updated.metadata_json).unwrap(),
        serde_json::json!({"acp_session_id": "s-1"})
    );

    // A no-op update changes nothing and records nothing.
    let same = app
        .update(pb::UpdateTaskRequest {
            id: task.id.clone(),
            priority: Some(7),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(same.version, 2);

    let cleared = app
        .update(pb::UpdateTaskRequest {
            id: task.id.clone(),
            clear_agent_type: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(cleared.agent_type, None);

    let list = app.list_tasks(&board.id, &[]).await.unwrap();
    assert_eq!(list.len(), 2);
    app.set_state(&second.id, pb::TaskState::InProgress)
        .await
        .unwrap();
    let todo = app
        .list_tasks(&board.id, &[pb::TaskState::Todo])
        .await
        .unwrap();
    assert_eq!(todo.len(), 1);
    assert_eq!(todo[0].id, task.id);

    app.client
        .delete_task(pb::DeleteTaskRequest {
            id: task.id.clone(),
            actor: "bob".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let err = app.get_task(&task.id).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // The audit log outlives the task: created, 2 updates, deleted.
    let history = app.history(&task.id).await.unwrap();
    let kinds: Vec<_> = history.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["created", "updated", "updated", "deleted"]);
    let first_update = &history[1];
    assert_eq!(first_update.actor, "bob");
    let old: serde_json::Value = serde_json::from_str(&first_update.old_value_json).unwrap();
    let new: serde_json::Value = serde_json::from_str(&first_update.new_value_json).unwrap();
    assert_eq!(old["priority"], 2);
    assert_eq!(new["priority"], 7);
    assert_eq!(new["title"], "Fix login bug for email users");
    assert!(
        old.get("description").is_none(),
        "only changed fields: {old}"
    );
    app.stop().await;
}

#[tokio::test]
async fn concurrent_updates_conflict() {
    let mut app = spawn_app().await;
    let board = app.board().await;
    let task = app.task(&board.id, "contended").await;

    // Two writers both read version 1 and race.
    let update = |title: &str| pb::UpdateTaskRequest {
        id: task.id.clone(),
        expected_version: Some(task.version),
        title: Some(title.into()),
        actor: title.into(),
        ..Default::default()
    };
    let (mut c1, mut c2) = (app.client.clone(), app.client.clone());
    let (a, b) = tokio::join!(
        c1.update_task(update("writer-a")),
        c2.update_task(update("writer-b"))
    );
    let (ok, err) = match (a, b) {
        (Ok(ok), Err(err)) | (Err(err), Ok(ok)) => (ok.into_inner(), err),
        other => panic!("exactly one writer must win: {other:?}"),
    };
    assert_eq!(err.code(), Code::Aborted);
    assert!(err.message().contains("version"), "{}", err.message());
    assert_eq!(ok.version, 2);
    let stored = app.get_task(&task.id).await.unwrap();
    assert_eq!(stored.title, ok.title, "the loser changed nothing");

    // A stale state change and delete are refused too.
    let err = app
        .client
        .change_task_state(pb::ChangeTaskStateRequest {
            id: task.id.clone(),
            state: pb::TaskState::InProgress as i32,
            expected_version: Some(1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    let err = app
        .client
        .delete_task(pb::DeleteTaskRequest {
            id: task.id.clone(),
            expected_version: Some(1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);

    // Without expected_version, concurrent patches of different fields both land.
    let (mut c1, mut c2) = (app.client.clone(), app.client.clone());
    let (a, b) = tokio::join!(
        c1.update_task(pb::UpdateTaskRequest {
            id: task.id.clone(),
            priority: Some(9),
            ..Default::default()
        }),
        c2.update_task(pb::UpdateTaskRequest {
            id: task.id.clone(),
            branch: Some("dev".into()),
            ..Default::default()
        })
    );
    a.unwrap();
    b.unwrap();
    let stored = app.get_task(&task.id).await.unwrap();
    assert_eq!(
        (stored.priority, stored.branch.as_str(), stored.version),
        (9, "dev", 4)
    );
    app.stop().await;
}

#[tokio::test]
async fn task_bad_input_writes_nothing() {
    let mut app = spawn_app().await;
    let board = app.board().await;

    let cases: Vec<(&str, pb::CreateTaskRequest, Code)> = vec![
        (
            "empty title",
            pb::CreateTaskRequest {
                title: "  ".into(),
                ..task_request(&board.id, "")
            },
            Code::InvalidArgument,
        ),
        (
            "oversized title",
            task_request(&board.id, &"x".repeat(501)),
            Code::InvalidArgument,
        ),
        (
            "unknown board",
            task_request(&Uuid::new_v4().to_string(), "t"),
            Code::NotFound,
        ),
        (
            "malformed board id",
            task_request("not-a-uuid", "t"),
            Code::InvalidArgument,
        ),
        (
            "unknown state",
            pb::CreateTaskRequest {
                state: 99,
                ..task_request(&board.id, "t")
            },
            Code::InvalidArgument,
        ),
        (
            "negative priority",
            pb::CreateTaskRequest {
                priority: -1,
                ..task_request(&board.id, "t")
            },
            Code::InvalidArgument,
        ),
        (
            "metadata not an object",
            pb::CreateTaskRequest {
                metadata_json: "[1]".into(),
                ..task_request(&board.id, "t")
            },
            Code::InvalidArgument,
        ),
        (
            "metadata not json",
            pb::CreateTaskRequest {
                metadata_json: "{".into(),
                ..task_request(&board.id, "t")
            },
            Code::InvalidArgument,
        ),
        (
            "negative max_retries",
            pb::CreateTaskRequest {
                max_retries: Some(-1),
                ..task_request(&board.id, "t")
            },
            Code::InvalidArgument,
        ),
        (
            "bad agent type",
            pb::CreateTaskRequest {
                agent_type: Some("Not An Id".into()),
                ..task_request(&board.id, "t")
            },
            Code::InvalidArgument,
        ),
        (
            "oversized description",
            pb::CreateTaskRequest {
                description: "d".repeat(64 * 1024 + 1),
                ..task_request(&board.id, "t")
            },
            Code::InvalidArgument,
        ),
    ];
    for (name, request, code) in cases {
        let err = app.client.create_task(request).await.unwrap_err();
        assert_eq!(err.code(), code, "{name}: {}", err.message());
        assert!(!err.message().is_empty(), "{name}: a clear message");
    }
    let list = app.list_tasks(&board.id, &[]).await.unwrap();
    assert!(list.is_empty(), "nothing half-written");

    let task = app.task(&board.id, "valid").await;
    let bad_updates: Vec<(&str, pb::UpdateTaskRequest, Code)> = vec![
        (
            "empty title",
            pb::UpdateTaskRequest {
                id: task.id.clone(),
                title: Some("".into()),
                ..Default::default()
            },
            Code::InvalidArgument,
        ),
        (
            "negative priority",
            pb::UpdateTaskRequest {
                id: task.id.clone(),
                priority: Some(-5),
                ..Default::default()
            },
            Code::InvalidArgument,
        ),
        (
            "malformed id",
            pb::UpdateTaskRequest {
                id: "x".into(),
                priority: Some(1),
                ..Default::default()
            },
            Code::InvalidArgument,
        ),
        (
            "unknown task",
            pb::UpdateTaskRequest {
                id: Uuid::new_v4().to_string(),
                priority: Some(1),
                ..Default::default()
            },
            Code::NotFound,
        ),
        (
            "bad metadata patch",
            pb::UpdateTaskRequest {
                id: task.id.clone(),
                metadata_patch_json: Some("3".into()),
                ..Default::default()
            },
            Code::InvalidArgument,
        ),
    ];
    for (name, request, code) in bad_updates {
        let err = app.client.update_task(request).await.unwrap_err();
        assert_eq!(err.code(), code, "{name}: {}", err.message());
    }
    for state in [42, pb::TaskState::Unspecified as i32] {
        let request = pb::ChangeTaskStateRequest {
            id: task.id.clone(),
            state,
            ..Default::default()
        };
        let err = app.client.change_task_state(request).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "state {state}");
    }
    let unknown = Uuid::new_v4().to_string();
    let err = app.list_tasks(&unknown, &[]).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = app.history(&unknown).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    let unchanged = app.get_task(&task.id).await.unwrap();
    assert_eq!(unchanged, task, "refused changes leave the task as it was");
    app.stop().await;
}
