//! Making a delivered task's clone again for a follow-up (a "Fix CI" turn,
//! say) after the approval removed it (see
//! [`crate::changes::remove_clone_keeping_delivery`]).
//!
//! What the new clone is made of comes only from Kandev's own repository of
//! the task, which no container ever mounted: the URL it was cloned from,
//! the task's branch (the one delivery pushed) and the base it started
//! from. The repository is cloned again from that URL with the same
//! hardened invocation as a first clone ([`crate::workspace`]), on the
//! pushed branch, so the agent resumes from what was pushed (with whatever
//! was pushed on top since); nothing of the removed work tree is read.

use std::path::Path;

use uuid::Uuid;

use crate::{
    changes::{
        BASE_BRANCH, BASE_COMMIT, DELIVERED_COMMIT, DELIVERED_TO, URL, current_branch, recorded,
    },
    domain::{AgentError, Result},
    git::Repo,
    paths::TaskPaths,
};

/// What Kandev's repository of a delivered task recorded.
#[derive(Debug, Clone)]
pub struct Records {
    /// The task's branch, as pushed.
    pub branch: String,
    pub url: String,
    base_commit: String,
    base_branch: String,
    delivered_commit: String,
    delivered_to: String,
}

/// The records of the task's delivered and pushed clone, if Kandev's
/// repository of it is still there (it stays until the retention).
pub async fn delivered_records(workspaces_root: &Path, task_id: Uuid) -> Result<Option<Records>> {
    let repo = TaskPaths::new(workspaces_root, task_id).repo();
    if !repo.git_dir().is_dir() {
        return Ok(None);
    }
    let Ok(delivered_to) = recorded(&repo, DELIVERED_TO).await else {
        return Ok(None);
    };
    if delivered_to.is_empty() {
        // Committed only: nothing was pushed to clone back.
        return Ok(None);
    }
    let branch = current_branch(&repo).await.ok_or_else(|| {
        AgentError::FailedPrecondition("the task's repository is not on a branch".into())
    })?;
    Ok(Some(Records {
        branch,
        url: recorded(&repo, URL).await?,
        base_commit: recorded(&repo, BASE_COMMIT).await?,
        base_branch: recorded(&repo, BASE_BRANCH).await.unwrap_or_default(),
        delivered_commit: recorded(&repo, DELIVERED_COMMIT).await?,
        delivered_to,
    }))
}

/// Sets up the fresh bare clone `repo` of the pushed branch as the task's
/// repository again: on the task's branch, with the base, URL and delivery
/// recorded before, and the index at the branch's tree.
pub async fn resume_branch(repo: &Repo, records: &Records) -> Result<()> {
    let work_ref = format!("refs/heads/{}", records.branch);
    repo.run(["symbolic-ref", "HEAD", &work_ref], None).await?;
    for (key, value) in [
        (BASE_COMMIT, records.base_commit.as_str()),
        (BASE_BRANCH, records.base_branch.as_str()),
        (URL, records.url.as_str()),
        (DELIVERED_COMMIT, records.delivered_commit.as_str()),
        (DELIVERED_TO, records.delivered_to.as_str()),
    ] {
        repo.run(["config", key, value], None).await?;
    }
    repo.run(["read-tree", "HEAD"], None).await?;
    Ok(())
}
