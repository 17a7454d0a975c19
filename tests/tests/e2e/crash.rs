//! An agent that crashes is retried, then the task FAILS with the error; an
//! agent that cannot start fails the task at once.

use kandev_e2e::{Options, Stack, Svc, kind, replay, serde_json::json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_agent_is_retried_then_fails() {
    crashing_agent_is_retried_then_fails_on("crash", Options::default()).await;
}

/// The same with every service on SQLite, as the one-machine `kandev` keeps
/// its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_agent_is_retried_then_fails_on_sqlite() {
    crashing_agent_is_retried_then_fails_on("crash_sqlite", Options::sqlite()).await;
}

/// The same through the `kandev` binary: the four services in one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_agent_is_retried_then_fails_single() {
    crashing_agent_is_retried_then_fails_on("crash_single", Options::single()).await;
}

async fn crashing_agent_is_retried_then_fails_on(test: &str, options: Options) {
    let stack = Stack::start(test, options).await;
    let api = stack.admin().await;
    let board = api.board("crash").await;
    let task = api
        .task(
            &board,
            json!({"title": "Crash", "description": "scenario: crash 3",
                   "agent_type": "mock-agent", "max_retries": 2}),
        )
        .await;
    let failed = api.wait_state(&task, &["FAILED"], 180).await;
    let error = failed["metadata"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(!error.is_empty(), "{failed}");
    assert_eq!(failed["metadata"]["attempts"], 3, "{failed}");

    let exec = api.execution(&task).await;
    assert_eq!(exec.body["state"], "failed", "{}", exec.body);
    assert_eq!(exec.body["attempts"], 3, "{}", exec.body);
    assert!(
        exec.body["last_error"]
            .as_str()
            .is_some_and(|e| !e.is_empty())
    );

    // Three runs, each crashing, all in the task's one feed.
    let frames = replay(&api, &task).await;
    let crashes = frames
        .iter()
        .filter(|f| {
            kind(f) == "message_chunk"
                && f["event"]["data"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("Crashing now with exit code 3"))
        })
        .count();
    assert_eq!(crashes, 3, "one crash per attempt");
    assert!(stack.containers(Some(&task), false).await.is_empty());
    stack.stop().await;
}

/// An agent that cannot even start (its image is missing and never pulled)
/// moves the card from TODO to FAILED, with the reason a person can read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_that_fails_moves_the_task_to_failed() {
    let stack = Stack::start("launch_failure", Options::default()).await;
    // Placed through the pool of announced managers, as always once one
    // announced itself: no manager has the image, one is asked anyway.
    stack
        .wait_log(Svc::Orchestrator, 0, "agent manager joined the pool", 30)
        .await;
    let api = stack.admin().await;
    let made = api
        .post(
            "/api/v1/agent-types",
            json!({"id": "no-image", "name": "Missing image",
                   "image": "kandev/not-built-anywhere:latest", "memory_mb": 256,
                   "cpu_cores": 0.5, "pids_limit": 64, "timeout_seconds": 600,
                   "network_mode": "none"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let board = api.board("launch failure").await;
    let task = api
        .task(
            &board,
            json!({"title": "Cannot start", "description": "echo hi",
                   "agent_type": "no-image", "max_retries": 0}),
        )
        .await;
    let failed = api.wait_state(&task, &["FAILED"], 60).await;
    let error = failed["metadata"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("kandev/not-built-anywhere:latest"),
        "the reason names the image: {failed}"
    );
    stack.stop().await;
}

/// An agent that answers the prompt with its own error would answer the same
/// again: the task fails once, with that error, and is not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_error_answer_fails_once_without_retries() {
    let stack = Stack::start("agent_error", Options::default()).await;
    let api = stack.admin().await;
    let board = api.board("agent error").await;
    let task = api
        .task(
            &board,
            json!({"title": "Refused", "description": "scenario: error Could not resolve dependency foo@2",
                   "agent_type": "mock-agent", "max_retries": 3}),
        )
        .await;
    let failed = api.wait_state(&task, &["FAILED"], 120).await;
    assert_eq!(failed["metadata"]["attempts"], 1, "{failed}");
    let error = failed["metadata"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("Could not resolve dependency foo@2"),
        "the agent's own message: {failed}"
    );
    let exec = api.execution(&task).await;
    assert_eq!(exec.body["attempts"], 1, "{}", exec.body);
    stack.stop().await;
}
