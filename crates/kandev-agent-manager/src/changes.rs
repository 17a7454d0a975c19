//! A task's changes against its base commit: what the agent committed and
//! what it left in the work tree (untracked files included, ignored ones
//! not), as one list of files and one unified diff per file.
//!
//! Everything is read from Kandev's own repository of the task (see
//! [`crate::workspace`]): the agent's work tree is first copied into the
//! mirror ([`crate::mirror::sync`]), then staged into Kandev's index, and
//! that index is diffed against the base recorded when the task's branch
//! was started ([`start_branch`]). Nothing in the agent's `.git` is read.
//!
//! What is left out, as git leaves it out of `git add --all`: files the
//! work tree's `.gitignore` files ignore, and the agent type's state paths
//! (its own files in the workspace, see [`exclude_state`]), which Kandev
//! writes into its repository's `info/exclude`. Nothing else the agent
//! wrote decides: git runs without global or system configuration, so no
//! `core.excludesFile` of anyone's is read. A file the base tracks stays
//! tracked.
//!
//! After a delivery ([`crate::delivery`], which records its commit and
//! where it went) the clone may be removed but Kandev's repository kept
//! ([`remove_clone_keeping_delivery`]): the changes are then the delivered
//! commit's against the base, read without any work tree, until
//! [`remove_workspace`] removes the rest.

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    sync::{Arc, LazyLock, Mutex, Weak},
};

use tracing::instrument;
use uuid::Uuid;

use crate::{
    domain::{AgentError, Result},
    git::Repo,
    mirror,
    paths::TaskPaths,
};

mod excludes;

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
    /// The last delivery, when the files are exactly it: nothing changed
    /// in the clone since, or the clone is gone.
    pub delivered: Option<Delivered>,
    /// The agent's clone was removed after the delivery: the files are the
    /// delivered commit's.
    pub clone_removed: bool,
}

/// The last delivery of the task's branch, as Kandev recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub branch: String,
    pub commit: String,
    /// The remote pushed to (credentials removed); `None` when committed
    /// only.
    pub pushed_to: Option<String>,
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

pub(crate) const BASE_COMMIT: &str = "kandev.baseCommit";
pub(crate) const BASE_BRANCH: &str = "kandev.baseBranch";
/// The URL the task's repository was cloned from: where delivery pushes.
pub(crate) const URL: &str = "kandev.url";
/// The commit of the last delivery.
pub(crate) const DELIVERED_COMMIT: &str = "kandev.deliveredCommit";
/// Where the last delivery was pushed (credentials removed; empty: not
/// pushed).
pub(crate) const DELIVERED_TO: &str = "kandev.deliveredTo";

/// A task's clone: the agent's work tree and Kandev's repository of it.
#[derive(Debug, Clone)]
pub struct TaskRepo {
    paths: TaskPaths,
    repo: Repo,
    /// Only Kandev's repository is left, after a delivery.
    clone_removed: bool,
}

impl TaskRepo {
    /// The agent's work tree on the host.
    pub fn workspace(&self) -> &Path {
        &self.paths.workspace
    }

    /// Kandev's repository of the task.
    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    /// Whether the agent's clone was removed after a delivery (only
    /// Kandev's repository is left).
    pub fn clone_removed(&self) -> bool {
        self.clone_removed
    }

    /// What the task's clone holds on disk: the agent's work tree, or,
    /// once it is removed, Kandev's repository.
    pub fn disk_dir(&self) -> &Path {
        if self.clone_removed {
            &self.paths.kandev
        } else {
            &self.paths.workspace
        }
    }
}

/// The clone of `task_id` under `workspaces_root`.
pub async fn task_repo(workspaces_root: &Path, task_id: Uuid) -> Result<TaskRepo> {
    let paths = TaskPaths::new(workspaces_root, task_id);
    let repo = paths.repo();
    if repo.git_dir().is_dir() && paths.workspace.is_dir() {
        return Ok(TaskRepo {
            paths,
            repo,
            clone_removed: false,
        });
    }
    if paths.workspace.join(".git").exists() {
        return Err(AgentError::FailedPrecondition(format!(
            "the clone of task {task_id} was made by an earlier Kandev, which kept no \
             repository of its own: its changes cannot be read without trusting the \
             agent's; start the task again in a new clone to review it"
        )));
    }
    Err(AgentError::NotFound(format!(
        "a cloned workspace of task {task_id}"
    )))
}

