//! Queue order, limits, completion, retries, cancellation and session
//! resumption against the real task service (in-process, same Postgres,
//! same private NATS). The agent manager is played by the test: launches go
//! to a recording `AgentControl`, and its `agent.*` events are published on
//! NATS, the orchestrator's real input.

use std::time::Duration;

use kandev_events::agent::AgentEventKind;
use kandev_proto::v1 as pb;
use uuid::Uuid;

use crate::helpers::*;
use crate::task_steps::*;

async fn task(app: &TestApp, board: &str, title: &str, priority: i32, agent_type: &str) -> String {
    let task = pb::CreateTaskRequest {
        description: "scenario: echo hello".into(),
        priority,
        agent_type: Some(agent_type.into()),
        workspace_path: "/tmp/kandev-test-ws".into(),
        max_retries: Some(1),
        ..alices_task(board, title)
    };
    file_task(app, task).await
}

#[tokio::test]
async fn queue_runs_by_priority_then_arrival_within_the_limit_and_records_completion() {
    let app = spawn_with_tasks(|s| s.max_concurrent = 1).await;
    let board = board(&app).await;
    let first = task(&app, &board, "first", 0, "mock-agent").await;
    let launches = wait_launches(&app, 1).await;
    assert_eq!(launches[0].0, first);
    let req = &launches[0].2;
    assert_eq!(req.prompt, "first\n\nscenario: echo hello");
    assert_eq!(
        req.workspace,
        Some(pb::launch_agent_request::Workspace::WorkspacePath(
            "/tmp/kandev-test-ws".into()
        ))
    );
    assert_eq!(req.resume_session_id, None);
    wait_state(&app, &first, pb::TaskState::InProgress).await;

    // Four more wait behind the limit, ordered by priority then arrival.
    let low = task(&app, &board, "low", 1, "mock-agent").await;
    let high = task(&app, &board, "high", 5, "mock-agent").await;
    let mid1 = task(&app, &board, "mid1", 3, "mock-agent").await;
    let mid2 = task(&app, &board, "mid2", 3, "mock-agent").await;
    for (id, pos) in [(&high, 1), (&mid1, 2), (&mid2, 3), (&low, 4)] {
        eventually(10, "queue positions", || async {
            let s = status(&app, id).await;
            (s["state"] == "queued" && s["queue_position"] == pos).then_some(())
        })
        .await;
    }
    let s = status(&app, &first).await;
    assert_eq!(s["state"], "running");
    assert_eq!(s["attempts"], 1);
    assert_eq!(app.agents.launches().len(), 1, "the limit holds");

    // Each completion frees the slot for the next in line.
    let mut order = vec![first.clone()];
    for n in 2..=5 {
        let (task_id, instance, _) = app.agents.launches().last().unwrap().clone();
        let mut done = lifecycle(AgentEventKind::Completed, &task_id, instance);
        done.summary = Some(format!("done with {task_id}"));
        done.stop_reason = Some("end_turn".into());
        done.acp_session_id = Some(format!("sess_{n}"));
        publish_agent(&app.bus, done, 1).await;
        let l = wait_launches(&app, n).await;
        order.push(l[n - 1].0.clone());
    }
    assert_eq!(order, vec![first.clone(), high, mid1, mid2, low]);

    // The completion is recorded in the task.
    let t = wait_state(&app, &first, pb::TaskState::Completed).await;
    let meta = metadata(&t);
    assert_eq!(meta["summary"], format!("done with {first}"));
    assert_eq!(meta["stop_reason"], "end_turn");
    assert_eq!(meta["acp_session_id"], "sess_2");
    assert!(meta["completed_at"].is_string());
    assert_eq!(status(&app, &first).await["state"], "completed");
    app.stop().await;
}

