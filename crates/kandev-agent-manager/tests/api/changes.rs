//! A task's changes and their delivery, read from Kandev's own repository
//! of the task after copying the agent's work tree.

use kandev_agent_manager::{
    changes::{self, ChangeStatus},
    delivery::{self, Author, Ship},
    domain::AgentError,
};
use kandev_proto::v1 as pb;
use uuid::Uuid;

use crate::{
    clones::{Clone, clone_of, git, write},
    helpers::{TaskWatch, TestApp, git_repo, launch_request, spawn_app},
};

fn ada() -> Author {
    Author {
        name: "Ada".into(),
        email: "ada@example.com".into(),
    }
}

/// The usual base: files kept, edited, removed and moved by the tests.
async fn base() -> Clone {
    let long: String = (0..40)
        .map(|i| format!("line {i} of a file that moves\n"))
        .collect();
    clone_of(
        &[
            ("keep.txt", b"same\n"),
            ("edit.txt", b"one\ntwo\nthree\n"),
            ("gone.txt", b"bye\n"),
            ("old/name.txt", long.as_bytes()),
        ],
        "Fix it",
    )
    .await
}

#[tokio::test]
async fn committed_and_uncommitted_changes_are_listed_against_the_base() {
    let clone = base().await;
    let work = clone.work();
    // Committed by the agent in its own clone...
    write(&work, "edit.txt", b"one\n2\nthree\nfour\n");
    std::fs::create_dir_all(work.join("new")).unwrap();
    std::fs::rename(work.join("old/name.txt"), work.join("new/name.txt")).unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "agent"]);
    // ...and left in the work tree, untracked files included.
    std::fs::remove_file(work.join("gone.txt")).unwrap();
    write(&work, "added.txt", b"hello\n");
    write(&work, "image.bin", &[0u8, 159, 146, 150, 0, 1, 2]);
    write(&work, ".gitignore", b"*.log\n");
    write(&work, "debug.log", b"ignored\n");

    let changes = changes::changes(&clone.task).await.unwrap();
    let short = &clone.task_id.simple().to_string()[24..];
    assert_eq!(changes.branch, format!("kandev/{short}-fix-it"));
    assert_eq!(changes.base_branch, "main");
    assert_eq!(
        changes.base_commit,
        clone.remote_git(&["rev-parse", "main"]).trim()
    );
    let by_path = |p: &str| {
        changes
            .files
            .iter()
            .find(|f| f.path == p)
            .unwrap_or_else(|| panic!("no {p} in {:?}", changes.files))
    };
    let edit = by_path("edit.txt");
    assert_eq!(
        (edit.status, edit.additions, edit.deletions),
        (ChangeStatus::Modified, 2, 1)
    );
    let moved = by_path("new/name.txt");
    assert_eq!(moved.status, ChangeStatus::Renamed);
    assert_eq!(moved.old_path.as_deref(), Some("old/name.txt"));
    assert_eq!(by_path("gone.txt").status, ChangeStatus::Deleted);
    assert_eq!(by_path("added.txt").status, ChangeStatus::Added);
    let binary = by_path("image.bin");
    assert!(binary.binary && binary.status == ChangeStatus::Added);
    assert!(
        changes
            .files
            .iter()
            .all(|f| f.path != "debug.log" && f.path != "keep.txt")
    );
    assert_eq!(changes.files.len(), 6, "{:?}", changes.files);

    let diff = changes::file_diff(&clone.task, "edit.txt", 1 << 20)
        .await
        .unwrap();
    assert!(!diff.truncated);
    assert!(diff.diff.contains("-two\n+2\n"), "{}", diff.diff);
    assert!(diff.diff.contains("+four\n"), "{}", diff.diff);
    let renamed = changes::file_diff(&clone.task, "new/name.txt", 1 << 20)
        .await
        .unwrap();
    assert!(
        renamed.diff.contains("rename from old/name.txt"),
        "{}",
        renamed.diff
    );
    let binary = changes::file_diff(&clone.task, "image.bin", 1 << 20)
        .await
        .unwrap();
    assert!(
        binary.binary && binary.diff.contains("Binary files"),
        "{}",
        binary.diff
    );
    let missing = changes::file_diff(&clone.task, "keep.txt", 1 << 20)
        .await
        .unwrap_err();
    assert!(matches!(missing, AgentError::NotFound(_)), "{missing}");
}

