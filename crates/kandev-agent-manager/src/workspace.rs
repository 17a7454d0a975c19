//! Workspaces on the host: a repository cloned for a task, or a caller's
//! directory that must lie under an allowed root.
//!
//! A task's clone is two repositories ([`TaskPaths`]):
//! - Kandev's own, `<workspaces_root>/.kandev/<task_id>`: a bare clone of
//!   the task's repository holding the task's branch, the base it started
//!   from and the URL it was cloned from, plus the mirror of the agent's
//!   work tree that git reads ([`crate::mirror`]). No container mounts it.
//! - The agent's, `<workspaces_root>/<task_id>`, mounted at `/workspace`:
//!   a clone of Kandev's on the task's branch, given to the agent's user
//!   (mode 0700). The agent may do anything with it, its `.git` included:
//!   Kandev never runs git there again once it is made.
//!
//! The workspaces root is 0700, so no other local user reaches a workspace
//! or what an agent left in it.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::process::Command;
use uuid::Uuid;

use crate::paths::repo_in;
pub use crate::paths::{KANDEV_DIR, TaskPaths};
use crate::{
    config::Settings,
    domain::{AgentError, AgentInstance, Result, invalid},
    preflight,
    repository::{self, redact_url},
};

/// The workspaces root mounted on itself `nosuid,nodev` by a manager
/// running as root, unmounted when dropped: nothing an agent leaves in a
/// workspace is executed setuid or opened as a device on the host, and
/// Docker's bind of a workspace inherits both flags in the container.
#[derive(Debug)]
pub struct SealedRoot(Option<PathBuf>);

/// Seals the workspaces root (see [`SealedRoot`]); a manager that is not
/// root, or may not mount, leaves it as it is (its agents are its own user,
/// and the root is 0700 either way).
pub fn seal_root(settings: &Settings) -> Result<SealedRoot> {
    let root = Path::new(&settings.workspaces_root);
    private_dir(root)?;
    if !nix::unistd::geteuid().is_root() {
        return Ok(SealedRoot(None));
    }
    let root = root
        .canonicalize()
        .map_err(|e| AgentError::Internal(format!("cannot resolve {root:?}: {e}")))?;
    if sealed_already(&root) {
        return Ok(SealedRoot(None));
    }
    use nix::mount::{MsFlags, mount};
    let none: Option<&str> = None;
    let sealed = mount(Some(&root), &root, none, MsFlags::MS_BIND, none).and_then(|()| {
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        mount(none, &root, none, flags, none)
    });
    match sealed {
        Ok(()) => {
            tracing::info!(root = %root.display(), "workspaces root mounted nosuid,nodev");
            Ok(SealedRoot(Some(root)))
        }
        Err(e) => {
            tracing::warn!(root = %root.display(), error = %e, "cannot mount the workspaces root nosuid,nodev");
            let _ = nix::mount::umount2(&root, nix::mount::MntFlags::MNT_DETACH);
            Ok(SealedRoot(None))
        }
    }
}

/// Whether `root` is a mount point with `nosuid` and `nodev` already.
fn sealed_already(root: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = root.to_string_lossy().replace(' ', "\\040");
    table.lines().any(|line| {
        let mut fields = line.split(' ').skip(4);
        let (Some(point), Some(options)) = (fields.next(), fields.next()) else {
            return false;
        };
        point == wanted
            && options.split(',').any(|o| o == "nosuid")
            && options.split(',').any(|o| o == "nodev")
    })
}

impl Drop for SealedRoot {
    fn drop(&mut self) {
        if let Some(root) = self.0.take()
            && let Err(e) = nix::mount::umount2(&root, nix::mount::MntFlags::MNT_DETACH)
        {
            tracing::warn!(root = %root.display(), error = %e, "cannot unmount the workspaces root");
        }
    }
}

