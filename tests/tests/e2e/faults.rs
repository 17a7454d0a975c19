//! Faults mid-run: each service SIGKILLed and restarted, then NATS
//! restarted, then one node of a 3-node NATS cluster SIGKILLed for good,
//! while a slow task runs. The task still completes and the
//! WebSocket client (reconnecting with ?after=<last seq>) sees every
//! sequence number exactly once.

use std::time::Duration;

use kandev_e2e::{
    Feed, Options, Stack, Svc, assert_every_chunk_once, deployments, is_turn_end, mock_task,
    replay, serde_json::Value,
};

const CHUNKS: usize = 40;

/// The agent's answer to `session/prompt` (with its `stopReason`).
fn ends_turn(frame: &Value) -> bool {
    is_turn_end(frame) || frame["event"]["raw"]["result"]["stopReason"].is_string()
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Kill(Svc),
    Nats,
    /// One node of a 3-node cluster SIGKILLed (streams in 3 copies).
    NatsNode,
}

/// A slow task while `fault` strikes mid-run.
async fn survives_on(fault: Fault, test: &str, options: Options) {
    let options = Options {
        nats_nodes: if matches!(fault, Fault::NatsNode) {
            3
        } else {
            1
        },
        ..options
    };
    // Killing `kandev` kills its agent manager too.
    let manager_restarted = matches!(fault, Fault::Kill(Svc::AgentManager)) || options.single;
    let (mut stack, api, board) = Stack::start_with_board(test, options, test).await;
    let slow = mock_task("Slow", &format!("scenario: slow {CHUNKS} 150"));
    let task = api.task(&board, slow).await;
    let mut feed = Feed::open(&api, &task).await;
    feed.wait_for_chunk(120, &format!("chunk 5/{CHUNKS}")).await;

    match fault {
        Fault::Kill(svc) => {
            stack.kill(svc);
            tokio::time::sleep(Duration::from_millis(800)).await;
            stack.spawn(svc).await;
        }
        Fault::Nats => stack.restart_nats().await,
        // The node every service lists first, and it stays down.
        Fault::NatsNode => {
            assert_streams_replicated(&stack, 3).await;
            stack.kill_nats_node(0);
        }
    }

    // The end of the turn: the agent's answer to `session/prompt`. After an
    // agent manager restart the re-read answer is not normalized to
    // `turn_end` (its method is unknown to the new client: see the agent
    // manager's README), so the wire message is what is checked.
    let end = feed.wait_for(240, "the prompt's answer", ends_turn).await;
    assert_eq!(
        end["event"]["raw"]["result"]["stopReason"], "end_turn",
        "{end}"
    );
    if !manager_restarted {
        assert!(is_turn_end(&end), "{end}");
    }
    let done = api.wait_state(&task, &["COMPLETED"], 120).await;
    assert_eq!(done["state"], "COMPLETED");
    feed.drain(Duration::from_millis(1500)).await;

    // Every chunk exactly once, in order.
    assert_every_chunk_once(&feed.frames, CHUNKS);
    let seen = feed.frames.len();
    let reconnects = feed.reconnects;
    feed.close().await;
    let stored = replay(&api, &task).await;
    assert_eq!(stored.len(), seen, "live and stored feeds differ");
    // Killing the gateway drops its streams (and the client reconnects with
    // ?after=); an orchestrator that dies does not: the gateway keeps
    // following the live feed on NATS and reads gaps from the orchestrator
    // once it is back.
    if matches!(fault, Fault::Kill(Svc::Gateway)) {
        assert!(reconnects >= 1, "the stream should have dropped");
    }
    assert!(stack.containers(Some(&task), false).await.is_empty());
    stack.stop().await;
}

/// Every Kandev stream is kept in `copies` copies, as the services were
/// told (`KANDEV_NATS_STREAM_REPLICAS`), with every copy current.
async fn assert_streams_replicated(stack: &Stack, copies: usize) {
    let js = stack.jetstream().await;
    for name in ["KANDEV_TASKS", "KANDEV_AGENTS", "KANDEV_ACP"] {
        let info = js
            .get_stream(name)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .clone();
        assert_eq!(info.config.num_replicas, copies, "{name}");
        let cluster = info.cluster.expect("a clustered stream");
        assert_eq!(cluster.replicas.len(), copies - 1, "{name}: {cluster:?}");
    }
}

deployments! {
    survives_on("fault_task_service", Fault::Kill(Svc::TaskService)),
    four: fault_task_service_killed_mid_run,
    sqlite: fault_task_service_killed_mid_run_on_sqlite,
}

deployments! {
    survives_on("fault_agent_manager", Fault::Kill(Svc::AgentManager)),
    four: fault_agent_manager_killed_mid_run,
    sqlite: fault_agent_manager_killed_mid_run_on_sqlite,
}

deployments! {
    survives_on("fault_orchestrator", Fault::Kill(Svc::Orchestrator)),
    four: fault_orchestrator_killed_mid_run,
    sqlite: fault_orchestrator_killed_mid_run_on_sqlite,
}

deployments! { survives_on("fault_gateway", Fault::Kill(Svc::Gateway)), four: fault_gateway_killed_mid_run }

deployments! { survives_on("fault_nats", Fault::Nats), four: fault_nats_restarted_mid_run }

deployments! {
    survives_on("fault_nats_node", Fault::NatsNode),
    four: fault_one_nats_cluster_node_killed_mid_run,
}

// The `kandev` binary (the four services in one process) SIGKILLed
// mid-run and started again: the run goes on and the feed stays exact.
deployments! {
    survives_on("fault_kandev", Fault::Kill(Svc::Gateway)),
    single: fault_kandev_killed_mid_run_single,
}