/// What GetChanges reads for `task_id`: its clone, or, once the clone was
/// removed after a delivery, Kandev's repository alone (see
/// [`remove_clone_keeping_delivery`]).
pub async fn task_changes_repo(workspaces_root: &Path, task_id: Uuid) -> Result<TaskRepo> {
    let found = task_repo(workspaces_root, task_id).await;
    let paths = TaskPaths::new(workspaces_root, task_id);
    let repo = paths.repo();
    match found {
        Err(AgentError::NotFound(_))
            if repo.git_dir().is_dir() && delivered(&repo).await.is_some() =>
        {
            Ok(TaskRepo {
                paths,
                repo,
                clone_removed: true,
            })
        }
        other => other,
    }
}

/// The last delivery recorded in Kandev's repository of the task.
async fn delivered(repo: &Repo) -> Option<Delivered> {
    let commit = recorded(repo, DELIVERED_COMMIT).await.ok()?;
    let pushed_to = recorded(repo, DELIVERED_TO).await.unwrap_or_default();
    Some(Delivered {
        branch: current_branch(repo).await.unwrap_or_default(),
        commit,
        pushed_to: Some(pushed_to).filter(|p| !p.is_empty()),
    })
}

/// Records a delivery of `commit` (pushed to `pushed_to`, credentials
/// removed) in Kandev's repository of the task.
pub(crate) async fn record_delivery(
    repo: &Repo,
    commit: &str,
    pushed_to: Option<&str>,
) -> Result<()> {
    repo.run(["config", DELIVERED_COMMIT, commit], None).await?;
    repo.run(
        ["config", DELIVERED_TO, pushed_to.unwrap_or_default()],
        None,
    )
    .await?;
    Ok(())
}

/// Declares the agent type's `state_paths` (`.gitignore` patterns, checked
/// when the type was saved) in Kandev's repository of the task, if the
/// task has a clone: Changes and delivery leave them out from the next
/// staging on. Patterns declared once stay: another agent's state may
/// still lie in the clone.
#[instrument(skip_all, fields(%task_id))]
pub async fn exclude_state(
    workspaces_root: &Path,
    task_id: Uuid,
    patterns: &[String],
) -> Result<()> {
    let paths = TaskPaths::new(workspaces_root, task_id);
    let git_dir = paths.repo().git_dir().to_path_buf();
    if patterns.is_empty() || !git_dir.is_dir() {
        return Ok(());
    }
    let _guard = task_lock(&paths.kandev).lock_owned().await;
    let patterns = patterns.to_vec();
    let added = tokio::task::spawn_blocking(move || excludes::add(&git_dir, &patterns))
        .await
        .map_err(|e| AgentError::Internal(format!("declaring state paths: {e}")))??;
    if added {
        tracing::debug!("state paths declared");
    }
    Ok(())
}

/// The branch checked out, or `None` when detached.
pub(crate) async fn current_branch(repo: &Repo) -> Option<String> {
    repo.text(["symbolic-ref", "--quiet", "--short", "HEAD"])
        .await
        .ok()
}

/// The commit `rev` names.
pub(crate) async fn commit_of(repo: &Repo, rev: &str) -> Result<String> {
    repo.text([
        "rev-parse",
        "--verify",
        "--end-of-options",
        &format!("{rev}^{{commit}}"),
    ])
    .await
}

