//! The mirror: Kandev's own copy of a task's work tree.
//!
//! An agent owns everything under its workspace (its `.git` included) and
//! keeps changing it while Kandev reads it. Kandev never runs git there:
//! [`sync`] copies the work tree into a directory only Kandev writes (the
//! mirror), and git reads the mirror with Kandev's own repository (see
//! [`crate::changes`]). Nothing the agent wrote is interpreted on the host:
//!
//! - the walk goes one component at a time from directory descriptors
//!   (`openat` with `O_NOFOLLOW | O_DIRECTORY`), so a directory swapped for
//!   a symlink mid-walk is refused, never followed out of the workspace;
//! - a symlink is copied as a symlink: its target is text to git, which
//!   stores it and never follows it;
//! - a regular file is opened with `O_NOFOLLOW | O_NONBLOCK` and checked
//!   with `fstat` once open, so a symlink, FIFO or device swapped in after
//!   the listing is never read;
//! - FIFOs, sockets and devices are left out (as git leaves them out), and
//!   so is every entry named `.git` at any depth (the agent's repository, a
//!   nested one, or a `gitdir:` file pointing elsewhere);
//! - only the executable bit of a mode reaches the mirror (no setuid);
//! - directories the work tree's `.gitignore` files ignore, or Kandev's
//!   own excludes (the agent type's state paths), and that hold nothing
//!   tracked are not copied (git would leave them out anyway);
//! - sizes, entries and depth are bounded ([`Limits`]).
//!
//! A file is copied again when its size, modification time or executable
//! bit differ from the mirror's copy (which is given the source's
//! modification time).

use std::{
    collections::HashSet,
    ffi::{OsStr, OsString},
    fs::File,
    io::{Read, Write},
    os::{
        fd::{AsFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use nix::{
    errno::Errno,
    fcntl::{AtFlags, OFlag, open, openat, readlinkat, renameat},
    sys::{
        stat::{FileStat, Mode, SFlag, fstat, fstatat, futimens, mkdirat},
        time::TimeSpec,
    },
    unistd::{UnlinkatFlags, symlinkat, unlinkat},
};

use crate::domain::{AgentError, Result};

/// Bounds on what one sync copies.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Files, links and directories walked.
    pub max_entries: usize,
    /// The largest file copied; a larger one fails the sync with its path.
    pub max_file_bytes: u64,
    /// The deepest directory walked.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 500_000,
            max_file_bytes: 100 * 1024 * 1024,
            max_depth: 128,
        }
    }
}

/// What one sync did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncStats {
    /// Entries walked.
    pub entries: usize,
    /// Files and links written to the mirror.
    pub copied: usize,
    pub bytes_copied: u64,
    /// Mirror entries removed (gone from the workspace, or left out).
    pub removed: usize,
    /// Entries left out: special files, `.git`, entries that changed kind
    /// while being read.
    pub skipped: usize,
}

/// The largest `.gitignore` read.
const MAX_GITIGNORE_BYTES: u64 = 256 * 1024;

/// How a file of the workspace is opened: never through a link, never
/// blocking on a FIFO swapped in (checked with `fstat` once open).
const READ_FILE: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_CLOEXEC);

/// How a directory is opened: never through a link.
const OPEN_DIR: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Where a file is written before it is renamed into the mirror.
const STAGED: &str = "file";

/// What decides that a directory is left out of the mirror.
#[derive(Debug, Clone, Copy)]
pub struct Ignored<'a> {
    /// The directories holding tracked files: never left out.
    pub tracked_dirs: &'a HashSet<String>,
    /// Kandev's own excludes (its repository's `info/exclude`), rooted at
    /// the work tree (`/`): the lowest precedence, below every
    /// `.gitignore`, as git gives them.
    pub excludes: &'a Gitignore,
}

