//! Running git on the host in a workspace an agent has written to.
//!
//! The agent controls everything under `/workspace`, `.git` included. Plain
//! `git diff` there would run whatever the repository's configuration
//! names (an fsmonitor, hooks, clean filters, textconv and external diff
//! commands) on the host, outside the agent's container. So before any
//! command [`Repo::open`] checks that `.git` is a plain directory of the
//! workspace with no links to other repositories (`commondir`, alternates)
//! and that its configuration holds only keys from a short allow-list, and
//! every command runs with no system or global configuration, hooks and
//! fsmonitor off, and no terminal prompt.

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

/// A workspace repository checked by [`Repo::open`].
#[derive(Clone)]
pub struct Repo {
    work_tree: PathBuf,
    git_dir: PathBuf,
    /// More environment for every command (credentials for a push).
    env: Vec<(String, String)>,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The environment may hold credentials: names only.
        f.debug_struct("Repo")
            .field("work_tree", &self.work_tree)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish()
    }
}

/// Configuration keys git may read from an agent's repository: none of
/// them runs a program. `*` stands for one subsection name.
const SAFE_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.abbrev",
    "extensions.objectformat",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.tagopt",
    "remote.*.prune",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
    "user.name",
    "user.email",
    "init.defaultbranch",
    "pull.rebase",
    "fetch.prune",
    "gc.auto",
    "kandev.basecommit",
    "kandev.basebranch",
];

fn key_is_safe(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SAFE_KEYS
        .iter()
        .any(|pattern| match pattern.split_once(".*.") {
            None => key == *pattern,
            Some((section, name)) => key
                .strip_prefix(section)
                .and_then(|rest| rest.strip_prefix('.'))
                .and_then(|rest| rest.rsplit_once('.'))
                .is_some_and(|(sub, last)| !sub.is_empty() && last == name),
        })
}

fn refused(why: impl std::fmt::Display) -> AgentError {
    AgentError::FailedPrecondition(format!("Kandev does not run git in this workspace: {why}"))
}

impl Repo {
    /// Checks the repository of `work_tree` (see the module's docs).
    pub async fn open(work_tree: &Path) -> Result<Repo> {
        let git_dir = work_tree.join(".git");
        match std::fs::symlink_metadata(&git_dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(refused(".git is not a directory")),
            Err(_) => {
                return Err(AgentError::FailedPrecondition(
                    "the workspace is not a git repository".into(),
                ));
            }
        }
        for link in ["commondir", "objects/info/alternates", "config.worktree"] {
            if std::fs::symlink_metadata(git_dir.join(link)).is_ok() {
                return Err(refused(format!(".git/{link} exists")));
            }
        }
        let config = git_dir.join("config");
        match std::fs::symlink_metadata(&config) {
            Ok(meta) if meta.is_file() => {}
            _ => return Err(refused(".git/config is not a regular file")),
        }
        let repo = Repo {
            work_tree: work_tree.to_path_buf(),
            git_dir,
            env: Vec::new(),
        };
        // Read as a plain file: `--file` follows no include.
        let listed = repo
            .run_raw(
                [
                    OsStr::new("config"),
                    OsStr::new("--file"),
                    config.as_os_str(),
                    OsStr::new("--null"),
                    OsStr::new("--name-only"),
                    OsStr::new("--list"),
                ],
                None,
            )
            .await?;
        let names = String::from_utf8_lossy(&listed.stdout);
        if let Some(unsafe_key) = names
            .split('\0')
            .filter(|k| !k.is_empty())
            .find(|k| !key_is_safe(k))
        {
            return Err(refused(format!("its configuration sets {unsafe_key}")));
        }
        Ok(repo)
    }

    /// This repository with `env` set for its commands (never logged).
    pub fn with_env(&self, env: Vec<(String, String)>) -> Repo {
        Repo {
            env,
            ..self.clone()
        }
    }

    /// The work tree.
    pub fn work_tree(&self) -> &Path {
        &self.work_tree
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
        let mut cmd = Command::new("git");
        // The agent (another uid) owns the files: its configuration was
        // checked by `open`, so git may use the repository.
        let mut safe = std::ffi::OsString::from("safe.directory=");
        safe.push(&self.work_tree);
        cmd.arg("-c")
            .arg(safe)
            .args([
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
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work_tree)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            // A path is a path: no `:(glob)` or other pathspec magic.
            .env("GIT_LITERAL_PATHSPECS", "1")
            .env("LC_ALL", "C")
            .current_dir(&self.work_tree)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
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

#[cfg(test)]
mod tests {
    use super::key_is_safe;

    #[test]
    fn only_allowed_keys_are_safe() {
        for key in [
            "core.bare",
            "remote.origin.url",
            "remote.my.fork.fetch",
            "branch.kandev/abc-fix.merge",
            "kandev.baseCommit",
            "user.email",
        ] {
            assert!(key_is_safe(key), "{key}");
        }
        for key in [
            "core.fsmonitor",
            "core.hookspath",
            "core.sshcommand",
            "filter.lfs.clean",
            "diff.x.textconv",
            "include.path",
            "includeif.gitdir:/x.path",
            "remote.origin.uploadpack",
            "remote..url",
            "credential.helper",
            "alias.st",
        ] {
            assert!(!key_is_safe(key), "{key}");
        }
    }
}
