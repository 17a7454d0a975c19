use std::time::Duration;

use kandev_agent_manager::{
    Application, domain::InstanceStatus, manager::LaunchRequest, workspace::WorkspaceSource,
};
use uuid::Uuid;

use crate::helpers::{TestDb, containers_of, ensure_docker, git_repo, settings};

/// A manager that dies without any cleanup (its runtime is dropped) leaves
/// its containers running; the next start reconciles them: nothing is left
/// behind and every instance gets a final status.
#[tokio::test]
async fn restart_reconciles_containers_left_behind() {
    tokio::task::spawn_blocking(ensure_docker).await.unwrap();
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().unwrap();
    for sub in ["workspaces", "allowed", "home"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let settings = settings(&db, dir.path());
    let repo = git_repo(dir.path());

    let first = settings.clone();
    let ids = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let app = Application::build(first).await.unwrap();
            let manager = app.manager();
            let mut ids = vec![];
            for _ in 0..2 {
                let instance = manager
                    .launch(LaunchRequest {
                        task_id: Uuid::new_v4(),
                        agent_type: "mock-agent".into(),
                        workspace: WorkspaceSource::Git {
                            url: repo.clone(),
                            branch: "main".into(),
                        },
                        env: Default::default(),
                        prompt: "wait-cancel".into(),
                        resume_session_id: None,
                    })
                    .await
                    .unwrap();
                for _ in 0..200 {
                    let now = manager.get_instance(instance.id).await.unwrap();
                    if now.status == InstanceStatus::Running {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                ids.push(instance.id);
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
    // One agent exits while no manager runs.
    let killed = containers_of(&ids[1].to_string()).remove(0);
    let status = std::process::Command::new("docker")
        .args(["kill", &killed])
        .output()
        .unwrap()
        .status;
    assert!(status.success());

    let app = Application::build(settings).await.unwrap();
    let manager = app.manager();
    let running = manager.get_instance(ids[0]).await.unwrap();
    assert_eq!(running.status, InstanceStatus::Failed);
    assert!(
        running.error.contains("manager restarted"),
        "{}",
        running.error
    );
    let exited = manager.get_instance(ids[1]).await.unwrap();
    assert_eq!(exited.status, InstanceStatus::Failed);
    assert_eq!(exited.exit_code, Some(137));
    assert!(
        exited.error.contains("while the manager was not running"),
        "{}",
        exited.error
    );
    for id in &ids {
        assert!(
            containers_of(&id.to_string()).is_empty(),
            "orphan container left"
        );
    }
    drop(app);
    db.drop_db().await;
}
