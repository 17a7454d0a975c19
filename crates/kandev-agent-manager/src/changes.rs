//! A task's changes against its base commit: what the agent committed and
//! what it left in the work tree (untracked files included, ignored ones
//! not), as one list of files and one unified diff per file.
//!
//! The work tree is staged into a throwaway index (a copy of the
//! repository's, so unchanged files are not hashed again) and that index is
//! diffed against the base: the repository's own index and refs are never
//! touched. The base is recorded in the clone's configuration when its
//! branch is created ([`start_branch`]).

use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::{
    domain::{AgentError, Result},
    git::Repo,
};

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeStatus {
    Added,
    Modified,
    Deleted,
    Renamed,
    Copied,
    TypeChanged,
}

impl ChangeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeStatus::Added => "added",
            ChangeStatus::Modified => "modified",
            ChangeStatus::Deleted => "deleted",
            ChangeStatus::Renamed => "renamed",
            ChangeStatus::Copied => "copied",
            ChangeStatus::TypeChanged => "type_changed",
        }
    }

    fn from_letter(letter: char) -> Option<Self> {
        Some(match letter {
            'A' => ChangeStatus::Added,
            'M' => ChangeStatus::Modified,
            'D' => ChangeStatus::Deleted,
            'R' => ChangeStatus::Renamed,
            'C' => ChangeStatus::Copied,
            'T' => ChangeStatus::TypeChanged,
            _ => return None,
        })
    }
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: String,
    /// The path before a rename or copy.
    pub old_path: Option<String>,
    pub status: ChangeStatus,
    pub additions: u64,
    pub deletions: u64,
    pub binary: bool,
}

/// The task's changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The branch checked out (empty when detached).
    pub branch: String,
    pub base_branch: String,
    pub base_commit: String,
    pub head_commit: String,
    pub files: Vec<FileChange>,
}

/// The unified diff of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    pub path: String,
    pub diff: String,
    /// Cut at the size limit; `diff` ends with a line saying so.
    pub truncated: bool,
    pub binary: bool,
}

const BASE_COMMIT: &str = "kandev.baseCommit";
const BASE_BRANCH: &str = "kandev.baseBranch";

/// The branch checked out, or `None` when detached.
async fn current_branch(repo: &Repo) -> Option<String> {
    repo.text(["symbolic-ref", "--quiet", "--short", "HEAD"])
        .await
        .ok()
}

/// The commit `rev` names.
async fn commit_of(repo: &Repo, rev: &str) -> Result<String> {
    repo.text(["rev-parse", "--verify", &format!("{rev}^{{commit}}")])
        .await
}

/// `-c` options making `author` the committer and author of a commit.
fn author_config(author: &Author) -> [String; 4] {
    [
        "-c".into(),
        format!("user.name={}", author.name),
        "-c".into(),
        format!("user.email={}", author.email),
    ]
}

