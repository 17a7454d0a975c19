//! A local server speaking the subset of GitLab's REST API v4 Kandev uses,
//! under `/api/v4`: a project's issues (`GET /projects/:id/issues`, by
//! labels and state, paginated with GitLab's `X-Page`/`X-Next-Page`/
//! `X-Total` headers), notes on an issue, merge requests (409 for a second
//! open one of a branch), a commit's pipelines, a pipeline's jobs and a
//! job's trace. A project's id is its URL-encoded full path; an unknown
//! one answers 404 `{"message":"404 Project Not Found"}`, a request
//! without the token (`PRIVATE-TOKEN`, or `Authorization: Bearer`) 401
//! `{"message":"401 Unauthorized"}`, as GitLab does. It also delivers
//! `Issue Hook` webhooks with their `X-Gitlab-Token`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Query, State},
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

/// One project the fake serves.
#[derive(Default)]
pub struct Project {
    /// Issues as GitLab's REST API shows them.
    pub issues: Vec<Value>,
    /// Pipelines (`id`, `sha`, `ref`, `status`, `web_url`).
    pub pipelines: Vec<Value>,
    /// Each pipeline's jobs, by pipeline id.
    pub jobs: HashMap<u64, Vec<Value>>,
    /// Each job's trace (its log), by job id.
    pub traces: HashMap<u64, String>,
}

/// What the fake knows and was asked.
#[derive(Default)]
pub struct Gitlab {
    /// Projects by full path (`group/app`).
    pub projects: HashMap<String, Project>,
    /// (project, issue iid, note body) of each note.
    pub notes: Vec<(String, i64, String)>,
    /// (project, request body) of each merge request.
    pub merge_requests: Vec<(String, Value)>,
    /// (method, path and query) of each request.
    pub asked: Vec<(String, String)>,
}

pub struct FakeGitlab {
    /// The server's root; the API is at [`FakeGitlab::api_url`].
    pub url: String,
    pub token: String,
    pub state: Arc<Mutex<Gitlab>>,
}

#[derive(Clone)]
struct Shared {
    token: String,
    state: Arc<Mutex<Gitlab>>,
}

/// An open issue as GitLab's REST API lists it.
pub fn issue(project: &str, iid: i64, title: &str, description: &str, labels: &[&str]) -> Value {
    json!({
        "id": 1000 + iid, "iid": iid, "project_id": 1, "title": title,
        "description": description, "state": "opened",
        "web_url": format!("https://gitlab.example/{project}/-/issues/{iid}"),
        "labels": labels, "updated_at": "2026-01-01T00:00:00.000Z",
    })
}

/// The `Issue Hook` delivery GitLab sends for `issue` (a REST issue as
/// [`issue`] makes) of `project`, with `action` (`open`, `update`,
/// `close`, `reopen`).
pub fn issue_hook(project: &str, issue: &Value, action: &str) -> Value {
    let labels: Vec<Value> = issue["labels"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, l)| json!({"id": i + 1, "title": l, "type": "ProjectLabel"}))
        .collect();
    json!({
        "object_kind": "issue", "event_type": "issue",
        "user": {"id": 1, "username": "root"},
        "project": {"id": 1, "path_with_namespace": project,
                    "web_url": format!("https://gitlab.example/{project}")},
        "object_attributes": {
            "id": issue["id"], "iid": issue["iid"], "title": issue["title"],
            "description": issue["description"], "state": issue["state"],
            "action": action, "url": issue["web_url"],
        },
        "labels": labels,
    })
}

/// GitLab's error body.
fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "message": message }))).into_response()
}

/// `%XX` decoded (GitLab's project ids are URL-encoded paths).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn authorized(token: &str, headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    header("private-token") == Some(token)
        || header("authorization") == Some(&format!("Bearer {token}"))
}