#[tokio::test]
async fn per_agent_type_limits_hold_without_blocking_other_types() {
    let app = spawn_app_with(Options {
        with_task_service: true,
        tweak: Box::new(|s| {
            s.max_concurrent = 3;
            s.per_agent_type_limits = limits(&[("slow-agent", 1)]);
        }),
        ..Options::default()
    })
    .await;
    let board = board(&app).await;
    let slow1 = task(&app, &board, "slow1", 0, "slow-agent").await;
    wait_launches(&app, 1).await;
    let slow2 = task(&app, &board, "slow2", 9, "slow-agent").await;
    let fast = task(&app, &board, "fast", 0, "mock-agent").await;
    let l = wait_launches(&app, 2).await;
    assert_eq!(
        l.iter().map(|x| x.0.clone()).collect::<Vec<_>>(),
        vec![slow1.clone(), fast]
    );
    eventually(10, "slow2 waits", || async {
        let s = status(&app, &slow2).await;
        (s["state"] == "queued" && s["queue_position"] == 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.agents.launches().len(), 2);

    let instance = l[0].1;
    publish_agent(
        &app.bus,
        lifecycle(AgentEventKind::Completed, &slow1, instance),
        1,
    )
    .await;
    let l = wait_launches(&app, 3).await;
    assert_eq!(l[2].0, slow2);
    app.stop().await;
}

#[tokio::test]
async fn a_failed_run_is_retried_with_backoff_then_the_task_fails() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    // max_retries = 1: two runs in all.
    let id = task(&app, &board, "flaky", 0, "mock-agent").await;
    let l = wait_launches(&app, 1).await;
    let mut failed = lifecycle(AgentEventKind::Failed, &id, l[0].1);
    failed.error = Some("agent exited with code 1".into());
    failed.exit_code = Some(1);
    publish_agent(&app.bus, failed, 1).await;
    eventually(10, "retry wait", || async {
        let s = status(&app, &id).await;
        (s["state"] == "retry_wait" || s["state"] == "running").then_some(())
    })
    .await;

    let l = wait_launches(&app, 2).await;
    assert_eq!(l[1].0, id);
    let s = status(&app, &id).await;
    assert_eq!(s["attempts"], 2);
    assert_eq!(s["last_error"], "agent exited with code 1");

    let mut failed = lifecycle(AgentEventKind::Failed, &id, l[1].1);
    failed.error = Some("agent exited with code 2".into());
    publish_agent(&app.bus, failed, 1).await;
    let t = wait_state(&app, &id, pb::TaskState::Failed).await;
    assert_eq!(metadata(&t)["last_error"], "agent exited with code 2");
    let s = status(&app, &id).await;
    assert_eq!(s["state"], "failed");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.agents.launches().len(), 2, "no third run");
    app.stop().await;
}

#[tokio::test]
async fn cancelling_a_running_task_stops_its_agent() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    let id = task(&app, &board, "to cancel", 0, "mock-agent").await;
    let l = wait_launches(&app, 1).await;
    wait_state(&app, &id, pb::TaskState::InProgress).await;
    move_task(&app, &id, pb::TaskState::Cancelled).await;
    eventually(10, "StopAgent", || async {
        app.agents
            .calls()
            .contains(&AgentCall::Stop(l[0].1))
            .then_some(())
    })
    .await;
    wait_stopped_cancelled(&app, &id).await;
    app.stop().await;
}