/// Pushes `refspec` to `url`; on refusal, why, in git's words with the
/// URL's credentials removed: the porcelain line of the refused ref
/// ("[rejected] (non-fast-forward)", "[remote rejected] (...)"), else git's
/// first fatal or error line.
async fn push_ref(
    repo: &Repo,
    url: &str,
    protocols: &[String],
    refspec: String,
) -> Result<std::result::Result<(), String>> {
    let mut args = crate::repository::protocol_args(protocols);
    args.extend([
        "push".into(),
        "--porcelain".into(),
        "--".into(),
        url.to_string(),
        refspec,
    ]);
    let output = repo.output(args).await?;
    if output.status.success() {
        return Ok(Ok(()));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let reason = stdout
        .lines()
        .find(|l| l.starts_with('!'))
        .and_then(|l| l.rsplit('\t').next())
        .map(str::to_string)
        .or_else(|| crate::git::failure_line(&stderr).map(str::to_string))
        .unwrap_or_else(|| "git push failed".into())
        .replace(url, &crate::workspace::redact_url(url));
    Ok(Err(reason))
}

/// Puts a fresh clone on its own branch `work_branch`, started from what
/// was checked out, and records that commit and branch as the base.
pub async fn start_branch(repo: &Repo, work_branch: &str) -> Result<()> {
    repo.run(["check-ref-format", "--branch", work_branch], None)
        .await
        .map_err(|_| {
            AgentError::InvalidArgument(format!("{work_branch:?} is not a branch name"))
        })?;
    let base_branch = current_branch(repo).await.unwrap_or_default();
    let base_commit = commit_of(repo, "HEAD").await?;
    repo.run(["checkout", "--quiet", "-b", work_branch], None)
        .await?;
    repo.run(["config", BASE_COMMIT, &base_commit], None)
        .await?;
    repo.run(["config", BASE_BRANCH, &base_branch], None)
        .await?;
    Ok(())
}

/// A throwaway index file, removed when dropped.
struct ScratchIndex(PathBuf);

impl Drop for ScratchIndex {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Stages the whole work tree into a scratch index.
async fn stage_all(repo: &Repo) -> Result<ScratchIndex> {
    let scratch = ScratchIndex(
        std::env::temp_dir().join(format!("kandev-index-{}", Uuid::new_v4().simple())),
    );
    let index = repo.work_tree().join(".git").join("index");
    let copied = std::fs::symlink_metadata(&index).is_ok_and(|m| m.is_file())
        && std::fs::copy(&index, &scratch.0).is_ok();
    if !copied {
        repo.run(["read-tree", "HEAD"], Some(&scratch.0)).await?;
    }
    repo.run(["add", "--all", "--", "."], Some(&scratch.0))
        .await?;
    Ok(scratch)
}

async fn base_of(repo: &Repo) -> Result<(String, String)> {
    let commit = repo
        .text(["config", "--get", BASE_COMMIT])
        .await
        .map_err(|_| {
            AgentError::FailedPrecondition(
                "the workspace has no recorded base commit (cloned before task branches)".into(),
            )
        })?;
    let branch = repo
        .text(["config", "--get", BASE_BRANCH])
        .await
        .unwrap_or_default();
    Ok((commit, branch))
}

const DIFF: &[&str] = &[
    "diff",
    "--cached",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--find-renames",
];

/// The files changed since the base, committed or not.
pub async fn changes(repo: &Repo) -> Result<Changes> {
    let (base_commit, base_branch) = base_of(repo).await?;
    let index = stage_all(repo).await?;
    let files = staged_changes(repo, &base_commit, &index).await?;
    let branch = current_branch(repo).await.unwrap_or_default();
    let head_commit = commit_of(repo, "HEAD").await?;
    Ok(Changes {
        branch,
        base_branch,
        base_commit,
        head_commit,
        files,
    })
}

/// The files of `index` (the staged work tree) that differ from the base.
async fn staged_changes(
    repo: &Repo,
    base_commit: &str,
    index: &ScratchIndex,
) -> Result<Vec<FileChange>> {
    let diff = |extra: &'static str| {
        let mut args: Vec<&str> = DIFF.to_vec();
        args.extend([extra, "-z", base_commit, "--"]);
        repo.run(args, Some(&index.0))
    };
    let names = diff("--name-status").await?.stdout;
    let stats = diff("--numstat").await?.stdout;
    let mut files = parse_name_status(&String::from_utf8_lossy(&names))?;
    for (path, added, deleted) in parse_numstat(&String::from_utf8_lossy(&stats)) {
        if let Some(file) = files.iter_mut().find(|f| f.path == path) {
            match (added, deleted) {
                (Some(a), Some(d)) => (file.additions, file.deletions) = (a, d),
                _ => file.binary = true,
            }
        }
    }
    Ok(files)
}

/// The unified diff of the changed file `path`, cut at `max_bytes`.
pub async fn file_diff(repo: &Repo, path: &str, max_bytes: usize) -> Result<FileDiff> {
    let (base_commit, _) = base_of(repo).await?;
    let index = stage_all(repo).await?;
    let files = staged_changes(repo, &base_commit, &index).await?;
    let file = files
        .iter()
        .find(|f| f.path == path)
        .ok_or_else(|| AgentError::NotFound(format!("a change to {path}")))?;
    let mut args: Vec<&str> = DIFF.to_vec();
    args.extend([base_commit.as_str(), "--"]);
    if let Some(old) = &file.old_path {
        args.push(old);
    }
    args.push(&file.path);
    let output = repo.run(args, Some(&index.0)).await?.stdout;
    let (diff, truncated) = bounded(&output, max_bytes);
    Ok(FileDiff {
        path: file.path.clone(),
        diff,
        truncated,
        binary: file.binary,
    })
}

/// `output` as text, cut at the last line that fits in `max_bytes`, with a
/// closing line saying how much was left out.
fn bounded(output: &[u8], max_bytes: usize) -> (String, bool) {
    if output.len() <= max_bytes {
        return (String::from_utf8_lossy(output).into_owned(), false);
    }
    let cut = output[..max_bytes]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let mut text = String::from_utf8_lossy(&output[..cut]).into_owned();
    text.push_str(&format!(
        "[kandev: diff truncated: {} of {} bytes shown]\n",
        cut,
        output.len()
    ));
    (text, true)
}

/// Parses `--name-status -z`: `status\0path\0`, or `Rnn\0old\0new\0`.
fn parse_name_status(text: &str) -> Result<Vec<FileChange>> {
    let mut fields = text.split('\0').filter(|f| !f.is_empty());
    let mut files = Vec::new();
    while let Some(status) = fields.next() {
        let letter = status.chars().next().unwrap_or('?');
        let status = ChangeStatus::from_letter(letter)
            .ok_or_else(|| AgentError::Internal(format!("unknown git status {status:?}")))?;
        let first = fields
            .next()
            .ok_or_else(|| AgentError::Internal("truncated git status".into()))?;
        let (old_path, path) = if matches!(status, ChangeStatus::Renamed | ChangeStatus::Copied) {
            let new = fields
                .next()
                .ok_or_else(|| AgentError::Internal("truncated git rename".into()))?;
            (Some(first.to_string()), new.to_string())
        } else {
            (None, first.to_string())
        };
        files.push(FileChange {
            path,
            old_path,
            status,
            additions: 0,
            deletions: 0,
            binary: false,
        });
    }
    Ok(files)
}

/// Parses `--numstat -z`: `added\tdeleted\tpath\0`, or for a rename
/// `added\tdeleted\t\0old\0new\0`; `-` counts mean binary.
fn parse_numstat(text: &str) -> Vec<(String, Option<u64>, Option<u64>)> {
    let mut out = Vec::new();
    let mut fields = text.split('\0');
    while let Some(record) = fields.next() {
        let mut parts = record.splitn(3, '\t');
        let (Some(added), Some(deleted), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = if path.is_empty() {
            let _old = fields.next();
            fields.next().unwrap_or_default().to_string()
        } else {
            path.to_string()
        };
        out.push((path, added.parse().ok(), deleted.parse().ok()));
    }
    out
}

/// What [`deliver`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub branch: String,
    /// The branch the task's branch started from.
    pub base_branch: String,
    /// The branch's commit after delivery.
    pub commit: String,
    /// Whether uncommitted work was committed.
    pub committed: bool,
    /// The remote pushed to (credentials removed), when pushed.
    pub pushed_to: Option<String>,
}

/// How far [`deliver`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ship {
    /// Commit on the task's branch.
    Commit,
    /// Commit, and push the task's branch.
    Push,
    /// Commit, push the task's branch, and merge it into the base branch on
    /// the remote (for repositories without a forge): the merge is made
    /// without touching the clone's files, and refused on a conflict.
    Merge,
}