/// Where the workspace of a launch comes from.
#[derive(Debug, Clone)]
pub enum WorkspaceSource {
    /// `git clone --branch <branch> <url>`, for a URL the repository policy
    /// allows (see [`crate::repository`]), then the task's own branch,
    /// named after `title` (see [`work_branch`]).
    Git {
        url: String,
        branch: String,
        title: String,
    },
    /// An existing host directory.
    Path(String),
    /// An empty directory of the manager's.
    Empty,
}

/// A prepared workspace.
#[derive(Debug, Clone)]
pub struct PreparedWorkspace {
    /// Canonical host path, mounted read-write at `/workspace`.
    pub host_path: PathBuf,
    /// Whether the manager created it (and may delete it).
    pub owned: bool,
}

/// A workspace checked and, unless a clone is still to run, ready.
#[derive(Debug)]
pub enum Prepared {
    Ready(PreparedWorkspace),
    /// Checked against the policy; [`PendingClone::run`] makes it.
    Clone(PendingClone),
}

/// Checks the workspace of `task_id` against the policy and prepares what
/// is quick; a clone is left to [`PendingClone::run`], which can take long.
pub async fn prepare(
    settings: &Settings,
    task_id: Uuid,
    source: WorkspaceSource,
) -> Result<Prepared> {
    let prepared = match source {
        WorkspaceSource::Path(path) => Prepared::Ready(allowed_path(settings, &path)?),
        WorkspaceSource::Empty => {
            let dir = task_dir(settings, task_id)?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| AgentError::Internal(format!("cannot create {dir:?}: {e}")))?;
            give_to_agent(&dir, settings.file_owner()).await?;
            Prepared::Ready(owned(dir)?)
        }
        WorkspaceSource::Git { url, branch, title } => {
            let work_branch = work_branch(&settings.branch_prefix, task_id, &title);
            plan_clone(settings, task_id, url, branch, work_branch).await?
        }
    };
    // Docker's bind syntax is `host:container:mode`.
    let path = match &prepared {
        Prepared::Ready(ready) => &ready.host_path,
        Prepared::Clone(clone) => &clone.paths.workspace,
    };
    if path.to_string_lossy().contains([':', ',']) {
        return Err(invalid("the workspace path must not contain ':' or ','"));
    }
    Ok(prepared)
}

fn owned(dir: PathBuf) -> Result<PreparedWorkspace> {
    let host_path = dir
        .canonicalize()
        .map_err(|e| AgentError::Internal(format!("cannot resolve {dir:?}: {e}")))?;
    Ok(PreparedWorkspace {
        host_path,
        owned: true,
    })
}

/// The workspace of `task_id`, after making the workspaces root (0700).
fn task_dir(settings: &Settings, task_id: Uuid) -> Result<PathBuf> {
    let root = Path::new(&settings.workspaces_root);
    private_dir(root)?;
    Ok(root.join(task_id.to_string()))
}

/// Makes `dir` (and its parents) if needed, and closes it to other users.
fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)
        .map_err(|e| AgentError::Internal(format!("cannot create {dir:?}: {e}")))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| AgentError::Internal(format!("cannot restrict {dir:?}: {e}")))
}

/// Gives a tree Kandev just made to the agent's user, closed to others.
async fn give_to_agent(dir: &Path, owner: Option<(u32, u32)>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        if let Some(owner) = owner {
            crate::mirror::chown_tree(&dir, owner, &crate::mirror::Limits::default())?;
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| AgentError::Internal(format!("cannot restrict {dir:?}: {e}")))
    })
    .await
    .map_err(|e| AgentError::Internal(format!("giving a workspace to the agent: {e}")))?
}

