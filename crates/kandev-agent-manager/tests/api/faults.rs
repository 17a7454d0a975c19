use kandev_proto::v1 as pb;
use tonic::Code;
use uuid::Uuid;

use crate::helpers::{Launched, TaskWatch, containers_of, git_repo, spawn_app};

async fn only_instance(app: &mut crate::helpers::TestApp, task: Uuid) -> pb::AgentInstance {
    let mut list = app.instances_of(task).await;
    assert_eq!(list.len(), 1);
    list.remove(0)
}

#[tokio::test]
async fn crash_mid_turn_fails_with_the_exit_code() {
    let mut app = spawn_app().await;
    let (mut watch, instance) = app.launch_watched("mock-agent", "crash 3").await.split();
    let failed = watch.until("agent.failed", 0).await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("exited with code 3"),
        "{failed}"
    );
    assert_eq!(failed["exit_code"], 3);
    let status = app.status(&instance.id).await;
    assert_eq!(status.status, pb::AgentStatus::Failed as i32);
    assert_eq!(status.exit_code, Some(3));
    assert!(containers_of(&instance.id).is_empty());
    app.stop().await;
}

#[tokio::test]
async fn the_type_timeout_kills_the_container() {
    let mut app = spawn_app().await;
    app.mock_type("mock-quick", |t| t.timeout_seconds = 2).await;
    let (mut watch, instance) = app.launch_watched("mock-quick", "hang").await.split();
    let failed = watch.until("agent.failed", 0).await;
    assert_eq!(failed["error"], "timed out after 2 s");
    assert_eq!(
        app.status(&instance.id).await.status,
        pb::AgentStatus::Failed as i32
    );
    assert!(containers_of(&instance.id).is_empty());
    app.stop().await;
}

#[tokio::test]
async fn garbage_output_becomes_protocol_errors_and_the_turn_ends() {
    let mut app = spawn_app().await;
    let Launched { mut watch, .. } = app.launch_watched("mock-agent", "garbage").await;
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    let errors = watch
        .kinds()
        .iter()
        .filter(|k| *k == "protocol_error")
        .count();
    assert!(errors >= 5, "{:?}", watch.kinds());
    app.stop().await;
}

#[tokio::test]
async fn auth_required_names_the_credential() {
    let mut app = spawn_app().await;
    app.mock_type("mock-auth", |t| {
        t.required_env = vec!["KANDEV_MOCK_AUTH".into()];
    })
    .await;
    let Launched {
        mut watch,
        instance,
        ..
    } = app
        .launch_watched_with("mock-auth", "echo hi", |r| {
            r.env = [("KANDEV_MOCK_AUTH".to_string(), "agent".to_string())].into();
        })
        .await;
    let failed = watch.until("agent.failed", 0).await;
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("requires authentication"), "{error}");
    assert!(error.contains("KANDEV_MOCK_AUTH"), "{error}");
    assert!(containers_of(&instance.id).is_empty());
    app.stop().await;
}

#[tokio::test]
async fn an_agent_that_never_answers_initialize_fails_cleanly() {
    let mut app = spawn_app().await;
    let Launched {
        task,
        mut watch,
        instance,
        ..
    } = app
        .launch_quirky("mock-silent", "silent-initialize", "echo hi")
        .await;
    let failed = watch.until("agent.failed", 0).await;
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("did not answer initialize"), "{error}");
    let stored = only_instance(&mut app, task).await;
    assert_eq!(stored.status, pb::AgentStatus::Failed as i32);
    assert!(
        containers_of(&instance.id).is_empty(),
        "no orphan container"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_container_that_cannot_start_fails_cleanly() {
    let mut app = spawn_app().await;
    app.mock_type("mock-broken", |t| {
        t.command = vec!["/no/such/binary".into()];
    })
    .await;
    let (mut watch, instance) = app.launch_watched("mock-broken", "echo hi").await.split();
    let failed = watch.until("agent.failed", 0).await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("failed to start"),
        "{failed}"
    );
    assert!(containers_of(&instance.id).is_empty());
    app.stop().await;
}

