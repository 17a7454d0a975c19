//! A task's repository after the task was taken: a launch whose local
//! repository went away (or lost its branch) is refused plainly, before
//! its clone or, when it goes while the clone is pending, by the clone,
//! and never as a failure worth retrying; a remote that does not answer
//! may answer later.

use std::path::Path;

use kandev_agent_manager::{
    AgentError, Settings,
    workspace::{self, Prepared, WorkspaceSource},
};
use kandev_proto::v1 as pb;
use uuid::Uuid;

use crate::helpers::{TaskWatch, git, spawn_app_with};

/// A repository `<root>/repos/r` on `main` with a branch `feature`, and
/// settings allowing `<root>/repos`.
fn repository(root: &Path) -> (String, Settings) {
    let repo = root.join("repos/r");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hi\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    git(&repo, &["branch", "feature"]);
    let settings = Settings::rooted_in(root);
    (repo.display().to_string(), settings)
}

fn source(url: &str, branch: &str) -> WorkspaceSource {
    WorkspaceSource::Git {
        url: url.into(),
        branch: branch.into(),
        title: "t".into(),
    }
}

/// Checked and left to clone: the pending clone.
async fn pending(settings: &Settings, url: &str, branch: &str) -> workspace::PendingClone {
    match workspace::prepare(settings, Uuid::new_v4(), source(url, branch)).await {
        Ok(Prepared::Clone(clone)) => clone,
        other => panic!("a clone to run, not {other:?}"),
    }
}

fn assert_refused(err: &AgentError, message: &str) {
    assert!(matches!(err, AgentError::InvalidArgument(_)), "{err:?}");
    assert!(!err.retryable(), "{err:?}");
    assert_eq!(err.to_string(), message);
}

#[tokio::test]
async fn a_repository_gone_after_the_task_was_taken_is_refused_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, settings) = repository(dir.path());
    let gone = format!("the repository {repo} does not exist");

    // Gone while its clone waits to run: the clone says so.
    let clone = pending(&settings, &repo, "main").await;
    std::fs::remove_dir_all(&repo).unwrap();
    let err = clone.run().await.unwrap_err();
    assert_refused(&err, &gone);

    // Gone before the launch: refused before any clone.
    let err = workspace::prepare(&settings, Uuid::new_v4(), source(&repo, "main"))
        .await
        .unwrap_err();
    assert_refused(&err, &gone);
}

#[tokio::test]
async fn a_branch_deleted_after_the_task_was_taken_is_refused_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, settings) = repository(dir.path());
    let missing = format!("the branch feature does not exist in the repository {repo}");

    let clone = pending(&settings, &format!("file://{repo}"), "feature").await;
    git(Path::new(&repo), &["branch", "-D", "feature"]);
    let err = clone.run().await.unwrap_err();
    assert_refused(&err, &missing);

    let err = workspace::prepare(&settings, Uuid::new_v4(), source(&repo, "feature"))
        .await
        .unwrap_err();
    assert_refused(&err, &missing);
}

#[tokio::test]
async fn a_remote_that_does_not_answer_may_be_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on, allowed as an internal host.
    let port = closed_port();
    let settings = Settings {
        workspaces_root: dir.path().join("workspaces").display().to_string(),
        allowed_repository_schemes: vec!["http".into()],
        allow_internal_repository_hosts: true,
        ..Settings::default()
    };
    let url = format!("http://127.0.0.1:{port}/r.git");
    let err = pending(&settings, &url, "main")
        .await
        .run()
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Unavailable(_)), "{err:?}");
    assert!(err.retryable());
    assert!(
        err.to_string().starts_with(&format!("cloning {url}")),
        "{err}"
    );
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Through the service: a launch answers `pending`, its clone fails in the
/// background, and `agent.failed` carries whether the run may be tried
/// again, typed (a remote that did not answer: yes).
#[tokio::test]
async fn a_clone_failing_after_the_launch_answered_says_whether_to_retry() {
    let mut app = spawn_app_with(|s| {
        s.allowed_repository_schemes = vec!["http".into()];
        s.allow_internal_repository_hosts = true;
    })
    .await;
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    let url = format!("http://127.0.0.1:{}/r.git", closed_port());
    let instance = app
        .client
        .launch_agent(pb::LaunchAgentRequest {
            task_id: task.to_string(),
            agent_type: "mock-agent".into(),
            workspace: Some(pb::launch_agent_request::Workspace::Repository(
                pb::GitWorkspace {
                    repository_url: url.clone(),
                    branch: "main".into(),
                    title: String::new(),
                },
            )),
            prompt: "echo hi".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(instance.status, pb::AgentStatus::Pending as i32);
    let failed = watch.until("agent.failed", 0).await;
    assert_eq!(failed["retryable"], true, "{failed}");
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.starts_with(&format!("cloning {url}"))),
        "{failed}"
    );
    app.stop().await;
}
