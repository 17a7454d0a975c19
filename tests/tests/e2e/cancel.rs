//! A running task moved to CANCELLED stops its agent; a cancelled turn
//! leaves the task in progress.

use kandev_e2e::{
    Feed, Options, Stack, deployments, eventually, is_turn_end, mock_task, serde_json::json,
};

/// A task waiting for `session/cancel`, moved to CANCELLED.
async fn cancel_stops_the_agent_and_removes_its_container_on(test: &str, options: Options) {
    let (stack, api, board) = Stack::start_with_board(test, options, "cancel").await;
    let task = api
        .task(&board, mock_task("Wait", "scenario: wait-cancel"))
        .await;
    let mut feed = Feed::open(&api, &task).await;
    feed.wait_for_chunk(120, "Waiting for session/cancel").await;
    let running = api.wait_state(&task, &["IN_PROGRESS"], 30).await;
    assert_eq!(stack.containers(Some(&task), true).await.len(), 1);

    let r = api
        .patch(
            &format!("/api/v1/tasks/{task}/state"),
            json!({"state": "CANCELLED", "version": running["version"], "reason": "e2e"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let cancelled = api.wait_state(&task, &["CANCELLED"], 30).await;
    assert_eq!(cancelled["state"], "CANCELLED");

    eventually(60, "the container removed", || async {
        stack
            .containers(Some(&task), false)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    eventually(30, "the execution stopped", || async {
        let e = api.execution(&task).await;
        (e.body["state"] == "stopped").then_some(())
    })
    .await;
    // It stays cancelled: nothing relaunches it.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let t = api.get(&format!("/api/v1/tasks/{task}")).await;
    assert_eq!(t.body["state"], "CANCELLED", "{}", t.body);
    assert!(stack.containers(Some(&task), false).await.is_empty());
    feed.close().await;
    stack.stop().await;
}

/// "Cancel turn" ends the agent's turn, not the task: it stays in progress,
/// idle, and a follow-up continues the same session and completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_turn_leaves_the_task_in_progress_for_a_follow_up() {
    let options = Options::default();
    let (stack, api, board) = Stack::start_with_board("cancel_turn", options, "cancel turn").await;
    let wait = mock_task("Wait", "scenario: wait-cancel");
    let task = api.task(&board, wait).await;
    let mut feed = Feed::open(&api, &task).await;
    feed.wait_for(120, "the waiting message", |f| {
        f.to_string().contains("Waiting for session/cancel")
    })
    .await;
    let ack = feed.command(json!({"type": "cancel"}), 30).await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let end = feed
        .wait_for(60, "the cancelled turn's end", is_turn_end)
        .await;
    assert_eq!(end["event"]["data"]["stop_reason"], "cancelled", "{end}");
    // The orchestrator has handled the run's end: the task is still in
    // progress, not completed.
    eventually(60, "the run's end to be handled", || async {
        let exec = api.execution(&task).await;
        (exec.body["state"] == "completed").then_some(())
    })
    .await;
    let idle = api.get(&format!("/api/v1/tasks/{task}")).await;
    assert_eq!(idle.body["state"], "IN_PROGRESS", "{}", idle.body);

    let ack = feed
        .command(json!({"type": "prompt", "text": "echo carry on"}), 60)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let end = feed.wait_for(120, "the follow-up's end", is_turn_end).await;
    assert_eq!(end["event"]["data"]["stop_reason"], "end_turn", "{end}");
    feed.close().await;
    api.wait_state(&task, &["COMPLETED"], 60).await;
    stack.stop().await;
}

deployments! {
    cancel_stops_the_agent_and_removes_its_container_on("cancel"),
    four: cancel_stops_the_agent_and_removes_its_container,
    sqlite: cancel_stops_the_agent_and_removes_its_container_on_sqlite,
    single: cancel_stops_the_agent_and_removes_its_container_single,
}
