//! `fs/*` confined to a workspace root, with path translation between the
//! agent's view (`/workspace/...` inside its container) and the host.

use std::path::{Component, Path, PathBuf};

use agent_client_protocol::v1::schema::{ReadTextFileRequest, WriteTextFileRequest};

use crate::error::{RpcError, codes};

/// The default in-container workspace path.
pub const DEFAULT_AGENT_ROOT: &str = "/workspace";

/// The largest file `fs/read_text_file` will return, by default 4 MiB.
pub const DEFAULT_MAX_READ_BYTES: u64 = 4 * 1024 * 1024;

/// Why an `fs/*` request was refused.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// ACP requires absolute paths.
    #[error("path must be absolute: {0}")]
    NotAbsolute(PathBuf),
    /// `..` components are refused outright.
    #[error("path must not contain '..': {0}")]
    ParentDir(PathBuf),
    /// The path (or what a symlink in it points to) is outside the workspace.
    #[error("path is outside the workspace: {0}")]
    OutsideWorkspace(PathBuf),
    /// No such file.
    #[error("file not found: {0}")]
    NotFound(PathBuf),
    /// The file is larger than the read limit.
    #[error("file is too large ({size} bytes, limit {limit}): {path}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Any other I/O error.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl FsError {
    /// The JSON-RPC error sent back to the agent.
    pub fn to_rpc(&self) -> RpcError {
        let code = match self {
            Self::NotFound(_) => codes::RESOURCE_NOT_FOUND,
            Self::Io { .. } => codes::INTERNAL_ERROR,
            _ => codes::INVALID_PARAMS,
        };
        RpcError::new(code, self.to_string())
    }
}

/// A workspace root as seen by the host and by the agent.
#[derive(Debug, Clone)]
pub struct Workspace {
    host_root: PathBuf,
    agent_root: PathBuf,
    max_read_bytes: u64,
}

