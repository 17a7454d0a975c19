//! Ten queued tasks with a concurrency limit of three.

use std::time::Duration;

use kandev_e2e::{Options, Stack, serde_json::json};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_tasks_run_three_at_a_time_and_all_complete() {
    let stack = Stack::start(
        "concurrency",
        Options {
            max_concurrent: 3,
            ..Options::default()
        },
    )
    .await;
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

    // Poll the running agent containers (one `docker ps` is a consistent
    // snapshot; polling ten executions one by one is not) until every task
    // is COMPLETED.
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut max_containers = 0;
    loop {
        let containers = stack.containers(None, true).await.len();
        max_containers = max_containers.max(containers);
        assert!(containers <= 3, "{containers} agent containers at once");
        let r = api
            .get(&format!(
                "/api/v1/boards/{board}/tasks?state=COMPLETED&page_size=100"
            ))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let completed = r.body["tasks"].as_array().map_or(0, Vec::len);
        if completed == tasks.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {completed} of 10 tasks completed in 300 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(max_containers, 3, "the limit was used");
    for task in &tasks {
        let e = api.execution(task).await;
        assert_eq!(e.body["state"], "completed", "{}", e.body);
        assert_eq!(e.body["attempts"], 1, "{}", e.body);
    }
    assert!(stack.containers(None, false).await.is_empty());
    stack.stop().await;
}