/// Who commits: the user who delivers.
#[derive(Debug, Clone)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// Commits the work tree to the task's branch (when anything changed) and,
/// with `push`, pushes the branch to the clone's origin: the URL is checked
/// against the repository policy again (the agent could have changed it),
/// and git is told that URL, never a configured push URL.
pub async fn deliver(
    repo: &Repo,
    settings: &crate::config::Settings,
    message: &str,
    author: &Author,
    how: Ship,
    push_auth: Option<&str>,
) -> Result<Delivery> {
    let push = how != Ship::Commit;
    let branch = current_branch(repo)
        .await
        .ok_or_else(|| AgentError::FailedPrecondition("the clone is not on a branch".into()))?;
    let (_, base_branch) = base_of(repo).await?;
    if branch == base_branch {
        return Err(AgentError::FailedPrecondition(format!(
            "the clone is on its base branch {branch}, not the task's own"
        )));
    }
    repo.run(["add", "--all", "--", "."], None).await?;
    let staged = repo
        .run_status(["diff", "--cached", "--quiet", "--no-ext-diff"])
        .await?;
    let committed = !staged;
    if committed {
        let message = if message.trim().is_empty() {
            "Changes made by the agent"
        } else {
            message
        };
        let mut args = author_config(author).to_vec();
        args.extend([
            "-c".to_string(),
            "commit.gpgSign=false".to_string(),
            "commit".to_string(),
            "--quiet".to_string(),
            "--no-verify".to_string(),
            "--message".to_string(),
            message.to_string(),
        ]);
        repo.run(args, None).await?;
    }
    let commit = commit_of(repo, "HEAD").await?;
    let mut pushed_to = None;
    if push {
        let url = repo
            .text(["config", "--get", "remote.origin.url"])
            .await
            .map_err(|_| {
                AgentError::FailedPrecondition("the clone has no origin to push to".into())
            })?;
        let protocols = crate::repository::check(settings, &url).await?;
        let pusher = repo.with_env(push_env(settings, &url, push_auth));
        let repo = &pusher;
        let refspec = format!("refs/heads/{branch}:refs/heads/{branch}");
        if let Err(reason) = push_ref(repo, &url, &protocols, refspec).await? {
            return Err(AgentError::FailedPrecondition(format!(
                "pushing {branch} to {} was refused: {reason}",
                crate::workspace::redact_url(&url),
            )));
        }
        pushed_to = Some(crate::workspace::redact_url(&url));
        if how == Ship::Merge {
            merge_into_base(repo, &url, &protocols, &branch, &base_branch, author).await?;
        }
    }
    Ok(Delivery {
        branch,
        base_branch,
        commit,
        committed,
        pushed_to,
    })
}

