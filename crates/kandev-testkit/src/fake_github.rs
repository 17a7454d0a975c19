//! A local server speaking the subset of GitHub's REST API Kandev uses:
//! a repository's issues (`GET /repos/{owner}/{repo}/issues`, filtered by
//! label), comments on an issue, and pull requests; a missing repository
//! answers 404 and a renamed one 301, as GitHub does. Repository names
//! may have more than two segments (a `file://` path's). Shared by the
//! orchestrator's tests and the end-to-end suite.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::{Value, json};

/// What the fake knows and was asked.
#[derive(Default)]
pub struct Forge {
    /// Issues by repository (`owner/repo`), as GitHub shows them.
    pub issues: HashMap<String, Vec<Value>>,
    /// Repositories that were renamed: 301.
    pub moved: HashSet<String>,
    /// (repository, issue number, comment body) of each comment.
    pub comments: Vec<(String, i64, String)>,
    /// (authorization header, request body) of each pull request.
    pub pulls: Vec<(String, Value)>,
    /// (repository, authorization header) of each issue listing.
    pub reads: Vec<(String, String)>,
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

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"}))).into_response()
}

/// The repository a path names (`{repo}/issues...`) and what follows it.
fn split(rest: &str) -> Option<(String, Vec<&str>)> {
    let parts: Vec<&str> = rest.split('/').collect();
    let at = parts
        .iter()
        .rposition(|p| *p == "issues" || *p == "pulls")?;
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

async fn read(
    State(state): State<Shared>,
    Path(rest): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let mut forge = state.lock().unwrap();
    let Some((repo, tail)) = split(&rest) else {
        return not_found();
    };
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    forge.reads.push((repo.clone(), auth));
    if let Some(answer) = unserved(&forge, &repo) {
        return answer;
    }
    if tail != ["issues"] {
        return not_found();
    }
    let label = query.get("labels").cloned().unwrap_or_default();
    let listed: Vec<Value> = forge.issues[&repo]
        .iter()
        .filter(|i| {
            label.is_empty()
                || i["labels"]
                    .as_array()
                    .is_some_and(|ls| ls.iter().any(|l| l["name"] == label.as_str()))
        })
        .cloned()
        .collect();
    Json(Value::Array(listed)).into_response()
}

async fn write(
    State(state): State<Shared>,
    Path(rest): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let mut forge = state.lock().unwrap();
    let Some((repo, tail)) = split(&rest) else {
        return not_found();
    };
    if let Some(answer) = unserved(&forge, &repo) {
        return answer;
    }
    match tail.as_slice() {
        ["pulls"] => {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
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
        ["issues", number, "comments"] => {
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

impl FakeGithub {
    pub async fn start() -> FakeGithub {
        let state = Shared::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/repos/{*rest}", get(read).post(write))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeGithub { url, state }
    }

    /// Serves `repo` with `issues`.
    pub fn serve(&self, repo: &str, issues: Vec<Value>) {
        self.state
            .lock()
            .unwrap()
            .issues
            .insert(repo.to_string(), issues);
    }
}