#[tokio::test]
async fn launch_preparation_errors_fail_the_instance() {
    let mut app = spawn_app().await;
    let repo = git_repo(app.dir.path());

    // Unknown type.
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    let err = app
        .launch(task, "no-such-agent", &repo, "hi")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("no-such-agent"), "{err:?}");
    let failed = watch.until("agent.failed", 0).await;
    assert!(failed["error"].as_str().unwrap().contains("no-such-agent"));
    // A refusal: running again would meet it again.
    assert_eq!(failed["retryable"], false, "{failed}");
    assert_eq!(
        only_instance(&mut app, task).await.status,
        pb::AgentStatus::Failed as i32
    );

    // Missing required env: the message names the variable, never a value.
    let task = Uuid::new_v4();
    let err = app
        .launch(task, "claude-code", &repo, "hi")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("ANTHROPIC_API_KEY"), "{err:?}");
    let instance = only_instance(&mut app, task).await;
    assert!(instance.error.contains("ANTHROPIC_API_KEY"));

    // Missing image, pulling disabled.
    app.mock_type("mock-missing", |t| {
        t.image = "kandev/not-built:latest".into()
    })
    .await;
    let task = Uuid::new_v4();
    let err = app
        .launch(task, "mock-missing", &repo, "hi")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("kandev/not-built:latest"), "{err:?}");

    // Disabled type.
    app.mock_type("mock-off", |t| t.enabled = false).await;
    let err = app
        .launch(Uuid::new_v4(), "mock-off", &repo, "hi")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("disabled"));

    // A local repository that does not exist: refused before any clone,
    // plainly, as a failure that would repeat; nothing is left behind.
    // (A clone that fails in the background is below.)
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    let path = app.path("repos/no-such-repo");
    let missing = format!("file://{}", path.display());
    let err = app
        .launch(task, "mock-agent", &missing, "hi")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let said = format!("the repository {} does not exist", path.display());
    assert_eq!(err.message(), said);
    let failed = watch.until("agent.failed", 0).await;
    assert_eq!(failed["error"], said.as_str(), "{failed}");
    assert_eq!(failed["retryable"], false, "{failed}");
    let instance = only_instance(&mut app, task).await;
    assert_eq!(instance.status, pb::AgentStatus::Failed as i32);
    assert_eq!(instance.error, said);
    assert_no_workspace(&app, task);

    // Repositories the policy refuses: another user's workspace (a local
    // path outside the repository roots, plain or `file://`), loopback and
    // private hosts (a port-scan oracle), schemes not allowed. Nothing is
    // cloned, the instance fails saying why.
    let neighbour = git_repo(&app.path("workspaces"));
    for url in [
        neighbour.trim_start_matches("file://").to_string(),
        neighbour.clone(),
        "/etc".to_string(),
        "http://127.0.0.1:9/repo.git".to_string(),
        "https://127.0.0.1:9/repo.git".to_string(),
        "git@192.168.0.1:org/repo.git".to_string(),
        "git://203.0.114.1/repo.git".to_string(),
        "ext::sh -c touch% /tmp/pwned".to_string(),
    ] {
        let task = Uuid::new_v4();
        let err = app
            .launch(task, "mock-agent", &url, "hi")
            .await
            .unwrap_err();
        assert!(
            matches!(err.code(), Code::PermissionDenied | Code::InvalidArgument),
            "{url}: {err:?}"
        );
        assert_eq!(
            only_instance(&mut app, task).await.status,
            pb::AgentStatus::Failed as i32,
            "{url}"
        );
        assert_no_workspace(&app, task);
    }

    // Workspace outside the allowed roots: refused, nothing mounted.
    for path in [
        "/etc".to_string(),
        format!("{}/../..", app.path("allowed").display()),
    ] {
        let task = Uuid::new_v4();
        let err = app
            .client
            .launch_agent(pb::LaunchAgentRequest {
                task_id: task.to_string(),
                agent_type: "mock-agent".into(),
                workspace: Some(pb::launch_agent_request::Workspace::WorkspacePath(path)),
                prompt: "hi".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied);
        let instance = only_instance(&mut app, task).await;
        assert_eq!(instance.status, pb::AgentStatus::Failed as i32);
        assert!(instance.container_id.is_empty());
        assert!(containers_of(&instance.id).is_empty());
    }
    app.stop().await;
}

