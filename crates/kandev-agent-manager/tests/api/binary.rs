use std::{
    path::Path,
    process::{Child, Stdio},
    time::Duration,
};

use kandev_common::trace::TracedChannel;
use kandev_proto::v1::{self as pb, agent_manager_client::AgentManagerClient};
use uuid::Uuid;

use crate::helpers::{
    TaskWatch, TestDb, assert_slow_stream_complete, containers_of, ensure_docker, free_port,
    git_repo,
};

#[test]
fn help_describes_the_service() {
    kandev_testkit::assert_help(
        env!("CARGO_BIN_EXE_kandev-agent-manager"),
        &["--config", "KANDEV_WORKSPACES_ROOT"],
    );
}

/// Starts the binary on `port`; returns it with a connected client.
async fn start(db: &TestDb, dir: &Path, port: u16) -> (Child, AgentManagerClient<TracedChannel>) {
    let mut child =
        kandev_testkit::service_command(env!("CARGO_BIN_EXE_kandev-agent-manager"), port, &db.url)
            .env("KANDEV_MANAGER_ID", &db.name)
            .env("KANDEV_PULL_IMAGES", "false")
            .env(
                "KANDEV_WORKSPACES_ROOT",
                dir.join("workspaces").display().to_string(),
            )
            .env(
                "KANDEV_CREDENTIALS_HOME",
                dir.join("home").display().to_string(),
            )
            .env("KANDEV_SEQ_FLUSH_MS", "100")
            .env(
                "KANDEV_ALLOWED_REPOSITORY_ROOTS",
                format!("[{:?}]", dir.join("repos").display().to_string()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
    for _ in 0..200 {
        if let Ok(client) = crate::helpers::client(format!("127.0.0.1:{port}")).await {
            return (child, client);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the agent manager binary did not start");
}

/// The real binary is SIGKILLed mid-turn and started again: the agent kept
/// running, the new process re-attaches, and the stream on NATS continues
/// with no lost or duplicated seq.
#[tokio::test]
async fn sigkill_mid_turn_then_restart_continues_the_stream() {
    tokio::task::spawn_blocking(ensure_docker).await.unwrap();
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().unwrap();
    for sub in ["workspaces", "home"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let repo = git_repo(dir.path());
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;

    let (mut first, mut client) = start(&db, dir.path(), free_port()).await;
    let instance = client
        .launch_agent(pb::LaunchAgentRequest {
            task_id: task.to_string(),
            agent_type: "mock-agent".into(),
            workspace: Some(pb::launch_agent_request::Workspace::Repository(
                pb::GitWorkspace {
                    repository_url: repo,
                    branch: "main".into(),
                    title: String::new(),
                },
            )),
            prompt: "slow 40 100".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let status = |client: &mut AgentManagerClient<TracedChannel>| {
        let mut client = client.clone();
        let id = instance.id.clone();
        async move {
            client
                .get_status(pb::GetStatusRequest { instance_id: id })
                .await
                .unwrap()
                .into_inner()
        }
    };
    for _ in 0..200 {
        if status(&mut client).await.last_seq >= 12 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    assert_eq!(containers_of(&instance.id).len(), 1, "the agent survives");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (mut second, mut client) = start(&db, dir.path(), free_port()).await;
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    let last = assert_slow_stream_complete(&watch.events, 40);
    let end = status(&mut client).await;
    assert_eq!(end.status, pb::AgentStatus::Completed as i32);
    assert_eq!(end.last_seq, last as i64);
    assert!(containers_of(&instance.id).is_empty());
    second.kill().unwrap();
    second.wait().unwrap();
    kandev_testkit::unmount(&dir.path().join("workspaces"));
    db.drop_db().await;
}