#[tokio::test]
async fn a_huge_diff_is_cut_with_a_marker() {
    let clone = base().await;
    let big: String = (0..20_000)
        .map(|i| format!("generated line {i}\n"))
        .collect();
    write(&clone.work(), "big.txt", big.as_bytes());
    let diff = changes::file_diff(&clone.task, "big.txt", 64 * 1024)
        .await
        .unwrap();
    assert!(diff.truncated);
    assert!(diff.diff.len() < 64 * 1024 + 100);
    assert!(
        diff.diff.ends_with("bytes shown]\n") && diff.diff.contains("[kandev: diff truncated"),
        "{}",
        &diff.diff[diff.diff.len() - 200..]
    );
}

#[tokio::test]
async fn the_agents_clone_is_its_own_and_closed_to_other_users() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let clone = base().await;
    let work = clone.work();
    let root = work.parent().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(root), 0o700, "the workspaces root");
    assert_eq!(mode(&work), 0o700, "the workspace");
    assert_eq!(mode(&root.join(".kandev")), 0o700, "Kandev's repositories");
    let (uid, gid) = clone.settings.agent_owner().unwrap();
    assert_ne!(uid, 0);
    let meta = std::fs::metadata(work.join("edit.txt")).unwrap();
    if nix::unistd::geteuid().is_root() {
        assert_eq!((meta.uid(), meta.gid()), (uid, gid));
    }
    // The agent sees its task's branch and the repository's URL, not
    // Kandev's paths.
    let head = std::fs::read_to_string(work.join(".git/HEAD")).unwrap();
    assert!(head.contains("refs/heads/kandev/"), "{head}");
    let config = std::fs::read_to_string(work.join(".git/config")).unwrap();
    assert!(
        config.contains("repos/remote.git") && !config.contains(".kandev"),
        "{config}"
    );
}

#[tokio::test]
async fn delivery_commits_and_pushes_the_task_branch() {
    let clone = clone_of(&[("README.md", b"# Demo\n")], "deliver").await;
    let work = clone.work();
    write(&work, "README.md", b"# Demo\n\nBetter.\n");
    let done = delivery::deliver(
        &clone.task,
        &clone.settings,
        "Improve the readme",
        &ada(),
        Ship::Push,
        None,
    )
    .await
    .unwrap();
    assert!(done.committed);
    assert!(done.branch.ends_with("-deliver"), "{}", done.branch);
    assert!(done.pushed_to.is_some());
    let pushed = clone.remote_git(&["log", "-1", "--format=%H %an %s", &done.branch]);
    assert_eq!(
        pushed.trim(),
        format!("{} Ada Improve the readme", done.commit)
    );
    assert_eq!(
        clone.remote_git(&["show", &format!("{}:README.md", done.branch)]),
        "# Demo\n\nBetter.\n"
    );

    // Nothing new: no commit, and the push is a no-op.
    let again = delivery::deliver(&clone.task, &clone.settings, "", &ada(), Ship::Push, None)
        .await
        .unwrap();
    assert!(!again.committed);
    assert_eq!(again.commit, done.commit);

    // Someone else moved the branch on the remote: the push is refused
    // and says why.
    let root = clone.root();
    git(
        root,
        &[
            "clone",
            "-q",
            "-b",
            &done.branch,
            "repos/remote.git",
            "other",
        ],
    );
    write(&root.join("other"), "OTHER.md", b"theirs\n");
    git(&root.join("other"), &["add", "-A"]);
    git(&root.join("other"), &["commit", "-q", "-m", "theirs"]);
    git(&root.join("other"), &["push", "-q", "origin", &done.branch]);
    write(&work, "MINE.md", b"mine\n");
    let refused = delivery::deliver(
        &clone.task,
        &clone.settings,
        "Mine",
        &ada(),
        Ship::Push,
        None,
    )
    .await
    .unwrap_err();
    let text = refused.to_string();
    assert!(
        text.contains("rejected") || text.contains("fetch first"),
        "{text}"
    );
    assert!(
        matches!(refused, AgentError::FailedPrecondition(_)),
        "{text}"
    );
}

