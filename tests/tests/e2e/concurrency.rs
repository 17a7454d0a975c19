//! Ten queued tasks with a concurrency limit of three.

use std::time::Duration;

use kandev_e2e::{Options, Stack, serde_json::json};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_tasks_run_three_at_a_time_and_all_complete() {
    let stack = Stack::start("concurrency", Options { max_concurrent: 3 }).await;
    let api = stack.admin().await;
    let board = api.board("concurrency").await;
    let mut tasks = Vec::new();
    for i in 0..10 {
        tasks.push(
            api.task(
                &board,
                json!({"title": format!("slow {i}"), "description": "scenario: slow 8 150",
                       "agent_type": "mock-agent", "max_retries": 0}),
            )
            .await,
        );
    }

    // Poll the running agent containers and the executions until every
    // task is COMPLETED.
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut max_containers = 0;
    let mut max_running = 0;
    loop {
        let containers = stack.containers(None, true).await.len();
        max_containers = max_containers.max(containers);
        assert!(containers <= 3, "{containers} agent containers at once");
        let mut running = 0;
        let mut completed = 0;
        for task in &tasks {
            let e = api.execution(task).await;
            if e.body["state"] == "running" || e.body["state"] == "launching" {
                running += 1;
            }
            let t = api.get(&format!("/api/v1/tasks/{task}")).await;
            if t.body["state"] == "COMPLETED" {
                completed += 1;
            }
        }
        max_running = max_running.max(running);
        assert!(running <= 3, "{running} executions running at once");
        if completed == tasks.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {completed} of 10 tasks completed in 300 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(max_running.max(max_containers), 3, "the limit was used");
    for task in &tasks {
        let e = api.execution(task).await;
        assert_eq!(e.body["state"], "completed", "{}", e.body);
        assert_eq!(e.body["attempts"], 1, "{}", e.body);
    }
    assert!(stack.containers(None, false).await.is_empty());
    stack.stop().await;
}