/// Starts the task's branch `work_branch` in Kandev's fresh bare clone,
/// from the commit cloned, and records that commit, the branch it came
/// from and `url` (where delivery pushes) in Kandev's own configuration.
pub async fn start_branch(repo: &Repo, work_branch: &str, url: &str) -> Result<()> {
    repo.run(["check-ref-format", "--branch", work_branch], None)
        .await
        .map_err(|_| {
            AgentError::InvalidArgument(format!("{work_branch:?} is not a branch name"))
        })?;
    let base_branch = current_branch(repo).await.unwrap_or_default();
    let base_commit = commit_of(repo, "HEAD").await?;
    let work_ref = format!("refs/heads/{work_branch}");
    repo.run(["update-ref", &work_ref, &base_commit], None)
        .await?;
    repo.run(["symbolic-ref", "HEAD", &work_ref], None).await?;
    for (key, value) in [
        (BASE_COMMIT, base_commit.as_str()),
        (BASE_BRANCH, base_branch.as_str()),
        (URL, url),
    ] {
        repo.run(["config", key, value], None).await?;
    }
    // The index starts as the base tree (without stat data: the first
    // staging hashes the mirror's files once, later ones what changed).
    repo.run(["read-tree", "HEAD"], None).await?;
    Ok(())
}

/// What Kandev's own configuration of the task's repository says.
pub(crate) async fn recorded(repo: &Repo, key: &str) -> Result<String> {
    repo.text(["config", "--get", key]).await.map_err(|_| {
        AgentError::FailedPrecondition(format!("the task's repository has no {key} recorded"))
    })
}

async fn base_of(repo: &Repo) -> Result<(String, String)> {
    let commit = recorded(repo, BASE_COMMIT).await?;
    let branch = recorded(repo, BASE_BRANCH).await.unwrap_or_default();
    Ok((commit, branch))
}

/// One staging at a time per task: two would race on the mirror and the
/// index.
fn task_lock(key: &Path) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: LazyLock<Mutex<HashMap<PathBuf, Weak<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Mutex::default);
    let mut locks = LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(lock) = locks.get(key).and_then(Weak::upgrade) {
        return lock;
    }
    locks.retain(|_, lock| lock.strong_count() > 0);
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    locks.insert(key.to_path_buf(), Arc::downgrade(&lock));
    lock
}

/// The directories of `HEAD` holding tracked files: never left out of the
/// mirror as ignored.
async fn tracked_dirs(repo: &Repo) -> Result<HashSet<String>> {
    let out = repo
        .run(["ls-tree", "-r", "-d", "--name-only", "-z", "HEAD"], None)
        .await?;
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

/// Copies the agent's work tree into the mirror and stages all of it in
/// Kandev's index; the task's lock, held until the caller is done.
#[instrument(skip_all, fields(workspace = %task.paths.workspace.display()))]
pub(crate) async fn stage(task: &TaskRepo) -> Result<tokio::sync::OwnedMutexGuard<()>> {
    if task.clone_removed {
        return Err(AgentError::FailedPrecondition(
            "the task's clone was removed after its delivery: there is no work to stage".into(),
        ));
    }
    let guard = task_lock(&task.paths.kandev).lock_owned().await;
    let tracked = tracked_dirs(&task.repo).await?;
    let started = std::time::Instant::now();
    let (workspace, tree, staging, git_dir) = (
        task.paths.workspace.clone(),
        task.repo.work_tree().to_path_buf(),
        task.paths.staging(),
        task.repo.git_dir().to_path_buf(),
    );
    let stats = tokio::task::spawn_blocking(move || {
        let ignored = mirror::Ignored {
            tracked_dirs: &tracked,
            excludes: &excludes::matcher(&git_dir),
        };
        mirror::sync(
            &workspace,
            &tree,
            &staging,
            &ignored,
            &mirror::Limits::default(),
        )
    })
    .await
    .map_err(|e| AgentError::Internal(format!("copying the work tree: {e}")))??;
    metrics::histogram!(crate::metric_names::WORKSPACE_SYNC_SECONDS)
        .record(started.elapsed().as_secs_f64());
    tracing::debug!(?stats, "work tree copied");
    task.repo.run(["add", "--all", "--", "."], None).await?;
    Ok(guard)
}

const DIFF: &[&str] = &[
    "diff",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--find-renames",
];

/// What the base is compared with.
#[derive(Debug, Clone, Copy)]
enum Target<'a> {
    /// Kandev's index: the staged work tree.
    Index,
    /// A commit (the delivered one), without any work tree.
    Commit(&'a str),
}

/// `git diff` of `base` against `target`, then `extra`, then `--`.
fn diff_args<'a>(base: &'a str, target: Target<'a>, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args: Vec<&str> = DIFF.to_vec();
    args.extend(extra);
    match target {
        Target::Index => args.extend(["--cached", base]),
        Target::Commit(commit) => args.extend([base, commit]),
    }
    args.push("--");
    args
}