#[tokio::test]
async fn merging_lands_on_the_remote_base_and_conflicts_are_refused() {
    let clone = clone_of(&[("README.md", b"# Demo\n\nline three\n")], "merge").await;
    write(&clone.work(), "NEW.md", b"new\n");
    let done = delivery::deliver(
        &clone.task,
        &clone.settings,
        "Add NEW",
        &ada(),
        Ship::Merge,
        None,
    )
    .await
    .unwrap();
    assert!(done.committed);
    assert_eq!(clone.remote_git(&["show", "main:NEW.md"]), "new\n");
    let log = clone.remote_git(&["log", "-1", "--format=%s%n%an", "main"]);
    assert!(
        log.starts_with(&format!("Merge {} into main\nAda", done.branch)),
        "{log}"
    );

    // The base moved on with a change to the same line: refused, and the
    // remote's base is left as it was.
    let clone = clone_of(&[("README.md", b"# Demo\n\nline three\n")], "merge").await;
    let root = clone.root();
    git(root, &["clone", "-q", "repos/remote.git", "other"]);
    write(&root.join("other"), "README.md", b"# Demo\n\ntheirs\n");
    git(&root.join("other"), &["commit", "-q", "-am", "theirs"]);
    git(&root.join("other"), &["push", "-q", "origin", "main"]);
    let before = clone.remote_git(&["rev-parse", "main"]);
    write(&clone.work(), "README.md", b"# Demo\n\nmine\n");
    let refused = delivery::deliver(
        &clone.task,
        &clone.settings,
        "Mine",
        &ada(),
        Ship::Merge,
        None,
    )
    .await
    .unwrap_err();
    let text = refused.to_string();
    assert!(
        text.contains("does not merge cleanly") && text.contains("README.md"),
        "{text}"
    );
    assert_eq!(clone.remote_git(&["rev-parse", "main"]), before);
}

#[tokio::test]
async fn removing_a_clone_removes_both_repositories() {
    let clone = base().await;
    let root = std::path::PathBuf::from(&clone.settings.workspaces_root);
    let freed = changes::remove_workspace(&root, clone.task_id)
        .await
        .unwrap();
    assert!(freed.is_some_and(|b| b > 0));
    assert!(!clone.work().exists());
    assert!(
        !root
            .join(".kandev")
            .join(clone.task_id.to_string())
            .exists()
    );
    let gone = changes::task_repo(&root, clone.task_id).await.unwrap_err();
    assert!(matches!(gone, AgentError::NotFound(_)), "{gone}");
}

/// The files of `branch` on the remote, sorted.
fn pushed_files(clone: &Clone, branch: &str) -> Vec<String> {
    let mut files: Vec<String> = clone
        .remote_git(&["ls-tree", "-r", "--name-only", branch])
        .lines()
        .map(str::to_string)
        .collect();
    files.sort();
    files
}

/// Neither what the repository's `.gitignore` ignores nor the agent type's
/// state paths are the work: Changes list neither, delivery pushes neither.
/// A file the base tracks under a state path stays tracked, and a
/// `.gitignore` of the agent's may un-ignore (git's precedence), but no
/// other file of the agent's decides.
#[tokio::test]
async fn ignored_files_and_state_paths_are_neither_listed_nor_delivered() {
    let clone = clone_of(
        &[
            ("README.md", b"# Demo\n"),
            (".gitignore", b"*.log\nbuild/\n"),
            (".claude/settings.json", b"{}\n"),
        ],
        "state",
    )
    .await;
    let root = std::path::PathBuf::from(&clone.settings.workspaces_root);
    let state = [
        ".kandev-mock/".to_string(),
        ".claude/settings.local.json".to_string(),
    ];
    changes::exclude_state(&root, clone.task_id, &state)
        .await
        .unwrap();
    let work = clone.work();
    write(&work, "README.md", b"# Demo\n\nBetter.\n");
    write(&work, ".claude/settings.json", b"{\"shared\": true}\n");
    write(&work, ".kandev-mock/sessions/sess_1.json", b"{}");
    write(&work, ".claude/settings.local.json", b"{\"allow\": []}\n");
    write(&work, "debug.log", b"noise\n");
    write(&work, "build/out.bin", b"\x00\x01");
    // What an agent could plant to widen or narrow what is left out:
    // configuration of its own clone, which Kandev never reads.
    write(&work, ".git/info/exclude", b"README.md\n");
    write(&work, "nested/.git", b"gitdir: /elsewhere\n");

    let listed = changes::changes(&clone.task).await.unwrap();
    let mut paths: Vec<&str> = listed.files.iter().map(|f| f.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, [".claude/settings.json", "README.md"], "{listed:?}");
    assert_eq!(listed.delivered, None);
    let hidden = changes::file_diff(&clone.task, ".kandev-mock/sessions/sess_1.json", 1 << 20)
        .await
        .unwrap_err();
    assert!(matches!(hidden, AgentError::NotFound(_)), "{hidden}");

    let done = delivery::deliver(
        &clone.task,
        &clone.settings,
        "Work",
        &ada(),
        Ship::Push,
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        pushed_files(&clone, &done.branch),
        [".claude/settings.json", ".gitignore", "README.md"]
    );
    assert_eq!(
        clone.remote_git(&["show", &format!("{}:.claude/settings.json", done.branch)]),
        "{\"shared\": true}\n"
    );
    // The work tree is left as the agent had it.
    assert!(work.join(".kandev-mock/sessions/sess_1.json").exists());
}

