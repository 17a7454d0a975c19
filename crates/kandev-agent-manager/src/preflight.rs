//! Whether a task may use a repository, asked before the task is taken
//! (`CheckRepository`: when it is created, or its repository or branch
//! changes) and again when its launch needs a clone: the repository policy
//! ([`crate::repository`]) and, for a local repository, that it exists, is
//! a git repository and has the branch (with none, a default branch to
//! start from).
//!
//! A remote is never contacted here: for one, only what its URL says is
//! checked (the launch resolves its host, and its clone finds the rest).
//! A local repository is read the way its clone reads it: `git ls-remote`
//! over the file transport, with no configuration of the manager's and
//! no hooks.
//!
//! A [`Refusal`] fails every run the same way, so a run refused at launch
//! fails once, with no retry ([`AgentError::retryable`]).

use std::{path::Path, process::Output, time::Duration};

use crate::{
    config::Settings,
    domain::{AgentError, Result},
    repository::{self, Remote},
};

/// How long reading a local repository's references may take.
const LS_REMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// What is wrong with a task's repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Not a URL or path git reads as written.
    Invalid,
    /// A branch name git would not take.
    InvalidBranch,
    /// Refused by the policy: a scheme, an internal host, a path outside
    /// the allowed roots.
    NotAllowed,
    /// A local repository that does not exist (or the manager cannot read).
    NotFound,
    /// A local path that is not a git repository.
    NotARepository,
    /// The branch is not in the repository, or with no branch the
    /// repository has no default branch.
    UnknownBranch,
}

/// Why a task may not use a repository, in plain words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub problem: Problem,
    pub message: String,
}

impl Refusal {
    fn new(problem: Problem, message: impl Into<String>) -> Refusal {
        Refusal {
            problem,
            message: message.into(),
        }
    }
}

impl From<Refusal> for AgentError {
    /// As a launch refuses it: a policy's refusal is a permission denied,
    /// anything else an invalid argument; neither is retried.
    fn from(refusal: Refusal) -> AgentError {
        match refusal.problem {
            Problem::NotAllowed => AgentError::PermissionDenied(refusal.message),
            _ => AgentError::InvalidArgument(refusal.message),
        }
    }
}

/// The check before a task is taken: `None` when it may use the
/// repository, else why not. An error says the check could not be made.
#[tracing::instrument(skip_all, fields(url = %crate::repository::redact_url(url), branch = %branch))]
pub async fn check(settings: &Settings, url: &str, branch: &str) -> Result<Option<Refusal>> {
    let remote = match check_written(settings, url, branch) {
        Ok(remote) => remote,
        Err(refusal) => return Ok(Some(refusal)),
    };
    match remote {
        Remote::Local(path) => local(url, &path, branch).await,
        Remote::Network { .. } => Ok(None),
    }
}

/// What the URL and branch say: both well-formed, and the policy's
/// offline check ([`repository::check_offline`]).
fn check_written(
    settings: &Settings,
    url: &str,
    branch: &str,
) -> std::result::Result<Remote, Refusal> {
    validate(url, branch)?;
    repository::check_offline(settings, url).map_err(|err| match err {
        AgentError::PermissionDenied(message) => Refusal::new(Problem::NotAllowed, message),
        other => Refusal::new(Problem::Invalid, other.to_string()),
    })
}

/// A repository URL and a branch as a launch takes them: a URL given and
/// not read as an option, a branch git would take.
pub fn validate(url: &str, branch: &str) -> std::result::Result<(), Refusal> {
    if url.trim().is_empty() || url.starts_with('-') {
        return Err(Refusal::new(
            Problem::Invalid,
            "repository_url is required and must not start with '-'",
        ));
    }
    if !branch.is_empty() && !branch_name_ok(branch) {
        return Err(Refusal::new(
            Problem::InvalidBranch,
            format!("{branch:?} is not a valid branch name"),
        ));
    }
    Ok(())
}

/// A name `git check-ref-format --branch` takes (its rules, checked
/// here without running git): no space, control character or any of
/// `~^:?*[\`, no `..`, `@{` or `//`, no part starting with `.` or ending
/// with `.lock`, not starting with `-` or `/`, not ending with `/` or `.`,
/// and not `@`.
fn branch_name_ok(name: &str) -> bool {
    let forbidden = |c: char| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c);
    !name.is_empty()
        && name != "@"
        && !name.starts_with(['-', '/'])
        && !name.ends_with(['/', '.'])
        && !name.chars().any(forbidden)
        && !name.contains("..")
        && !name.contains("@{")
        && !name.contains("//")
        && name
            .split('/')
            .all(|part| !part.starts_with('.') && !part.ends_with(".lock"))
}

