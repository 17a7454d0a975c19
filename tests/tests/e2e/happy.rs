//! A coding task runs from creation to COMPLETED; its whole ACP stream
//! reaches a WebSocket client exactly once.

use std::time::Duration;

use kandev_e2e::{
    Feed, Options, Stack, deployments, is_turn_end, kind, merged, mock_task, replay,
    serde_json::json,
};

/// A `code` task on a fresh repository, watched from its creation.
async fn happy_path_code_task_completes_with_the_full_stream_on(test: &str, options: Options) {
    let (stack, api, board) = Stack::start_with_board(test, options, "happy").await;
    let me = api.get("/api/v1/auth/me").await;
    assert_eq!(me.status, 200, "{}", me.body);

    let repo = stack.git_repo("happy");
    let fields = json!({"repository_url": repo});
    let task = api
        .task(
            &board,
            merged(mock_task("Edit the readme", "scenario: code"), fields),
        )
        .await;

    let mut feed = Feed::open(&api, &task).await;
    // Queued, then launched: the task goes IN_PROGRESS with an instance.
    let running = api
        .wait_state(&task, &["IN_PROGRESS", "COMPLETED"], 120)
        .await;
    assert_eq!(running["agent_type"], "mock-agent", "{running}");

    let end = feed.wait_for(120, "turn_end", is_turn_end).await;
    assert_eq!(end["event"]["data"]["stop_reason"], "end_turn", "{end}");
    let done = api.wait_state(&task, &["COMPLETED"], 60).await;
    feed.drain(Duration::from_millis(1500)).await;

    // The whole ACP turn: plan, the read/edit/verify tool calls with the
    // diff, the summary message, then the end of the turn.
    let kinds = feed.kinds();
    for k in [
        "plan",
        "tool_call",
        "tool_call_update",
        "message_chunk",
        "turn_end",
    ] {
        assert!(kinds.iter().any(|x| x == k), "no {k} in {kinds:?}");
    }
    let tool_calls: Vec<&str> = feed
        .frames
        .iter()
        .filter(|f| kind(f) == "tool_call")
        .filter_map(|f| f["event"]["data"]["tool_call_id"].as_str())
        .collect();
    for id in ["call_read_1", "call_edit_1", "call_exec_1"] {
        assert!(tool_calls.contains(&id), "no {id} in {tool_calls:?}");
    }
    let diff = feed
        .frames
        .iter()
        .any(|f| f["event"]["raw"].to_string().contains(r#""type":"diff""#));
    assert!(diff, "no diff in the stream");
    let plan_pos = kinds.iter().position(|k| k == "plan").unwrap();
    let end_pos = kinds.iter().rposition(|k| k == "turn_end").unwrap();
    assert!(plan_pos < end_pos, "{kinds:?}");
    let frames_seen = feed.frames.len();
    assert_eq!(feed.last_seq, frames_seen as i64);
    feed.close().await;

    // Exactly once: a new client replaying from 0 gets the same 1..N.
    let stored = replay(&api, &task).await;
    assert_eq!(
        stored.len(),
        frames_seen,
        "the live and stored feeds differ"
    );

    // The task records the run; the workspace holds the edit.
    assert_eq!(done["state"], "COMPLETED");
    let exec = api.execution(&task).await;
    assert_eq!(exec.status, 200, "{}", exec.body);
    assert_eq!(exec.body["state"], "completed", "{}", exec.body);
    let readme = std::fs::read_to_string(stack.workspace(&task).join("README.md"))
        .expect("the cloned workspace");
    assert!(
        readme.contains("A test repository.")
            && readme.contains("Edited by kandev-mock-agent (turn 1)."),
        "{readme}"
    );
    assert!(stack.containers(Some(&task), false).await.is_empty());
    stack.stop().await;
}

deployments! {
    happy_path_code_task_completes_with_the_full_stream_on("happy_path"),
    four: happy_path_code_task_completes_with_the_full_stream,
    sqlite: happy_path_code_task_completes_with_the_full_stream_on_sqlite,
    single: happy_path_code_task_completes_with_the_full_stream_single,
}
