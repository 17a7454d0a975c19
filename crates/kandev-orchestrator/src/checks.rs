//! The CI checks of a pushed commit, read from its forge: GitHub's check
//! runs (`GET /repos/{o}/{r}/commits/{sha}/check-runs`) and commit
//! statuses (`GET /repos/{o}/{r}/commits/{sha}/status`), and the end of a
//! failed check's output (its `output.text`, else `output.summary`, else
//! the Actions job's log, `GET /repos/{o}/{r}/actions/jobs/{id}/logs`);
//! GitLab's pipeline jobs (see [`gitlab`]).
//!
//! What a forge says is untrusted text: every string is size-bounded,
//! stripped of control characters but newlines and tabs, and never
//! interpreted. A log is read as a stream, keeping only its end.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::forge::api::bounded;
use crate::forge::{CallError, Forge, ForgeKind, api, project_path};

mod gitlab;

/// Why a commit's checks could not be read (`forge` is the forge's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChecksError {
    #[error("the repository URL {0} names no project on its forge")]
    NoProject(String),
    #[error("{0:?} is not a commit id")]
    BadCommit(String),
    #[error("{forge}'s answer is not what was expected: {message}")]
    Malformed {
        forge: &'static str,
        message: String,
    },
    #[error(transparent)]
    Call(#[from] CallError),
    /// A status Kandev does not know: not guessed at.
    #[error("{forge} reported the unknown status {status:?} for the check {check:?}")]
    UnknownStatus {
        forge: &'static str,
        check: String,
        status: String,
    },
}

/// The most bytes of a failed check's output kept.
pub const MAX_LOG_TAIL: usize = 4096;
/// The most checks kept per commit.
pub const MAX_CHECKS: usize = 100;
/// The longest name or conclusion kept.
const MAX_NAME: usize = 200;
/// The longest URL kept.
const MAX_URL: usize = 2048;

/// The overall state of a commit's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckState {
    /// Nothing watched, or no check reported.
    None,
    /// A check still runs (or none reported yet, while polled).
    Pending,
    Success,
    /// At least one check failed.
    Failure,
}

impl CheckState {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckState::None => "none",
            CheckState::Pending => "pending",
            CheckState::Success => "success",
            CheckState::Failure => "failure",
        }
    }

    pub fn parse(s: &str) -> Result<CheckState, String> {
        match s {
            "none" => Ok(CheckState::None),
            "pending" => Ok(CheckState::Pending),
            "success" => Ok(CheckState::Success),
            "failure" => Ok(CheckState::Failure),
            other => Err(format!("unknown check state {other:?}")),
        }
    }
}

impl TryFrom<String> for CheckState {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        CheckState::parse(&s)
    }
}

/// One check of a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    /// `check_run` or `status`.
    pub kind: String,
    /// `queued`, `in_progress` or `completed`.
    pub status: String,
    /// When completed: the forge's conclusion; else empty.
    pub conclusion: String,
    pub url: String,
    pub failed: bool,
    /// The end of its output or log (failed checks only).
    pub log_tail: String,
}

impl Check {
    fn completed(&self) -> bool {
        self.status == "completed"
    }
}

/// The state of `checks`: a failure as soon as one failed (the agent can
/// start on it), pending while one runs, success when all completed.
pub fn summarize(checks: &[Check]) -> CheckState {
    if checks.iter().any(|c| c.failed) {
        CheckState::Failure
    } else if checks.is_empty() || checks.iter().any(|c| !c.completed()) {
        CheckState::Pending
    } else {
        CheckState::Success
    }
}

/// Whether a check run's conclusion is a failure.
fn failed_conclusion(conclusion: &str) -> bool {
    matches!(
        conclusion,
        "failure" | "timed_out" | "cancelled" | "action_required" | "startup_failure"
    )
}

/// The last `max` bytes of `text` (on a character boundary), cleaned as
/// [`bounded`] cleans.
pub fn tail(text: &str, max: usize) -> String {
    let clean = bounded(text, usize::MAX);
    let start = clean.len().saturating_sub(max);
    let start = (start..=clean.len())
        .find(|i| clean.is_char_boundary(*i))
        .unwrap_or(clean.len());
    clean[start..].to_string()
}

/// A URL the UI may link: http(s) only.
fn link(url: &Value) -> String {
    let url = url.as_str().unwrap_or_default();
    if (url.starts_with("https://") || url.starts_with("http://")) && url.len() <= MAX_URL {
        bounded(url, MAX_URL)
    } else {
        String::new()
    }
}

/// The checks of `sha` in `repository_url` on `forge`, failed ones with
/// the end of their output.
pub async fn read_checks(
    client: &reqwest::Client,
    forge: &Forge,
    repository_url: &str,
    sha: &str,
) -> Result<Vec<Check>, ChecksError> {
    if sha.is_empty() || sha.len() > 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ChecksError::BadCommit(bounded(sha, 80)));
    }
    let project = project_path(forge, repository_url)
        .ok_or_else(|| ChecksError::NoProject(repository_url.to_string()))?;
    let api = forge.api_url.trim_end_matches('/');
    if forge.kind == ForgeKind::Gitlab {
        return gitlab::read(client, forge, api, &project, sha).await;
    }
    let base = format!("{api}/repos/{project}");
    let runs = get_json(
        client,
        forge,
        &format!("{base}/commits/{sha}/check-runs?per_page=100"),
    )
    .await?;
    let mut checks = Vec::new();
    for run in runs["check_runs"].as_array().into_iter().flatten() {
        checks.push(check_run(client, forge, &base, run).await);
        if checks.len() >= MAX_CHECKS {
            return Ok(checks);
        }
    }
    let combined = get_json(client, forge, &format!("{base}/commits/{sha}/status")).await?;
    for status in combined["statuses"].as_array().into_iter().flatten() {
        checks.push(commit_status(status));
        if checks.len() >= MAX_CHECKS {
            break;
        }
    }
    Ok(checks)
}

