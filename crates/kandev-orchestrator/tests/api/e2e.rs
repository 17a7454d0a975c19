//! End to end: the orchestrator, the task service and the agent manager
//! in-process, the mock agent in Docker (`kandev/mock-agent:latest`), a
//! private NATS and a fresh Postgres database. The task's description picks
//! the mock agent's scenario.

use std::{collections::BTreeSet, time::Duration};

use kandev_proto::v1::{self as pb, agent_manager_client::AgentManagerClient};
use serde_json::Value;
use uuid::Uuid;

use crate::helpers::*;
use crate::task_steps::*;

fn e2e(tweak: impl FnOnce(&mut kandev_orchestrator::Settings) + Send + 'static) -> Options {
    Options {
        with_task_service: true,
        with_agent_manager: true,
        tweak: Box::new(tweak),
    }
}

async fn create(
    app: &TestApp,
    board: &str,
    title: &str,
    description: &str,
    priority: i32,
    max_retries: i32,
) -> String {
    let task = pb::CreateTaskRequest {
        description: description.into(),
        priority,
        max_retries: Some(max_retries),
        ..alices_task(board, title)
    };
    file_task(app, task).await
}

/// The whole feed of a task through a fresh WebSocket client, checked to be
/// numbered 1..=n with each (instance, instance_seq) once.
async fn full_feed(app: &TestApp, task_id: &str) -> Vec<Value> {
    let id = Uuid::parse_str(task_id).unwrap();
    // The feed and agent.* are consumed independently: wait until the
    // numbering has settled and is stored.
    let last = eventually(20, "the feed settles", || async {
        let before = status(app, task_id).await["last_seq"].as_i64().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = status(app, task_id).await["last_seq"].as_i64().unwrap();
        let stored = stored(&app.db, id).await.len() as i64;
        (after > 0 && before == after && stored == after).then_some(after)
    })
    .await;
    let mut ws = ws_connect(&app.ws_url(id, None)).await;
    let frames = ws_frames(&mut ws, last as usize).await;
    assert_eq!(seqs(&frames), (1..=last).collect::<Vec<_>>());
    let keys: BTreeSet<(String, i64)> = frames
        .iter()
        .map(|f| {
            (
                f["instance_id"].as_str().unwrap().to_string(),
                f["instance_seq"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(keys.len(), frames.len(), "no message twice");
    let stored = wait_stored(&app.db, id, last as usize, 10).await;
    for (row, frame) in stored.iter().zip(&frames) {
        assert_eq!(row.0, frame["seq"].as_i64().unwrap());
        assert_eq!(row.1.to_string(), frame["instance_id"].as_str().unwrap());
        assert_eq!(row.2, frame["instance_seq"].as_i64().unwrap());
    }
    frames
}

fn kinds(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f["event"]["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn e2e_a_coding_run_completes_with_its_summary_and_an_exact_feed() {
    let app = spawn_app_with(e2e(|_| {})).await;
    let board = board(&app).await;
    let id = create(&app, &board, "Edit the readme", "scenario: code", 0, 0).await;
    let task_id = Uuid::parse_str(&id).unwrap();
    let mut live = ws_connect(&app.ws_url(task_id, None)).await;

    let t = wait_state_within(&app, &id, pb::TaskState::Completed, 90).await;
    let meta = metadata(&t);
    assert!(
        !meta["summary"].as_str().unwrap_or("").is_empty(),
        "summary recorded: {meta}"
    );
    assert!(meta["completed_at"].is_string());
    assert_eq!(meta["stop_reason"], "end_turn");
    let session = meta["acp_session_id"].as_str().unwrap().to_string();
    assert!(session.starts_with("sess_"), "{session}");
    let s = status(&app, &id).await;
    assert_eq!(s["state"], "completed");
    assert_eq!(s["attempts"], 1);
    assert_eq!(s["acp_session_id"], session);

    let frames = full_feed(&app, &id).await;
    let k = kinds(&frames);
    for kind in [
        "tool_call",
        "tool_call_update",
        "plan",
        "message_chunk",
        "turn_end",
    ] {
        assert!(k.iter().any(|x| x == kind), "{kind} in {k:?}");
    }
    // The client connected before the run saw the same frames live.
    let seen = ws_frames(&mut live, frames.len()).await;
    assert_eq!(seen, frames);
    app.stop().await;
}

#[tokio::test]
async fn e2e_the_queue_honours_priority_and_the_limit() {
    let app = spawn_app_with(e2e(|s| s.max_concurrent = 1)).await;
    let board = board(&app).await;
    let blocker = create(&app, &board, "blocker", "scenario: slow 20 100", 0, 0).await;
    eventually(60, "blocker runs", || async {
        (status(&app, &blocker).await["state"] == "running").then_some(())
    })
    .await;
    let low = create(&app, &board, "low", "scenario: echo low", 1, 0).await;
    let high = create(&app, &board, "high", "scenario: echo high", 7, 0).await;
    eventually(20, "both wait in order", || async {
        let (l, h) = (status(&app, &low).await, status(&app, &high).await);
        (l["queue_position"] == 2 && h["queue_position"] == 1).then_some(())
    })
    .await;
    let low_done = wait_state_within(&app, &low, pb::TaskState::Completed, 90).await;
    let high_done = wait_state_within(&app, &high, pb::TaskState::Completed, 90).await;
    let blocker_done = wait_state_within(&app, &blocker, pb::TaskState::Completed, 90).await;
    let at = |t: &pb::Task| metadata(t)["completed_at"].as_str().unwrap().to_string();
    assert!(at(&blocker_done) < at(&high_done));
    assert!(at(&high_done) < at(&low_done), "high ran before low");
    assert_eq!(metadata(&high_done)["summary"], "high");
    app.stop().await;
}

#[tokio::test]
async fn e2e_a_crashing_agent_is_retried_then_the_task_fails() {
    let app = spawn_app_with(e2e(|s| {
        s.retry_backoff_ms = 200;
    }))
    .await;
    let board = board(&app).await;
    let id = create(&app, &board, "doomed", "scenario: crash 3", 0, 1).await;
    let t = wait_state_within(&app, &id, pb::TaskState::Failed, 90).await;
    let meta = metadata(&t);
    assert!(
        !meta["last_error"].as_str().unwrap_or("").is_empty(),
        "{meta}"
    );
    let s = status(&app, &id).await;
    assert_eq!(s["state"], "failed");
    assert_eq!(s["attempts"], 2, "one retry");
    let frames = full_feed(&app, &id).await;
    let runs: BTreeSet<&str> = frames
        .iter()
        .map(|f| f["instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "both runs in one feed");
    app.stop().await;
}

#[tokio::test]
async fn e2e_cancelling_a_running_task_stops_its_agent() {
    let app = spawn_app_with(e2e(|_| {})).await;
    let board = board(&app).await;
    let id = create(&app, &board, "endless", "scenario: wait-cancel", 0, 0).await;
    let instance = eventually(60, "running", || async {
        let s = status(&app, &id).await;
        (s["state"] == "running").then(|| s["instance_id"].as_str().unwrap().to_string())
    })
    .await;
    wait_state_within(&app, &id, pb::TaskState::InProgress, 90).await;
    move_task(&app, &id, pb::TaskState::Cancelled).await;
    let am_addr = app.agent_manager.as_ref().unwrap().addr;
    let mut am = AgentManagerClient::new(service_channel(am_addr));
    eventually(30, "instance stopped", || {
        let mut am = am.clone();
        let instance = instance.clone();
        async move {
            let i = am
                .get_status(pb::GetStatusRequest {
                    instance_id: instance,
                })
                .await
                .ok()?
                .into_inner();
            (i.status == pb::AgentStatus::Stopped as i32).then_some(())
        }
    })
    .await;
    wait_stopped_cancelled(&app, &id).await;
    let _ = am
        .list_instances(pb::ListInstancesRequest {
            task_id: id.clone(),
            active_only: false,
        })
        .await
        .unwrap();
    app.stop().await;
}

#[tokio::test]
async fn e2e_follow_ups_and_reruns_resume_the_session() {
    let app = spawn_app_with(e2e(|_| {})).await;
    let board = board(&app).await;
    let id = create(&app, &board, "talk", "scenario: echo first", 0, 0).await;
    let t = wait_state_within(&app, &id, pb::TaskState::Completed, 90).await;
    let session = metadata(&t)["acp_session_id"].as_str().unwrap().to_string();
    let first = status(&app, &id).await["instance_id"].clone();

    // A follow-up over the WebSocket: a new turn of the same session.
    let task_id = Uuid::parse_str(&id).unwrap();
    let mut ws = ws_connect(&app.ws_url(task_id, None)).await;
    ws_send(
        &mut ws,
        serde_json::json!({"type": "prompt", "text": "scenario: echo second"}),
    )
    .await;
    let ack = loop {
        match ws_read(&mut ws, Duration::from_secs(30)).await {
            Some(Read::Frame(f)) if f.get("type").is_some() => break f,
            Some(Read::Frame(_)) => continue,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(ack["type"], "ack", "{ack}");
    let t = eventually(90, "second turn done", || async {
        let t = get_task(&app, &id).await;
        (t.state == pb::TaskState::Completed as i32 && metadata(&t)["summary"] == "second")
            .then_some(t)
    })
    .await;
    assert_eq!(metadata(&t)["acp_session_id"], session);

    // A rerun (back to TODO) is a new instance resuming the same session.
    move_task(&app, &id, pb::TaskState::Todo).await;
    let s = eventually(90, "rerun done", || async {
        let s = status(&app, &id).await;
        (s["state"] == "completed" && s["instance_id"] != first).then_some(s)
    })
    .await;
    assert_eq!(s["acp_session_id"], session, "the session was resumed");
    let t = wait_state_within(&app, &id, pb::TaskState::Completed, 90).await;
    assert_eq!(metadata(&t)["acp_session_id"], session);

    let frames = full_feed(&app, &id).await;
    let second_run: Vec<&Value> = frames
        .iter()
        .filter(|f| f["instance_id"] == s["instance_id"])
        .collect();
    assert!(
        second_run.iter().any(|f| f["event"]["kind"] == "lifecycle"
            && f["event"]["data"]["phase"] == "session_loaded"),
        "the rerun loaded the session"
    );
    app.stop().await;
}

#[tokio::test]
async fn e2e_the_orchestrator_killed_mid_run_comes_back_and_the_task_completes_exactly() {
    let mut app = spawn_app_with(e2e(|s| s.feed_flush_ms = 300)).await;
    let board = board(&app).await;
    let id = create(&app, &board, "long", "scenario: slow 40 100", 0, 0).await;
    let task_id = Uuid::parse_str(&id).unwrap();
    let mut ws = ws_connect(&app.ws_url(task_id, None)).await;
    let before = ws_frames(&mut ws, 15).await;
    app.crash().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    app.restart().await;

    let t = wait_state_within(&app, &id, pb::TaskState::Completed, 90).await;
    assert!(!metadata(&t)["summary"].as_str().unwrap_or("").is_empty());
    let s = status(&app, &id).await;
    assert_eq!(s["attempts"], 1, "the run went on, it was not relaunched");
    let frames = full_feed(&app, &id).await;
    let last = frames.len() as i64;
    let mut again = ws_connect(&app.ws_url(task_id, Some(15))).await;
    let after = ws_frames(&mut again, (last - 15) as usize).await;
    assert_eq!(seqs(&after), (16..=last).collect::<Vec<_>>());
    assert_eq!(
        &frames[..15],
        &before[..],
        "the same seqs for the same messages"
    );
    assert_eq!(&frames[15..], &after[..]);
    let mut instance_seqs: Vec<i64> = frames
        .iter()
        .map(|f| f["instance_seq"].as_i64().unwrap())
        .collect();
    instance_seqs.sort();
    assert_eq!(instance_seqs, (1..=last).collect::<Vec<_>>());
    app.stop().await;
}
