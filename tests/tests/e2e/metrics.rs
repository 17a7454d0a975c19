//! Every service's `/metrics` parses as Prometheus text, and its counters,
//! gauges and histograms move when tasks run: launches and their phases,
//! messages at each hop, the queue rising and falling, WebSocket clients,
//! requests per route and RPC, the outbox, the process itself; and every
//! query of the Grafana dashboard (`deploy/grafana/kandev.json`) names an
//! exported metric.

use std::{net::SocketAddr, time::Duration};

use kandev_common::metrics::{Sample, parse_text};
use kandev_e2e::{
    Api, Feed, Options, Stack, Svc, eventually, is_turn_end, mock_task, serde_json::json,
};

const SCRAPE_TOKEN: &str = "e2e-scrape-token-0123456789";

async fn scrape(stack: &Stack, svc: Svc) -> Vec<Sample> {
    let api = Api {
        addr: SocketAddr::from(([127, 0, 0, 1], stack.port(svc))),
        token: (svc == Svc::Gateway).then(|| SCRAPE_TOKEN.to_string()),
    };
    let r = api.get("/metrics").await;
    assert_eq!(r.status, 200, "{svc:?} /metrics: {}", r.body);
    let text = r.body.as_str().unwrap_or_default();
    parse_text(text).unwrap_or_else(|e| panic!("{svc:?} /metrics does not parse: {e}\n{text}"))
}

