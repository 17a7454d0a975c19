//! A task's changes and their delivery, read from Kandev's own repository
//! of the task after copying the agent's work tree.

use kandev_agent_manager::{
    changes::{self, ChangeStatus},
    delivery::{self, Author, Ship},
    domain::AgentError,
};

use crate::clones::{Clone, clone_of, git, write};

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
