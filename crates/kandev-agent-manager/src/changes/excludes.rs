//! The agent type's state paths in Kandev's repository of a task: kept as
//! `.gitignore` patterns in its `info/exclude` (Kandev's file, which no
//! container mounts), so `git add --all` leaves them out as it leaves out
//! what the work tree's `.gitignore` files ignore (with less precedence
//! than those, and never a file the base tracks), and the mirror does not
//! copy a directory they ignore.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::domain::{AgentError, Result};

/// The largest `info/exclude` read.
const MAX_BYTES: u64 = 256 * 1024;

fn exclude_file(git_dir: &Path) -> PathBuf {
    git_dir.join("info").join("exclude")
}

/// Appends to the repository's `info/exclude` the `patterns` it lacks;
/// whether it changed. Blocking.
pub(super) fn add(git_dir: &Path, patterns: &[String]) -> Result<bool> {
    let path = exclude_file(git_dir);
    let io = |what: &str, e: std::io::Error| {
        AgentError::Internal(format!("cannot {what} {}: {e}", path.display()))
    };
    let current = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io("read", e)),
    };
    let missing: Vec<&String> = patterns
        .iter()
        .filter(|p| !current.lines().any(|line| line == p.as_str()))
        .collect();
    if missing.is_empty() {
        return Ok(false);
    }
    let mut text = current;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if !text.contains(HEADER) {
        text.push_str(HEADER);
        text.push('\n');
    }
    for pattern in missing {
        text.push_str(pattern);
        text.push('\n');
    }
    let dir = path.parent().unwrap_or(git_dir);
    std::fs::create_dir_all(dir).map_err(|e| io("create the directory of", e))?;
    // Written aside, then renamed over: a reader sees the old or the new.
    let staged = path.with_extension("kandev-new");
    std::fs::File::create(&staged)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&staged, &path))
        .map_err(|e| io("write", e))?;
    Ok(true)
}

const HEADER: &str = "# The agent types' state paths (Kandev): not the task's work.";

/// The patterns of the repository's `info/exclude`, rooted at the work
/// tree (`/`); empty when there is none. Blocking.
pub(super) fn matcher(git_dir: &Path) -> Gitignore {
    use std::io::Read as _;
    let mut text = String::new();
    let read = std::fs::File::open(exclude_file(git_dir))
        .and_then(|f| f.take(MAX_BYTES).read_to_string(&mut text));
    if read.is_err() {
        return Gitignore::empty();
    }
    let mut builder = GitignoreBuilder::new("/");
    for line in text.lines() {
        let _ = builder.add_line(None, line);
    }
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_added_once_and_match_from_the_root() {
        let git_dir = tempfile::tempdir().unwrap();
        assert!(matcher(git_dir.path()).is_empty());
        let patterns = [".kandev-mock/".to_string(), "notes/*.tmp".to_string()];
        assert!(add(git_dir.path(), &patterns).unwrap());
        assert!(!add(git_dir.path(), &patterns[..1]).unwrap());
        let text = std::fs::read_to_string(exclude_file(git_dir.path())).unwrap();
        assert_eq!(text.matches(".kandev-mock/").count(), 1, "{text}");
        let m = matcher(git_dir.path());
        assert!(m.matched(Path::new("/.kandev-mock"), true).is_ignore());
        assert!(m.matched(Path::new("/notes/a.tmp"), false).is_ignore());
        assert!(!m.matched(Path::new("/.kandev-mock"), false).is_ignore());
        assert!(!m.matched(Path::new("/src/main.rs"), false).is_ignore());
    }
}
