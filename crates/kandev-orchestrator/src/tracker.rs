//! Issue trackers (GitHub issues, GitLab project issues): what a board
//! linked to a repository reads of it and writes to it, through the
//! forge's REST API with the `KANDEV_FORGES` entry's token, and the
//! webhook deliveries' proofs (GitHub's `X-Hub-Signature-256`: HMAC-SHA256
//! of the body with the link's secret; GitLab's `X-Gitlab-Token`: the
//! secret itself), compared in constant time before the body is parsed.
//! GitLab's side is in [`gitlab`].
//!
//! Redirects are not followed: a renamed repository answers 301, which is
//! told to the board's owner in plain words ([`TrackerError`]), as is a
//! deleted one (404).

use std::time::Duration;

pub use gitlab::ISSUE_HOOK;
pub use kandev_common::webhook::{parse_signature, sign, signature_matches, token_matches};
use serde_json::{Value, json};

use crate::forge::{CallError, Forge, ForgeKind, api};

mod gitlab;

/// The most pages of issues one reconcile reads.
const MAX_PAGES: u32 = 10;
/// Issues a page.
const PER_PAGE: usize = 100;

/// A forge's issue object parsed.
type ParseIssue = fn(&Value) -> Result<Issue, String>;

/// An issue as the tracker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub number: i64,
    pub title: String,
    pub body: String,
    pub url: String,
    pub open: bool,
    pub labels: Vec<String>,
    /// GitHub lists pull requests among issues: those are not tasks.
    pub pull_request: bool,
}

impl Issue {
    /// Parses GitHub's issue object; what is missing or mistyped is an
    /// error, never a default.
    pub fn from_github(v: &Value) -> Result<Issue, String> {
        let number = v["number"].as_i64().ok_or("an issue without a number")?;
        let text = |key: &str| -> Result<String, String> {
            match &v[key] {
                Value::String(s) => Ok(s.clone()),
                Value::Null if key == "body" => Ok(String::new()),
                _ => Err(format!("issue {number} has no {key}")),
            }
        };
        let open = match v["state"].as_str() {
            Some("open") => true,
            Some("closed") => false,
            other => return Err(format!("issue {number} has the unknown state {other:?}")),
        };
        let labels = v["labels"]
            .as_array()
            .map(|ls| {
                ls.iter()
                    .filter_map(|l| l["name"].as_str().or_else(|| l.as_str()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Issue {
            number,
            title: text("title")?,
            body: text("body")?,
            url: text("html_url")?,
            open,
            labels,
            pull_request: !v["pull_request"].is_null(),
        })
    }

    /// Whether the issue carries `label` (any issue when it is empty).
    pub fn has_label(&self, label: &str) -> bool {
        label.is_empty() || self.labels.iter().any(|l| l == label)
    }
}

/// What a GitHub `issues` delivery says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueEvent {
    pub action: String,
    /// `owner/repo`.
    pub repository: String,
    pub issue: Issue,
}

impl IssueEvent {
    pub fn parse(payload: &[u8]) -> Result<IssueEvent, String> {
        let v: Value =
            serde_json::from_slice(payload).map_err(|e| format!("the payload is not JSON: {e}"))?;
        Ok(IssueEvent {
            action: v["action"]
                .as_str()
                .ok_or("the payload has no action")?
                .to_string(),
            repository: v["repository"]["full_name"]
                .as_str()
                .ok_or("the payload names no repository")?
                .to_string(),
            issue: Issue::from_github(&v["issue"])?,
        })
    }
}

/// Why the tracker could not be read or written, in words for the board
/// (`forge` is the forge's name, `GitHub` or `GitLab`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackerError {
    #[error(
        "the repository {repo} was not found on {forge}: it was deleted, renamed, or the token cannot see it"
    )]
    NotFound { forge: &'static str, repo: String },
    #[error(
        "the repository {repo} moved on {forge} (renamed or transferred): link the board to its new name"
    )]
    Moved { forge: &'static str, repo: String },
    #[error("{forge} refused the token for {repo} ({status}): {message}")]
    Unauthorized {
        forge: &'static str,
        repo: String,
        status: u16,
        message: String,
    },
    #[error("{forge} answered {status} for {repo}: {message}")]
    Refused {
        forge: &'static str,
        repo: String,
        status: u16,
        message: String,
    },
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("{forge}'s answer for {repo} is not what was expected: {message}")]
    Malformed {
        forge: &'static str,
        repo: String,
        message: String,
    },
}

