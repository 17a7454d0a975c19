//! The whole cluster at once (docs/scaling.md): a 3-node NATS cluster with
//! streams in 3 copies, three agent managers each on a Docker engine of its
//! own, two orchestrators, two task services and two gateways (gateway B
//! talks to the second task service and the second orchestrator only).
//!
//! - 30 tasks across the three managers: placement respects each manager's
//!   capacity, each task runs once, every feed is exact;
//! - then, mid-run: a manager SIGKILLed with its engine, the leading
//!   orchestrator SIGKILLed, a NATS node SIGKILLed. The runs move, finish,
//!   nothing runs twice, and clients on both gateways (A's orchestrator is
//!   dead: its clients get the frames the other replica numbers) keep an
//!   exact feed; the manager comes back and leaves no container.

use std::{cell::RefCell, collections::BTreeSet, time::Duration};

use futures::future::join_all;
use kandev_e2e::{
    Feed, Options, Stack, Svc, assert_every_chunk_once, eventually, instances, mock_tasks_through,
    on_engine, own_engine, replay, serde_json::Value,
};
use kandev_testkit::OwnDocker;

const CAPACITY: usize = 3;
const CHUNKS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_loses_a_manager_an_orchestrator_and_a_nats_node_and_nothing_else() {
    let engines = [own_engine().await, own_engine().await, own_engine().await];
    let hosts: Vec<String> = engines.iter().map(|e| e.lock().unwrap().host()).collect();
    let options = Options {
        max_concurrent: 9,
        nats_nodes: 3,
        ..Options::default()
    }
    .with(Svc::Orchestrator, "KANDEV_MANAGER_GRACE_MS", "3000")
    .with(Svc::Orchestrator, "KANDEV_LEADER_POLL_MS", "200")
    .with(
        Svc::AgentManager,
        "KANDEV_MAX_INSTANCES",
        CAPACITY.to_string(),
    )
    .with(Svc::AgentManager, "KANDEV_ANNOUNCE_MS", "300")
    .with(Svc::AgentManager, "KANDEV_DOCKER_HOST", hosts[0].clone());
    let mut stack = Stack::start("cluster", options).await;
    let base = stack.manager_id().to_string();
    let ids = [base.clone(), format!("{base}-1"), format!("{base}-2")];
    let mut managers = vec![0];
    for i in 1..3 {
        let root = stack
            .workspace("x")
            .parent()
            .unwrap()
            .with_file_name(format!("workspaces-{i}"));
        std::fs::create_dir_all(&root).unwrap();
        managers.push(
            stack
                .add_replica(
                    Svc::AgentManager,
                    &[
                        ("KANDEV_MANAGER_ID", ids[i].clone()),
                        ("KANDEV_DOCKER_HOST", hosts[i].clone()),
                        ("KANDEV_WORKSPACES_ROOT", root.display().to_string()),
                    ],
                )
                .await,
        );
    }
    stack.wait_log(Svc::Orchestrator, 0, "leading:", 30).await;
    let orchestrator_b = stack.add_replica(Svc::Orchestrator, &[]).await;
    let task_service_b = stack.add_replica(Svc::TaskService, &[]).await;
    let (ts_url, orch_url) = (
        stack.replica_url(Svc::TaskService, task_service_b),
        stack.replica_url(Svc::Orchestrator, orchestrator_b),
    );
    let gateway_b = stack
        .add_replica(
            Svc::Gateway,
            &[
                ("KANDEV_TASK_SERVICE_URL", ts_url),
                ("KANDEV_ORCHESTRATOR_URL", orch_url),
            ],
        )
        .await;
    for replica in [0, orchestrator_b] {
        eventually(30, "each orchestrator hears the three managers", || async {
            (stack
                .replica_log(Svc::Orchestrator, replica)
                .matches("agent manager joined the pool")
                .count()
                == 3)
                .then_some(())
        })
        .await;
    }
    let apis = [stack.admin().await, stack.admin_at(gateway_b).await];
    let board = apis[0].board("cluster").await;

    // 30 tasks, created through both gateways; at most CAPACITY at once on
    // each manager.
    let tasks = mock_tasks_through(&apis, &board, 30, "spread", "scenario: slow 10 60").await;
    let used = RefCell::new(BTreeSet::new());
    apis[1]
        .wait_completed(&board, tasks.len(), 300, || async {
            for (id, host) in ids.iter().zip(&hosts) {
                let running = stack.containers_of(id, Some(host), true).await.len();
                assert!(running <= CAPACITY, "{running} runs at once on {id}");
                if running > 0 {
                    used.borrow_mut().insert(id.clone());
                }
            }
        })
        .await;
    let used = used.into_inner();
    assert_eq!(used.len(), 3, "every manager ran some: {used:?}");
    let replays = join_all(
        tasks
            .iter()
            .enumerate()
            .map(|(i, task)| replay(&apis[i % 2], task)),
    )
    .await;
    for (task, frames) in tasks.iter().zip(&replays) {
        assert_eq!(instances(frames).len(), 1, "{task} ran once");
        let e = apis[0].execution(task).await;
        assert_eq!(e.body["attempts"], 1, "{}", e.body);
    }

    // Six long runs, watched on both gateways; then the faults.
    let slow = format!("scenario: slow {CHUNKS} 100");
    let long = mock_tasks_through(&apis, &board, 6, "long", &slow).await;
    let mut feeds = Vec::new();
    for task in &long {
        for api in &apis {
            feeds.push(Feed::open(api, task).await);
        }
    }
    for feed in feeds.iter_mut() {
        feed.wait_for_chunk(120, &format!("chunk 3/{CHUNKS}")).await;
    }
    // The manager with the most long runs dies with its engine.
    let mut victim = (1, 0);
    for i in 1..3 {
        let running = stack
            .containers_of(&ids[i], Some(&hosts[i]), true)
            .await
            .len();
        if running > victim.1 {
            victim = (i, running);
        }
    }
    let (victim, victim_runs) = victim;
    assert!(victim_runs > 0, "a long run on manager 1 or 2");
    stack.kill_replica(Svc::AgentManager, managers[victim]);
    on_engine(&engines[victim], OwnDocker::kill).await;
    eventually(30, "its runs move", || async {
        (0..2)
            .any(|r| {
                stack
                    .replica_log(Svc::Orchestrator, r)
                    .contains("moving the run")
            })
            .then_some(())
    })
    .await;
    // The leading orchestrator dies; the other leads.
    stack.kill(Svc::Orchestrator);
    stack
        .wait_log(Svc::Orchestrator, orchestrator_b, "leading:", 30)
        .await;
    // A NATS node dies for good.
    stack.kill_nats_node(2);

    for task in &long {
        let done = apis[1].wait_state(task, &["COMPLETED"], 300).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
    }
    // Back as a standby, so gateway A reads stored frames again.
    stack.spawn(Svc::Orchestrator).await;
    let mut moved = BTreeSet::new();
    let last_chunk = format!("chunk {CHUNKS}/{CHUNKS}");
    let is_last = |f: &Value| {
        f["event"]["data"]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&last_chunk))
    };
    for mut feed in feeds {
        // Gateway A fills the gap its dead orchestrator left once the
        // restarted one answers.
        if !feed.frames.iter().any(is_last) {
            feed.wait_for(60, "the last chunk", is_last).await;
        }
        feed.drain(Duration::from_millis(500)).await;
        let task = feed.frames[0]["task_id"].as_str().unwrap().to_string();
        let ran = instances(&feed.frames);
        assert!(ran.len() <= 2, "{task}: {ran:?}");
        if ran.len() == 2 {
            moved.insert(task.clone());
        }
        // The last run is whole.
        let last = feed.frames.last().unwrap()["instance_id"].clone();
        let first_of_last = feed
            .frames
            .iter()
            .position(|f| f["instance_id"] == last)
            .unwrap();
        assert_every_chunk_once(&feed.frames[first_of_last..], CHUNKS);
        let e = apis[0].execution(&task).await;
        assert_eq!(e.body["attempts"], 1, "{}", e.body);
        let seen = feed.frames.len();
        feed.close().await;
        for api in &apis {
            assert_eq!(
                replay(api, &task).await.len(),
                seen,
                "{task}: live and stored"
            );
        }
    }
    assert_eq!(moved.len(), victim_runs, "the dead manager's runs moved");

    // The manager comes back with its engine: nothing of the old runs stays.
    on_engine(&engines[victim], OwnDocker::start_again).await;
    stack
        .spawn_replica(Svc::AgentManager, managers[victim])
        .await;
    eventually(60, "no container left on any engine", || async {
        let mut left = 0;
        for (id, host) in ids.iter().zip(&hosts) {
            left += stack.containers_of(id, Some(host), false).await.len();
        }
        (left == 0).then_some(())
    })
    .await;
    stack.stop().await;
    tokio::task::spawn_blocking(move || drop(engines))
        .await
        .unwrap();
}