#[tokio::test]
async fn an_allowed_workspace_path_is_used_in_place() {
    let mut app = spawn_app().await;
    let ws = app.path("allowed").join("project");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.md"), "notes\n").unwrap();
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    app.client
        .launch_agent(pb::LaunchAgentRequest {
            task_id: task.to_string(),
            agent_type: "mock-agent".into(),
            workspace: Some(pb::launch_agent_request::Workspace::WorkspacePath(
                ws.display().to_string(),
            )),
            prompt: "code notes.md".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    watch.until("agent.completed", 0).await;
    let text = std::fs::read_to_string(ws.join("notes.md")).unwrap();
    assert!(text.contains("Edited by kandev-mock-agent"), "{text}");
    app.stop().await;
}

/// Neither the task's workspace nor any partial clone of it exists.
fn assert_no_workspace(app: &crate::helpers::TestApp, task: Uuid) {
    let root = app.path("workspaces");
    let leftovers: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(&task.to_string()))
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

/// A clone that hangs (a server that accepts and never answers) does not
/// hold the launch: it answers `pending` at once; the clone is killed with
/// its whole process group after the clone timeout, the instance fails
/// saying so, nothing partial is kept, and a relaunch clones afresh.
#[tokio::test]
async fn a_hanging_clone_is_bounded_and_never_reused() {
    use std::time::Duration;

    let mut app = crate::helpers::spawn_app_with(|s| {
        s.clone_timeout_secs = 2;
        s.allowed_repository_schemes = vec!["http".into()];
        s.allow_internal_repository_hosts = true;
    })
    .await;
    // Accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            sockets.push(socket);
        }
    });
    let url = format!("http://127.0.0.1:{port}/slow/repo.git");

    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    let launched = tokio::time::timeout(
        Duration::from_secs(5),
        app.launch(task, "mock-agent", &url, "hi"),
    )
    .await
    .expect("the launch answers before the clone ends")
    .unwrap();
    assert_eq!(launched.status, pb::AgentStatus::Pending as i32);
    // The clone's processes exist meanwhile.
    kandev_testkit::eventually(10, "git is cloning", || async {
        (!git_processes_for(port).is_empty()).then_some(())
    })
    .await;

    let failed = watch.until("agent.failed", 0).await;
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("timed out"), "{error}");
    // A remote that does not answer may answer later.
    assert_eq!(failed["retryable"], true, "{failed}");
    assert_no_workspace(&app, task);
    // git and its helpers (git-remote-http) are gone, not orphaned.
    kandev_testkit::eventually(10, "the clone's processes are gone", || async {
        git_processes_for(port).is_empty().then_some(())
    })
    .await;

    // A relaunch of the task tries again from scratch (and fails again the
    // same way), rather than starting on a broken partial clone.
    app.launch(task, "mock-agent", &url, "hi").await.unwrap();
    let again = watch.until("agent.failed", 1).await;
    assert!(again["error"].as_str().unwrap().contains("timed out"));
    assert_no_workspace(&app, task);
    held.abort();
    app.stop().await;
}

/// Processes whose command line names `127.0.0.1:<port>` (the clone's).
fn git_processes_for(port: u16) -> Vec<String> {
    let needle = format!("127.0.0.1:{port}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|cmd| cmd.contains(&needle) && cmd.contains("git"))
        .collect()
}