/// The credentials a push uses: over http(s), a token from configuration
/// (`user:token`, sent as basic auth) or else the operator's stored
/// credentials (`.git-credentials`); over ssh, the keys and known hosts of
/// `credentials_home` (the same files agents get read-only).
fn push_env(
    settings: &crate::config::Settings,
    url: &str,
    push_auth: Option<&str>,
) -> Vec<(String, String)> {
    use base64::Engine as _;
    let mut env = Vec::new();
    let home = Path::new(&settings.credentials_home);
    if !settings.credentials_home.is_empty() {
        env.push(("HOME".to_string(), settings.credentials_home.clone()));
    }
    let http = url.starts_with("https://") || url.starts_with("http://");
    let mut config: Vec<(String, String)> = Vec::new();
    match push_auth.filter(|a| !a.is_empty()) {
        Some(auth) if http => {
            let basic = base64::engine::general_purpose::STANDARD.encode(auth);
            config.push((
                "http.extraHeader".into(),
                format!("Authorization: Basic {basic}"),
            ));
        }
        _ if http && home.join(".git-credentials").is_file() => {
            config.push((
                "credential.helper".into(),
                format!("store --file={}", home.join(".git-credentials").display()),
            ));
        }
        _ => {}
    }
    // Through the environment, not the command line: other users can read
    // a process's arguments.
    if !config.is_empty() {
        env.push(("GIT_CONFIG_COUNT".into(), config.len().to_string()));
        for (i, (key, value)) in config.into_iter().enumerate() {
            env.push((format!("GIT_CONFIG_KEY_{i}"), key));
            env.push((format!("GIT_CONFIG_VALUE_{i}"), value));
        }
    }
    env
}

