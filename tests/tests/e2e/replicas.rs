//! Two orchestrators and two gateways on one Postgres and one NATS: one
//! orchestrator leads (consumes events, numbers the feed, schedules), the
//! other serves and stands by. A browser on the gateway that talks to the
//! standby sees the live feed the leader numbers; when the leader is
//! SIGKILLed mid-run the standby takes over: no task is launched twice,
//! queued tasks still start, and clients on both gateways keep an exact
//! feed.

use std::time::Duration;

use kandev_e2e::{
    Feed, Options, Stack, Svc, assert_every_chunk_once, instances, mock_task, replay,
};

const CHUNKS: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_orchestrator_takes_over_without_launching_twice() {
    let options = Options {
        max_concurrent: 2,
        ..Options::default()
    }
    .with(Svc::Orchestrator, "KANDEV_LEADER_POLL_MS", "200");
    let mut stack = Stack::start("replicas", options).await;
    stack.wait_log(Svc::Orchestrator, 0, "leading:", 30).await;
    let standby = stack.add_replica(Svc::Orchestrator, &[]).await;
    stack
        .wait_log(Svc::Orchestrator, standby, "standing by", 30)
        .await;
    // Gateway B talks to the standby only.
    let orchestrator_b = stack.replica_url(Svc::Orchestrator, standby);
    let gateway_b = stack
        .add_replica(Svc::Gateway, &[("KANDEV_ORCHESTRATOR_URL", orchestrator_b)])
        .await;
    let api_a = stack.admin().await;
    let api_b = stack.admin_at(gateway_b).await;

    // A task created and watched through gateway B, whose events the
    // leader (behind gateway A) handles: its frames arrive live.
    let board = api_b.board("replicas").await;
    let through_b = mock_task("Through B", "scenario: slow 5 50");
    let first = api_b.task(&board, through_b).await;
    let mut feed = Feed::open(&api_b, &first).await;
    feed.wait_for_chunk(120, "chunk 5/5").await;
    api_b.wait_state(&first, &["COMPLETED"], 120).await;
    feed.close().await;
    assert!(
        !stack
            .replica_log(Svc::Orchestrator, standby)
            .contains("leading:"),
        "the standby did not lead meanwhile"
    );

    // Four slow tasks, two at a time; each watched on both gateways.
    let slow = format!("scenario: slow {CHUNKS} 150");
    let tasks = api_a.mock_tasks(&board, 4, "slow", &slow).await;
    let mut feeds = Vec::new();
    for task in &tasks {
        feeds.push(Feed::open(&api_a, task).await);
        feeds.push(Feed::open(&api_b, task).await);
    }
    // Two run, two wait; mid-run the leader dies.
    feeds[0]
        .wait_for_chunk(120, &format!("chunk 5/{CHUNKS}"))
        .await;
    stack.kill(Svc::Orchestrator);
    stack
        .wait_log(Svc::Orchestrator, standby, "leading:", 30)
        .await;
    // Back as the standby, so gateway A reads the stored feed again.
    stack.spawn(Svc::Orchestrator).await;

    for task in &tasks {
        let done = api_b.wait_state(task, &["COMPLETED"], 300).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        let exec = api_a.execution(task).await;
        assert_eq!(exec.body["attempts"], 1, "launched once: {}", exec.body);
    }
    for mut feed in feeds {
        feed.drain(Duration::from_millis(1000)).await;
        assert_every_chunk_once(&feed.frames, CHUNKS);
        let seen = feed.frames.len();
        let task = feed.frames[0]["task_id"].as_str().unwrap().to_string();
        assert_eq!(
            instances(&feed.frames).len(),
            1,
            "one agent instance ran {task}"
        );
        feed.close().await;
        for api in [&api_a, &api_b] {
            assert_eq!(
                replay(api, &task).await.len(),
                seen,
                "live and stored differ"
            );
        }
    }
    assert!(
        stack.log(Svc::Orchestrator).matches("===== start").count() == 2
            && stack.log(Svc::Orchestrator).contains("standing by"),
        "the restarted orchestrator stands by"
    );
    assert!(stack.containers(None, false).await.is_empty());
    stack.stop().await;
}
