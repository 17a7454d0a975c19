//! A local server answering the GitHub endpoints Kandev calls for a
//! pushed branch's CI: open a pull request, list a commit's check runs and
//! statuses, and an Actions job's log. Every commit's checks: `build`
//! failed with a long output ending in [`BUILD_TAIL`], `unit-tests` failed
//! with its log (ending in [`JOB_LOG_TAIL`]) only in the job's log, `lint`
//! passed, and the `ci/docs` status passed. Requests without
//! `Bearer <token>` get GitHub's 401. Shared by the end-to-end suite and
//! the gateway's browser tests.

use std::sync::{Arc, Mutex};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde_json::json;

/// The end of `build`'s output; what comes before it is cut.
pub const BUILD_TAIL: &str = "error[E0308]: mismatched types in src/login.rs";
/// The end of `unit-tests`' job log.
pub const JOB_LOG_TAIL: &str = "assertion failed: login_works";

/// What the fake forge was asked: (method, path, authorization header).
pub type Asked = Arc<Mutex<Vec<(String, String, String)>>>;

pub struct FakeChecksForge {
    pub url: String,
    pub asked: Asked,
}

#[derive(Clone)]
struct Shared {
    asked: Asked,
    auth: String,
}

async fn answer(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let path = uri.path().to_string();
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    shared
        .asked
        .lock()
        .unwrap()
        .push((method.to_string(), path.clone(), auth.clone()));
    if auth != shared.auth {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "Bad credentials"})),
        )
            .into_response();
    }
    if method == Method::POST && path.ends_with("/pulls") {
        return (
            StatusCode::CREATED,
            Json(json!({"html_url": "https://github.example/pull/9", "number": 9})),
        )
            .into_response();
    }
    if path.ends_with("/check-runs") {
        let noise = "compiling…\n".repeat(2000);
        return Json(json!({"total_count": 3, "check_runs": [
            {"id": 11, "name": "build", "status": "completed", "conclusion": "failure",
             "html_url": "https://github.example/runs/11",
             "output": {"title": "Build failed", "summary": "1 error",
                        "text": format!("{noise}{BUILD_TAIL}")}},
            {"id": 12, "name": "unit-tests", "status": "completed", "conclusion": "failure",
             "html_url": "https://github.example/runs/12",
             "output": {"title": null, "summary": null, "text": null}},
            {"id": 13, "name": "lint", "status": "completed", "conclusion": "success",
             "html_url": "https://github.example/runs/13", "output": {}},
        ]}))
        .into_response();
    }
    if path.ends_with("/status") {
        return Json(json!({"state": "success", "statuses": [
            {"context": "ci/docs", "state": "success", "target_url": "https://ci.example/docs",
             "description": "built"},
        ]}))
        .into_response();
    }
    if path.ends_with("/actions/jobs/12/logs") {
        return format!("{}{JOB_LOG_TAIL}\n", "running test…\n".repeat(1000)).into_response();
    }
    (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"}))).into_response()
}

impl FakeChecksForge {
    /// Serves on a free local port; only `token` is let in.
    pub async fn start(token: &str) -> FakeChecksForge {
        let asked = Asked::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shared = Shared {
            asked: asked.clone(),
            auth: format!("Bearer {token}"),
        };
        let app = Router::new().fallback(answer).with_state(shared);
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeChecksForge { url, asked }
    }
}