/// Merges `branch` into the remote's `base` (a merge commit made with
/// `merge-tree`, so the work tree is left alone) and pushes the base. A
/// conflict is refused with the files that conflict; a base that moved
/// meanwhile makes the push fail without forcing.
async fn merge_into_base(
    repo: &Repo,
    url: &str,
    protocols: &[String],
    branch: &str,
    base: &str,
    author: &Author,
) -> Result<()> {
    if base.is_empty() {
        return Err(AgentError::FailedPrecondition(
            "the clone has no recorded base branch to merge into".into(),
        ));
    }
    let redacted = crate::workspace::redact_url(url);
    let mut fetch = crate::repository::protocol_args(protocols);
    fetch.extend([
        "fetch".into(),
        "--quiet".into(),
        "--".into(),
        url.to_string(),
        format!("refs/heads/{base}"),
    ]);
    repo.run(fetch, None).await.map_err(|e| {
        AgentError::FailedPrecondition(format!("cannot fetch {base} from {redacted}: {e}"))
    })?;
    let base_commit = commit_of(repo, "FETCH_HEAD").await?;
    let merged = repo
        .output([
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            &base_commit,
            branch,
        ])
        .await?;
    let out = String::from_utf8_lossy(&merged.stdout);
    let mut lines = out.lines();
    let tree = lines.next().unwrap_or_default().trim().to_string();
    match merged.status.code() {
        Some(0) => {}
        Some(1) => {
            let files: Vec<&str> = lines.filter(|l| !l.is_empty()).take(20).collect();
            return Err(AgentError::FailedPrecondition(format!(
                "{branch} does not merge cleanly into {base}: conflicts in {}",
                files.join(", ")
            )));
        }
        _ => {
            return Err(AgentError::FailedPrecondition(format!(
                "git merge-tree: {}",
                String::from_utf8_lossy(&merged.stderr).trim()
            )));
        }
    }
    let mut args = author_config(author).to_vec();
    args.extend([
        "commit-tree".to_string(),
        tree,
        "-p".to_string(),
        base_commit,
        "-p".to_string(),
        branch.to_string(),
        "-m".to_string(),
        format!("Merge {branch} into {base}"),
    ]);
    let commit = repo.run(args, None).await?;
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
    if let Err(reason) =
        push_ref(repo, url, protocols, format!("{commit}:refs/heads/{base}")).await?
    {
        return Err(AgentError::FailedPrecondition(format!(
            "pushing the merge into {base} to {redacted} was refused: {reason}"
        )));
    }
    Ok(())
}

/// Bytes used by the files under `dir` (symlinks not followed).
pub fn disk_usage(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total = total.saturating_add(meta.len());
            }
        }
    }
    total
}

/// Removes the clone of `task_id` under `workspaces_root`; the bytes freed,
/// or `None` when there was none.
pub async fn remove_workspace(workspaces_root: &Path, task_id: Uuid) -> Result<Option<u64>> {
    let dir = workspaces_root.join(task_id.to_string());
    tokio::task::spawn_blocking(move || {
        if std::fs::symlink_metadata(&dir).is_err() {
            return Ok(None);
        }
        let bytes = disk_usage(&dir);
        std::fs::remove_dir_all(&dir)
            .map_err(|e| AgentError::Internal(format!("cannot remove {}: {e}", dir.display())))?;
        Ok(Some(bytes))
    })
    .await
    .map_err(|e| AgentError::Internal(format!("removing a workspace: {e}")))?
}

/// The largest diff of one file returned whole.
pub const MAX_DIFF_BYTES: usize = 512 * 1024;