/// Checks that `path` exists and lies under an allowed root, after
/// resolving symlinks and `..`.
fn allowed_path(settings: &Settings, path: &str) -> Result<PreparedWorkspace> {
    let requested = Path::new(path);
    if !requested.is_absolute() {
        return Err(invalid("workspace_path must be an absolute path"));
    }
    let refused = || {
        AgentError::PermissionDenied(format!(
            "workspace_path {path} is outside the allowed workspace roots"
        ))
    };
    let real = requested.canonicalize().map_err(|_| refused())?;
    let inside = settings
        .allowed_workspace_roots
        .iter()
        .filter_map(|root| Path::new(root).canonicalize().ok())
        .any(|root| real.starts_with(&root));
    // Kandev's own repositories and other tasks' clones are never a
    // caller's directory.
    let managed = Path::new(&settings.workspaces_root)
        .canonicalize()
        .is_ok_and(|root| real.starts_with(root));
    if !inside || managed {
        return Err(refused());
    }
    if !real.is_dir() {
        return Err(invalid(format!("workspace_path {path} is not a directory")));
    }
    Ok(PreparedWorkspace {
        host_path: real,
        owned: false,
    })
}

/// The task's branch: `<prefix><short id>-<slug of title>`. The short id is
/// the end of the task's UUID (its random part: tasks created together
/// differ there).
pub fn work_branch(prefix: &str, task_id: Uuid, title: &str) -> String {
    let id = task_id.simple().to_string();
    let short = &id[id.len() - 8..];
    let mut slug = String::new();
    for word in title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if slug.len() + word.len() + 1 > 40 {
            break;
        }
        slug.push('-');
        slug.push_str(&word.to_ascii_lowercase());
    }
    format!("{prefix}{short}{slug}")
}

async fn plan_clone(
    settings: &Settings,
    task_id: Uuid,
    url: String,
    branch: String,
    work_branch: String,
) -> Result<Prepared> {
    preflight::validate(&url, &branch)?;
    let protocols = repository::check(settings, &url).await?;
    let dest = task_dir(settings, task_id)?;
    let paths = TaskPaths::new(Path::new(&settings.workspaces_root), task_id);
    if dest.is_dir() {
        // A relaunch of the same task keeps its work (only complete clones
        // are ever renamed into place).
        return Ok(Prepared::Ready(owned(dest)?));
    }
    // A local repository gone, or without the branch, since the task was
    // taken: refused now, plainly, rather than by git in the background.
    preflight::before_clone(&url, &branch).await?;
    Ok(Prepared::Clone(PendingClone {
        url,
        branch,
        work_branch,
        protocols,
        paths,
        owner: settings.file_owner(),
        timeout: Duration::from_secs(settings.clone_timeout_secs),
        resume: None,
    }))
}

/// The clone of a delivered task made again from its pushed branch (see
/// [`crate::reclone`]), when its work tree was removed after the push and
/// Kandev's repository of it is still there; `None` otherwise.
pub async fn plan_reclone(settings: &Settings, task_id: Uuid) -> Result<Option<PendingClone>> {
    let root = Path::new(&settings.workspaces_root);
    let paths = TaskPaths::new(root, task_id);
    if paths.workspace.exists() {
        return Ok(None);
    }
    let Some(records) = crate::reclone::delivered_records(root, task_id).await? else {
        return Ok(None);
    };
    let url = records.url.clone();
    let branch = records.branch.clone();
    preflight::validate(&url, &branch)?;
    // The policy may have changed since the first clone.
    let protocols = repository::check(settings, &url).await?;
    preflight::before_clone(&url, &branch).await?;
    private_dir(root)?;
    Ok(Some(PendingClone {
        url,
        work_branch: branch.clone(),
        branch,
        protocols,
        paths,
        owner: settings.file_owner(),
        timeout: Duration::from_secs(settings.clone_timeout_secs),
        resume: Some(Box::new(records)),
    }))
}

/// The instance's workspace for a follow-up turn. A delivered clone
/// removed after its push is made again from the pushed branch; any other
/// workspace that is gone is refused.
pub async fn workspace_for_turn(
    settings: &Settings,
    instance: &AgentInstance,
) -> Result<std::path::PathBuf> {
    let path = std::path::PathBuf::from(&instance.workspace_path);
    if path.exists() {
        return Ok(path);
    }
    let clone = if instance.workspace_owned {
        plan_reclone(settings, instance.task_id).await?
    } else {
        None
    };
    let Some(clone) = clone else {
        return Err(AgentError::FailedPrecondition(
            "the instance's workspace was removed; start a new run".into(),
        ));
    };
    let ready = clone.run().await?;
    tracing::info!(task = %instance.task_id, "delivered clone made again from its pushed branch");
    Ok(ready.host_path)
}

