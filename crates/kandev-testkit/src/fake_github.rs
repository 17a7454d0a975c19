//! A local server speaking the subset of GitHub's REST API Kandev uses,
//! shared by the orchestrator's tests and the end-to-end suite:
//! - a repository's issues (`GET /repos/{owner}/{repo}/issues`, filtered
//!   by label) and comments on an issue;
//! - pull requests (`POST /repos/{owner}/{repo}/pulls`);
//! - a commit's check runs and statuses
//!   (`GET /repos/{owner}/{repo}/commits/{sha}/check-runs`, `.../status`)
//!   and an Actions job's log (`GET /repos/{owner}/{repo}/actions/jobs/{id}/logs`);
//! - the payload of an issue webhook ([`issue_event`]), delivered by the
//!   test with the `X-Hub-Signature-256` HMAC Kandev checks.
//!
//! A repository the fake does not serve answers 404 and a renamed one 301,
//! as GitHub does; with a [`Forge::token`] set, any other credentials get
//! GitHub's 401. Repository names may have more than two segments (a
//! `file://` path's).

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Query, State},
    http::{HeaderMap, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

/// What the fake knows and was asked.
#[derive(Default)]
pub struct Forge {
    /// Issues by repository (`owner/repo`), as GitHub shows them; a
    /// repository not here answers 404.
    pub issues: HashMap<String, Vec<Value>>,
    /// Repositories that were renamed: 301.
    pub moved: HashSet<String>,
    /// When set, only `Authorization: Bearer <token>` is let in.
    pub token: Option<String>,
    /// Every commit's check runs, as GitHub lists them.
    pub check_runs: Vec<Value>,
    /// Every commit's statuses, as GitHub lists them.
    pub statuses: Vec<Value>,
    /// Actions jobs' logs by job id.
    pub job_logs: HashMap<i64, String>,
    /// (method, path, authorization header) of each request.
    pub asked: Vec<(String, String, String)>,
    /// (repository, issue number, comment body) of each comment.
    pub comments: Vec<(String, i64, String)>,
    /// (authorization header, request body) of each pull request.
    pub pulls: Vec<(String, Value)>,
}

pub struct FakeGithub {
    pub url: String,
    pub state: Arc<Mutex<Forge>>,
}

type Shared = Arc<Mutex<Forge>>;

/// An issue as GitHub lists it.
pub fn issue(repo: &str, number: i64, title: &str, body: &str, labels: &[&str]) -> Value {
    json!({
        "number": number, "title": title, "body": body, "state": "open",
        "html_url": format!("https://github.example/{repo}/issues/{number}"),
        "labels": labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
    })
}

/// The payload of an `issues` webhook delivery: `action` on `issue` of
/// `repo`. Signed by the test with `kandev_common::webhook::sign`.
pub fn issue_event(action: &str, repo: &str, issue: Value) -> Value {
    json!({"action": action, "issue": issue, "repository": {"full_name": repo}})
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"}))).into_response()
}

/// The repository a path names (`{repo}/issues...`) and what follows it.
fn split(rest: &str) -> Option<(String, Vec<&str>)> {
    let parts: Vec<&str> = rest.split('/').collect();
    let at = parts
        .iter()
        .rposition(|p| ["issues", "pulls", "commits", "actions"].contains(p))?;
    Some((parts[..at].join("/"), parts[at..].to_vec()))
}

/// 404 or 301 for a repository the fake does not serve.
fn unserved(forge: &Forge, repo: &str) -> Option<Response> {
    if forge.moved.contains(repo) {
        return Some(
            (
                StatusCode::MOVED_PERMANENTLY,
                [(header::LOCATION, "/repositories/42")],
                Json(json!({"message": "Moved Permanently"})),
            )
                .into_response(),
        );
    }
    (!forge.issues.contains_key(repo)).then(not_found)
}

/// One request: recorded, its credentials checked, then answered.
async fn answer(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let path = uri.path();
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut forge = state.lock().unwrap_or_else(|e| e.into_inner());
    forge
        .asked
        .push((method.to_string(), path.to_string(), auth.clone()));
    if let Some(token) = &forge.token
        && auth != format!("Bearer {token}")
    {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "Bad credentials"})),
        )
            .into_response();
    }
    let Some((repo, tail)) = path.strip_prefix("/repos/").and_then(split) else {
        return not_found();
    };
    if let Some(refused) = unserved(&forge, &repo) {
        return refused;
    }
    if method == Method::GET {
        return read(&forge, &repo, &tail, &query);
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match (method == Method::POST, tail.as_slice()) {
        (true, ["pulls"]) => {
            forge.pulls.push((auth, body));
            let number = forge.pulls.len();
            (
                StatusCode::CREATED,
                Json(json!({
                    "html_url": format!("https://github.example/{repo}/pull/{number}"),
                    "number": number,
                })),
            )
                .into_response()
        }
        (true, ["issues", number, "comments"]) => {
            let Ok(number) = number.parse::<i64>() else {
                return not_found();
            };
            let text = body["body"].as_str().unwrap_or_default().to_string();
            forge.comments.push((repo, number, text));
            (StatusCode::CREATED, Json(json!({"id": 1}))).into_response()
        }
        _ => not_found(),
    }
}