/// The clone of `task_id` under `workspaces_root`, checked for running git.
pub async fn task_repo(workspaces_root: &Path, task_id: Uuid) -> Result<Repo> {
    let dir = workspaces_root.join(task_id.to_string());
    if !dir.join(".git").exists() {
        return Err(AgentError::NotFound(format!(
            "a cloned workspace of task {task_id}"
        )));
    }
    Repo::open(&dir).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@e",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    fn write(dir: &Path, path: &str, content: &[u8]) {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// A repository with a first commit on `main`, on the task's branch.
    async fn cloned() -> (tempfile::TempDir, Repo) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q", "-b", "main"]);
        write(root, "keep.txt", b"same\n");
        write(root, "edit.txt", b"one\ntwo\nthree\n");
        write(root, "gone.txt", b"bye\n");
        let long: String = (0..40)
            .map(|i| format!("line {i} of a file that moves\n"))
            .collect();
        write(root, "old/name.txt", long.as_bytes());
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "base"]);
        let repo = Repo::open(root).await.unwrap();
        start_branch(&repo, "kandev/1a2b3c4d-fix").await.unwrap();
        (dir, repo)
    }

    #[tokio::test]
    async fn committed_and_uncommitted_changes_are_listed_against_the_base() {
        let (dir, repo) = cloned().await;
        let root = dir.path();
        // Committed on the task's branch...
        write(root, "edit.txt", b"one\n2\nthree\nfour\n");
        std::fs::create_dir_all(root.join("new")).unwrap();
        std::fs::rename(root.join("old/name.txt"), root.join("new/name.txt")).unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "agent"]);
        // ...and left in the work tree, untracked files included.
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        write(root, "added.txt", b"hello\n");
        write(root, "image.bin", &[0u8, 159, 146, 150, 0, 1, 2]);
        write(root, ".gitignore", b"*.log\n");
        write(root, "debug.log", b"ignored\n");

        let changes = changes(&repo).await.unwrap();
        assert_eq!(changes.branch, "kandev/1a2b3c4d-fix");
        assert_eq!(changes.base_branch, "main");
        assert_ne!(changes.base_commit, changes.head_commit);
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

        // Nothing of the repository's own state moved.
        let status = repo.text(["status", "--porcelain"]).await.unwrap();
        assert!(status.contains("?? added.txt"), "{status}");

        let diff = file_diff(&repo, "edit.txt", 1 << 20).await.unwrap();
        assert!(!diff.truncated);
        assert!(diff.diff.contains("-two\n+2\n"), "{}", diff.diff);
        assert!(diff.diff.contains("+four\n"), "{}", diff.diff);
        let renamed = file_diff(&repo, "new/name.txt", 1 << 20).await.unwrap();
        assert!(
            renamed.diff.contains("rename from old/name.txt"),
            "{}",
            renamed.diff
        );
        let binary = file_diff(&repo, "image.bin", 1 << 20).await.unwrap();
        assert!(
            binary.binary && binary.diff.contains("Binary files"),
            "{}",
            binary.diff
        );
        let missing = file_diff(&repo, "keep.txt", 1 << 20).await.unwrap_err();
        assert!(matches!(missing, AgentError::NotFound(_)), "{missing}");
    }

    #[tokio::test]
    async fn a_huge_diff_is_cut_with_a_marker() {
        let (dir, repo) = cloned().await;
        let big: String = (0..20_000)
            .map(|i| format!("generated line {i}\n"))
            .collect();
        write(dir.path(), "big.txt", big.as_bytes());
        let diff = file_diff(&repo, "big.txt", 64 * 1024).await.unwrap();
        assert!(diff.truncated);
        assert!(diff.diff.len() < 64 * 1024 + 100);
        assert!(
            diff.diff.ends_with("bytes shown]\n") && diff.diff.contains("[kandev: diff truncated"),
            "{}",
            &diff.diff[diff.diff.len() - 200..]
        );
    }

    #[tokio::test]
    async fn delivery_commits_and_pushes_the_task_branch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let src = root.join("src");
        std::fs::create_dir_all(&src).unwrap();
        git(&src, &["init", "-q", "-b", "main"]);
        write(&src, "README.md", b"# Demo\n");
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-q", "-m", "base"]);
        git(root, &["clone", "-q", "--bare", "src", "remote.git"]);
        git(root, &["clone", "-q", "remote.git", "work"]);
        let work = root.join("work");
        let repo = Repo::open(&work).await.unwrap();
        start_branch(&repo, "kandev/1a2b3c4d-deliver")
            .await
            .unwrap();
        let settings = crate::config::Settings {
            allowed_repository_roots: vec![root.display().to_string()],
            ..Default::default()
        };
        let author = Author {
            name: "Ada".into(),
            email: "ada@example.com".into(),
        };

        write(&work, "README.md", b"# Demo\n\nBetter.\n");
        let done = deliver(
            &repo,
            &settings,
            "Improve the readme",
            &author,
            Ship::Push,
            None,
        )
        .await
        .unwrap();
        assert!(done.committed);
        assert_eq!(done.branch, "kandev/1a2b3c4d-deliver");
        assert!(done.pushed_to.is_some());
        let remote = Repo::open(&root.join("remote.git")).await;
        assert!(
            remote.is_err(),
            "a bare repository has no work tree to open"
        );
        let pushed = std::process::Command::new("git")
            .args([
                "--git-dir",
                "remote.git",
                "log",
                "-1",
                "--format=%H %an %s",
                "kandev/1a2b3c4d-deliver",
            ])
            .current_dir(root)
            .output()
            .unwrap();
        let pushed = String::from_utf8_lossy(&pushed.stdout);
        assert_eq!(
            pushed.trim(),
            format!("{} Ada Improve the readme", done.commit)
        );

        // Nothing new: no commit, and the push is a no-op.
        let again = deliver(&repo, &settings, "", &author, Ship::Push, None)
            .await
            .unwrap();
        assert!(!again.committed);
        assert_eq!(again.commit, done.commit);

        // Someone else moved the branch on the remote: the push is refused
        // and says why.
        git(
            root,
            &[
                "clone",
                "-q",
                "-b",
                "kandev/1a2b3c4d-deliver",
                "remote.git",
                "other",
            ],
        );
        write(&root.join("other"), "OTHER.md", b"theirs\n");
        git(&root.join("other"), &["add", "-A"]);
        git(&root.join("other"), &["commit", "-q", "-m", "theirs"]);
        git(
            &root.join("other"),
            &["push", "-q", "origin", "kandev/1a2b3c4d-deliver"],
        );
        write(&work, "MINE.md", b"mine\n");
        let refused = deliver(&repo, &settings, "Mine", &author, Ship::Push, None)
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

    /// A work clone of a bare remote whose `main` has `README.md`, on the
    /// task's branch; the settings that allow pushing there.
    async fn remote_and_clone() -> (tempfile::TempDir, Repo, crate::config::Settings) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let src = root.join("src");
        std::fs::create_dir_all(&src).unwrap();
        git(&src, &["init", "-q", "-b", "main"]);
        write(&src, "README.md", b"# Demo\n\nline three\n");
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-q", "-m", "base"]);
        git(root, &["clone", "-q", "--bare", "src", "remote.git"]);
        git(root, &["clone", "-q", "remote.git", "work"]);
        let repo = Repo::open(&root.join("work")).await.unwrap();
        start_branch(&repo, "kandev/1a2b3c4d-merge").await.unwrap();
        let settings = crate::config::Settings {
            allowed_repository_roots: vec![root.display().to_string()],
            ..Default::default()
        };
        (dir, repo, settings)
    }

    fn remote_file(root: &Path, rev: &str) -> String {
        remote_git(root, &["show", rev])
    }

    fn remote_git(root: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(["--git-dir", "remote.git"])
            .args(args)
            .current_dir(root)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[tokio::test]
    async fn merging_lands_on_the_remote_base_and_conflicts_are_refused() {
        let author = Author {
            name: "Ada".into(),
            email: "ada@example.com".into(),
        };
        let (dir, repo, settings) = remote_and_clone().await;
        let root = dir.path();
        write(&root.join("work"), "NEW.md", b"new\n");
        let done = deliver(&repo, &settings, "Add NEW", &author, Ship::Merge, None)
            .await
            .unwrap();
        assert!(done.committed);
        assert_eq!(remote_file(root, "main:NEW.md"), "new\n");
        let log = remote_git(root, &["log", "-1", "--format=%s%n%an", "main"]);
        assert!(
            log.starts_with("Merge kandev/1a2b3c4d-merge into main\nAda"),
            "{log}"
        );
        // The clone itself stayed on the task's branch.
        assert_eq!(
            repo.text(["symbolic-ref", "--short", "HEAD"])
                .await
                .unwrap(),
            "kandev/1a2b3c4d-merge"
        );

        // The base moved on with a change to the same line: refused, and
        // the remote's base is left as it was.
        let (dir, repo, settings) = remote_and_clone().await;
        let root = dir.path();
        git(root, &["clone", "-q", "remote.git", "other"]);
        write(&root.join("other"), "README.md", b"# Demo\n\ntheirs\n");
        git(&root.join("other"), &["commit", "-q", "-am", "theirs"]);
        git(&root.join("other"), &["push", "-q", "origin", "main"]);
        let before = remote_git(root, &["rev-parse", "main"]);
        write(&root.join("work"), "README.md", b"# Demo\n\nmine\n");
        let refused = deliver(&repo, &settings, "Mine", &author, Ship::Merge, None)
            .await
            .unwrap_err();
        let text = refused.to_string();
        assert!(
            text.contains("does not merge cleanly") && text.contains("README.md"),
            "{text}"
        );
        assert_eq!(remote_git(root, &["rev-parse", "main"]), before);
    }

    #[test]
    fn a_push_uses_the_configured_token_or_the_stored_credentials() {
        let home = tempfile::tempdir().unwrap();
        let settings = crate::config::Settings {
            credentials_home: home.path().display().to_string(),
            ..Default::default()
        };
        let get = |env: &[(String, String)], key: &str| {
            env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        };
        let env = push_env(
            &settings,
            "https://github.com/a/b.git",
            Some("x-access-token:t0k"),
        );
        assert_eq!(
            get(&env, "GIT_CONFIG_KEY_0").as_deref(),
            Some("http.extraHeader")
        );
        // base64("x-access-token:t0k")
        assert_eq!(
            get(&env, "GIT_CONFIG_VALUE_0").as_deref(),
            Some("Authorization: Basic eC1hY2Nlc3MtdG9rZW46dDBr")
        );
        assert_eq!(get(&env, "HOME"), Some(settings.credentials_home.clone()));
        // No token: nothing, until the operator has stored credentials.
        let env = push_env(&settings, "https://github.com/a/b.git", None);
        assert_eq!(get(&env, "GIT_CONFIG_COUNT"), None);
        std::fs::write(
            home.path().join(".git-credentials"),
            "https://u:p@github.com\n",
        )
        .unwrap();
        let env = push_env(&settings, "https://github.com/a/b.git", None);
        assert!(
            get(&env, "GIT_CONFIG_VALUE_0").is_some_and(|v| v.starts_with("store --file=")),
            "{env:?}"
        );
        // ssh: the keys under HOME, no http configuration.
        let env = push_env(&settings, "git@github.com:a/b.git", Some("x:t"));
        assert_eq!(get(&env, "GIT_CONFIG_COUNT"), None);
    }

    #[tokio::test]
    async fn a_repository_configured_to_run_programs_is_refused() {
        let (dir, _) = cloned().await;
        let marker = dir.path().join("ran");
        for (key, value) in [
            ("core.fsmonitor", format!("touch {}", marker.display())),
            ("filter.x.clean", format!("touch {}", marker.display())),
            ("include.path", "/etc/gitconfig".to_string()),
        ] {
            git(dir.path(), &["config", key, &value]);
            let refused = Repo::open(dir.path()).await.unwrap_err();
            assert!(
                refused.to_string().contains(&key.to_ascii_lowercase()),
                "{key}: {refused}"
            );
            git(dir.path(), &["config", "--unset", key]);
        }
        std::fs::write(
            dir.path().join(".git/objects/info/alternates"),
            "/elsewhere\n",
        )
        .unwrap();
        assert!(Repo::open(dir.path()).await.is_err());
        assert!(!marker.exists(), "a configured program ran");
    }
}