/// A clone that passed the policy, to run in the background.
#[derive(Debug)]
pub struct PendingClone {
    url: String,
    branch: String,
    work_branch: String,
    protocols: Vec<String>,
    paths: TaskPaths,
    owner: Option<(u32, u32)>,
    timeout: Duration,
    /// Set when the clone is a delivered task's made again: the task's
    /// branch is the cloned one, with what was recorded before.
    resume: Option<Box<crate::reclone::Records>>,
}

impl PendingClone {
    /// Clones Kandev's repository of the task from the URL, starts the
    /// task's branch there, and makes the agent's clone from it (see the
    /// module's docs). Both are made in hidden directories and renamed into
    /// place when complete, so a failed or interrupted clone is never
    /// reused.
    #[tracing::instrument(name = "clone", skip_all, fields(url = %redact_url(&self.url)))]
    pub async fn run(self) -> Result<PreparedWorkspace> {
        let suffix = format!("partial-{}", Uuid::new_v4().simple());
        let name = |p: &Path| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        };
        let kandev = self
            .paths
            .kandev
            .with_file_name(format!(".{}.{suffix}", name(&self.paths.kandev)));
        let agent = self
            .paths
            .workspace
            .with_file_name(format!(".{}.{suffix}", name(&self.paths.workspace)));
        let _cleanup = (RemoveOnDrop(kandev.clone()), RemoveOnDrop(agent.clone()));
        // `.kandev/` itself too: `create_dir_all` makes parents 0755.
        let parent = kandev.parent().unwrap_or(&kandev).to_path_buf();
        for dir in [
            parent,
            kandev.clone(),
            kandev.join("tree"),
            kandev.join("staging"),
        ] {
            private_dir(&dir)?;
        }
        self.clone_bare(&kandev.join("git")).await?;
        let repo = repo_in(&kandev);
        match &self.resume {
            None => crate::changes::start_branch(&repo, &self.work_branch, &self.url).await?,
            Some(records) => crate::reclone::resume_branch(&repo, records).await?,
        }
        crate::git::clone_local(repo.git_dir(), &self.work_branch, &agent).await?;
        crate::git::set_origin(&agent, &redact_url(&self.url)).await?;
        give_to_agent(&agent, self.owner).await?;
        let rename = |from: &Path, to: &Path| {
            std::fs::rename(from, to)
                .map_err(|e| AgentError::Internal(format!("cannot move the clone into place: {e}")))
        };
        // Kandev's repository of a delivered clone, kept for its Changes
        // (see `changes::remove_clone_keeping_delivery`): the new clone's
        // replaces it.
        if self.paths.kandev.exists() {
            std::fs::remove_dir_all(&self.paths.kandev).map_err(|e| {
                AgentError::Internal(format!("cannot replace the task's old repository: {e}"))
            })?;
        }
        rename(&kandev, &self.paths.kandev)?;
        rename(&agent, &self.paths.workspace)?;
        owned(self.paths.workspace)
    }

    /// `git clone --bare` of the URL into `dest`, in its own process group
    /// killed whole (helpers such as `git-remote-https` included) on
    /// timeout or when dropped.
    async fn clone_bare(&self, dest: &Path) -> Result<()> {
        let PendingClone {
            url,
            branch,
            protocols,
            timeout,
            ..
        } = self;
        let mut cmd = Command::new("git");
        cmd.args(repository::protocol_args(protocols))
            .args(["clone", "--bare", "--quiet"]);
        if !branch.is_empty() {
            cmd.args(["--branch", branch]);
        }
        cmd.arg("--").arg(url).arg(dest);
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| AgentError::Internal(format!("cannot run git: {e}")))?;
        let group = KillGroupOnDrop(child.id());
        let output = match tokio::time::timeout(*timeout, child.wait_with_output()).await {
            Ok(output) => output.map_err(|e| AgentError::Internal(format!("git clone: {e}")))?,
            Err(_) => {
                drop(group);
                return Err(AgentError::Unavailable(format!(
                    "cloning {} timed out after {} s",
                    redact_url(url),
                    timeout.as_secs()
                )));
            }
        };
        if output.status.success() {
            return Ok(());
        }
        // A local repository that went away (or lost the branch) fails
        // every run alike: said plainly, and not retried.
        if let Some(refused) = preflight::explain_failed_clone(url, branch).await {
            return Err(refused);
        }
        // Anything else (a remote that did not answer, say) may pass later.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = clone_failure(&stderr).replace(url.as_str(), &redact_url(url));
        Err(AgentError::Unavailable(format!(
            "cloning {} (branch {}) failed: {reason}",
            redact_url(url),
            if branch.is_empty() { "default" } else { branch },
        )))
    }
}

