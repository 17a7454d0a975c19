use std::time::Duration;

use kandev_proto::v1 as pb;

use crate::helpers::{EventWatch, NATS_URL, OwnNats, spawn_app, spawn_app_with_nats};

#[tokio::test]
async fn events_carry_the_right_payloads_in_commit_order() {
    let mut app = spawn_app().await;
    let board = app.board().await;
    let mut watch = EventWatch::start(&NATS_URL, &board.id).await;

    let task = app.task(&board.id, "evented").await;
    app.client
        .update_task(pb::UpdateTaskRequest {
            id: task.id.clone(),
            priority: Some(5),
            actor: "bob".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    app.set_state(&task.id, pb::TaskState::InProgress)
        .await
        .unwrap();
    app.set_state(&task.id, pb::TaskState::Completed)
        .await
        .unwrap();
    app.client
        .delete_task(pb::DeleteTaskRequest {
            id: task.id.clone(),
            actor: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    let events = watch.next(5).await;
    let subjects: Vec<_> = events.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        subjects,
        [
            "task.created",
            "task.updated",
            "task.state_changed",
            "task.state_changed",
            "task.deleted"
        ]
    );
    for (subject, env) in &events {
        assert_eq!(env["type"], subject.as_str());
        assert!(uuid::Uuid::parse_str(env["id"].as_str().unwrap()).is_ok());
        assert!(env["occurred_at"].is_string());
        assert_eq!(env["data"]["task"]["id"], task.id.as_str());
    }
    let created = &events[0].1["data"];
    assert_eq!(created["actor"], "alice");
    assert_eq!(created["task"]["title"], "evented");
    assert_eq!(created["task"]["state"], "TODO");
    assert_eq!(created["task"]["agent_type"], "mock-agent");
    assert_eq!(
        created["task"]["metadata"],
        serde_json::json!({"labels": ["x"]})
    );
    let updated = &events[1].1["data"];
    assert_eq!(updated["changed"], serde_json::json!(["priority"]));
    assert_eq!(updated["task"]["priority"], 5);
    assert_eq!(updated["task"]["version"], 2);
    let started = &events[2].1["data"];
    assert_eq!(
        (started["from"].as_str(), started["to"].as_str()),
        (Some("TODO"), Some("IN_PROGRESS"))
    );
    let done = &events[3].1["data"];
    assert_eq!(
        (done["from"].as_str(), done["to"].as_str()),
        (Some("IN_PROGRESS"), Some("COMPLETED"))
    );
    assert_eq!(events[4].1["data"]["actor"], "alice");

    // Refused changes publish nothing.
    let _ = app
        .set_state(&task.id, pb::TaskState::Todo)
        .await
        .unwrap_err();
    watch.assert_quiet(Duration::from_millis(500)).await;
    app.stop().await;
}

#[tokio::test]
async fn events_written_while_nats_is_down_are_published_late_not_lost() {
    let mut nats = OwnNats::start().await;
    let mut app = spawn_app_with_nats(&nats.url()).await;
    let board = app.board().await;

    nats.stop();
    // Writes succeed while NATS is unreachable: the events wait in the outbox.
    let task = app.task(&board.id, "written in the dark").await;
    app.set_state(&task.id, pb::TaskState::InProgress)
        .await
        .unwrap();
    let other = app.task(&board.id, "second").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    nats.restart().await;
    // Read the stream itself: consumers that were down catch up from it.
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut seen = vec![];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "events not published: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(stream) = js.get_stream("KANDEV_TASKS").await else {
            continue;
        };
        seen.clear();
        let mut seq = 1;
        while let Ok(msg) = stream.get_raw_message(seq).await {
            let env: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
            seen.push((
                msg.subject.to_string(),
                env["data"]["task"]["id"].as_str().unwrap().to_string(),
            ));
            seq += 1;
        }
    }
    let expected: Vec<(String, String)> = vec![
        ("task.created".into(), task.id.clone()),
        ("task.state_changed".into(), task.id.clone()),
        ("task.created".into(), other.id.clone()),
    ];
    assert_eq!(seen, expected, "each event once, in commit order");
    app.stop().await;
}
