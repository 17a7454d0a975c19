//! The "ask" permission policy: the request reaches the WebSocket client,
//! the task waits for input meanwhile, and the answer reaches the agent.

use kandev_e2e::{Feed, Options, Stack, is_turn_end, kind, serde_json::json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_ask_is_answered_over_the_websocket() {
    permission_ask_is_answered_over_the_websocket_on("permission", Options::default()).await;
}

/// The same with every service on SQLite, as the one-machine `kandev` keeps
/// its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_ask_is_answered_over_the_websocket_on_sqlite() {
    permission_ask_is_answered_over_the_websocket_on("permission_sqlite", Options::sqlite()).await;
}

/// The same through the `kandev` binary: the four services in one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_ask_is_answered_over_the_websocket_single() {
    permission_ask_is_answered_over_the_websocket_on("permission_single", Options::single()).await;
}

async fn permission_ask_is_answered_over_the_websocket_on(test: &str, options: Options) {
    let stack = Stack::start(test, options).await;
    let api = stack.admin().await;
    let made = api
        .post(
            "/api/v1/agent-types",
            json!({"id": "mock-ask", "name": "Mock agent (asks)",
                   "image": "kandev/mock-agent:latest", "capabilities": ["acp", "fs"],
                   "memory_mb": 256, "cpu_cores": 0.5, "pids_limit": 64, "timeout_seconds": 600,
                   "network_mode": "none", "permission_policy": "ask"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);

    let board = api.board("permission").await;
    let repo = stack.git_repo("permission");
    let task = api
        .task(
            &board,
            json!({"title": "Write a file", "description": "scenario: permission",
                   "agent_type": "mock-ask", "repository_url": repo, "max_retries": 0}),
        )
        .await;
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
    let history = api
        .get(&format!("/api/v1/tasks/{task}/events?page_size=100"))
        .await;
    let states: Vec<String> = history.body["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", history.body))
        .iter()
        .filter(|e| e["kind"] == "state_changed")
        .map(|e| {
            e["new_value"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
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
    let written = std::fs::read_to_string(stack.workspace(&task).join("permitted.txt"))
        .expect("the permitted file");
    assert!(
        written.contains("Written by kandev-mock-agent after permission was granted."),
        "{written}"
    );
    feed.close().await;
    stack.stop().await;
}