/// A client for trackers' APIs: redirects are answers, not followed.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_default()
}

fn github_request(
    client: &reqwest::Client,
    forge: &Forge,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    let api = forge.api_url.trim_end_matches('/');
    api::request(client, forge, method, &format!("{api}{path}"))
}

/// The answer's JSON, or the plain reason it failed (in the forge's own
/// words, see [`api::Answer::message`]).
async fn answer(
    forge: &Forge,
    repo: &str,
    request: reqwest::RequestBuilder,
) -> Result<Value, TrackerError> {
    let answer = api::call(forge, request).await?;
    let (forge, repo, status) = (forge.kind.name(), repo.to_string(), answer.status);
    match status {
        200 | 201 => Ok(answer.body),
        301 | 302 | 307 | 308 => Err(TrackerError::Moved { forge, repo }),
        404 | 410 => Err(TrackerError::NotFound { forge, repo }),
        401 | 403 => Err(TrackerError::Unauthorized {
            forge,
            repo,
            status,
            message: answer.message(),
        }),
        _ => Err(TrackerError::Refused {
            forge,
            repo,
            status,
            message: answer.message(),
        }),
    }
}

/// The issues of `repo` with `label` (any when empty), open and closed,
/// most recently updated first; pull requests left out.
pub async fn list_issues(
    client: &reqwest::Client,
    forge: &Forge,
    repo: &str,
    label: &str,
) -> Result<Vec<Issue>, TrackerError> {
    let mut issues = Vec::new();
    for page in 1..=MAX_PAGES {
        let (request, parse): (_, ParseIssue) = match forge.kind {
            ForgeKind::Github => (
                github_issues_page(client, forge, repo, label, page),
                Issue::from_github,
            ),
            ForgeKind::Gitlab => (
                gitlab::issues_page(client, forge, repo, label, page),
                Issue::from_gitlab,
            ),
        };
        let body = answer(forge, repo, request).await?;
        let malformed = |message: String| TrackerError::Malformed {
            forge: forge.kind.name(),
            repo: repo.to_string(),
            message,
        };
        let items = body
            .as_array()
            .ok_or_else(|| malformed("not a list".into()))?;
        for item in items {
            let issue = parse(item).map_err(malformed)?;
            if !issue.pull_request {
                issues.push(issue);
            }
        }
        if items.len() < PER_PAGE {
            break;
        }
    }
    Ok(issues)
}

/// One page of a GitHub repository's issues.
fn github_issues_page(
    client: &reqwest::Client,
    forge: &Forge,
    repo: &str,
    label: &str,
    page: u32,
) -> reqwest::RequestBuilder {
    let mut query = vec![
        ("state", "all".to_string()),
        ("sort", "updated".to_string()),
        ("per_page", PER_PAGE.to_string()),
        ("page", page.to_string()),
    ];
    if !label.is_empty() {
        query.push(("labels", label.to_string()));
    }
    github_request(
        client,
        forge,
        reqwest::Method::GET,
        &format!("/repos/{repo}/issues"),
    )
    .query(&query)
}

/// Comments `body` on issue `number` (a note on a GitLab issue).
pub async fn comment(
    client: &reqwest::Client,
    forge: &Forge,
    repo: &str,
    number: i64,
    body: &str,
) -> Result<(), TrackerError> {
    let request = match forge.kind {
        ForgeKind::Github => github_request(
            client,
            forge,
            reqwest::Method::POST,
            &format!("/repos/{repo}/issues/{number}/comments"),
        ),
        ForgeKind::Gitlab => gitlab::note_request(client, forge, repo, number),
    }
    .json(&json!({ "body": body }));
    answer(forge, repo, request).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issue_is_parsed_strictly() {
        let issue = Issue::from_github(&json!({
            "number": 7, "title": "Fix it", "body": null, "html_url": "https://x/7",
            "state": "open", "labels": [{"name": "kandev"}]
        }))
        .unwrap();
        assert_eq!(issue.body, "");
        assert!(issue.has_label("kandev") && issue.has_label("") && !issue.has_label("bug"));
        assert!(!issue.pull_request);
        assert!(
            Issue::from_github(
                &json!({"number": 7, "title": "x", "html_url": "u", "state": "odd"})
            )
            .is_err()
        );
        assert!(Issue::from_github(&json!({"title": "x"})).is_err());
    }
}