async fn answer(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    body: axum::body::Bytes,
) -> Response {
    let mut gitlab = shared.state.lock().unwrap();
    let asked = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    gitlab.asked.push((method.to_string(), asked));
    if !authorized(&shared.token, &headers) {
        return error(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    let Some(rest) = uri.path().strip_prefix("/api/v4/projects/") else {
        return error(StatusCode::NOT_FOUND, "404 Not Found");
    };
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let project = decode(id);
    if !gitlab.projects.contains_key(&project) {
        return error(StatusCode::NOT_FOUND, "404 Project Not Found");
    }
    let tail: Vec<&str> = tail.split('/').collect();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match (method, tail.as_slice()) {
        (Method::GET, ["issues"]) => list_issues(&gitlab.projects[&project], &query),
        (Method::POST, ["issues", iid, "notes"]) => {
            let iid = iid.parse::<i64>().unwrap_or(-1);
            if !gitlab.projects[&project]
                .issues
                .iter()
                .any(|i| i["iid"] == iid)
            {
                return error(StatusCode::NOT_FOUND, "404 Issue Not Found");
            }
            let Some(text) = body["body"].as_str() else {
                return error(StatusCode::BAD_REQUEST, "400 Bad request - body is missing");
            };
            gitlab.notes.push((project, iid, text.to_string()));
            let id = gitlab.notes.len();
            (StatusCode::CREATED, Json(json!({"id": id, "body": text}))).into_response()
        }
        (Method::POST, ["merge_requests"]) => open_merge_request(&mut gitlab, project, body),
        (Method::GET, ["pipelines"]) => {
            let sha = query.get("sha");
            let mut listed: Vec<Value> = gitlab.projects[&project]
                .pipelines
                .iter()
                .filter(|p| sha.is_none_or(|s| p["sha"] == s.as_str()))
                .cloned()
                .collect();
            listed.sort_by_key(|p| std::cmp::Reverse(p["id"].as_u64()));
            page(listed, &query)
        }
        (Method::GET, ["pipelines", id, "jobs"]) => {
            let jobs = id
                .parse::<u64>()
                .ok()
                .and_then(|id| gitlab.projects[&project].jobs.get(&id));
            match jobs {
                Some(jobs) => page(jobs.clone(), &query),
                None => error(StatusCode::NOT_FOUND, "404 Not found"),
            }
        }
        (Method::GET, ["jobs", id, "trace"]) => {
            let trace = id
                .parse::<u64>()
                .ok()
                .and_then(|id| gitlab.projects[&project].traces.get(&id));
            match trace {
                Some(trace) => trace.clone().into_response(),
                None => error(StatusCode::NOT_FOUND, "404 Not found"),
            }
        }
        _ => error(StatusCode::NOT_FOUND, "404 Not Found"),
    }
}

/// The issues with every label of `labels` (comma-separated) in `state`
/// (`opened`, `closed`, `all`: the default).
fn list_issues(project: &Project, query: &HashMap<String, String>) -> Response {
    let labels: Vec<&str> = query
        .get("labels")
        .map(|l| l.split(',').filter(|l| !l.is_empty()).collect())
        .unwrap_or_default();
    let state = query.get("state").map_or("all", String::as_str);
    let listed: Vec<Value> = project
        .issues
        .iter()
        .filter(|i| state == "all" || i["state"] == state)
        .filter(|i| {
            labels.iter().all(|l| {
                i["labels"]
                    .as_array()
                    .is_some_and(|ls| ls.iter().any(|x| x == *l))
            })
        })
        .cloned()
        .collect();
    page(listed, query)
}

/// One page of `items` (`page`, `per_page`: 20 by default, at most 100)
/// with GitLab's pagination headers.
fn page(items: Vec<Value>, query: &HashMap<String, String>) -> Response {
    let number = |key: &str, default: usize| {
        query
            .get(key)
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(default)
    };
    let per_page = number("per_page", 20).min(100);
    let page = number("page", 1);
    let total = items.len();
    let shown: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let next = if page * per_page < total {
        (page + 1).to_string()
    } else {
        String::new()
    };
    (
        [
            ("x-page", page.to_string()),
            ("x-per-page", per_page.to_string()),
            ("x-next-page", next),
            ("x-total", total.to_string()),
        ],
        Json(Value::Array(shown)),
    )
        .into_response()
}

fn open_merge_request(gitlab: &mut Gitlab, project: String, body: Value) -> Response {
    let branch = body["source_branch"].as_str().unwrap_or_default();
    if branch.is_empty() || body["target_branch"].as_str().is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "400 Bad request - source_branch is missing",
        );
    }
    let taken = gitlab
        .merge_requests
        .iter()
        .position(|(p, mr)| *p == project && mr["source_branch"] == branch);
    if let Some(at) = taken {
        return (
            StatusCode::CONFLICT,
            Json(json!({"message": [format!(
                "Another open merge request already exists for this source branch: !{}",
                at + 1
            )]})),
        )
            .into_response();
    }
    gitlab.merge_requests.push((project.clone(), body));
    let iid = gitlab.merge_requests.len();
    (
        StatusCode::CREATED,
        Json(json!({
            "id": 5000 + iid, "iid": iid, "state": "opened",
            "web_url": format!("https://gitlab.example/{project}/-/merge_requests/{iid}"),
        })),
    )
        .into_response()
}