/// The answer to a GET on a served repository.
fn read(forge: &Forge, repo: &str, tail: &[&str], query: &HashMap<String, String>) -> Response {
    match tail {
        ["issues"] => {
            let label = query.get("labels").map(String::as_str).unwrap_or_default();
            let listed: Vec<Value> = forge.issues[repo]
                .iter()
                .filter(|i| {
                    label.is_empty()
                        || i["labels"]
                            .as_array()
                            .is_some_and(|ls| ls.iter().any(|l| l["name"] == label))
                })
                .cloned()
                .collect();
            Json(Value::Array(listed)).into_response()
        }
        ["commits", _, "check-runs"] => Json(json!({
            "total_count": forge.check_runs.len(),
            "check_runs": forge.check_runs,
        }))
        .into_response(),
        ["commits", _, "status"] => {
            let failed = forge
                .statuses
                .iter()
                .any(|s| s["state"] != "success" && s["state"] != "pending");
            let state = if failed { "failure" } else { "success" };
            Json(json!({"state": state, "statuses": forge.statuses})).into_response()
        }
        ["actions", "jobs", id, "logs"] => {
            match id.parse().ok().and_then(|id: i64| forge.job_logs.get(&id)) {
                Some(log) => log.clone().into_response(),
                None => not_found(),
            }
        }
        _ => not_found(),
    }
}

/// The end of [`FakeGithub::red`]'s `build` output; what comes before it
/// is cut by Kandev.
pub const BUILD_TAIL: &str = "error[E0308]: mismatched types in src/login.rs";
/// The end of [`FakeGithub::red`]'s `unit-tests` job log.
pub const JOB_LOG_TAIL: &str = "assertion failed: login_works";

impl FakeGithub {
    /// A fake that lets in only `token`, where every commit's checks are:
    /// `build` failed with a long output ending in [`BUILD_TAIL`],
    /// `unit-tests` failed with its log ([`JOB_LOG_TAIL`]) only in the
    /// job's log, `lint` passed, and the `ci/docs` status passed.
    pub async fn red(token: &str) -> FakeGithub {
        let github = FakeGithub::start().await;
        let mut forge = github.forge();
        forge.token = Some(token.into());
        let noise = "compiling…\n".repeat(2000);
        forge.check_runs = vec![
            json!({"id": 11, "name": "build", "status": "completed", "conclusion": "failure",
             "html_url": "https://github.example/runs/11",
             "output": {"title": "Build failed", "summary": "1 error",
                        "text": format!("{noise}{BUILD_TAIL}")}}),
            json!({"id": 12, "name": "unit-tests", "status": "completed", "conclusion": "failure",
             "html_url": "https://github.example/runs/12",
             "output": {"title": null, "summary": null, "text": null}}),
            json!({"id": 13, "name": "lint", "status": "completed", "conclusion": "success",
             "html_url": "https://github.example/runs/13", "output": {}}),
        ];
        forge.statuses = vec![json!({"context": "ci/docs", "state": "success",
            "target_url": "https://ci.example/docs", "description": "built"})];
        let log = format!("{}{JOB_LOG_TAIL}\n", "running test…\n".repeat(1000));
        forge.job_logs.insert(12, log);
        drop(forge);
        github
    }

    pub async fn start() -> FakeGithub {
        let state = Shared::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new().fallback(answer).with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeGithub { url, state }
    }

    /// Serves `repo` with `issues`.
    pub fn serve(&self, repo: &str, issues: Vec<Value>) {
        self.forge().issues.insert(repo.to_string(), issues);
    }

    /// What the fake knows and was asked, to read or change.
    pub fn forge(&self) -> std::sync::MutexGuard<'_, Forge> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `KANDEV_FORGES` value pointing every `file:///` repository at
    /// this fake, with `token`.
    pub fn forges_setting(&self, token: &str) -> String {
        format!(
            "[{{repository_prefix = \"file:///\", kind = \"github\", api_url = \"{}\", token = \"{token}\"}}]",
            self.url
        )
    }
}
