//! Delivering a task's work: a commit of the agent's work tree on the
//! task's branch in Kandev's own repository, pushed to the repository the
//! task was cloned from, optionally merged into its base there.
//!
//! What is pushed, and where, comes only from Kandev's own repository of
//! the task: the URL and branch recorded at clone time, never the agent's
//! remote, `HEAD` or configuration; the credentials a push carries are for
//! that URL only. What is committed is what Changes show: the work tree
//! without what its `.gitignore` files ignore or the agent type declares
//! as its own state (see [`crate::changes`]). The delivery is recorded
//! there too, so the delivered change stays readable after the clone goes.

use std::path::Path;

use tracing::instrument;

use crate::{
    changes::{
        BASE_BRANCH, TaskRepo, URL, commit_of, current_branch, record_delivery, recorded, stage,
    },
    domain::{AgentError, Result},
    git::Repo,
};

/// What [`deliver`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub branch: String,
    /// The branch the task's branch started from.
    pub base_branch: String,
    /// The branch's commit after delivery.
    pub commit: String,
    /// Whether uncommitted work was committed.
    pub committed: bool,
    /// The remote pushed to (credentials removed), when pushed.
    pub pushed_to: Option<String>,
}

/// How far [`deliver`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ship {
    /// Commit on the task's branch.
    Commit,
    /// Commit, and push the task's branch.
    Push,
    /// Commit, push the task's branch, and merge it into the base branch on
    /// the remote (for repositories without a forge): the merge is made
    /// without touching the clone's files, and refused on a conflict.
    Merge,
}

/// Who commits: the user who delivers.
#[derive(Debug, Clone)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// Commits the agent's work tree to the task's branch (when anything
/// changed) and, unless `how` is [`Ship::Commit`], pushes the branch to the
/// URL recorded when the task was cloned (checked against the repository
/// policy again: the policy may have changed since).
#[instrument(skip_all, fields(how = ?how))]
pub async fn deliver(
    task: &TaskRepo,
    settings: &crate::config::Settings,
    message: &str,
    author: &Author,
    how: Ship,
    push_auth: Option<&str>,
) -> Result<Delivery> {
    let repo = task.repo();
    let branch = current_branch(repo)
        .await
        .ok_or_else(|| AgentError::FailedPrecondition("the clone is not on a branch".into()))?;
    let base_branch = recorded(repo, BASE_BRANCH).await.unwrap_or_default();
    let _staged = stage(task).await?;
    let committed = commit_work(repo, message, author).await?;
    let commit = commit_of(repo, "HEAD").await?;
    let mut pushed_to = None;
    if how != Ship::Commit {
        let url = recorded(repo, URL).await?;
        let protocols = crate::repository::check(settings, &url).await?;
        let pusher = repo.with_env(push_env(settings, &url, push_auth));
        let refspec = format!("refs/heads/{branch}:refs/heads/{branch}");
        if let Err(reason) = push_ref(&pusher, &url, &protocols, refspec).await? {
            return Err(AgentError::FailedPrecondition(format!(
                "pushing {branch} to {} was refused: {reason}",
                crate::repository::redact_url(&url),
            )));
        }
        pushed_to = Some(crate::repository::redact_url(&url));
        if how == Ship::Merge {
            merge_into_base(&pusher, &url, &protocols, &branch, &base_branch, author).await?;
        }
    }
    // What the task's Changes show once the clone is gone.
    record_delivery(repo, &commit, pushed_to.as_deref()).await?;
    Ok(Delivery {
        branch,
        base_branch,
        commit,
        committed,
        pushed_to,
    })
}

/// Commits what is staged, if it differs from `HEAD`; whether it did.
async fn commit_work(repo: &Repo, message: &str, author: &Author) -> Result<bool> {
    let unchanged = repo
        .run_status(["diff", "--cached", "--quiet", "--no-ext-diff", "HEAD", "--"])
        .await?;
    if unchanged {
        return Ok(false);
    }
    let message = if message.trim().is_empty() {
        "Changes made by the agent"
    } else {
        message
    };
    let mut args = author_config(author).to_vec();
    args.extend(
        [
            "-c",
            "commit.gpgSign=false",
            "commit",
            "--quiet",
            "--no-verify",
            "--message",
            message,
        ]
        .map(str::to_string),
    );
    repo.run(args, None).await?;
    Ok(true)
}

/// `-c` options making `author` the committer and author of a commit.
fn author_config(author: &Author) -> [String; 4] {
    [
        "-c".into(),
        format!("user.name={}", author.name),
        "-c".into(),
        format!("user.email={}", author.email),
    ]
}