/// Makes `mirror` a copy of the work tree at `workspace` (see the module's
/// docs). `ignored` says which directories are left out; `staging` is an
/// empty directory of Kandev's on the mirror's file system. Blocking.
pub fn sync(
    workspace: &Path,
    mirror: &Path,
    staging: &Path,
    ignored: &Ignored<'_>,
    limits: &Limits,
) -> Result<SyncStats> {
    let src = open_root(workspace)?;
    let dst = open_root(mirror)?;
    let staging = open_root(staging)?;
    let mut walk = Walk {
        tracked_dirs: ignored.tracked_dirs,
        excludes: ignored.excludes,
        limits,
        staging,
        ignores: Vec::new(),
        stats: SyncStats::default(),
    };
    walk.dir(&src, &dst, Path::new(""), 0)?;
    Ok(walk.stats)
}

/// Bytes used by the files under `dir`, walked as [`sync`] walks (no link
/// followed), up to `limits`' entries and depth. Blocking.
pub fn disk_usage(dir: &Path, limits: &Limits) -> u64 {
    fn walk(dir: &OwnedFd, depth: usize, budget: &mut usize, limits: &Limits) -> u64 {
        let Ok(names) = list(dir) else { return 0 };
        let mut total = 0u64;
        for name in names {
            if *budget == 0 {
                break;
            }
            *budget -= 1;
            let Ok(st) = fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            if kind(&st) == Kind::Dir {
                if depth < limits.max_depth
                    && let Ok(sub) = open_dir_at(dir, &name)
                {
                    total = total.saturating_add(walk(&sub, depth + 1, budget, limits));
                }
            } else {
                total = total.saturating_add(u64::try_from(st.st_size).unwrap_or(0));
            }
        }
        total
    }
    let Ok(root) = open_root(dir) else { return 0 };
    let mut budget = limits.max_entries;
    walk(&root, 0, &mut budget, limits)
}

/// Gives a tree just made by Kandev (a fresh clone) to `owner`, without
/// following links. Blocking.
pub fn chown_tree(dir: &Path, owner: (u32, u32), limits: &Limits) -> Result<()> {
    fn walk(dir: &OwnedFd, owner: (u32, u32), depth: usize, limits: &Limits) -> Result<()> {
        for name in list(dir)? {
            let st = fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(|e| io_error("stat", &name, e))?;
            chown_at(dir, &name, owner)?;
            if kind(&st) == Kind::Dir && depth < limits.max_depth {
                let sub = open_dir_at(dir, &name).map_err(|e| io_error("open", &name, e))?;
                walk(&sub, owner, depth + 1, limits)?;
            }
        }
        Ok(())
    }
    let root = open_root(dir)?;
    nix::unistd::fchown(
        &root,
        Some(nix::unistd::Uid::from_raw(owner.0)),
        Some(nix::unistd::Gid::from_raw(owner.1)),
    )
    .map_err(|e| io_error("chown", dir.as_os_str(), e))?;
    walk(&root, owner, 0, limits)
}

fn chown_at(dir: &OwnedFd, name: &OsStr, (uid, gid): (u32, u32)) -> Result<()> {
    nix::unistd::fchownat(
        dir,
        name,
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(|e| io_error("chown", name, e))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File {
        exec: bool,
    },
    Link,
    Dir,
    /// FIFOs, sockets, devices.
    Other,
}

fn kind(st: &FileStat) -> Kind {
    let format = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    match format {
        SFlag::S_IFREG => Kind::File {
            exec: st.st_mode & 0o100 != 0,
        },
        SFlag::S_IFLNK => Kind::Link,
        SFlag::S_IFDIR => Kind::Dir,
        _ => Kind::Other,
    }
}

struct Walk<'a> {
    tracked_dirs: &'a HashSet<String>,
    excludes: &'a Gitignore,
    limits: &'a Limits,
    staging: OwnedFd,
    /// The `.gitignore` of each directory on the way down that has one.
    ignores: Vec<Gitignore>,
    stats: SyncStats,
}