/// The sum of the samples named `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_exports_metrics_that_move_when_tasks_run() {
    let options = Options {
        max_concurrent: 1,
        ..Options::default()
    }
    .with(Svc::Gateway, "KANDEV_METRICS_TOKEN", SCRAPE_TOKEN);
    let stack = Stack::start("metrics", options).await;
    let api = stack.admin().await;

    // The gateway's port is public: no scrape without the token.
    let anonymous = stack.anonymous().get("/metrics").await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);

    let board = api.board("metrics").await;
    let first = api.task(&board, mock_task("First", "slow 40 50")).await;
    let mut feed = Feed::open(&api, &first).await;
    let second = api.task(&board, mock_task("Second", "slow 5 20")).await;
    // One slot: the second task waits in the queue, and a client watches.
    eventually(60, "the queue to hold the second task", || async {
        let o = scrape(&stack, Svc::Orchestrator).await;
        (value(&o, "kandev_queue_depth", &[]) >= 1.0).then_some(())
    })
    .await;
    let g = scrape(&stack, Svc::Gateway).await;
    assert!(value(&g, "kandev_ws_clients", &[]) >= 1.0);

    feed.wait_for(120, "the first turn's end", is_turn_end)
        .await;
    feed.close().await;
    api.wait_state(&first, &["COMPLETED"], 60).await;
    api.wait_state(&second, &["COMPLETED"], 120).await;
    // A task naming a made-up agent type is queued and fails to launch;
    // its type never becomes a metric label (issue 37: labels from input).
    let made_up = api
        .task(
            &board,
            json!({"title": "Made up", "agent_type": "made-up-type-7f3a", "max_retries": 0}),
        )
        .await;
    api.wait_state(&made_up, &["FAILED"], 120).await;
    // The queue emptied, the client left.
    eventually(30, "the queue to empty", || async {
        let o = scrape(&stack, Svc::Orchestrator).await;
        (value(&o, "kandev_queue_depth", &[]) == 0.0).then_some(())
    })
    .await;
    eventually(30, "the WebSocket client to be gone", || async {
        let g = scrape(&stack, Svc::Gateway).await;
        (value(&g, "kandev_ws_clients", &[]) == 0.0).then_some(())
    })
    .await;

    let am = scrape(&stack, Svc::AgentManager).await;
    let o = scrape(&stack, Svc::Orchestrator).await;
    let t = scrape(&stack, Svc::TaskService).await;
    let g = scrape(&stack, Svc::Gateway).await;
    // Messages at every hop.
    let hop = |s: &[Sample], hop: &str| value(s, "kandev_acp_messages_total", &[("hop", hop)]);
    assert!(
        hop(&am, "agent_manager") >= 10.0,
        "agent manager: {}",
        hop(&am, "agent_manager")
    );
    assert!(
        hop(&o, "orchestrator_store") >= 10.0,
        "orchestrator: {}",
        hop(&o, "orchestrator_store")
    );
    assert!(hop(&g, "gateway") >= 1.0, "gateway: {}", hop(&g, "gateway"));
    assert!(value(&am, "kandev_acp_bytes_total", &[]) > 0.0);
    assert!(value(&am, "kandev_bus_publish_seconds_count", &[]) >= 1.0);
    // Launch phases, queue wait, running agents.
    for phase in ["create", "start", "initialize", "session"] {
        assert!(
            value(
                &am,
                "kandev_launch_phase_seconds_count",
                &[("phase", phase)]
            ) >= 2.0,
            "{phase}"
        );
    }
    assert!(value(&o, "kandev_queue_wait_seconds_count", &[]) >= 2.0);
    assert!(
        o.iter()
            .any(|s| s.name == "kandev_running_agents"
                && s.label("agent_type") == Some("mock-agent")),
        "kandev_running_agents{{agent_type=\"mock-agent\"}}"
    );
    assert!(
        o.iter()
            .all(|s| s.label("agent_type") != Some("made-up-type-7f3a")),
        "a made-up agent type became a label"
    );
    assert!(value(&o, "kandev_feed_store_batch_size_count", &[]) >= 1.0);
    // Requests per route and RPC.
    assert!(
        value(
            &g,
            "http_requests_total",
            &[
                ("method", "POST"),
                ("route", "/api/v1/boards/{id}/tasks"),
                ("status", "201")
            ]
        ) >= 2.0,
        "gateway POST tasks"
    );
    assert!(
        value(
            &t,
            "http_requests_total",
            &[
                ("route", "/kandev.v1.TaskService/CreateTask"),
                ("status", "grpc_0")
            ]
        ) >= 2.0,
        "CreateTask"
    );
    assert!(
        value(
            &am,
            "http_requests_total",
            &[("route", "/kandev.v1.AgentManager/LaunchAgent")]
        ) >= 2.0,
        "LaunchAgent"
    );
    assert!(value(&t, "kandev_outbox_published_total", &[]) >= 2.0);
    assert_eq!(value(&t, "kandev_outbox_backlog", &[]), 0.0);
    // Every series names its service; every process reports itself.
    for (svc, samples) in [
        ("agent-manager", &am),
        ("orchestrator", &o),
        ("task-service", &t),
        ("gateway", &g),
    ] {
        assert!(
            samples.iter().all(|s| s.label("service") == Some(svc)),
            "{svc}"
        );
        assert!(
            value(samples, "process_resident_memory_bytes", &[]) > 1e6,
            "{svc}"
        );
        assert!(value(samples, "process_open_fds", &[]) > 0.0, "{svc}");
    }
    // Every query of the dashboard names a metric the services export.
    let exported: std::collections::BTreeSet<&str> = [&am, &o, &t, &g]
        .into_iter()
        .flat_map(|samples| samples.iter().map(|s| s.name.as_str()))
        .collect();
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/kandev.json"),
    )
    .expect("deploy/grafana/kandev.json");
    let dashboard: kandev_e2e::serde_json::Value =
        kandev_e2e::serde_json::from_str(&dashboard).expect("the dashboard is valid JSON");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(
        exprs.len() >= 10,
        "the dashboard has its queries: {exprs:?}"
    );
    for expr in &exprs {
        for name in metric_names(expr) {
            assert!(
                exported.contains(name.as_str()),
                "{name} (in {expr}) is not exported; exported: {exported:?}"
            );
        }
    }
    tokio::time::timeout(Duration::from_secs(30), stack.stop())
        .await
        .expect("the stack stops");
}

fn collect_exprs(value: &kandev_e2e::serde_json::Value, out: &mut Vec<String>) {
    use kandev_e2e::serde_json::Value;
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The metric names a PromQL expression uses: Kandev's, request and process
/// metrics (functions, labels and keywords are not metric names).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_quotes = false;
    let mut token = String::new();
    let flush = |token: &mut String, names: &mut Vec<String>| {
        if ["kandev_", "http_", "process_"]
            .iter()
            .any(|p| token.starts_with(p))
        {
            names.push(std::mem::take(token));
        }
        token.clear();
    };
    for c in expr.chars() {
        if c == '"' {
            in_quotes = !in_quotes;
            flush(&mut token, &mut names);
            continue;
        }
        if !in_quotes && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            token.push(c);
        } else {
            flush(&mut token, &mut names);
        }
    }
    flush(&mut token, &mut names);
    names
}