/// The files changed since the base, committed or not; once the clone was
/// removed after a delivery, the delivered commit's.
#[instrument(skip_all)]
pub async fn changes(task: &TaskRepo) -> Result<Changes> {
    let repo = &task.repo;
    let (base_commit, base_branch) = base_of(repo).await?;
    let branch = current_branch(repo).await.unwrap_or_default();
    let last = delivered(repo).await;
    if task.clone_removed {
        let last = last.ok_or_else(|| {
            AgentError::FailedPrecondition("the task's repository has no delivery recorded".into())
        })?;
        let files = changed_files(repo, &base_commit, Target::Commit(&last.commit)).await?;
        return Ok(Changes {
            branch,
            base_branch,
            base_commit,
            head_commit: last.commit.clone(),
            files,
            delivered: Some(last),
            clone_removed: true,
        });
    }
    let _staged = stage(task).await?;
    let files = changed_files(repo, &base_commit, Target::Index).await?;
    let head_commit = commit_of(repo, "HEAD").await?;
    // The delivered change still, when nothing changed since.
    let delivered = match last {
        Some(last) if unchanged_since(repo, &last.commit).await? => Some(last),
        _ => None,
    };
    Ok(Changes {
        branch,
        base_branch,
        base_commit,
        head_commit,
        files,
        delivered,
        clone_removed: false,
    })
}

/// Whether the staged work tree is `commit`'s tree.
async fn unchanged_since(repo: &Repo, commit: &str) -> Result<bool> {
    repo.run_status(["diff", "--cached", "--quiet", "--no-ext-diff", commit, "--"])
        .await
}

