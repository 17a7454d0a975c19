//! A bounded soak: a few hundred tasks through the whole stack, and every
//! service's open file descriptors and resident memory stay flat (read from
//! their own `/metrics`). Docker connections, NATS subscriptions and
//! database connections that leaked would show as descriptors.

use std::net::SocketAddr;

use kandev_common::metrics::parse_text;
use kandev_e2e::{Api, Options, Stack, Svc, eventually};

const SVCS: [Svc; 4] = [
    Svc::Gateway,
    Svc::TaskService,
    Svc::Orchestrator,
    Svc::AgentManager,
];
const TOKEN: &str = "soak-scrape-token-0123456789";

/// (open fds, resident bytes) of a service.
async fn usage(stack: &Stack, svc: Svc) -> (f64, f64) {
    let api = Api {
        addr: SocketAddr::from(([127, 0, 0, 1], stack.port(svc))),
        token: (svc == Svc::Gateway).then(|| TOKEN.to_string()),
    };
    let r = api.get("/metrics").await;
    let samples = parse_text(r.body.as_str().unwrap_or_default()).expect("metrics parse");
    let get = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name)
            .map_or(0.0, |s| s.value)
    };
    (
        get("process_open_fds"),
        get("process_resident_memory_bytes"),
    )
}

/// Runs `n` quick tasks on `board` and waits until every one completed.
async fn run_tasks(api: &Api, board: &str, n: usize) {
    let ids = api.mock_tasks(board, n, "soak", "echo soak").await;
    let cards = format!("/api/v1/boards/{board}/cards");
    eventually(600, "every soak task to complete", || async {
        let r = api.get(&cards).await;
        let list = r.body["cards"].as_array()?;
        let done = list
            .iter()
            .filter(|c| ids.iter().any(|id| c["task"]["id"] == id.as_str()))
            .all(|c| c["task"]["state"] == "COMPLETED");
        done.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_few_hundred_tasks_leave_fds_and_memory_flat() {
    let options = Options::default().with(Svc::Gateway, "KANDEV_METRICS_TOKEN", TOKEN);
    let stack = Stack::start("soak", options).await;
    let api = stack.admin().await;
    // Warm up: pools, caches and the first containers, then measure.
    let warm = api.board("soak warm-up").await;
    run_tasks(&api, &warm, 20).await;
    let mut before = Vec::new();
    for svc in SVCS {
        before.push(usage(&stack, svc).await);
    }
    let board = api.board("soak").await;
    for _ in 0..4 {
        run_tasks(&api, &board, 50).await;
    }
    for (svc, (fds0, rss0)) in SVCS.into_iter().zip(before) {
        let (fds1, rss1) = usage(&stack, svc).await;
        println!(
            "{svc:?}: fds {fds0} -> {fds1}, RSS {:.1} -> {:.1} MiB",
            rss0 / 1048576.0,
            rss1 / 1048576.0
        );
        assert!(
            fds1 <= fds0 + 8.0,
            "{svc:?} leaks descriptors: {fds0} -> {fds1}"
        );
        assert!(
            rss1 <= rss0 * 1.5 + 16.0 * 1048576.0,
            "{svc:?} memory grows: {rss0} -> {rss1}"
        );
    }
    assert!(
        stack.containers(None, true).await.is_empty(),
        "no agent container is left running"
    );
    stack.stop().await;
}
