//! Task clones made the way a launch makes them (Kandev's repository and
//! the agent's copy), on a bare repository standing for the task's remote.

use std::path::{Path, PathBuf};

use kandev_agent_manager::{
    Settings,
    changes::{self, TaskRepo},
    workspace::{self, Prepared, WorkspaceSource},
};
use tempfile::TempDir;
use uuid::Uuid;

pub use crate::helpers::git;

/// A task's clone of a bare remote whose `main` holds `files`.
pub struct Clone {
    pub dir: TempDir,
    pub settings: Settings,
    pub task_id: Uuid,
    pub task: TaskRepo,
}

impl Clone {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The agent's work tree.
    pub fn work(&self) -> PathBuf {
        self.task.workspace().to_path_buf()
    }

    /// The bare repository the task was cloned from.
    pub fn remote(&self) -> PathBuf {
        self.root().join("repos/remote.git")
    }

    /// `git <args>` in the remote, its standard output.
    pub fn remote_git(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(self.remote())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

pub fn write(dir: &Path, path: &str, content: &[u8]) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Clones a new remote holding `files` on `main` for a task titled `title`.
pub async fn clone_of(files: &[(&str, &[u8])], title: &str) -> Clone {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    for (path, content) in files {
        write(&src, path, content);
    }
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-q", "-m", "base"]);
    std::fs::create_dir_all(root.join("repos")).unwrap();
    git(root, &["clone", "-q", "--bare", "src", "repos/remote.git"]);
    let settings = Settings::rooted_in(root);
    let task_id = Uuid::new_v4();
    let source = WorkspaceSource::Git {
        url: root.join("repos/remote.git").display().to_string(),
        branch: "main".into(),
        title: title.into(),
    };
    let Prepared::Clone(pending) = workspace::prepare(&settings, task_id, source)
        .await
        .unwrap()
    else {
        panic!("a new task's clone is made, not reused");
    };
    pending.run().await.unwrap();
    let task = changes::task_repo(Path::new(&settings.workspaces_root), task_id)
        .await
        .unwrap();
    Clone {
        dir,
        settings,
        task_id,
        task,
    }
}