/// The files of `target` that differ from the base.
async fn changed_files(
    repo: &Repo,
    base_commit: &str,
    target: Target<'_>,
) -> Result<Vec<FileChange>> {
    let diff = |extra: &'static str| repo.run(diff_args(base_commit, target, &[extra, "-z"]), None);
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

/// What a diff of the task's work compares: its base commit with the
/// staged work tree (the task's lock held while this lives) or, once the
/// clone was removed, with the delivered commit.
struct DiffSides {
    base_commit: String,
    /// The delivered commit, once the clone was removed.
    delivered: Option<String>,
    _staged: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl DiffSides {
    /// The base, then the work tree staged or the delivery looked up.
    async fn of(task: &TaskRepo) -> Result<DiffSides> {
        let (base_commit, _) = base_of(&task.repo).await?;
        let (_staged, delivered) = if task.clone_removed {
            let last = delivered(&task.repo).await.ok_or_else(|| {
                AgentError::FailedPrecondition(
                    "the task's repository has no delivery recorded".into(),
                )
            })?;
            (None, Some(last.commit))
        } else {
            (Some(stage(task).await?), None)
        };
        Ok(DiffSides {
            base_commit,
            delivered,
            _staged,
        })
    }

    /// What the base is compared with.
    fn target(&self) -> Target<'_> {
        self.delivered
            .as_deref()
            .map_or(Target::Index, Target::Commit)
    }
}

/// The unified diff of the changed file `path`, cut at `max_bytes` (the
/// delivered commit's once the clone was removed).
#[instrument(skip_all)]
pub async fn file_diff(task: &TaskRepo, path: &str, max_bytes: usize) -> Result<FileDiff> {
    let repo = &task.repo;
    let sides = DiffSides::of(task).await?;
    let (base_commit, target) = (&sides.base_commit, sides.target());
    let files = changed_files(repo, base_commit, target).await?;
    let file = files
        .iter()
        .find(|f| f.path == path)
        .ok_or_else(|| AgentError::NotFound(format!("a change to {path}")))?;
    let mut args = diff_args(base_commit, target, &[]);
    if let Some(old) = &file.old_path {
        args.push(old);
    }
    args.push(&file.path);
    let output = repo.run(args, None).await?.stdout;
    let (diff, truncated) = bounded(&output, max_bytes);
    Ok(FileDiff {
        path: file.path.clone(),
        diff,
        truncated,
        binary: file.binary,
    })
}

/// The unified diff of all the task's work against its base (the delivered
/// commit's once the clone was removed), cut at `max_bytes`: what a
/// workflow column's `{diff}` stands for.
#[instrument(skip_all)]
pub async fn whole_diff(task: &TaskRepo, max_bytes: usize) -> Result<String> {
    let repo = &task.repo;
    let sides = DiffSides::of(task).await?;
    let (base_commit, target) = (&sides.base_commit, sides.target());
    let output = repo
        .run(diff_args(base_commit, target, &[]), None)
        .await?
        .stdout;
    Ok(bounded(&output, max_bytes).0)
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

/// Bytes used by the files under `dir` (no link followed).
pub fn disk_usage(dir: &Path) -> u64 {
    mirror::disk_usage(dir, &mirror::Limits::default())
}

/// Removes the clone of `task_id` under `workspaces_root` (the agent's work
/// tree and Kandev's repository); the bytes freed, or `None` when there was
/// none.
pub async fn remove_workspace(workspaces_root: &Path, task_id: Uuid) -> Result<Option<u64>> {
    remove(workspaces_root, task_id, false).await
}

/// [`remove_workspace`], except that a repository with a delivery recorded
/// keeps its git directory (the mirror emptied, the index dropped): the
/// delivered change stays readable ([`task_changes_repo`]) until
/// [`remove_workspace`] removes the rest.
pub async fn remove_clone_keeping_delivery(
    workspaces_root: &Path,
    task_id: Uuid,
) -> Result<Option<u64>> {
    remove(workspaces_root, task_id, true).await
}

#[instrument(skip_all, fields(%task_id, keep_delivered))]
async fn remove(
    workspaces_root: &Path,
    task_id: Uuid,
    keep_delivered: bool,
) -> Result<Option<u64>> {
    let paths = TaskPaths::new(workspaces_root, task_id);
    let repo = paths.repo();
    let keep = keep_delivered && repo.git_dir().is_dir() && delivered(&repo).await.is_some();
    // No staging meanwhile: it would copy into what goes.
    let _guard = task_lock(&paths.kandev).lock_owned().await;
    tokio::task::spawn_blocking(move || {
        let mut dirs = vec![paths.workspace.clone()];
        if keep {
            dirs.extend([paths.staging(), repo.work_tree().to_path_buf()]);
        } else {
            dirs.push(paths.kandev.clone());
        }
        let mut freed = None;
        for dir in &dirs {
            if std::fs::symlink_metadata(dir).is_err() {
                continue;
            }
            let bytes = disk_usage(dir);
            std::fs::remove_dir_all(dir).map_err(|e| {
                AgentError::Internal(format!("cannot remove {}: {e}", dir.display()))
            })?;
            freed = Some(freed.unwrap_or(0) + bytes);
        }
        if keep {
            // git runs in the (now empty) mirror; the index is the clone's.
            let index = repo.git_dir().join("index");
            let bytes = std::fs::metadata(&index).map_or(0, |m| m.len());
            if std::fs::remove_file(&index).is_ok() {
                freed = Some(freed.unwrap_or(0) + bytes);
            }
            std::fs::create_dir(repo.work_tree())
                .map_err(|e| AgentError::Internal(format!("cannot empty the mirror: {e}")))?;
        }
        Ok(freed)
    })
    .await
    .map_err(|e| AgentError::Internal(format!("removing a workspace: {e}")))?
}

/// The largest diff of one file returned whole.
pub const MAX_DIFF_BYTES: usize = 512 * 1024;
