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
    /// Who owns what `fs/write_text_file` creates: the agent's user, when
    /// the host process (root) is not that user.
    owner: Option<(u32, u32)>,
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
            owner: None,
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
            owner: None,
        })
    }

    /// Gives what `fs/write_text_file` writes to `(uid, gid)`: the agent's
    /// user, so files written for it stay its own (for a host process
    /// running as root).
    #[must_use]
    pub fn with_owner(mut self, owner: Option<(u32, u32)>) -> Self {
        self.owner = owner;
        self
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

    #[cfg(not(target_os = "linux"))]
    fn check_inside(&self, resolved: &Path, requested: &Path) -> Result<(), FsError> {
        if resolved.starts_with(&self.host_root) {
            Ok(())
        } else {
            Err(FsError::OutsideWorkspace(requested.to_owned()))
        }
    }

    /// Resolves an existing file, following symlinks, and checks that the
    /// target is inside the workspace.
    #[cfg(not(target_os = "linux"))]
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
    #[cfg(not(target_os = "linux"))]
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

    /// The path below the host root of an agent path (lexically checked).
    #[cfg(target_os = "linux")]
    fn relative(&self, agent_path: &Path) -> Result<PathBuf, FsError> {
        let host = self.to_host(agent_path)?;
        let rel = host
            .strip_prefix(&self.host_root)
            .map_err(|_| FsError::OutsideWorkspace(agent_path.to_owned()))?;
        if rel.as_os_str().is_empty() {
            return Err(FsError::Io {
                path: agent_path.to_owned(),
                source: std::io::Error::other("the workspace root is a directory"),
            });
        }
        Ok(rel.to_owned())
    }

    /// Handles `fs/read_text_file` (with the optional 1-based `line` and
    /// `limit` in lines). On Linux the file is opened relative to the root
    /// with `openat2(RESOLVE_BENEATH)`: the kernel resolves every component,
    /// symlinks included, and refuses anything that leaves the workspace,
    /// so swapping a symlink between a check and the open cannot escape.
    /// Only regular files are read, at most the read limit whatever the
    /// size the file claims.
    #[cfg(target_os = "linux")]
    pub async fn read_text_file(&self, request: &ReadTextFileRequest) -> Result<String, FsError> {
        let rel = self.relative(&request.path)?;
        let root = self.host_root.clone();
        let limit = self.max_read_bytes;
        let agent_path = request.path.clone();
        let bytes = tokio::task::spawn_blocking(move || beneath::read(&root, &rel, limit))
            .await
            .map_err(|e| FsError::Io {
                path: agent_path.clone(),
                source: std::io::Error::other(e),
            })?
            .map_err(|e| e.at(&agent_path))?;
        Ok(lines(&String::from_utf8_lossy(&bytes), request))
    }

    /// Handles `fs/write_text_file`, creating the file and missing parent
    /// directories inside the workspace, fd-relative like
    /// [`Self::read_text_file`].
    #[cfg(target_os = "linux")]
    pub async fn write_text_file(&self, request: &WriteTextFileRequest) -> Result<(), FsError> {
        let rel = self.relative(&request.path)?;
        let root = self.host_root.clone();
        let content = request.content.clone();
        let agent_path = request.path.clone();
        let owner = self.owner;
        tokio::task::spawn_blocking(move || beneath::write(&root, &rel, content.as_bytes(), owner))
            .await
            .map_err(|e| FsError::Io {
                path: agent_path.clone(),
                source: std::io::Error::other(e),
            })?
            .map_err(|e| e.at(&agent_path))
    }

    /// Handles `fs/read_text_file` (with the optional 1-based `line` and
    /// `limit` in lines).
    #[cfg(not(target_os = "linux"))]
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
        Ok(lines(&String::from_utf8_lossy(&bytes), request))
    }

    /// Handles `fs/write_text_file`, creating the file and missing parent
    /// directories inside the workspace.
    #[cfg(not(target_os = "linux"))]
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

/// The requested lines of a text (1-based `line`, `limit` lines).
fn lines(text: &str, request: &ReadTextFileRequest) -> String {
    if request.line.is_none() && request.limit.is_none() {
        return text.to_owned();
    }
    let skip = request.line.map_or(0, |l| l.saturating_sub(1)) as usize;
    let take = request.limit.map_or(usize::MAX, |l| l as usize);
    text.split_inclusive('\n').skip(skip).take(take).collect()
}

