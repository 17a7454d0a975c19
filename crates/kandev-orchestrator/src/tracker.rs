//! Issue trackers (GitHub): what a board linked to a repository reads of
//! it and writes to it, through the forge's REST API with the
//! `KANDEV_FORGES` entry's token, and the webhook deliveries' signatures
//! (`X-Hub-Signature-256`: HMAC-SHA256 of the body with the link's
//! secret, compared in constant time before the body is parsed).
//!
//! Redirects are not followed: a renamed repository answers 301, which is
//! told to the board's owner in plain words ([`TrackerError`]), as is a
//! deleted one (404).

use std::time::Duration;

pub use kandev_common::webhook::{parse_signature, sign, signature_matches};
use serde_json::{Value, json};

use crate::forge::{Forge, ForgeKind};

/// The most issues one reconcile reads (100 a page).
const MAX_PAGES: u32 = 10;

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

/// Why the tracker could not be read or written, in words for the board.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackerError {
    #[error(
        "the repository {0} was not found on GitHub: it was deleted, renamed, or the token cannot see it"
    )]
    NotFound(String),
    #[error(
        "the repository {0} moved on GitHub (renamed or transferred): link the board to its new name"
    )]
    Moved(String),
    #[error("GitHub refused the token for {repo} ({status}): {message}")]
    Unauthorized {
        repo: String,
        status: u16,
        message: String,
    },
    #[error("GitHub answered {status} for {repo}: {message}")]
    Refused {
        repo: String,
        status: u16,
        message: String,
    },
    #[error("cannot reach GitHub: {0}")]
    Unreachable(String),
    #[error("GitHub's answer for {0} is not what was expected: {1}")]
    Malformed(String, String),
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
    client
        .request(method, format!("{api}{path}"))
        .bearer_auth(&forge.token)
        .header("accept", "application/vnd.github+json")
        .header("x-github-api-version", "2022-11-28")
        .header("user-agent", "kandev")
}

/// The answer's JSON, or the plain reason it failed.
async fn answer(repo: &str, request: reqwest::RequestBuilder) -> Result<Value, TrackerError> {
    let response = request
        .send()
        .await
        .map_err(|e| TrackerError::Unreachable(e.without_url().to_string()))?;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let message = body["message"].as_str().unwrap_or("no details").to_string();
    let repo = repo.to_string();
    match status {
        200 | 201 => Ok(body),
        301 | 302 | 307 | 308 => Err(TrackerError::Moved(repo)),
        404 | 410 => Err(TrackerError::NotFound(repo)),
        401 | 403 => Err(TrackerError::Unauthorized {
            repo,
            status,
            message,
        }),
        _ => Err(TrackerError::Refused {
            repo,
            status,
            message,
        }),
    }
}

/// The repository's issues with `label` (any when empty), open and
/// closed, most recently updated first; pull requests left out.
pub async fn list_issues(
    client: &reqwest::Client,
    forge: &Forge,
    repo: &str,
    label: &str,
) -> Result<Vec<Issue>, TrackerError> {
    debug_assert_eq!(forge.kind, ForgeKind::Github);
    let mut issues = Vec::new();
    for page in 1..=MAX_PAGES {
        let mut query = vec![
            ("state", "all".to_string()),
            ("sort", "updated".to_string()),
            ("per_page", "100".to_string()),
            ("page", page.to_string()),
        ];
        if !label.is_empty() {
            query.push(("labels", label.to_string()));
        }
        let request = github_request(
            client,
            forge,
            reqwest::Method::GET,
            &format!("/repos/{repo}/issues"),
        )
        .query(&query);
        let body = answer(repo, request).await?;
        let items = body
            .as_array()
            .ok_or_else(|| TrackerError::Malformed(repo.into(), "not a list".into()))?;
        for item in items {
            let issue = Issue::from_github(item)
                .map_err(|e| TrackerError::Malformed(repo.to_string(), e))?;
            if !issue.pull_request {
                issues.push(issue);
            }
        }
        if items.len() < 100 {
            break;
        }
    }
    Ok(issues)
}

/// Comments `body` on issue `number`.
pub async fn comment(
    client: &reqwest::Client,
    forge: &Forge,
    repo: &str,
    number: i64,
    body: &str,
) -> Result<(), TrackerError> {
    let request = github_request(
        client,
        forge,
        reqwest::Method::POST,
        &format!("/repos/{repo}/issues/{number}/comments"),
    )
    .json(&json!({ "body": body }));
    answer(repo, request).await.map(drop)
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
