use std::time::Duration;

use kandev_agent_manager::{Application, domain::InstanceStatus};
use kandev_events::subjects;
use uuid::Uuid;

use crate::helpers::{
    TaskWatch, TestDb, assert_slow_stream_complete, containers_of, ensure_docker, git_repo,
    launch_then_die, manager_dir, mock_launch, settings,
};

/// A manager that dies without any cleanup (its runtime is dropped, as with
/// SIGKILL) leaves its agents running. The next start re-attaches to the
/// running one, whose stream continues where the stored `last_seq` left
/// off: after dropping re-published duplicates (same seq, same content),
/// every seq appears once and no chunk is lost. The agent that exited
/// meanwhile gets its final status. No container is left behind.
#[tokio::test]
async fn restart_resumes_running_agents_and_reconciles_exited_ones() {
    tokio::task::spawn_blocking(ensure_docker).await.unwrap();
    let db = TestDb::create().await;
    let dir = manager_dir();
    let settings = settings(&db, dir.path());
    let repo = git_repo(dir.path());
    let slow_task = Uuid::new_v4();
    let cancel_task = Uuid::new_v4();
    let done_task = Uuid::new_v4();
    let mut done_watch = TaskWatch::start(done_task).await;
    let mut watch = TaskWatch::start(slow_task).await;
    let mut cancel_watch = TaskWatch::start(cancel_task).await;

    let launches = [
        (slow_task, "slow 60 100"),
        (Uuid::new_v4(), "wait-cancel"),
        (cancel_task, "wait-cancel"),
        (done_task, "slow 20 100"),
    ]
    .map(|(task, prompt)| mock_launch(task, &repo, prompt));
    // Mid-turn: every agent runs, some chunks are out, and last_seq was
    // stored.
    let ids = launch_then_die(settings.clone(), launches.into(), 12);

    for id in &ids {
        assert_eq!(
            containers_of(&id.to_string()).len(),
            1,
            "the agent survives its manager"
        );
    }
    // The slow agents keep writing while no manager runs; one finishes its
    // turn and is then stopped, another is killed mid-turn.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let finished = containers_of(&ids[3].to_string()).remove(0);
    let status = std::process::Command::new("docker")
        .args(["stop", &finished])
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    let killed = containers_of(&ids[1].to_string()).remove(0);
    let status = std::process::Command::new("docker")
        .args(["kill", &killed])
        .output()
        .unwrap()
        .status;
    assert!(status.success());

    let app = Application::build(settings).await.unwrap();
    let manager = app.manager();
    let mut exited = manager.get_instance(ids[1]).await.unwrap();
    for _ in 0..200 {
        if exited.status.is_terminal() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        exited = manager.get_instance(ids[1]).await.unwrap();
    }
    assert_eq!(exited.status, InstanceStatus::Failed);
    assert_eq!(exited.exit_code, Some(137));
    assert!(
        exited.error.contains("while the manager was not running"),
        "{}",
        exited.error
    );

    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    let resumed = manager.get_instance(ids[0]).await.unwrap();
    assert_eq!(resumed.status, InstanceStatus::Completed);

    let last = assert_slow_stream_complete(&watch.events, 60);
    assert_eq!(resumed.last_seq, last as i64);
    // The turn that ended while no manager ran completes from its log.
    let done = done_watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    assert_slow_stream_complete(&done_watch.events, 20);
    assert_eq!(
        manager.get_instance(ids[3]).await.unwrap().status,
        InstanceStatus::Completed
    );

    // A re-attached turn can still be cancelled.
    assert!(manager.cancel(ids[2]).await.unwrap());
    let cancelled = cancel_watch.until("agent.completed", 0).await;
    assert_eq!(cancelled["stop_reason"], "cancelled");

    for id in &ids {
        assert!(
            containers_of(&id.to_string()).is_empty(),
            "orphan container left"
        );
    }
    drop(app);
    db.drop_db().await;
}

/// A manager killed in the middle of a flood, whose last published batch
/// was compressed, resumes after that batch: the restarted manager reads
/// the batch back (compressed or not) to learn where it stopped, then the
/// rest of the output from the container's log. Every chunk arrives once,
/// seqs have no gap.
#[tokio::test]
async fn a_manager_killed_mid_flood_resumes_after_its_last_compressed_batch() {
    tokio::task::spawn_blocking(ensure_docker).await.unwrap();
    let db = TestDb::create().await;
    let dir = manager_dir();
    let settings = settings(&db, dir.path());
    let repo = git_repo(dir.path());
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    const CHUNKS: u64 = 40_000;
    let launch = mock_launch(task, &repo, &format!("flood {CHUNKS} 200"));
    let ids = launch_then_die(settings.clone(), vec![launch], 5_000);

    // What the bus holds last for the task: a compressed batch.
    let bus = kandev_events::JetStreamBus::connect(crate::helpers::NATS_URL.as_str())
        .await
        .unwrap();
    let last = kandev_events::EventBus::last_message(&bus, &subjects::acp_message(&task))
        .await
        .unwrap()
        .expect("the flood published batches");
    assert!(
        kandev_events::pack::is_packed(&last),
        "the manager died after a compressed batch"
    );

    let app = Application::build(settings).await.unwrap();
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    assert!(watch.packed_batches > 0);

    let mut by_seq = std::collections::BTreeMap::new();
    for e in &watch.events {
        let seq = e["seq"].as_u64().unwrap();
        if let Some(seen) = by_seq.insert(seq, e["raw"].clone()) {
            assert_eq!(seen, e["raw"], "seq {seq} was reused for another event");
        }
    }
    let seqs: Vec<u64> = by_seq.keys().copied().collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "gap in seq"
    );
    // The restarted manager went on right after the last batch on the bus,
    // which it could read: nothing was published twice.
    assert_eq!(watch.events.len(), by_seq.len(), "events published again");
    let mut indexes: Vec<u64> = by_seq
        .values()
        .filter_map(|raw| raw["params"]["update"]["_meta"]["kandev/index"].as_u64())
        .collect();
    indexes.sort_unstable();
    assert_eq!(indexes, (0..CHUNKS).collect::<Vec<_>>(), "every chunk once");
    let resumed = app.manager().get_instance(ids[0]).await.unwrap();
    assert_eq!(resumed.last_seq, *seqs.last().unwrap() as i64);
    drop(app);
    db.drop_db().await;
}
