use std::time::Duration;

use kandev_agent_manager::{Application, domain::InstanceStatus};
use uuid::Uuid;

use crate::helpers::{
    TaskWatch, TestDb, assert_slow_stream_complete, containers_of, ensure_docker, git_repo,
    manager_dir, mock_launch, settings,
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

    let first = settings.clone();
    let ids = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let app = Application::build(first).await.unwrap();
            let manager = app.manager();
            let mut ids = vec![];
            for (task_id, prompt) in [
                (slow_task, "slow 60 100"),
                (Uuid::new_v4(), "wait-cancel"),
                (cancel_task, "wait-cancel"),
                (done_task, "slow 20 100"),
            ] {
                let instance = manager
                    .launch(mock_launch(task_id, &repo, prompt))
                    .await
                    .unwrap();
                ids.push(instance.id);
            }
            // Mid-turn: every agent runs, some chunks are out, and last_seq
            // was stored.
            for id in &ids[1..] {
                for _ in 0..200 {
                    if manager.get_instance(*id).await.unwrap().status == InstanceStatus::Running {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            for _ in 0..200 {
                let now = manager.get_instance(ids[0]).await.unwrap();
                if now.status == InstanceStatus::Running && now.last_seq >= 12 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            ids
        })
        // The runtime drops here: the manager dies mid-turn, no cleanup.
    })
    .join()
    .unwrap();

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