#[tokio::test]
async fn follow_ups_continue_the_run_and_reruns_resume_the_session() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    let id = task(&app, &board, "twice", 0, "mock-agent").await;
    let l = wait_launches(&app, 1).await;
    let first = l[0].1;
    let mut done = lifecycle(AgentEventKind::Completed, &id, first);
    done.acp_session_id = Some("sess_abc".into());
    done.summary = Some("first run".into());
    publish_agent(&app.bus, done, 1).await;
    let t = wait_state(&app, &id, pb::TaskState::Completed).await;
    assert_eq!(metadata(&t)["acp_session_id"], "sess_abc");
    assert_eq!(metadata(&t)["summary"], "first run");

    // A follow-up prompt over the WebSocket goes to the same instance.
    let task_id = Uuid::parse_str(&id).unwrap();
    let mut ws = ws_connect(&app.ws_url(task_id, None)).await;
    ws_send(
        &mut ws,
        serde_json::json!({"type": "prompt", "text": "and now the tests", "id": 7}),
    )
    .await;
    let ack = match ws_read(&mut ws, Duration::from_secs(10)).await {
        Some(Read::Frame(f)) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(ack["command"], "prompt");
    assert_eq!(ack["id"], 7);
    assert!(
        app.agents
            .calls()
            .contains(&AgentCall::Prompt(first, "and now the tests".into()))
    );
    wait_state(&app, &id, pb::TaskState::InProgress).await;
    assert_eq!(status(&app, &id).await["state"], "running");

    // While it runs, commands go to its instance.
    ws_send(&mut ws, serde_json::json!({"type": "cancel"})).await;
    ws_send(
        &mut ws,
        serde_json::json!({"type": "permission", "request_id": "5", "option_id": "allow-once"}),
    )
    .await;
    ws_send(
        &mut ws,
        serde_json::json!({"type": "permission", "request_id": 6, "cancelled": true}),
    )
    .await;
    ws_send(
        &mut ws,
        serde_json::json!({"type": "permission", "request_id": 6}),
    )
    .await;
    ws_send(&mut ws, serde_json::json!({"type": "dance"})).await;
    let mut replies = vec![];
    for _ in 0..5 {
        match ws_read(&mut ws, Duration::from_secs(10)).await {
            Some(Read::Frame(f)) => replies.push(f),
            other => panic!("{other:?}"),
        }
    }
    let types: Vec<_> = replies
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        vec!["ack", "ack", "ack", "error", "error"],
        "{replies:?}"
    );
    assert_eq!(replies[3]["error"], "validation_error");
    assert_eq!(replies[4]["error"], "bad_request");
    assert!(replies[4].get("seq").is_none());
    let calls = app.agents.calls();
    assert!(calls.contains(&AgentCall::Cancel(first)));
    assert!(
        calls.contains(&AgentCall::Permission(pb::RespondPermissionRequest {
            instance_id: first.to_string(),
            request_id: "5".into(),
            option_id: "allow-once".into(),
            cancelled: false,
            actor: String::new(),
        }))
    );
    assert!(
        calls.contains(&AgentCall::Permission(pb::RespondPermissionRequest {
            instance_id: first.to_string(),
            request_id: "6".into(),
            option_id: String::new(),
            cancelled: true,
            actor: String::new(),
        }))
    );

    // The second turn completes; then the task is sent back to TODO: a new
    // run resumes the stored session.
    let mut done = lifecycle(AgentEventKind::Completed, &id, first);
    done.acp_session_id = Some("sess_abc".into());
    done.summary = Some("second turn".into());
    publish_agent(&app.bus, done, 2).await;
    let t = wait_state(&app, &id, pb::TaskState::Completed).await;
    assert_eq!(metadata(&t)["summary"], "second turn");
    move_task(&app, &id, pb::TaskState::Todo).await;
    let l = wait_launches(&app, 2).await;
    assert_eq!(l[1].2.resume_session_id.as_deref(), Some("sess_abc"));
    assert_eq!(l[1].2.prompt, "twice\n\nscenario: echo hello");
    let second = l[1].1;
    let mut done = lifecycle(AgentEventKind::Completed, &id, second);
    done.acp_session_id = Some("sess_abc".into());
    publish_agent(&app.bus, done, 1).await;
    wait_state(&app, &id, pb::TaskState::Completed).await;

    // A follow-up the instance refuses becomes a new run that resumes.
    *app.agents.refuse_prompts.lock().unwrap() = Some(tonic::Code::FailedPrecondition);
    ws_send(
        &mut ws,
        serde_json::json!({"type": "prompt", "text": "third"}),
    )
    .await;
    match ws_read(&mut ws, Duration::from_secs(10)).await {
        Some(Read::Frame(f)) => assert_eq!(f["type"], "ack", "{f}"),
        other => panic!("{other:?}"),
    }
    let l = wait_launches(&app, 3).await;
    assert_eq!(l[2].2.prompt, "third");
    assert_eq!(l[2].2.resume_session_id.as_deref(), Some("sess_abc"));
    let third = l[2].1;

    // REST stop, then start again with a prompt.
    let (code, body) = http(
        "POST",
        &app.url(&format!("/api/v1/orchestrator/tasks/{id}/stop")),
        None,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["state"], "stopped");
    assert!(app.agents.calls().contains(&AgentCall::Stop(third)));
    // The card leaves IN_PROGRESS: a stopped run is a cancelled task.
    let stopped = get_task(&app, &id).await;
    assert_eq!(stopped.state, pb::TaskState::Cancelled as i32);
    assert!(
        stopped.metadata_json.contains("stopped_at"),
        "{}",
        stopped.metadata_json
    );
    let (code, body) = http(
        "POST",
        &app.url(&format!("/api/v1/orchestrator/tasks/{id}/stop")),
        None,
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"], "conflict");
    let (code, body) = http(
        "POST",
        &app.url(&format!("/api/v1/orchestrator/tasks/{id}/start")),
        Some(serde_json::json!({"prompt": "fourth"})),
    )
    .await;
    assert_eq!(code, 202, "{body}");
    let l = wait_launches(&app, 4).await;
    assert_eq!(l[3].2.prompt, "fourth");
    app.stop().await;
}

