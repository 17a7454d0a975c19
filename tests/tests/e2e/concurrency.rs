//! Ten queued tasks with a concurrency limit of three.

use std::cell::Cell;

use kandev_e2e::{Options, Stack};

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
    let tasks = api
        .mock_tasks(&board, 10, "slow", "scenario: slow 8 150")
        .await;

    // Poll the running agent containers (one `docker ps` is a consistent
    // snapshot; polling ten executions one by one is not) until every task
    // is COMPLETED.
    let max_containers = Cell::new(0);
    api.wait_completed(&board, tasks.len(), 300, || async {
        let containers = stack.containers(None, true).await.len();
        max_containers.set(max_containers.get().max(containers));
        assert!(containers <= 3, "{containers} agent containers at once");
    })
    .await;
    assert_eq!(max_containers.get(), 3, "the limit was used");
    for task in &tasks {
        let e = api.execution(task).await;
        assert_eq!(e.body["state"], "completed", "{}", e.body);
        assert_eq!(e.body["attempts"], 1, "{}", e.body);
    }
    assert!(stack.containers(None, false).await.is_empty());
    stack.stop().await;
}