/// Whether the local repository at `path` (the URL `url` points there)
/// exists, is a git repository, and has `branch` (a branch or a tag, as
/// `git clone --branch` takes) or, for none, a default branch.
pub async fn local(url: &str, path: &Path, branch: &str) -> Result<Option<Refusal>> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Some(Refusal::new(
                Problem::NotFound,
                format!("the repository {shown} does not exist"),
            )));
        }
        Err(e) => {
            return Ok(Some(Refusal::new(
                Problem::NotFound,
                format!("Kandev cannot read the repository {shown}: {e}"),
            )));
        }
    }
    let wanted = if branch.is_empty() {
        vec!["HEAD".to_string()]
    } else {
        vec![
            format!("refs/heads/{branch}"),
            format!("refs/tags/{branch}"),
        ]
    };
    let output = ls_remote(url, &wanted).await?;
    // 2: `--exit-code` found no matching reference.
    if !matches!(output.status.code(), Some(0 | 2)) {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = crate::git::failure_line(&stderr).unwrap_or(stderr.trim());
        tracing::info!(path = %shown, reason, "not a repository git can read");
        return Ok(Some(Refusal::new(
            Problem::NotARepository,
            format!("{shown} is not a git repository"),
        )));
    }
    if has_reference(&String::from_utf8_lossy(&output.stdout), &wanted) {
        return Ok(None);
    }
    let message = if branch.is_empty() {
        format!(
            "the repository {shown} has no default branch to start from (no commits, or its \
             HEAD names no branch)"
        )
    } else {
        format!("the branch {branch} does not exist in the repository {shown}")
    };
    Ok(Some(Refusal::new(Problem::UnknownBranch, message)))
}

/// Whether `git ls-remote` listed one of `wanted` exactly (its patterns
/// also match references that merely end like one).
fn has_reference(listing: &str, wanted: &[String]) -> bool {
    listing
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .any(|(_, name)| wanted.iter().any(|w| w == name))
}

/// `git ls-remote --exit-code -- <url> <patterns>` over the file
/// transport alone, as the clone reaches it.
async fn ls_remote(url: &str, patterns: &[String]) -> Result<Output> {
    let mut cmd = crate::git::plain_git();
    cmd.args(repository::protocol_args(&[
        "protocol.file.allow=always".to_string()
    ]))
    .args([
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
    ])
    .args(["ls-remote", "--exit-code", "--", url])
    .args(patterns);
    match tokio::time::timeout(LS_REMOTE_TIMEOUT, cmd.output()).await {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(e)) => Err(AgentError::Internal(format!("cannot run git: {e}"))),
        Err(_) => Err(AgentError::Unavailable(format!(
            "reading the repository {} took over {} s",
            crate::repository::redact_url(url),
            LS_REMOTE_TIMEOUT.as_secs()
        ))),
    }
}

/// A launch's check of a local repository before it clones it (the
/// policy was checked already): its refusal as the launch's error.
pub async fn before_clone(url: &str, branch: &str) -> Result<()> {
    let Ok(Remote::Local(path)) = repository::parse(url) else {
        return Ok(());
    };
    match local(url, &path, branch).await? {
        Some(refusal) => Err(refusal.into()),
        None => Ok(()),
    }
}