/// A check run; a failed one with the end of its output or job log.
async fn check_run(client: &reqwest::Client, forge: &Forge, base: &str, run: &Value) -> Check {
    let status = bounded(run["status"].as_str().unwrap_or("queued"), MAX_NAME);
    let conclusion = bounded(run["conclusion"].as_str().unwrap_or_default(), MAX_NAME);
    let failed = status == "completed" && failed_conclusion(&conclusion);
    let mut log_tail = String::new();
    if failed {
        let output = &run["output"];
        let text = [&output["text"], &output["summary"]]
            .into_iter()
            .filter_map(Value::as_str)
            .find(|t| !t.trim().is_empty());
        log_tail = match (text, run["id"].as_u64()) {
            (Some(text), _) => tail(text, MAX_LOG_TAIL),
            (None, Some(id)) => {
                job_log_tail(client, forge, &format!("{base}/actions/jobs/{id}/logs")).await
            }
            (None, None) => String::new(),
        };
    }
    Check {
        name: bounded(run["name"].as_str().unwrap_or("check"), MAX_NAME),
        kind: "check_run".into(),
        status,
        conclusion,
        url: link(&run["html_url"]),
        failed,
        log_tail,
    }
}

/// A commit status (`pending`, `success`, `failure`, `error`).
fn commit_status(status: &Value) -> Check {
    let state = status["state"].as_str().unwrap_or("pending");
    let (done, conclusion) = match state {
        "success" => (true, "success"),
        "failure" => (true, "failure"),
        "error" => (true, "error"),
        _ => (false, ""),
    };
    let failed = matches!(state, "failure" | "error");
    Check {
        name: bounded(status["context"].as_str().unwrap_or("status"), MAX_NAME),
        kind: "status".into(),
        status: if done { "completed" } else { "in_progress" }.into(),
        conclusion: conclusion.into(),
        url: link(&status["target_url"]),
        failed,
        log_tail: if failed {
            tail(
                status["description"].as_str().unwrap_or_default(),
                MAX_LOG_TAIL,
            )
        } else {
            String::new()
        },
    }
}

/// A forge's JSON answer to a GET of `url`; a status but 200 is refused.
async fn get_json(
    client: &reqwest::Client,
    forge: &Forge,
    url: &str,
) -> Result<Value, ChecksError> {
    let request = api::request(client, forge, reqwest::Method::GET, url);
    let answer = api::call(forge, request).await?;
    if answer.status == 200 {
        return Ok(answer.body);
    }
    Err(answer.refused(forge).into())
}

/// The end of a job's log (an Actions job's, a GitLab job's trace);
/// empty when it cannot be read (the check is reported without it).
async fn job_log_tail(client: &reqwest::Client, forge: &Forge, url: &str) -> String {
    let request = api::request(client, forge, reqwest::Method::GET, url);
    let Ok(mut response) = request.send().await else {
        return String::new();
    };
    if !response.status().is_success() {
        return String::new();
    }
    // Only the end is kept, however long the log.
    let mut kept: Vec<u8> = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        kept.extend_from_slice(&chunk);
        if kept.len() > 2 * MAX_LOG_TAIL {
            kept.drain(..kept.len() - MAX_LOG_TAIL - 4);
        }
    }
    tail(&String::from_utf8_lossy(&kept), MAX_LOG_TAIL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(status: &str, failed: bool) -> Check {
        Check {
            name: "build".into(),
            kind: "check_run".into(),
            status: status.into(),
            conclusion: String::new(),
            url: String::new(),
            failed,
            log_tail: String::new(),
        }
    }

    #[test]
    fn a_failure_wins_then_pending_then_success() {
        assert_eq!(summarize(&[]), CheckState::Pending);
        assert_eq!(
            summarize(&[check("completed", false), check("in_progress", false)]),
            CheckState::Pending
        );
        assert_eq!(
            summarize(&[check("completed", true), check("in_progress", false)]),
            CheckState::Failure
        );
        assert_eq!(summarize(&[check("completed", false)]), CheckState::Success);
        for s in [
            CheckState::None,
            CheckState::Pending,
            CheckState::Success,
            CheckState::Failure,
        ] {
            assert_eq!(CheckState::parse(s.as_str()), Ok(s));
        }
        assert!(CheckState::parse("red").is_err());
    }

    #[test]
    fn forge_text_is_bounded_and_cleaned() {
        assert_eq!(bounded("a\u{1b}[31mb\0c\n\td", 100), "a[31mbc\n\td");
        assert_eq!(bounded("héllo", 2), "h");
        assert_eq!(tail("héllo", 4), "llo");
        assert_eq!(tail("abc", 10), "abc");
        let long = "x".repeat(10_000) + "END";
        let t = tail(&long, MAX_LOG_TAIL);
        assert_eq!(t.len(), MAX_LOG_TAIL);
        assert!(t.ends_with("END"));
        assert_eq!(link(&Value::from("javascript:alert(1)")), "");
        assert_eq!(link(&Value::from("https://ci/1")), "https://ci/1");
    }

    #[test]
    fn a_status_fails_on_failure_or_error() {
        let c = commit_status(&serde_json::json!({
            "context": "ci/lint", "state": "error", "target_url": "https://ci/2",
            "description": "lint crashed"}));
        assert!(c.failed && c.status == "completed", "{c:?}");
        assert_eq!(c.log_tail, "lint crashed");
        let p = commit_status(&serde_json::json!({"context": "ci/x", "state": "pending"}));
        assert!(!p.failed && p.status == "in_progress", "{p:?}");
    }
}