/// Files opened relative to the workspace root with `openat2`, never
/// leaving it (Linux 5.6 and later).
#[cfg(target_os = "linux")]
mod beneath {
    use std::{
        fs::File,
        io::{Read, Write},
        os::fd::OwnedFd,
        path::{Path, PathBuf},
    };

    use nix::{
        errno::Errno,
        fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat2},
        sys::stat::{Mode, mkdirat},
        unistd::{Gid, Uid},
    };

    use super::FsError;

    /// Why a fd-relative operation failed, before the agent path is known.
    #[derive(Debug)]
    pub(super) enum Failure {
        Outside,
        NotFound,
        NotRegular,
        TooLarge(u64, u64),
        Io(std::io::Error),
    }

    impl Failure {
        pub(super) fn at(self, path: &Path) -> FsError {
            let path = path.to_owned();
            match self {
                Failure::Outside => FsError::OutsideWorkspace(path),
                Failure::NotFound => FsError::NotFound(path),
                Failure::NotRegular => FsError::Io {
                    path,
                    source: std::io::Error::other("not a regular file"),
                },
                Failure::TooLarge(size, limit) => FsError::TooLarge { path, size, limit },
                Failure::Io(source) => FsError::Io { path, source },
            }
        }
    }

    impl From<Errno> for Failure {
        fn from(errno: Errno) -> Self {
            match errno {
                // EXDEV: the resolution left the root; ELOOP: a magic link
                // or too many links.
                Errno::EXDEV | Errno::ELOOP => Failure::Outside,
                Errno::ENOENT => Failure::NotFound,
                other => Failure::Io(other.into()),
            }
        }
    }

    fn how(flags: OFlag) -> OpenHow {
        // openat2 refuses flags O_PATH ignores (such as O_NOCTTY).
        let extra = if flags.contains(OFlag::O_PATH) {
            OFlag::O_CLOEXEC
        } else {
            OFlag::O_CLOEXEC | OFlag::O_NOCTTY
        };
        OpenHow::new()
            .flags(flags | extra)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS)
    }

    fn root_fd(root: &Path) -> Result<OwnedFd, Failure> {
        Ok(nix::fcntl::open(
            root,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// A regular file's bytes, at most `limit` of them.
    pub(super) fn read(root: &Path, rel: &Path, limit: u64) -> Result<Vec<u8>, Failure> {
        let dir = root_fd(root)?;
        let fd = openat2(&dir, rel, how(OFlag::O_RDONLY | OFlag::O_NONBLOCK))?;
        let mut file = File::from(fd);
        let meta = file.metadata().map_err(Failure::Io)?;
        if !meta.is_file() {
            return Err(Failure::NotRegular);
        }
        if meta.len() > limit {
            return Err(Failure::TooLarge(meta.len(), limit));
        }
        // The size a file claims may change: read one byte past the limit
        // to know it grew.
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        (&mut file)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(Failure::Io)?;
        if bytes.len() as u64 > limit {
            return Err(Failure::TooLarge(bytes.len() as u64, limit));
        }
        Ok(bytes)
    }

    /// Writes a regular file, creating missing parent directories, all
    /// beneath the root.
    pub(super) fn write(
        root: &Path,
        rel: &Path,
        content: &[u8],
        owner: Option<(u32, u32)>,
    ) -> Result<(), Failure> {
        let dir = root_fd(root)?;
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            make_dirs(&dir, parent, owner)?;
        }
        let fd = openat2(
            &dir,
            rel,
            how(OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NONBLOCK)
                .mode(Mode::from_bits_truncate(0o644)),
        )?;
        let mut file = File::from(fd);
        if !file.metadata().map_err(Failure::Io)?.is_file() {
            return Err(Failure::NotRegular);
        }
        if let Some((uid, gid)) = owner {
            nix::unistd::fchown(&file, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
        }
        file.set_len(0).map_err(Failure::Io)?;
        file.write_all(content).map_err(Failure::Io)
    }

    /// Creates each missing directory of `parent`, each in a directory
    /// opened beneath the root.
    fn make_dirs(dir: &OwnedFd, parent: &Path, owner: Option<(u32, u32)>) -> Result<(), Failure> {
        let mut prefix = PathBuf::new();
        for component in parent.components() {
            let here = prefix.clone();
            prefix.push(component);
            match openat2(dir, &prefix, how(OFlag::O_PATH | OFlag::O_DIRECTORY)) {
                Ok(_) => continue,
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
            let parent_fd = if here.as_os_str().is_empty() {
                None
            } else {
                Some(openat2(
                    dir,
                    &here,
                    how(OFlag::O_PATH | OFlag::O_DIRECTORY),
                )?)
            };
            let at = parent_fd.as_ref().unwrap_or(dir);
            match mkdirat(at, component.as_os_str(), Mode::from_bits_truncate(0o755)) {
                Ok(()) => {
                    if let Some((uid, gid)) = owner {
                        // Not following: at worst a link the agent swapped in
                        // is given to it.
                        nix::unistd::fchownat(
                            at,
                            component.as_os_str(),
                            Some(Uid::from_raw(uid)),
                            Some(Gid::from_raw(gid)),
                            AtFlags::AT_SYMLINK_NOFOLLOW,
                        )?;
                    }
                }
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
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

    /// A symlink swapped between a directory inside and one outside, as fast
    /// as a thread can, while reads and writes go through it: none ever
    /// reaches the outside, however the swap and the open interleave.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_symlink_swapped_during_fs_requests_never_escapes() {
        use std::sync::{
            Arc,
            atomic::{AtomicBool, Ordering},
        };
        let root = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("inner")).expect("mkdir");
        std::fs::write(root.path().join("inner/f.txt"), "inside").expect("write");
        std::fs::write(outside.path().join("f.txt"), "SECRET").expect("write");
        let link = root.path().join("link");
        // Relative targets (an absolute one never resolves beneath the
        // root: it is refused outright).
        let inner = PathBuf::from("inner");
        let out = Path::new("..").join(outside.path().file_name().expect("name"));
        assert!(root.path().join(&out).join("f.txt").exists());
        std::os::unix::fs::symlink(&inner, &link).expect("symlink");

        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, link) = (stop.clone(), link.clone());
            std::thread::spawn(move || {
                let tmp = link.with_extension("tmp");
                let mut flips = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let target = if flips.is_multiple_of(2) {
                        &out
                    } else {
                        &inner
                    };
                    let _ = std::fs::remove_file(&tmp);
                    std::os::unix::fs::symlink(target, &tmp).expect("symlink");
                    std::fs::rename(&tmp, &link).expect("swap");
                    flips += 1;
                }
                flips
            })
        };
        let ws = Workspace::new(root.path(), "/workspace").expect("workspace");
        let (mut read_inside, mut refused) = (0, 0);
        for i in 0..3000 {
            let read = ws
                .read_text_file(&ReadTextFileRequest::new("s", "/workspace/link/f.txt"))
                .await;
            match read {
                Ok(text) => {
                    assert_eq!(text, "inside", "a read escaped the workspace");
                    read_inside += 1;
                }
                Err(FsError::OutsideWorkspace(_) | FsError::NotFound(_)) => refused += 1,
                Err(other) => panic!("unexpected: {other}"),
            }
            let write = ws
                .write_text_file(&WriteTextFileRequest::new(
                    "s",
                    "/workspace/link/w.txt",
                    format!("{i}"),
                ))
                .await;
            assert!(
                matches!(
                    write,
                    Ok(()) | Err(FsError::OutsideWorkspace(_) | FsError::NotFound(_))
                ),
                "{write:?}"
            );
        }
        stop.store(true, Ordering::Relaxed);
        let flips = swapper.join().expect("swapper");
        assert!(flips > 100, "the symlink was swapped ({flips} times)");
        assert!(
            read_inside > 0 && refused > 0,
            "both sides were hit: {read_inside} / {refused}"
        );
        assert!(
            !outside.path().join("w.txt").exists(),
            "a write escaped the workspace"
        );
        assert_eq!(
            std::fs::read_to_string(outside.path().join("f.txt")).expect("read"),
            "SECRET"
        );
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn only_regular_files_are_read_and_never_past_the_limit() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("dir")).expect("mkdir");
        std::fs::write(root.path().join("big.txt"), "x".repeat(100)).expect("write");
        let fifo = root.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .expect("mkfifo")
                .success()
        );
        let ws = Workspace::new(root.path(), "/workspace")
            .expect("workspace")
            .with_max_read_bytes(10);
        let req = |p: &'static str| ReadTextFileRequest::new("s", p);
        let dir = ws.read_text_file(&req("/workspace/dir")).await;
        assert!(matches!(dir, Err(FsError::Io { .. })), "{dir:?}");
        let fifo = ws.read_text_file(&req("/workspace/fifo")).await;
        assert!(matches!(fifo, Err(FsError::Io { .. })), "{fifo:?}");
        let big = ws.read_text_file(&req("/workspace/big.txt")).await;
        assert!(
            matches!(
                big,
                Err(FsError::TooLarge {
                    size: 100,
                    limit: 10,
                    ..
                })
            ),
            "{big:?}"
        );
    }
}
