//! A follow-up to a task whose clone was removed after its push (what an
//! approval does by default): the agent manager clones the task's
//! repository again on the pushed branch, from what Kandev's own repository
//! of the task recorded, and the turn resumes the session there.

use kandev_proto::v1 as pb;
use uuid::Uuid;

use crate::helpers::{TaskWatch, TestApp, git, git_repo, spawn_app};

/// Delivers the task's work and pushes its branch.
async fn push(app: &mut TestApp, task: Uuid, message: &str) -> pb::Delivery {
    app.client
        .deliver_changes(pb::DeliverChangesRequest {
            task_id: task.to_string(),
            message: message.into(),
            push: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn a_follow_up_after_the_clone_was_removed_runs_in_a_clone_of_the_pushed_branch() {
    let mut app = spawn_app().await;
    let repo = git_repo(app.dir.path());
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    let instance = app
        .launch(task, "mock-agent", &repo, "code README.md")
        .await
        .unwrap();
    let first = watch.until("agent.completed", 0).await;
    let delivery = push(&mut app, task, "Edit the readme").await;
    app.client
        .remove_workspace(pb::RemoveWorkspaceRequest {
            task_id: task.to_string(),
            keep_delivered: true,
        })
        .await
        .unwrap();
    let workspace = app.path("workspaces").join(task.to_string());
    assert!(!workspace.exists());

    // Someone pushes to the task's branch meanwhile: the new clone has it.
    let source = std::path::Path::new(repo.trim_start_matches("file://"));
    let human = app.dir.path().join("human");
    git(
        app.dir.path(),
        &["clone", "-q", "-b", &delivery.branch, &repo, "human"],
    );
    std::fs::write(human.join("HUMAN.md"), "a fix by hand\n").unwrap();
    git(&human, &["add", "HUMAN.md"]);
    git(&human, &["commit", "-q", "-m", "by hand"]);
    git(&human, &["push", "-q", "origin", &delivery.branch]);

    app.client
        .send_prompt(pb::SendPromptRequest {
            instance_id: instance.id.clone(),
            prompt: "code README.md".into(),
        })
        .await
        .unwrap();
    let second = watch.until("agent.completed", 1).await;
    assert_eq!(first["acp_session_id"], second["acp_session_id"]);
    let readme = std::fs::read_to_string(workspace.join("README.md")).unwrap();
    assert!(
        readme.contains("Edited by kandev-mock-agent (turn 1).")
            && readme.contains("Edited by kandev-mock-agent (turn 2)."),
        "{readme}"
    );
    assert!(workspace.join("HUMAN.md").is_file());
    let head = std::fs::read_to_string(workspace.join(".git/HEAD")).unwrap();
    assert_eq!(head.trim(), format!("ref: refs/heads/{}", delivery.branch));

    // The task's Changes are the clone's again, still against the base the
    // task started from; the next delivery pushes on top of the branch.
    let changes = app.changes(task).await;
    assert!(!changes.clone_removed, "{changes:?}");
    assert_eq!(changes.base_branch, "main", "{changes:?}");
    let mut files: Vec<&str> = changes.files.iter().map(|f| f.path.as_str()).collect();
    files.sort_unstable();
    assert_eq!(files, ["HUMAN.md", "README.md"], "{changes:?}");
    let again = push(&mut app, task, "Turn 2").await;
    let parent = std::process::Command::new("git")
        .args(["-C"])
        .arg(source)
        .args(["rev-parse", &format!("{}~1", again.commit)])
        .output()
        .unwrap();
    let pushed_by_hand = std::process::Command::new("git")
        .args(["-C"])
        .arg(&human)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    assert_eq!(parent.stdout, pushed_by_hand.stdout);
}