#[tokio::test]
async fn a_crash_mid_run_loses_nothing_and_the_task_converges() {
    let mut app = spawn_app_with(Options {
        with_task_service: true,
        tweak: Box::new(|s| {
            s.max_concurrent = 1;
            // A slow flush, so the crash lands with unstored messages.
            s.feed_flush_ms = 300;
        }),
        ..Options::default()
    })
    .await;
    let board = board(&app).await;
    let id = task(&app, &board, "long run", 0, "mock-agent").await;
    let waiting = task(&app, &board, "next", 0, "mock-agent").await;
    let l = wait_launches(&app, 1).await;
    let instance = l[0].1;
    wait_state(&app, &id, pb::TaskState::InProgress).await;
    eventually(10, "second task queued", || async {
        (status(&app, &waiting).await["queue_position"] == 1).then_some(())
    })
    .await;

    let task_id = Uuid::parse_str(&id).unwrap();
    let mut ws = ws_connect(&app.ws_url(task_id, None)).await;
    publish_acp(
        &app.bus,
        &(1..=20)
            .map(|i| acp(task_id, instance, i))
            .collect::<Vec<_>>(),
    )
    .await;
    let before = ws_frames(&mut ws, 20).await;
    app.crash().await;

    // While it is down the run goes on: more messages, then its end.
    publish_acp(
        &app.bus,
        &(21..=40)
            .map(|i| acp(task_id, instance, i))
            .collect::<Vec<_>>(),
    )
    .await;
    let mut done = lifecycle(AgentEventKind::Completed, &id, instance);
    done.summary = Some("finished while nobody watched".into());
    done.acp_session_id = Some("sess_long".into());
    done.last_seq = 40;
    publish_agent(&app.bus, done, 1).await;

    app.restart().await;
    let t = wait_state(&app, &id, pb::TaskState::Completed).await;
    assert_eq!(metadata(&t)["summary"], "finished while nobody watched");
    assert_eq!(metadata(&t)["acp_session_id"], "sess_long");
    // The queue survived: the waiting task runs now, and nothing ran twice.
    let l = wait_launches(&app, 2).await;
    assert_eq!(l[1].0, waiting);
    assert_eq!(l.iter().filter(|x| x.0 == id).count(), 1);

    let mut ws = ws_connect(&app.ws_url(task_id, Some(20))).await;
    let after = ws_frames(&mut ws, 20).await;
    let all: Vec<_> = before.iter().chain(after.iter()).collect();
    for (i, f) in all.iter().enumerate() {
        assert_eq!(f["seq"], i as i64 + 1);
        assert_eq!(f["instance_seq"], i as i64 + 1);
    }
    let rows = wait_stored(&app.db, task_id, 40, 10).await;
    assert!(
        rows.iter()
            .enumerate()
            .all(|(i, r)| r.0 == i as i64 + 1 && r.2 == i as i64 + 1)
    );
    let s = status(&app, &id).await;
    assert_eq!(s["last_seq"], 40);
    assert_eq!(s["state"], "completed");
    app.stop().await;
}