/// Declared state paths are kept in Kandev's own repository of the task,
/// added once, and only where the task has a clone.
#[tokio::test]
async fn state_paths_are_declared_in_kandevs_repository_only() {
    let clone = base().await;
    let root = std::path::PathBuf::from(&clone.settings.workspaces_root);
    for _ in 0..2 {
        changes::exclude_state(&root, clone.task_id, &[".kandev-mock/".to_string()])
            .await
            .unwrap();
    }
    let exclude =
        std::fs::read_to_string(clone.task.repo().git_dir().join("info/exclude")).unwrap();
    assert_eq!(exclude.matches(".kandev-mock/").count(), 1, "{exclude}");
    let agents =
        std::fs::read_to_string(clone.work().join(".git/info/exclude")).unwrap_or_default();
    assert!(!agents.contains(".kandev-mock/"), "{agents}");
    // No clone: nothing to declare, and nothing made.
    let other = uuid::Uuid::new_v4();
    changes::exclude_state(&root, other, &[".kandev-mock/".to_string()])
        .await
        .unwrap();
    assert!(!root.join(".kandev").join(other.to_string()).exists());
}

/// After an approval the clone may go, but Kandev's repository of the task
/// stays: the changes are then the delivered commit's, with the delivery;
/// nothing can be delivered again; a full removal takes the rest.
#[tokio::test]
async fn a_delivered_change_stays_readable_after_its_clone_is_removed() {
    let clone = base().await;
    let root = std::path::PathBuf::from(&clone.settings.workspaces_root);
    let work = clone.work();
    write(&work, "edit.txt", b"one\n2\nthree\n");
    write(&work, "added.txt", b"hello\n");
    // Not delivered yet: a removal keeping the delivery removes everything.
    let other = base().await;
    let other_root = std::path::PathBuf::from(&other.settings.workspaces_root);
    changes::remove_clone_keeping_delivery(&other_root, other.task_id)
        .await
        .unwrap();
    let none = changes::task_changes_repo(&other_root, other.task_id)
        .await
        .unwrap_err();
    assert!(matches!(none, AgentError::NotFound(_)), "{none}");

    let done = delivery::deliver(
        &clone.task,
        &clone.settings,
        "Deliver",
        &ada(),
        Ship::Push,
        None,
    )
    .await
    .unwrap();
    // Nothing changed since: the live changes are the delivered change.
    let live = changes::changes(&clone.task).await.unwrap();
    let delivered = live.delivered.clone().expect("the delivery is shown");
    assert_eq!(delivered.commit, done.commit);
    assert_eq!(delivered.branch, done.branch);
    assert_eq!(delivered.pushed_to, done.pushed_to);
    assert!(!live.clone_removed);

    let freed = changes::remove_clone_keeping_delivery(&root, clone.task_id)
        .await
        .unwrap();
    assert!(freed.is_some_and(|b| b > 0));
    assert!(!work.exists());
    let gone = changes::task_repo(&root, clone.task_id).await.unwrap_err();
    assert!(matches!(gone, AgentError::NotFound(_)), "{gone}");
    let kept = changes::task_changes_repo(&root, clone.task_id)
        .await
        .unwrap();
    assert!(kept.clone_removed());
    let after = changes::changes(&kept).await.unwrap();
    assert!(after.clone_removed);
    assert_eq!(after.delivered, Some(delivered));
    assert_eq!(after.head_commit, done.commit);
    assert_eq!(
        (after.files.clone(), after.base_commit.clone()),
        (live.files.clone(), live.base_commit.clone())
    );
    let diff = changes::file_diff(&kept, "edit.txt", 1 << 20)
        .await
        .unwrap();
    assert!(diff.diff.contains("-two\n+2\n"), "{}", diff.diff);
    let unchanged = changes::file_diff(&kept, "keep.txt", 1 << 20)
        .await
        .unwrap_err();
    assert!(matches!(unchanged, AgentError::NotFound(_)), "{unchanged}");
    let again = delivery::deliver(&kept, &clone.settings, "", &ada(), Ship::Push, None)
        .await
        .unwrap_err();
    assert!(
        matches!(again, AgentError::FailedPrecondition(_)),
        "{again}"
    );

    // The retention's removal takes the rest.
    assert!(
        changes::remove_workspace(&root, clone.task_id)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        !root
            .join(".kandev")
            .join(clone.task_id.to_string())
            .exists()
    );
    let none = changes::task_changes_repo(&root, clone.task_id)
        .await
        .unwrap_err();
    assert!(matches!(none, AgentError::NotFound(_)), "{none}");
}

