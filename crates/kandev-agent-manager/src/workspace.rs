//! Workspaces on the host: a repository cloned into
//! `<workspaces_root>/<task_id>`, or a caller's directory that must lie
//! under an allowed root.

use std::path::{Path, PathBuf};

use tokio::process::Command;
use uuid::Uuid;

use crate::{
    config::Settings,
    domain::{AgentError, Result, invalid},
};

/// Where the workspace of a launch comes from.
#[derive(Debug, Clone)]
pub enum WorkspaceSource {
    /// `git clone --branch <branch> <url>`; local paths and `file://` work.
    Git { url: String, branch: String },
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

/// Drops the user part of a URL so credentials never reach a message.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((userinfo, host)) if !userinfo.contains('/') => format!("{scheme}://***@{host}"),
            _ => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Prepares the workspace of `task_id`.
pub async fn prepare(
    settings: &Settings,
    task_id: Uuid,
    source: WorkspaceSource,
) -> Result<PreparedWorkspace> {
    let prepared = match source {
        WorkspaceSource::Path(path) => allowed_path(settings, &path),
        WorkspaceSource::Empty => {
            let dir = task_dir(settings, task_id)?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| AgentError::Internal(format!("cannot create {dir:?}: {e}")))?;
            owned(dir)
        }
        WorkspaceSource::Git { url, branch } => clone(settings, task_id, &url, &branch).await,
    }?;
    // Docker's bind syntax is `host:container:mode`.
    if prepared.host_path.to_string_lossy().contains([':', ',']) {
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

fn task_dir(settings: &Settings, task_id: Uuid) -> Result<PathBuf> {
    let root = Path::new(&settings.workspaces_root);
    std::fs::create_dir_all(root)
        .map_err(|e| AgentError::Internal(format!("cannot create {root:?}: {e}")))?;
    Ok(root.join(task_id.to_string()))
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
    if !inside {
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

async fn clone(
    settings: &Settings,
    task_id: Uuid,
    url: &str,
    branch: &str,
) -> Result<PreparedWorkspace> {
    if url.trim().is_empty() || url.starts_with('-') {
        return Err(invalid(
            "repository_url is required and must not start with '-'",
        ));
    }
    if branch.starts_with('-') || branch.chars().any(char::is_whitespace) {
        return Err(invalid("branch must not start with '-' or contain spaces"));
    }
    let dest = task_dir(settings, task_id)?;
    if dest.join(".git").is_dir() {
        // A relaunch of the same task keeps its work.
        return owned(dest);
    }
    let mut cmd = Command::new("git");
    cmd.arg("clone").arg("--quiet");
    if !branch.is_empty() {
        cmd.args(["--branch", branch]);
    }
    cmd.arg("--").arg(url).arg(&dest);
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(std::time::Duration::from_secs(600), cmd.output())
        .await
        .map_err(|_| AgentError::FailedPrecondition("git clone timed out".into()))?
        .map_err(|e| AgentError::Internal(format!("cannot run git: {e}")))?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&dest);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("unknown error")
            .replace(url, &redact_url(url));
        return Err(AgentError::FailedPrecondition(format!(
            "cloning {} (branch {}) failed: {reason}",
            redact_url(url),
            if branch.is_empty() { "default" } else { branch },
        )));
    }
    owned(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

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
