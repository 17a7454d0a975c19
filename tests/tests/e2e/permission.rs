//! The "ask" permission policy: the request reaches the WebSocket client,
//! the task waits for input meanwhile, and the answer reaches the agent.

use kandev_e2e::{
    Feed, Options, Stack, deployments, is_turn_end, kind, merged, mock_task, mock_type,
    serde_json::json,
};

/// A task of an agent type that asks before it writes a file.
async fn permission_ask_is_answered_over_the_websocket_on(test: &str, options: Options) {
    let (stack, api, board) = Stack::start_with_board(test, options, "permission").await;
    let ask = json!({"permission_policy": "ask"});
    api.agent_type(mock_type("mock-ask", "Mock agent (asks)", ask))
        .await;
    let repo = stack.git_repo("permission");
    let fields = json!({"agent_type": "mock-ask", "repository_url": repo});
    let fields = merged(mock_task("Write a file", "scenario: permission"), fields);
    let task = api.task(&board, fields).await;
    let mut feed = Feed::open(&api, &task).await;
    let ask = feed
        .wait_for(120, "a permission request", |f| {
            kind(f) == "permission_request"
        })
        .await;
    let data = &ask["event"]["data"];
    let options: Vec<&str> = data["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["option_id"].as_str().or(o["optionId"].as_str()))
        .collect();
    assert!(options.contains(&"allow-once"), "{ask}");
    // The board shows that a person is needed, and nothing is written
    // before the answer.
    let waiting = api.wait_state(&task, &["WAITING_FOR_INPUT"], 60).await;
    assert_eq!(waiting["state"], "WAITING_FOR_INPUT", "{waiting}");
    assert!(!stack.workspace(&task).join("permitted.txt").exists());

    let ack = feed
        .command(
            json!({"type": "permission", "request_id": data["request_id"].to_string(),
                   "option_id": "allow-once"}),
            30,
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let end = feed.wait_for(60, "turn_end", is_turn_end).await;
    assert_eq!(end["event"]["data"]["stop_reason"], "end_turn", "{end}");
    api.wait_state(&task, &["COMPLETED"], 60).await;
    // It went back to work when answered, then completed.
    let states = api.state_history(&task).await;
    let tail: Vec<&str> = states
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        ["WAITING_FOR_INPUT", "IN_PROGRESS", "COMPLETED"],
        "{states:?}"
    );
    feed.close().await;
    let written = std::fs::read_to_string(stack.workspace(&task).join("permitted.txt"))
        .expect("the permitted file");
    assert!(
        written.contains("Written by kandev-mock-agent after permission was granted."),
        "{written}"
    );
    stack.stop().await;
}

deployments! {
    permission_ask_is_answered_over_the_websocket_on("permission"),
    four: permission_ask_is_answered_over_the_websocket,
    sqlite: permission_ask_is_answered_over_the_websocket_on_sqlite,
    single: permission_ask_is_answered_over_the_websocket_single,
}