/// After a clone failed: for a local repository, the refusal that
/// explains it (it is gone, or is no git repository, or lacks the
/// branch), which every run would meet again.
pub async fn explain_failed_clone(url: &str, branch: &str) -> Option<AgentError> {
    let Ok(Remote::Local(path)) = repository::parse(url) else {
        return None;
    };
    match local(url, &path, branch).await {
        Ok(Some(refusal)) => Some(refusal.into()),
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(error = %err, "cannot check the repository of a failed clone");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `git` in `dir`, with no configuration of the machine's.
    fn git(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    /// A root with a repository `repo` (branch `main`, tag `v1`), an empty
    /// repository `empty`, and a plain directory `plain`.
    fn root() -> (tempfile::TempDir, Settings) {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README.md"), "hi\n").unwrap();
        git(&repo, &["add", "."]);
        let who = ["-c", "user.name=t", "-c", "user.email=t@e"];
        git(
            &repo,
            &[&who[..], &["commit", "-q", "-m", "init"][..]].concat(),
        );
        git(&repo, &["tag", "v1"]);
        git(&repo, &["branch", "feature/x"]);
        std::fs::create_dir_all(root.path().join("empty")).unwrap();
        git(&root.path().join("empty"), &["init", "-q", "--bare"]);
        std::fs::create_dir_all(root.path().join("plain")).unwrap();
        let settings = Settings {
            allowed_repository_roots: vec![root.path().display().to_string()],
            ..Settings::default()
        };
        (root, settings)
    }

    async fn problem(settings: &Settings, url: &str, branch: &str) -> Option<Problem> {
        check(settings, url, branch)
            .await
            .unwrap()
            .map(|r| r.problem)
    }

    #[tokio::test]
    async fn a_local_repository_must_exist_be_a_repository_and_have_the_branch() {
        let (root, settings) = root();
        let at = |name: &str| root.path().join(name).display().to_string();
        let repo = at("repo");
        for (url, branch) in [
            (repo.clone(), "main"),
            (repo.clone(), ""),
            (repo.clone(), "v1"),
            (repo.clone(), "feature/x"),
            (format!("file://{repo}"), "main"),
        ] {
            assert_eq!(
                problem(&settings, &url, branch).await,
                None,
                "{url} {branch}"
            );
        }
        let missing = check(&settings, &at("gone"), "main")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(missing.problem, Problem::NotFound);
        assert_eq!(
            missing.message,
            format!("the repository {} does not exist", at("gone"))
        );
        let plain = check(&settings, &at("plain"), "").await.unwrap().unwrap();
        assert_eq!(plain.problem, Problem::NotARepository);
        assert_eq!(
            plain.message,
            format!("{} is not a git repository", at("plain"))
        );
        let branch = check(&settings, &repo, "nope").await.unwrap().unwrap();
        assert_eq!(branch.problem, Problem::UnknownBranch);
        assert_eq!(
            branch.message,
            format!("the branch nope does not exist in the repository {repo}")
        );
        // `feature/x` is there; `x` only ends like it.
        assert_eq!(
            problem(&settings, &repo, "x").await,
            Some(Problem::UnknownBranch)
        );
        assert_eq!(
            problem(&settings, &at("empty"), "").await,
            Some(Problem::UnknownBranch)
        );
    }

    #[tokio::test]
    async fn the_policy_and_the_names_come_first() {
        let (root, settings) = root();
        let repo = root.path().join("repo").display().to_string();
        let outside = check(&settings, "/etc", "").await.unwrap().unwrap();
        assert_eq!(outside.problem, Problem::NotAllowed);
        assert!(
            outside
                .message
                .ends_with(&format!("Kandev may use: {}", root.path().display())),
            "{}",
            outside.message
        );
        assert_eq!(
            problem(&settings, "ftp://example.com/x", "").await,
            Some(Problem::NotAllowed)
        );
        assert_eq!(
            problem(&settings, "https://10.0.0.1/x", "").await,
            Some(Problem::NotAllowed)
        );
        assert_eq!(
            problem(&settings, "https://github.com/org/repo", "main").await,
            None
        );
        assert_eq!(problem(&settings, "", "").await, Some(Problem::Invalid));
        assert_eq!(
            problem(&settings, "-uhttps://x", "").await,
            Some(Problem::Invalid)
        );
        for bad in [
            "-x", "a b", "a..b", "a~1", "x.lock", "@", "a//b", ".hidden", "a/",
        ] {
            assert_eq!(
                problem(&settings, &repo, bad).await,
                Some(Problem::InvalidBranch),
                "{bad}"
            );
        }
    }

    #[test]
    fn refusals_are_launch_errors_that_are_not_retried() {
        for problem in [
            Problem::Invalid,
            Problem::InvalidBranch,
            Problem::NotAllowed,
            Problem::NotFound,
            Problem::NotARepository,
            Problem::UnknownBranch,
        ] {
            let err = AgentError::from(Refusal::new(problem, "why"));
            assert!(!err.retryable(), "{problem:?}");
            assert_eq!(err.to_string(), "why");
        }
    }

    #[tokio::test]
    async fn a_failed_clone_of_a_local_repository_is_explained() {
        let (root, _) = root();
        let gone = root.path().join("gone").display().to_string();
        let err = explain_failed_clone(&gone, "main").await.unwrap();
        assert!(!err.retryable());
        assert_eq!(
            err.to_string(),
            format!("the repository {gone} does not exist")
        );
        let repo = root.path().join("repo").display().to_string();
        assert!(explain_failed_clone(&repo, "main").await.is_none());
        assert!(
            explain_failed_clone("https://github.com/org/repo", "main")
                .await
                .is_none()
        );
    }
}
