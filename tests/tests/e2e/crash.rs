//! An agent that crashes is retried, then the task FAILS with the error; an
//! agent that cannot start fails the task at once.

use kandev_e2e::{
    Options, Stack, Svc, chunk_contains, deployments, merged, mock_task, mock_type, replay,
    serde_json::json,
};

/// A task whose agent crashes three times, with two retries.
async fn crashing_agent_is_retried_then_fails_on(test: &str, options: Options) {
    let (stack, api, board) = Stack::start_with_board(test, options, "crash").await;
    let fields = merged(
        mock_task("Crash", "scenario: crash 3"),
        json!({"max_retries": 2}),
    );
    let task = api.task(&board, fields).await;
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
        .filter(|f| chunk_contains(f, "Crashing now with exit code 3"))
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
    let image = json!({"image": "kandev/not-built-anywhere:latest"});
    api.agent_type(mock_type("no-image", "Missing image", image))
        .await;
    let board = api.board("launch failure").await;
    let fields = merged(
        mock_task("Cannot start", "echo hi"),
        json!({"agent_type": "no-image"}),
    );
    let task = api.task(&board, fields).await;
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
    let options = Options::default();
    let (stack, api, board) = Stack::start_with_board("agent_error", options, "agent error").await;
    let scenario = "scenario: error Could not resolve dependency foo@2";
    let fields = merged(mock_task("Refused", scenario), json!({"max_retries": 3}));
    let task = api.task(&board, fields).await;
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

deployments! {
    crashing_agent_is_retried_then_fails_on("crash"),
    four: crashing_agent_is_retried_then_fails,
    sqlite: crashing_agent_is_retried_then_fails_on_sqlite,
    single: crashing_agent_is_retried_then_fails_single,
}