/// Pushes `refspec` to `url`; on refusal, why, in git's words with the
/// URL's credentials removed: the porcelain line of the refused ref
/// ("[rejected] (non-fast-forward)", "[remote rejected] (...)"), else git's
/// first fatal or error line.
async fn push_ref(
    repo: &Repo,
    url: &str,
    protocols: &[String],
    refspec: String,
) -> Result<std::result::Result<(), String>> {
    let mut args = crate::repository::protocol_args(protocols);
    args.extend([
        "push".into(),
        "--porcelain".into(),
        "--".into(),
        url.to_string(),
        refspec,
    ]);
    let output = repo.output(args).await?;
    if output.status.success() {
        return Ok(Ok(()));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let reason = stdout
        .lines()
        .find(|l| l.starts_with('!'))
        .and_then(|l| l.rsplit('\t').next())
        .map(str::to_string)
        .or_else(|| crate::git::failure_line(&stderr).map(str::to_string))
        .unwrap_or_else(|| "git push failed".into())
        .replace(url, &crate::repository::redact_url(url));
    Ok(Err(reason))
}

/// The credentials a push uses: over http(s), a token from configuration
/// (`user:token`, sent as basic auth) or else the operator's stored
/// credentials (`.git-credentials`); over ssh, the keys and known hosts of
/// `credentials_home` (the same files agents get read-only).
fn push_env(
    settings: &crate::config::Settings,
    url: &str,
    push_auth: Option<&str>,
) -> Vec<(String, String)> {
    use base64::Engine as _;
    let mut env = Vec::new();
    let home = Path::new(&settings.credentials_home);
    if !settings.credentials_home.is_empty() {
        env.push(("HOME".to_string(), settings.credentials_home.clone()));
    }
    let http = url.starts_with("https://") || url.starts_with("http://");
    let mut config: Vec<(String, String)> = Vec::new();
    match push_auth.filter(|a| !a.is_empty()) {
        Some(auth) if http => {
            let basic = base64::engine::general_purpose::STANDARD.encode(auth);
            config.push((
                "http.extraHeader".into(),
                format!("Authorization: Basic {basic}"),
            ));
        }
        _ if http && home.join(".git-credentials").is_file() => {
            config.push((
                "credential.helper".into(),
                format!("store --file={}", home.join(".git-credentials").display()),
            ));
        }
        _ => {}
    }
    // Through the environment, not the command line: other users can read
    // a process's arguments.
    if !config.is_empty() {
        env.push(("GIT_CONFIG_COUNT".into(), config.len().to_string()));
        for (i, (key, value)) in config.into_iter().enumerate() {
            env.push((format!("GIT_CONFIG_KEY_{i}"), key));
            env.push((format!("GIT_CONFIG_VALUE_{i}"), value));
        }
    }
    env
}

/// Merges `branch` into the remote's `base` (a merge commit made with
/// `merge-tree`, so the work tree is left alone) and pushes the base. A
/// conflict is refused with the files that conflict; a base that moved
/// meanwhile makes the push fail without forcing.
async fn merge_into_base(
    repo: &Repo,
    url: &str,
    protocols: &[String],
    branch: &str,
    base: &str,
    author: &Author,
) -> Result<()> {
    if base.is_empty() {
        return Err(AgentError::FailedPrecondition(
            "the clone has no recorded base branch to merge into".into(),
        ));
    }
    let redacted = crate::repository::redact_url(url);
    let mut fetch = crate::repository::protocol_args(protocols);
    fetch.extend([
        "fetch".into(),
        "--quiet".into(),
        "--".into(),
        url.to_string(),
        format!("refs/heads/{base}"),
    ]);
    repo.run(fetch, None).await.map_err(|e| {
        AgentError::FailedPrecondition(format!("cannot fetch {base} from {redacted}: {e}"))
    })?;
    let base_commit = commit_of(repo, "FETCH_HEAD").await?;
    let merged = repo
        .output([
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            &base_commit,
            branch,
        ])
        .await?;
    let out = String::from_utf8_lossy(&merged.stdout);
    let mut lines = out.lines();
    let tree = lines.next().unwrap_or_default().trim().to_string();
    match merged.status.code() {
        Some(0) => {}
        Some(1) => {
            let files: Vec<&str> = lines.filter(|l| !l.is_empty()).take(20).collect();
            return Err(AgentError::FailedPrecondition(format!(
                "{branch} does not merge cleanly into {base}: conflicts in {}",
                files.join(", ")
            )));
        }
        _ => {
            return Err(AgentError::FailedPrecondition(format!(
                "git merge-tree: {}",
                String::from_utf8_lossy(&merged.stderr).trim()
            )));
        }
    }
    let mut args = author_config(author).to_vec();
    args.extend([
        "commit-tree".to_string(),
        tree,
        "-p".to_string(),
        base_commit,
        "-p".to_string(),
        branch.to_string(),
        "-m".to_string(),
        format!("Merge {branch} into {base}"),
    ]);
    let commit = repo.run(args, None).await?;
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
    if let Err(reason) =
        push_ref(repo, url, protocols, format!("{commit}:refs/heads/{base}")).await?
    {
        return Err(AgentError::FailedPrecondition(format!(
            "pushing the merge into {base} to {redacted} was refused: {reason}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_uses_the_configured_token_or_the_stored_credentials() {
        let home = tempfile::tempdir().unwrap();
        let settings = crate::config::Settings {
            credentials_home: home.path().display().to_string(),
            ..Default::default()
        };
        let get = |env: &[(String, String)], key: &str| {
            env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        };
        let env = push_env(
            &settings,
            "https://github.com/a/b.git",
            Some("x-access-token:t0k"),
        );
        assert_eq!(
            get(&env, "GIT_CONFIG_KEY_0").as_deref(),
            Some("http.extraHeader")
        );
        // base64("x-access-token:t0k")
        assert_eq!(
            get(&env, "GIT_CONFIG_VALUE_0").as_deref(),
            Some("Authorization: Basic eC1hY2Nlc3MtdG9rZW46dDBr")
        );
        assert_eq!(get(&env, "HOME"), Some(settings.credentials_home.clone()));
        // No token: nothing, until the operator has stored credentials.
        let env = push_env(&settings, "https://github.com/a/b.git", None);
        assert_eq!(get(&env, "GIT_CONFIG_COUNT"), None);
        std::fs::write(
            home.path().join(".git-credentials"),
            "https://u:p@github.com\n",
        )
        .unwrap();
        let env = push_env(&settings, "https://github.com/a/b.git", None);
        assert!(
            get(&env, "GIT_CONFIG_VALUE_0").is_some_and(|v| v.starts_with("store --file=")),
            "{env:?}"
        );
        // ssh: the keys under HOME, no http configuration.
        let env = push_env(&settings, "git@github.com:a/b.git", Some("x:t"));
        assert_eq!(get(&env, "GIT_CONFIG_COUNT"), None);
    }
}