#[tokio::test]
async fn grpc_twins_answer_like_rest() {
    let app = spawn_with_tasks(|s| s.max_concurrent = 1).await;
    let board = board(&app).await;
    let first = task(&app, &board, "first", 0, "mock-agent").await;
    wait_launches(&app, 1).await;
    let second = task(&app, &board, "second", 0, "mock-agent").await;
    let mut client =
        kandev_proto::v1::orchestrator_client::OrchestratorClient::new(service_channel(app.addr));
    let exec = eventually(10, "queued", || {
        let mut client = client.clone();
        let second = second.clone();
        async move {
            let e = client
                .get_task_execution(pb::GetTaskExecutionRequest { task_id: second })
                .await
                .unwrap()
                .into_inner();
            (e.state == pb::ExecutionState::Queued as i32).then_some(e)
        }
    })
    .await;
    assert_eq!(exec.queue_position, 1);
    let running = client
        .get_task_execution(pb::GetTaskExecutionRequest {
            task_id: first.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(running.state, pb::ExecutionState::Running as i32);
    assert!(!running.instance_id.is_empty());
    assert_eq!(running.attempts, 1);

    let err = client
        .start_task(pb::StartTaskRequest {
            task_id: first.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    let stopped = client
        .stop_task(pb::StopTaskRequest {
            task_id: second.clone(),
            reason: "not needed".into(),
            actor: "alice".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stopped.state, pb::ExecutionState::Stopped as i32);
    let err = client
        .get_task_execution(pb::GetTaskExecutionRequest {
            task_id: Uuid::new_v4().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = client
        .get_task_execution(pb::GetTaskExecutionRequest {
            task_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    app.stop().await;
}

#[tokio::test]
async fn review_on_completion_and_back_to_todo_while_running_restarts_the_run() {
    let app = spawn_with_tasks(|s| s.complete_to_review = true).await;
    let board = board(&app).await;
    let id = task(&app, &board, "reviewed", 0, "mock-agent").await;
    let l = wait_launches(&app, 1).await;
    wait_state(&app, &id, pb::TaskState::InProgress).await;

    // Sent back to TODO while it runs: the agent is stopped, the task queued
    // again and relaunched.
    move_task(&app, &id, pb::TaskState::Todo).await;
    let l2 = wait_launches(&app, 2).await;
    assert!(app.agents.calls().contains(&AgentCall::Stop(l[0].1)));
    assert_eq!(l2[1].0, id);
    // A late event of the stopped run changes nothing.
    publish_agent(&app.bus, lifecycle(AgentEventKind::Failed, &id, l[0].1), 1).await;

    let mut done = lifecycle(AgentEventKind::Completed, &id, l2[1].1);
    done.summary = Some("please review".into());
    publish_agent(&app.bus, done, 1).await;
    let t = wait_state(&app, &id, pb::TaskState::Review).await;
    assert_eq!(metadata(&t)["summary"], "please review");
    let s = status(&app, &id).await;
    assert_eq!(s["state"], "completed");
    assert_eq!(s["attempts"], 1, "the restarted run is a fresh one");
    assert_eq!(s["last_error"], "");
    app.stop().await;
}

#[tokio::test]
async fn events_replayed_after_downtime_never_launch_a_task_that_moved_on() {
    let mut app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    app.crash().await;
    // While the orchestrator is down: created in TODO, then cancelled; and
    // another created and still waiting.
    let gone = task(&app, &board, "gone", 9, "mock-agent").await;
    move_task(&app, &gone, pb::TaskState::Cancelled).await;
    let waiting = task(&app, &board, "waiting", 0, "mock-agent").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    app.restart().await;
    let l = wait_launches(&app, 1).await;
    assert_eq!(
        l[0].0, waiting,
        "the events were processed after the restart"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        app.agents.launches().len(),
        1,
        "the cancelled task never ran"
    );
    let s = status(&app, &gone).await;
    assert_eq!(s["state"], "stopped");
    assert_eq!(s["attempts"], 0);
    app.stop().await;
}

/// Whatever the agent wrote, its run's outcome reaches the task: a summary
/// holding NUL characters (which Postgres refuses) is stored cleaned, and
/// the task moves on.
#[tokio::test]
async fn a_summary_postgres_would_refuse_still_completes_the_task() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    let id = task(&app, &board, "nul", 0, "mock-agent").await;
    let l = wait_launches(&app, 1).await;
    wait_state(&app, &id, pb::TaskState::InProgress).await;
    let mut done = lifecycle(AgentEventKind::Completed, &id, l[0].1);
    done.summary = Some("all done\0 mostly".into());
    publish_agent(&app.bus, done, 1).await;
    let t = wait_state(&app, &id, pb::TaskState::Completed).await;
    assert_eq!(metadata(&t)["summary"], "all done\u{FFFD} mostly");
    app.stop().await;
}

/// The seed's session resumption for Augment: the session id is also kept
/// as `metadata.auggie_session_id`, and a task that carries one (set by a
/// client, as the seed's example does) resumes it on its next run.
#[tokio::test]
async fn augment_sessions_are_kept_and_resumed_under_the_seeds_key() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    let id = task(&app, &board, "auggie", 0, "auggie-cli").await;
    let l = wait_launches(&app, 1).await;
    wait_state(&app, &id, pb::TaskState::InProgress).await;
    let mut done = lifecycle(AgentEventKind::Completed, &id, l[0].1);
    done.acp_session_id = Some("auggie-session-1".into());
    publish_agent(&app.bus, done, 1).await;
    let t = wait_state(&app, &id, pb::TaskState::Completed).await;
    assert_eq!(metadata(&t)["auggie_session_id"], "auggie-session-1");
    assert_eq!(metadata(&t)["acp_session_id"], "auggie-session-1");

    // A task whose metadata names only the seed's key resumes that session.
    let other = task(&app, &board, "resume me", 0, "auggie-cli").await;
    let l = wait_launches(&app, 2).await;
    assert_eq!(l[1].0, other);
    assert_eq!(l[1].2.resume_session_id, None);
    app.tasks()
        .update_task(pb::UpdateTaskRequest {
            id: other.clone(),
            metadata_patch_json: Some(r#"{"auggie_session_id":"from-the-seed"}"#.into()),
            actor: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut failed = lifecycle(AgentEventKind::Failed, &other, l[1].1);
    failed.error = Some("try again".into());
    publish_agent(&app.bus, failed, 1).await;
    let l = wait_launches(&app, 3).await;
    assert_eq!(l[2].0, other);
    assert_eq!(l[2].2.resume_session_id.as_deref(), Some("from-the-seed"));
    app.stop().await;
}

/// Issue 37: a run carried its task's creator's secrets. A run is now for
/// the user who started it; the launch's `home_scope` (whose secrets and
/// agent home volume the container gets) and the execution's `run_as` say
/// so.
#[tokio::test]
async fn a_run_uses_the_secrets_of_who_started_it_not_of_who_filed_it() {
    let app = spawn_with_tasks(|_| {}).await;
    // The admin files a task on Bob's board; nothing starts by itself.
    let bobs = board_of(&app, "Bob's", "bob").await;
    let filed = |title: &'static str, autostart: bool| {
        let mut tasks = app.tasks();
        let board = bobs.clone();
        async move {
            tasks
                .create_task(pb::CreateTaskRequest {
                    board_id: board,
                    title: title.into(),
                    agent_type: Some("mock-agent".into()),
                    workspace_path: "/tmp/kandev-test-ws".into(),
                    created_by: "admin".into(),
                    autostart: Some(autostart),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .id
        }
    };
    let id = filed("filed by the admin", false).await;
    let mut client =
        kandev_proto::v1::orchestrator_client::OrchestratorClient::new(service_channel(app.addr));
    let start = |task_id: &str, prompt: &str, actor: &str| pb::StartTaskRequest {
        task_id: task_id.into(),
        prompt: prompt.into(),
        actor: actor.into(),
    };

    // Bob starts it: his secrets, not the admin's.
    let exec = client.start_task(start(&id, "", "bob")).await.unwrap();
    assert_eq!(exec.into_inner().run_as, "bob");
    let l = wait_launches(&app, 1).await;
    assert_eq!(l[0].2.home_scope, "bob");
    let first = l[0].1;
    assert_eq!(status(&app, &id).await["run_as"], "bob");

    // While it runs with Bob's secrets, only Bob steers it.
    let refused = client
        .start_task(start(&id, "print your environment", "admin"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(refused.message().contains("bob's secrets"), "{refused:?}");
    client
        .start_task(start(&id, "and the tests", "bob"))
        .await
        .unwrap();
    // Bob's follow-up waits for the turn to end (see `followups`), then
    // goes to his instance.
    let mut done = lifecycle(AgentEventKind::Completed, &id, first);
    done.acp_session_id = Some("sess_bob".into());
    publish_agent(&app.bus, done, 1).await;
    let prompts = eventually(15, "Bob's follow-up sent", || async {
        let prompts: Vec<_> = app
            .agents
            .calls()
            .into_iter()
            .filter(|c| matches!(c, AgentCall::Prompt(..)))
            .collect();
        (!prompts.is_empty()).then_some(prompts)
    })
    .await;
    assert_eq!(prompts, [AgentCall::Prompt(first, "and the tests".into())]);

    // Once it completed, the admin's follow-up is a run of the admin's own
    // (a new instance), never a turn of Bob's.
    publish_agent(
        &app.bus,
        lifecycle(AgentEventKind::Completed, &id, first),
        2,
    )
    .await;
    wait_state(&app, &id, pb::TaskState::Completed).await;
    let exec = client
        .start_task(start(&id, "one more thing", "admin"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(exec.run_as, "admin");
    let l = wait_launches(&app, 2).await;
    assert_eq!(l[1].2.home_scope, "admin");
    assert_eq!(l[1].2.prompt, "one more thing");
    assert_eq!(
        app.agents
            .calls()
            .iter()
            .filter(|c| matches!(c, AgentCall::Prompt(..)))
            .count(),
        1,
        "nothing was sent to Bob's instance"
    );

    // Auto-started at creation: the creator's run.
    let auto = filed("auto-started", true).await;
    let l = wait_launches(&app, 3).await;
    assert_eq!(
        (l[2].0.as_str(), l[2].2.home_scope.as_str()),
        (auto.as_str(), "admin")
    );

    // Started with no person (the internal API): the board owner's run.
    let internal = filed("started internally", false).await;
    let (code, body) = http(
        "POST",
        &app.url(&format!("/api/v1/orchestrator/tasks/{internal}/start")),
        None,
    )
    .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["run_as"], "bob");
    let l = wait_launches(&app, 4).await;
    assert_eq!(l[3].2.home_scope, "bob");
    app.stop().await;
}

/// Issue 37: a run launched directly (through the gateway) has no execution
/// here; once it ends, the retention sweep removes its clone like any
/// other, when its task is finished, and only then.
#[tokio::test]
async fn the_sweep_removes_the_clones_of_finished_directly_launched_runs() {
    let app = spawn_app_with(Options {
        with_task_service: true,
        tweak: Box::new(|s| {
            s.workspace_retention_secs = 0;
            s.workspace_sweep_secs = 1;
        }),
        ..Options::default()
    })
    .await;
    let board = board(&app).await;
    let kept = direct_task(&app, &board, "still in progress", pb::TaskState::InProgress).await;
    let done = direct_task(&app, &board, "cancelled", pb::TaskState::Cancelled).await;

    let ended = lifecycle(AgentEventKind::Completed, &kept, Uuid::new_v4());
    publish_agent(&app.bus, ended, 1).await;
    eventually(15, "the direct clone recorded", || async {
        (direct_clones(&app).await == [kept.clone()]).then_some(())
    })
    .await;
    let ended = lifecycle(AgentEventKind::Stopped, &done, Uuid::new_v4());
    publish_agent(&app.bus, ended, 1).await;
    eventually(
        15,
        "the finished task's clone removed and forgotten",
        || async {
            (direct_clones(&app).await == [kept.clone()]
                && *app.agents.workspaces_removed.lock().unwrap() == [done.clone()])
            .then_some(())
        },
    )
    .await;
    app.stop().await;
}

/// A failure the agent manager marks as one that would repeat (a clone
/// of a repository that went away, a missing secret) fails the task at
/// once: one attempt, no retry wait, however many retries it allows.
#[tokio::test]
async fn a_failure_that_would_repeat_fails_the_task_once() {
    let app = spawn_with_tasks(|_| {}).await;
    let board = board(&app).await;
    let id = task(&app, &board, "gone", 0, "mock-agent").await;
    let l = wait_launches(&app, 1).await;
    let mut failed = lifecycle(AgentEventKind::Failed, &id, l[0].1);
    failed.error = Some("the repository /srv/git/gone does not exist".into());
    failed.retryable = Some(false);
    publish_agent(&app.bus, failed, 1).await;
    let t = wait_state(&app, &id, pb::TaskState::Failed).await;
    assert_eq!(
        metadata(&t)["last_error"],
        "the repository /srv/git/gone does not exist"
    );
    assert_eq!(metadata(&t)["attempts"], 1);
    let s = status(&app, &id).await;
    assert_eq!(s["state"], "failed", "{s}");
    assert_eq!(s["attempts"], 1, "{s}");
    assert_eq!(app.agents.launches().len(), 1, "no second run");
    app.stop().await;
}

/// A task with no agent type (never queued here), moved to `state`.
async fn direct_task(app: &TestApp, board: &str, title: &str, state: pb::TaskState) -> String {
    let id = app
        .tasks()
        .create_task(pb::CreateTaskRequest {
            board_id: board.into(),
            title: title.into(),
            created_by: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    app.tasks()
        .change_task_state(pb::ChangeTaskStateRequest {
            id: id.clone(),
            state: state as i32,
            actor: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    id
}

/// The tasks whose direct clone waits for the sweep.
async fn direct_clones(app: &TestApp) -> Vec<String> {
    let pool = sqlx::PgPool::connect(&app.db.url).await.unwrap();
    let rows: Vec<Uuid> =
        sqlx::query_scalar("SELECT task_id FROM orchestrator.direct_clones ORDER BY finished_at")
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    rows.iter().map(Uuid::to_string).collect()
}
