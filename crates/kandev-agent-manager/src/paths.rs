//! Where a task's clone lives on the host: the two repositories of
//! [`crate::workspace`], named once.

use std::path::{Path, PathBuf};

use uuid::Uuid;

/// The directory under the workspaces root holding Kandev's own
/// repositories of tasks.
pub const KANDEV_DIR: &str = ".kandev";

/// Where the two repositories of a task's clone live (see the module's
/// docs).
#[derive(Debug, Clone)]
pub struct TaskPaths {
    /// The agent's work tree, mounted at `/workspace`.
    pub workspace: PathBuf,
    /// Kandev's own: `git/`, `tree/` (the mirror), `staging/`.
    pub kandev: PathBuf,
}

impl TaskPaths {
    pub fn new(workspaces_root: &Path, task_id: Uuid) -> TaskPaths {
        TaskPaths {
            workspace: workspaces_root.join(task_id.to_string()),
            kandev: workspaces_root.join(KANDEV_DIR).join(task_id.to_string()),
        }
    }

    /// Kandev's repository of the task.
    pub fn repo(&self) -> crate::git::Repo {
        repo_in(&self.kandev)
    }

    /// The mirror's scratch directory (see [`crate::mirror::sync`]).
    pub fn staging(&self) -> PathBuf {
        self.kandev.join("staging")
    }
}

pub(crate) fn repo_in(kandev: &Path) -> crate::git::Repo {
    crate::git::Repo::new(kandev.join("git"), kandev.join("tree"))
}