impl FakeGitlab {
    /// Starts the fake; requests must carry `token`.
    pub async fn start(token: &str) -> FakeGitlab {
        let shared = Shared {
            token: token.to_string(),
            state: Arc::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new().fallback(answer).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeGitlab {
            url,
            token: shared.token,
            state: shared.state,
        }
    }

    /// The REST API root (a forge's `api_url`).
    pub fn api_url(&self) -> String {
        format!("{}/api/v4", self.url)
    }

    /// Serves `project` with `issues` (and no pipelines yet).
    pub fn serve(&self, project: &str, issues: Vec<Value>) {
        self.state.lock().unwrap().projects.insert(
            project.to_string(),
            Project {
                issues,
                ..Project::default()
            },
        );
    }

    /// Adds a pipeline of `sha` with `jobs` (each `(id, name, status,
    /// trace)`), as GitLab shows them.
    pub fn pipeline(&self, project: &str, id: u64, sha: &str, jobs: &[(u64, &str, &str, &str)]) {
        let mut gitlab = self.state.lock().unwrap();
        let served = gitlab.projects.get_mut(project).expect("a served project");
        let web = format!("https://gitlab.example/{project}");
        let failed = jobs.iter().any(|j| j.2 == "failed");
        served.pipelines.push(json!({
            "id": id, "iid": id, "sha": sha, "ref": "main", "source": "push",
            "status": if failed { "failed" } else { "success" },
            "web_url": format!("{web}/-/pipelines/{id}"),
        }));
        let listed = jobs
            .iter()
            .map(|(job, name, status, _)| {
                json!({"id": job, "name": name, "stage": "test", "status": status,
                       "allow_failure": false, "web_url": format!("{web}/-/jobs/{job}"),
                       "pipeline": {"id": id, "sha": sha}})
            })
            .collect();
        served.jobs.insert(id, listed);
        for (job, _, _, trace) in jobs {
            served.traces.insert(*job, (*trace).to_string());
        }
    }

    /// Delivers an `Issue Hook` to `webhook_url` with `token` as its
    /// `X-Gitlab-Token` (none when empty): the answer's status and body.
    pub async fn deliver(&self, webhook_url: &str, token: &str, payload: &Value) -> (u16, Value) {
        let mut headers = vec![("x-gitlab-event", "Issue Hook")];
        if !token.is_empty() {
            headers.push(("x-gitlab-token", token));
        }
        crate::http_with("POST", webhook_url, Some(payload.clone()), &headers).await
    }
}
