//! Running git on the host, only ever in Kandev's own repository of a
//! task.
//!
//! The agent controls everything under `/workspace`, its `.git` included:
//! git run there would read the agent's configuration, attributes and
//! hooks (an fsmonitor, clean filters, textconv, a `--output=` smuggled in
//! as a revision, objects linked to another repository) and run or follow
//! them on the host. So git never runs there: each task has a repository
//! of Kandev's own outside the agent's reach (see [`crate::workspace`]),
//! whose work tree is a mirror Kandev copies from the agent's files
//! ([`crate::mirror`]). Every command also runs with no system or global
//! configuration, hooks and fsmonitor off, and no terminal prompt.

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use tokio::process::Command;

use crate::domain::{AgentError, Result};

/// How long one git command may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Kandev's repository of a task: its git directory and the mirror that is
/// its work tree, both written only by Kandev.
#[derive(Clone)]
pub struct Repo {
    git_dir: PathBuf,
    work_tree: PathBuf,
    /// More environment for every command (credentials for a push).
    env: Vec<(String, String)>,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The environment may hold credentials: names only.
        f.debug_struct("Repo")
            .field("git_dir", &self.git_dir)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish()
    }
}

impl Repo {
    /// The repository at `git_dir` (Kandev's own) with `work_tree` (a
    /// mirror of Kandev's own).
    pub fn new(git_dir: PathBuf, work_tree: PathBuf) -> Repo {
        Repo {
            git_dir,
            work_tree,
            env: Vec::new(),
        }
    }

    /// This repository with `env` set for its commands (never logged).
    pub fn with_env(&self, env: Vec<(String, String)>) -> Repo {
        Repo {
            env,
            ..self.clone()
        }
    }

    /// The work tree (the mirror).
    pub fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    /// The git directory.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// Runs `git <args>`; a non-zero exit is an error with git's message.
    /// `index` replaces the repository's index file (`GIT_INDEX_FILE`).
    pub async fn run<I, S>(&self, args: I, index: Option<&Path>) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let output = self.run_raw(args, index).await?;
        if output.status.success() {
            Ok(output)
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let message = failure_line(&stderr)
                .or_else(|| stderr.lines().next())
                .unwrap_or("failed")
                .trim()
                .to_string();
            Err(AgentError::FailedPrecondition(format!("git: {message}")))
        }
    }

    /// The output of `git <args>`, whatever its exit status.
    pub async fn output<I, S>(&self, args: I) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_raw(args, None).await
    }

    /// Whether `git <args>` exits 0 (`true`) or 1 (`false`); anything else
    /// is an error (for `--quiet` checks).
    pub async fn run_status<I, S>(&self, args: I) -> Result<bool>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let output = self.run_raw(args, None).await?;
        match output.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(AgentError::FailedPrecondition(format!(
                "git: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))),
        }
    }

    /// The trimmed standard output of `git <args>`.
    pub async fn text<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let output = self.run(args, None).await?;
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    async fn run_raw<I, S>(&self, args: I, index: Option<&Path>) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = plain_git();
        cmd.args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.untrackedCache=false",
            "-c",
            "core.pager=cat",
            "-c",
            "diff.external=",
        ])
        .args(args)
        .env("GIT_DIR", &self.git_dir)
        .env("GIT_WORK_TREE", &self.work_tree)
        .env("GIT_OPTIONAL_LOCKS", "0")
        // A path is a path: no `:(glob)` or other pathspec magic.
        .env("GIT_LITERAL_PATHSPECS", "1")
        .current_dir(&self.work_tree);
        if let Some(index) = index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        match tokio::time::timeout(TIMEOUT, cmd.output()).await {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(e)) => Err(AgentError::Internal(format!("cannot run git: {e}"))),
            Err(_) => Err(AgentError::Unavailable(format!(
                "git did not answer within {} s",
                TIMEOUT.as_secs()
            ))),
        }
    }
}

/// git's own reason in its standard error: the first `fatal:` or `error:`
/// line.
pub fn failure_line(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .find(|l| l.starts_with("fatal:") || l.starts_with("error:"))
}

/// A git command with a clean environment, no system or global
/// configuration and no prompt: every git Kandev runs on a task's clone.
pub(crate) fn plain_git() -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn finish(what: &str, mut cmd: Command) -> Result<()> {
    let output = tokio::time::timeout(TIMEOUT, cmd.output())
        .await
        .map_err(|_| AgentError::Unavailable(format!("git {what} did not answer")))?
        .map_err(|e| AgentError::Internal(format!("cannot run git: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(AgentError::Internal(format!(
        "git {what}: {}",
        failure_line(&stderr).unwrap_or(stderr.trim())
    )))
}

/// Clones Kandev's repository `from` into `to` on `branch`: the agent's
/// copy, with objects copied (never hard-linked to Kandev's).
pub async fn clone_local(from: &Path, branch: &str, to: &Path) -> Result<()> {
    let mut cmd = plain_git();
    cmd.args([
        "clone",
        "--quiet",
        "--no-hardlinks",
        "--branch",
        branch,
        "--",
    ])
    .arg(from)
    .arg(to);
    finish("clone", cmd).await
}

/// Points the origin of the agent's fresh clone `dir` at `url` (what the
/// agent sees; Kandev pushes only to the URL it keeps itself).
pub async fn set_origin(dir: &Path, url: &str) -> Result<()> {
    let mut cmd = plain_git();
    // `url` never starts with '-' (refused before any clone).
    cmd.arg("-C")
        .arg(dir)
        .args(["config", "remote.origin.url", url]);
    finish("config", cmd).await
}