/// Removes a directory (a partial clone) when dropped, if it still exists.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if self.0.exists()
            && let Err(e) = std::fs::remove_dir_all(&self.0)
        {
            tracing::warn!(path = %self.0.display(), error = %e, "cannot remove a partial clone");
        }
    }
}

/// Kills a process group (git and its helpers) when dropped.
struct KillGroupOnDrop(Option<u32>);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        // ESRCH: the group already ended, as it does after a normal exit.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Why git could not clone, in its own words: its first `fatal:` (or
/// `error:`) line, without the prefix; else its last line. (The last line
/// alone can be the tail of a sentence: "and the repository exists.")
fn clone_failure(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("fatal: ")
                .or_else(|| l.strip_prefix("error: "))
        })
        .or_else(|| lines.last().copied())
        .unwrap_or("unknown error")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_failures_read_as_git_said_them() {
        let missing = "Cloning into '/w/x.partial'...\nfatal: '/r/nope' does not appear to be a git repository\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists.\n";
        assert_eq!(
            clone_failure(missing),
            "'/r/nope' does not appear to be a git repository"
        );
        let branch = "Cloning into 'x'...\nwarning: Could not find remote branch nope to clone.\nfatal: Remote branch nope not found in upstream origin\n";
        assert_eq!(
            clone_failure(branch),
            "Remote branch nope not found in upstream origin"
        );
        assert_eq!(clone_failure("something odd\n"), "something odd");
        assert_eq!(clone_failure(""), "unknown error");
    }

    #[test]
    fn a_task_branch_is_named_by_its_id_and_title() {
        let task = Uuid::parse_str("01a23e7a-422d-74c4-bc6a-1c101a9b0f8c").unwrap();
        assert_eq!(
            super::work_branch("kandev/", task, "Fix the login page (again!)"),
            "kandev/1a9b0f8c-fix-the-login-page-again"
        );
        assert_eq!(super::work_branch("k/", task, ""), "k/1a9b0f8c");
        let long = super::work_branch("", task, &"word ".repeat(30));
        assert!(long.len() <= 8 + 40, "{long}");
    }

    #[test]
    fn redacts_credentials() {
        assert_eq!(
            redact_url("https://user:tok@github.com/a/b.git"),
            "https://***@github.com/a/b.git"
        );
        assert_eq!(redact_url("file:///tmp/x"), "file:///tmp/x");
        assert_eq!(redact_url("/tmp/x"), "/tmp/x");
    }

    #[test]
    fn refuses_paths_outside_roots() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("ws");
        std::fs::create_dir(&inside).unwrap();
        let settings = Settings {
            allowed_workspace_roots: vec![root.path().display().to_string()],
            ..Settings::default()
        };
        assert!(allowed_path(&settings, inside.to_str().unwrap()).is_ok());
        let escape = format!("{}/ws/../..", root.path().display());
        assert!(matches!(
            allowed_path(&settings, &escape),
            Err(AgentError::PermissionDenied(_))
        ));
    }
}