impl Walk<'_> {
    /// Syncs one directory: its entries, then removes what the mirror has
    /// beyond them.
    fn dir(&mut self, src: &OwnedFd, dst: &OwnedFd, rel: &Path, depth: usize) -> Result<()> {
        if depth > self.limits.max_depth {
            return Err(AgentError::FailedPrecondition(format!(
                "the workspace nests directories deeper than {} levels (at {})",
                self.limits.max_depth,
                rel.display()
            )));
        }
        let names = list(src)?;
        let pushed = self.push_gitignore(src, rel);
        let mut kept: HashSet<OsString> = HashSet::with_capacity(names.len());
        for name in names {
            self.stats.entries += 1;
            if self.stats.entries > self.limits.max_entries {
                return Err(AgentError::FailedPrecondition(format!(
                    "the workspace holds more than {} files and directories",
                    self.limits.max_entries
                )));
            }
            if self.entry(src, dst, rel, &name, depth)? {
                kept.insert(name);
            } else {
                self.stats.skipped += 1;
            }
        }
        if pushed {
            self.ignores.pop();
        }
        for name in list(dst)? {
            if !kept.contains(&name) {
                remove_entry(dst, &name, 0)?;
                self.stats.removed += 1;
            }
        }
        Ok(())
    }

    /// Syncs one entry; whether the mirror keeps it.
    fn entry(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        rel: &Path,
        name: &OsStr,
        depth: usize,
    ) -> Result<bool> {
        if name == ".git" {
            return Ok(false);
        }
        // Gone since the listing: nothing to copy.
        let Ok(st) = fstatat(src, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return Ok(false);
        };
        let path = rel.join(name);
        match kind(&st) {
            Kind::File { exec } => self.file(src, dst, &path, name, &st, exec),
            Kind::Link => self.link(src, dst, name),
            Kind::Dir => {
                if self.ignored_dir(&path) {
                    return Ok(false);
                }
                // Swapped for something else since the stat: left out.
                let Ok(sub_src) = open_dir_at(src, name) else {
                    return Ok(false);
                };
                let sub_dst = ensure_dir(dst, name)?;
                self.dir(&sub_src, &sub_dst, &path, depth + 1)?;
                Ok(true)
            }
            Kind::Other => Ok(false),
        }
    }

    fn file(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        path: &Path,
        name: &OsStr,
        listed: &FileStat,
        exec: bool,
    ) -> Result<bool> {
        if let Ok(have) = fstatat(dst, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            && kind(&have) == (Kind::File { exec })
            && same_content_stamp(&have, listed)
        {
            return Ok(true);
        }
        let Ok(fd) = openat(src, name, READ_FILE, Mode::empty()) else {
            return Ok(false);
        };
        let st = fstat(&fd).map_err(|e| io_error("stat", name, e))?;
        let Kind::File { exec } = kind(&st) else {
            return Ok(false);
        };
        let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
        if size > self.limits.max_file_bytes {
            return Err(AgentError::FailedPrecondition(format!(
                "{} is {size} bytes, more than the {} bytes Kandev reads of one file; \
                 remove it or list it in .gitignore",
                path.display(),
                self.limits.max_file_bytes
            )));
        }
        let copied = self.copy_into(File::from(fd), dst, name, exec, &st)?;
        self.stats.copied += 1;
        self.stats.bytes_copied += copied;
        Ok(true)
    }

    /// Writes `from` into the staging directory, then renames it over the
    /// mirror's `name` (whatever was there).
    fn copy_into(
        &self,
        from: File,
        dst: &OwnedFd,
        name: &OsStr,
        exec: bool,
        st: &FileStat,
    ) -> Result<u64> {
        let _ = unlinkat(&self.staging, STAGED, UnlinkatFlags::NoRemoveDir);
        let mode = Mode::from_bits_truncate(if exec { 0o755 } else { 0o644 });
        let out = openat(
            &self.staging,
            STAGED,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            mode,
        )
        .map_err(|e| io_error("create", OsStr::new(STAGED), e))?;
        let mut out = File::from(out);
        // Bounded even if the file grows while it is read.
        let mut limited = from.take(self.limits.max_file_bytes);
        let copied = std::io::copy(&mut limited, &mut out)
            .map_err(|e| AgentError::Internal(format!("copying {name:?}: {e}")))?;
        out.flush()
            .map_err(|e| AgentError::Internal(format!("copying {name:?}: {e}")))?;
        let mtime = TimeSpec::new(st.st_mtime, st.st_mtime_nsec);
        futimens(&out, &TimeSpec::UTIME_OMIT, &mtime).map_err(|e| io_error("stamp", name, e))?;
        replace_with_staged(&self.staging, dst, name)?;
        Ok(copied)
    }

    fn link(&mut self, src: &OwnedFd, dst: &OwnedFd, name: &OsStr) -> Result<bool> {
        let Ok(target) = readlinkat(src, name) else {
            return Ok(false);
        };
        if let Ok(have) = readlinkat(dst, name)
            && have == target
        {
            return Ok(true);
        }
        let _ = unlinkat(&self.staging, STAGED, UnlinkatFlags::NoRemoveDir);
        symlinkat(target.as_os_str(), &self.staging, STAGED)
            .map_err(|e| io_error("link", name, e))?;
        replace_with_staged(&self.staging, dst, name)?;
        self.stats.copied += 1;
        Ok(true)
    }

    /// Reads the directory's `.gitignore`, if any; whether one was pushed.
    fn push_gitignore(&mut self, src: &OwnedFd, rel: &Path) -> bool {
        let Some(text) = read_small(src, OsStr::new(".gitignore"), MAX_GITIGNORE_BYTES) else {
            return false;
        };
        let root = Path::new("/").join(rel);
        let mut builder = GitignoreBuilder::new(&root);
        for line in String::from_utf8_lossy(&text).lines() {
            let _ = builder.add_line(None, line);
        }
        match builder.build() {
            Ok(ignore) => {
                self.ignores.push(ignore);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether the directory at `path` is ignored by the nearest
    /// `.gitignore` that decides (else by Kandev's excludes), and holds
    /// nothing tracked.
    fn ignored_dir(&self, path: &Path) -> bool {
        if self.tracked_dirs.contains(path.to_string_lossy().as_ref()) {
            return false;
        }
        let abs = Path::new("/").join(path);
        for ignore in self.ignores.iter().rev().chain([self.excludes]) {
            let decided = ignore.matched(&abs, true);
            if decided.is_ignore() {
                return true;
            }
            if decided.is_whitelist() {
                return false;
            }
        }
        false
    }
}

/// The same size and modification time: the mirror's copy is current.
fn same_content_stamp(have: &FileStat, source: &FileStat) -> bool {
    have.st_size == source.st_size
        && have.st_mtime == source.st_mtime
        && have.st_mtime_nsec == source.st_mtime_nsec
}

fn replace_with_staged(staging: &OwnedFd, dst: &OwnedFd, name: &OsStr) -> Result<()> {
    if let Ok(st) = fstatat(dst, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        && kind(&st) == Kind::Dir
    {
        remove_entry(dst, name, 0)?;
    }
    renameat(staging, STAGED, dst, name).map_err(|e| io_error("rename", name, e))
}

/// The directory `name` in the mirror, made (over whatever else was there)
/// if needed.
fn ensure_dir(dst: &OwnedFd, name: &OsStr) -> Result<OwnedFd> {
    match fstatat(dst, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if kind(&st) == Kind::Dir => {}
        Ok(_) => {
            remove_entry(dst, name, 0)?;
            mkdirat(dst, name, Mode::from_bits_truncate(0o755))
                .map_err(|e| io_error("mkdir", name, e))?;
        }
        Err(_) => mkdirat(dst, name, Mode::from_bits_truncate(0o755))
            .map_err(|e| io_error("mkdir", name, e))?,
    }
    open_dir_at(dst, name).map_err(|e| io_error("open", name, e))
}

/// Removes `name` from a directory of Kandev's own, a tree recursively.
fn remove_entry(dir: &OwnedFd, name: &OsStr, depth: usize) -> Result<()> {
    let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(io_error("stat", name, e)),
    };
    if kind(&st) == Kind::Dir {
        if depth > 1024 {
            return Err(AgentError::Internal("the mirror nests too deep".into()));
        }
        let sub = open_dir_at(dir, name).map_err(|e| io_error("open", name, e))?;
        for child in list(&sub)? {
            remove_entry(&sub, &child, depth + 1)?;
        }
        unlinkat(dir, name, UnlinkatFlags::RemoveDir).map_err(|e| io_error("remove", name, e))
    } else {
        unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).map_err(|e| io_error("remove", name, e))
    }
}

/// A small regular file's bytes, opened as [`Walk::file`] opens; `None`
/// when it is missing, not a regular file or larger than `max`.
fn read_small(dir: &OwnedFd, name: &OsStr, max: u64) -> Option<Vec<u8>> {
    let fd = openat(dir, name, READ_FILE, Mode::empty()).ok()?;
    let st = fstat(&fd).ok()?;
    if !matches!(kind(&st), Kind::File { .. }) || u64::try_from(st.st_size).ok()? > max {
        return None;
    }
    let mut bytes = Vec::new();
    File::from(fd).take(max).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn open_root(path: &Path) -> Result<OwnedFd> {
    open(path, OPEN_DIR, Mode::empty()).map_err(|e| io_error("open", path.as_os_str(), e))
}

fn open_dir_at(dir: impl AsFd, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(dir, name, OPEN_DIR, Mode::empty())
}

/// The names in a directory (without `.` and `..`), sorted.
fn list(dir: &OwnedFd) -> Result<Vec<OsString>> {
    let mut handle = nix::dir::Dir::openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_error("list", OsStr::new("."), e))?;
    let mut names = Vec::new();
    for entry in handle.iter() {
        let entry = entry.map_err(|e| io_error("list", OsStr::new("."), e))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    names.sort();
    Ok(names)
}

fn io_error(what: &str, name: &OsStr, e: Errno) -> AgentError {
    AgentError::Internal(format!("{what} {}: {e}", PathBuf::from(name).display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    struct Dirs {
        _tmp: tempfile::TempDir,
        ws: PathBuf,
        mirror: PathBuf,
        staging: PathBuf,
    }

    fn dirs() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let [ws, mirror, staging] = ["ws", "mirror", "staging"].map(|d| {
            let p = tmp.path().join(d);
            std::fs::create_dir(&p).unwrap();
            p
        });
        Dirs {
            _tmp: tmp,
            ws,
            mirror,
            staging,
        }
    }

    fn run(d: &Dirs, tracked: &[&str]) -> SyncStats {
        run_excluding(d, tracked, &Gitignore::empty())
    }

    fn run_excluding(d: &Dirs, tracked: &[&str], excludes: &Gitignore) -> SyncStats {
        let tracked = tracked.iter().map(|s| s.to_string()).collect();
        let ignored = Ignored {
            tracked_dirs: &tracked,
            excludes,
        };
        sync(&d.ws, &d.mirror, &d.staging, &ignored, &Limits::default()).unwrap()
    }

    fn nothing_ignored() -> (HashSet<String>, Gitignore) {
        (HashSet::new(), Gitignore::empty())
    }

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    #[test]
    fn files_links_and_directories_are_copied_and_removals_follow() {
        let d = dirs();
        write(&d.ws, "a.txt", b"a");
        write(&d.ws, "dir/b.txt", b"b");
        write(&d.ws, "run.sh", b"#!/bin/sh\n");
        std::fs::set_permissions(d.ws.join("run.sh"), PermissionsExt::from_mode(0o4755)).unwrap();
        symlink("/etc/passwd", d.ws.join("link")).unwrap();
        write(&d.ws, ".git/config", b"[core]\n");
        write(&d.ws, "sub/.git", b"gitdir: /elsewhere\n");
        nix::unistd::mkfifo(&d.ws.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();

        let first = run(&d, &[]);
        assert_eq!(std::fs::read(d.mirror.join("dir/b.txt")).unwrap(), b"b");
        assert_eq!(
            std::fs::read_link(d.mirror.join("link")).unwrap(),
            Path::new("/etc/passwd")
        );
        let mode = std::fs::metadata(d.mirror.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755, "only the executable bit is kept");
        for gone in [".git", "sub/.git", "fifo"] {
            assert!(
                std::fs::symlink_metadata(d.mirror.join(gone)).is_err(),
                "{gone} reached the mirror"
            );
        }
        assert!(first.copied >= 4, "{first:?}");

        // Unchanged: nothing copied again.
        let again = run(&d, &[]);
        assert_eq!(again.copied, 0, "{again:?}");

        // A directory becomes a link, a file a directory, a file goes.
        std::fs::remove_dir_all(d.ws.join("dir")).unwrap();
        symlink("/", d.ws.join("dir")).unwrap();
        std::fs::remove_file(d.ws.join("a.txt")).unwrap();
        write(&d.ws, "a.txt/inner", b"i");
        std::fs::remove_file(d.ws.join("run.sh")).unwrap();
        run(&d, &[]);
        assert_eq!(
            std::fs::read_link(d.mirror.join("dir")).unwrap(),
            Path::new("/")
        );
        assert_eq!(std::fs::read(d.mirror.join("a.txt/inner")).unwrap(), b"i");
        assert!(std::fs::symlink_metadata(d.mirror.join("run.sh")).is_err());
    }

    #[test]
    fn ignored_directories_are_left_out_unless_they_hold_tracked_files() {
        let d = dirs();
        write(&d.ws, ".gitignore", b"node_modules/\nbuild/\n");
        write(&d.ws, "node_modules/x/index.js", b"x");
        write(&d.ws, "build/kept.txt", b"tracked");
        write(&d.ws, "pkg/.gitignore", b"out/\n!keep/\n");
        write(&d.ws, "pkg/out/gen.txt", b"g");
        write(&d.ws, "pkg/keep/k.txt", b"k");
        run(&d, &["build"]);
        assert!(!d.mirror.join("node_modules").exists());
        assert!(!d.mirror.join("pkg/out").exists());
        assert!(d.mirror.join("pkg/keep/k.txt").exists());
        assert!(d.mirror.join("build/kept.txt").exists());
    }

    #[test]
    fn directories_kandev_excludes_are_left_out_below_every_gitignore() {
        let d = dirs();
        write(&d.ws, ".kandev-mock/sessions/s.json", b"{}");
        write(&d.ws, "keep/.kandev-mock/x", b"x");
        write(&d.ws, ".claude/settings.json", b"tracked");
        write(&d.ws, "src/.gitignore", b"!.kandev-mock/\n");
        write(&d.ws, "src/.kandev-mock/y", b"y");
        let mut builder = GitignoreBuilder::new("/");
        for line in [".kandev-mock/", ".claude/"] {
            builder.add_line(None, line).unwrap();
        }
        let excludes = builder.build().unwrap();
        run_excluding(&d, &[".claude"], &excludes);
        assert!(!d.mirror.join(".kandev-mock").exists());
        assert!(!d.mirror.join("keep/.kandev-mock").exists());
        // A directory holding tracked files is copied (git decides file by
        // file), and a .gitignore's negation wins over Kandev's excludes.
        assert!(d.mirror.join(".claude/settings.json").exists());
        assert!(d.mirror.join("src/.kandev-mock/y").exists());
    }

    #[test]
    fn limits_are_errors_that_say_which() {
        let d = dirs();
        write(&d.ws, "big.bin", &vec![0u8; 2048]);
        let limits = Limits {
            max_file_bytes: 1024,
            ..Limits::default()
        };
        let (tracked, excludes) = nothing_ignored();
        let ignored = Ignored {
            tracked_dirs: &tracked,
            excludes: &excludes,
        };
        let err = sync(&d.ws, &d.mirror, &d.staging, &ignored, &limits).unwrap_err();
        assert!(err.to_string().contains("big.bin"), "{err}");

        let d = dirs();
        let deep: String = (0..10).map(|i| format!("d{i}/")).collect();
        write(&d.ws, &format!("{deep}f"), b"f");
        let limits = Limits {
            max_depth: 4,
            ..Limits::default()
        };
        let err = sync(&d.ws, &d.mirror, &d.staging, &ignored, &limits).unwrap_err();
        assert!(err.to_string().contains("deeper than 4"), "{err}");
    }

    #[test]
    fn disk_usage_does_not_follow_links() {
        let d = dirs();
        write(&d.ws, "a", &[1u8; 100]);
        symlink("/usr", d.ws.join("usr")).unwrap();
        let used = disk_usage(&d.ws, &Limits::default());
        assert!((100..1000).contains(&used), "{used}");
    }
}