impl Workspace {
    /// A workspace whose host directory `host_root` appears to the agent as
    /// `agent_root` (e.g. `/workspace`). The host root must exist.
    pub fn new(
        host_root: impl AsRef<Path>,
        agent_root: impl Into<PathBuf>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            host_root: std::fs::canonicalize(host_root)?,
            agent_root: agent_root.into(),
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
        })
    }

    /// A workspace the agent sees at the same path as the host (a local
    /// subprocess).
    pub fn local(host_root: impl AsRef<Path>) -> std::io::Result<Self> {
        let host_root = std::fs::canonicalize(host_root)?;
        Ok(Self {
            agent_root: host_root.clone(),
            host_root,
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
        })
    }

    /// Changes the largest file `fs/read_text_file` returns.
    #[must_use]
    pub fn with_max_read_bytes(mut self, max: u64) -> Self {
        self.max_read_bytes = max;
        self
    }

    /// The canonical host root.
    pub fn host_root(&self) -> &Path {
        &self.host_root
    }

    /// The root as the agent sees it.
    pub fn agent_root(&self) -> &Path {
        &self.agent_root
    }

    /// Translates an agent path to a host path, lexically: the path must be
    /// absolute, free of `..`, and under the agent root (or the host root).
    /// Symlinks are checked by [`Self::read_text_file`] and
    /// [`Self::write_text_file`].
    pub fn to_host(&self, agent_path: &Path) -> Result<PathBuf, FsError> {
        if !agent_path.is_absolute() {
            return Err(FsError::NotAbsolute(agent_path.to_owned()));
        }
        if agent_path.components().any(|c| c == Component::ParentDir) {
            return Err(FsError::ParentDir(agent_path.to_owned()));
        }
        let rel = agent_path
            .strip_prefix(&self.agent_root)
            .or_else(|_| agent_path.strip_prefix(&self.host_root))
            .map_err(|_| FsError::OutsideWorkspace(agent_path.to_owned()))?;
        Ok(self.host_root.join(rel))
    }

    /// Translates a host path under the root to the agent's view.
    pub fn to_agent(&self, host_path: &Path) -> Option<PathBuf> {
        let rel = host_path.strip_prefix(&self.host_root).ok()?;
        Some(self.agent_root.join(rel))
    }

    fn check_inside(&self, resolved: &Path, requested: &Path) -> Result<(), FsError> {
        if resolved.starts_with(&self.host_root) {
            Ok(())
        } else {
            Err(FsError::OutsideWorkspace(requested.to_owned()))
        }
    }

    /// Resolves an existing file, following symlinks, and checks that the
    /// target is inside the workspace.
    async fn resolve_existing(&self, agent_path: &Path) -> Result<PathBuf, FsError> {
        let host = self.to_host(agent_path)?;
        let resolved = tokio::fs::canonicalize(&host)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => FsError::NotFound(agent_path.to_owned()),
                _ => FsError::Io {
                    path: agent_path.to_owned(),
                    source: e,
                },
            })?;
        self.check_inside(&resolved, agent_path)?;
        Ok(resolved)
    }

    /// Resolves a file to write: an existing file (or symlink) must resolve
    /// inside the workspace; for a new file, the nearest existing ancestor
    /// must. Returns the host path to write to.
    async fn resolve_for_write(&self, agent_path: &Path) -> Result<PathBuf, FsError> {
        let host = self.to_host(agent_path)?;
        if tokio::fs::symlink_metadata(&host).await.is_ok() {
            // Exists (possibly a dangling symlink, which canonicalize refuses).
            let resolved = tokio::fs::canonicalize(&host)
                .await
                .map_err(|_| FsError::OutsideWorkspace(agent_path.to_owned()))?;
            self.check_inside(&resolved, agent_path)?;
            return Ok(resolved);
        }
        let mut ancestor = host.parent();
        while let Some(dir) = ancestor {
            if tokio::fs::symlink_metadata(dir).await.is_ok() {
                let resolved = tokio::fs::canonicalize(dir)
                    .await
                    .map_err(|_| FsError::OutsideWorkspace(agent_path.to_owned()))?;
                self.check_inside(&resolved, agent_path)?;
                let rest = host.strip_prefix(dir).unwrap_or(&host);
                return Ok(resolved.join(rest));
            }
            ancestor = dir.parent();
        }
        Err(FsError::OutsideWorkspace(agent_path.to_owned()))
    }

    /// Handles `fs/read_text_file` (with the optional 1-based `line` and
    /// `limit` in lines).
    pub async fn read_text_file(&self, request: &ReadTextFileRequest) -> Result<String, FsError> {
        let path = self.resolve_existing(&request.path).await?;
        let io_err = |source| FsError::Io {
            path: request.path.clone(),
            source,
        };
        let size = tokio::fs::metadata(&path).await.map_err(io_err)?.len();
        if size > self.max_read_bytes {
            return Err(FsError::TooLarge {
                path: request.path.clone(),
                size,
                limit: self.max_read_bytes,
            });
        }
        let bytes = tokio::fs::read(&path).await.map_err(io_err)?;
        let text = String::from_utf8_lossy(&bytes);
        if request.line.is_none() && request.limit.is_none() {
            return Ok(text.into_owned());
        }
        let skip = request.line.map_or(0, |l| l.saturating_sub(1)) as usize;
        let take = request.limit.map_or(usize::MAX, |l| l as usize);
        Ok(text.split_inclusive('\n').skip(skip).take(take).collect())
    }

    /// Handles `fs/write_text_file`, creating the file and missing parent
    /// directories inside the workspace.
    pub async fn write_text_file(&self, request: &WriteTextFileRequest) -> Result<(), FsError> {
        let path = self.resolve_for_write(&request.path).await?;
        let io_err = |source| FsError::Io {
            path: request.path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(io_err)?;
        }
        tokio::fs::write(&path, request.content.as_bytes())
            .await
            .map_err(io_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_agent_paths_to_host_paths() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::new(dir.path(), "/workspace").expect("workspace");
        let host = ws
            .to_host(Path::new("/workspace/src/main.rs"))
            .expect("inside");
        assert_eq!(host, ws.host_root().join("src/main.rs"));
        assert_eq!(
            ws.to_agent(&host).expect("agent path"),
            PathBuf::from("/workspace/src/main.rs")
        );
        // The host path itself is accepted too.
        assert_eq!(ws.to_host(&host).expect("host path"), host);
        assert!(matches!(
            ws.to_host(Path::new("src/main.rs")),
            Err(FsError::NotAbsolute(_))
        ));
        assert!(matches!(
            ws.to_host(Path::new("/workspace/../etc/passwd")),
            Err(FsError::ParentDir(_))
        ));
        assert!(matches!(
            ws.to_host(Path::new("/etc/passwd")),
            Err(FsError::OutsideWorkspace(_))
        ));
        assert!(matches!(
            ws.to_host(Path::new("/workspacex/a")),
            Err(FsError::OutsideWorkspace(_))
        ));
    }

    #[tokio::test]
    async fn reads_line_ranges() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f.txt"), "a\nb\nc\nd\n").expect("write");
        let ws = Workspace::new(dir.path(), "/workspace").expect("workspace");
        let req = ReadTextFileRequest::new("s", "/workspace/f.txt")
            .line(2)
            .limit(2);
        assert_eq!(ws.read_text_file(&req).await.expect("read"), "b\nc\n");
    }
}