/// Work after a delivery is not the delivered change any more.
#[tokio::test]
async fn new_work_after_a_delivery_is_not_shown_as_delivered() {
    let clone = clone_of(&[("README.md", b"# Demo\n")], "again").await;
    write(&clone.work(), "README.md", b"# Demo\n\nOne.\n");
    delivery::deliver(
        &clone.task,
        &clone.settings,
        "One",
        &ada(),
        Ship::Commit,
        None,
    )
    .await
    .unwrap();
    let shown = changes::changes(&clone.task).await.unwrap();
    let delivered = shown.delivered.expect("committed: shown as delivered");
    assert_eq!(delivered.pushed_to, None, "committed only");
    write(&clone.work(), "README.md", b"# Demo\n\nTwo.\n");
    let shown = changes::changes(&clone.task).await.unwrap();
    assert_eq!(shown.delivered, None);
}

async fn task_changes(app: &mut TestApp, task: Uuid) -> Result<pb::Changes, tonic::Status> {
    app.client
        .get_changes(pb::GetChangesRequest {
            task_id: task.to_string(),
        })
        .await
        .map(|r| r.into_inner())
}

fn paths(changes: &pb::Changes) -> Vec<&str> {
    changes.files.iter().map(|f| f.path.as_str()).collect()
}

/// A real run of the mock agent in Docker: its sessions stay in its home,
/// not in the workspace; with its state directory set in the workspace,
/// the seeded type's state paths leave it out of Changes and of the push;
/// and once the clone is removed after the delivery, the delivered change
/// is still served.
#[tokio::test]
async fn a_runs_own_state_is_not_its_work_and_the_delivery_outlives_the_clone() {
    let mut app = spawn_app().await;
    let repo = git_repo(app.dir.path());
    let plain = Uuid::new_v4();
    let mut watch = TaskWatch::start(plain).await;
    app.launch(plain, "mock-agent", &repo, "code README.md")
        .await
        .unwrap();
    watch.until("agent.completed", 0).await;
    let workspace = app.path("workspaces").join(plain.to_string());
    assert!(workspace.join("README.md").is_file());
    assert!(!workspace.join(".kandev-mock").exists(), "sessions go home");
    assert_eq!(
        paths(&task_changes(&mut app, plain).await.unwrap()),
        ["README.md"]
    );

    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    let request = pb::LaunchAgentRequest {
        env: [(
            "KANDEV_MOCK_STATE_DIR".to_string(),
            ".kandev-mock".to_string(),
        )]
        .into(),
        ..launch_request(task, "mock-agent", &repo, "code README.md")
    };
    app.client.launch_agent(request).await.unwrap();
    watch.until("agent.completed", 0).await;
    let workspace = app.path("workspaces").join(task.to_string());
    assert!(workspace.join(".kandev-mock/sessions").is_dir());
    assert_eq!(
        paths(&task_changes(&mut app, task).await.unwrap()),
        ["README.md"]
    );

    let delivery = app
        .client
        .deliver_changes(pb::DeliverChangesRequest {
            task_id: task.to_string(),
            message: "Edit the readme".into(),
            push: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!delivery.pushed_to.is_empty());
    let source = repo.trim_start_matches("file://");
    let listed = std::process::Command::new("git")
        .args([
            "-C",
            source,
            "ls-tree",
            "-r",
            "--name-only",
            &delivery.branch,
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "README.md\n");

    let removed = app
        .client
        .remove_workspace(pb::RemoveWorkspaceRequest {
            task_id: task.to_string(),
            keep_delivered: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(removed.removed);
    assert!(!workspace.exists());
    let after = task_changes(&mut app, task).await.unwrap();
    assert!(
        after.clone_removed && after.workspace_path.is_empty(),
        "{after:?}"
    );
    let delivered = after.delivered.clone().expect("the delivery");
    assert_eq!(
        (delivered.branch.as_str(), delivered.commit.as_str()),
        (delivery.branch.as_str(), delivery.commit.as_str())
    );
    assert_eq!(delivered.pushed_to, delivery.pushed_to);
    assert_eq!(paths(&after), ["README.md"]);
    assert!(after.disk_bytes > 0);
    let diff = app.file_diff(task, "README.md").await;
    assert!(
        diff.diff.contains("+Edited by kandev-mock-agent (turn 1)"),
        "{}",
        diff.diff
    );

    // The retention's removal takes the rest.
    app.client
        .remove_workspace(pb::RemoveWorkspaceRequest {
            task_id: task.to_string(),
            keep_delivered: false,
        })
        .await
        .unwrap();
    let gone = task_changes(&mut app, task).await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
}
