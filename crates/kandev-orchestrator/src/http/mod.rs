//! REST control and the WebSocket feed, on the orchestrator's own HTTP side.
//!
//! - `POST /api/v1/orchestrator/tasks/{taskId}/start` (optional `{"prompt"}`)
//! - `POST /api/v1/orchestrator/tasks/{taskId}/stop` (optional `{"reason"}`)
//! - `GET  /api/v1/orchestrator/tasks/{taskId}/status`
//! - `WS   /api/v1/orchestrator/tasks/{taskId}/stream[?after=<seq>]`
//! - `GET  /api/v1/orchestrator/tasks/{taskId}/feed[?before=<seq>&limit=<n>]`:
//!   a page of the compacted feed (`{"items","covers_to","earliest",
//!   "has_more"}`, see [`crate::feed::store::FeedPage`]), newest first;
//!   the stream from `?after=covers_to` continues it.
//!
//! Errors have the shape `{"error","message","details","http_status"}`.

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, Query, State, WebSocketUpgrade},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use kandev_common::ServiceError;
use serde::Deserialize;
use uuid::Uuid;

use crate::{domain::OrchestratorError, feed, ws};

pub mod state;

pub use state::{AppState, error_body};

pub fn routes(state: AppState) -> Router {
    Router::new()
        .route("/api/v1/orchestrator/tasks/{task_id}/start", post(start))
        .route("/api/v1/orchestrator/tasks/{task_id}/stop", post(stop))
        .route("/api/v1/orchestrator/tasks/{task_id}/status", get(status))
        .route("/api/v1/orchestrator/tasks/{task_id}/stream", get(stream))
        .route("/api/v1/orchestrator/tasks/{task_id}/feed", get(feed_page))
        .with_state(state)
}

/// An error as the API shows it.
#[derive(Debug)]
pub struct ApiError(pub OrchestratorError);

impl From<OrchestratorError> for ApiError {
    fn from(e: OrchestratorError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.0.error_code().http_status();
        (status, Json(error_body(&self.0))).into_response()
    }
}

pub fn parse_task_id(raw: &str) -> Result<Uuid, OrchestratorError> {
    Uuid::parse_str(raw)
        .map_err(|_| OrchestratorError::BadRequest(format!("invalid task id {raw:?}")))
}

fn parse_body<T: for<'de> Deserialize<'de> + Default>(
    body: &Bytes,
) -> Result<T, OrchestratorError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| OrchestratorError::BadRequest(format!("invalid JSON body: {e}")))
}

#[derive(Debug, Default, Deserialize)]
struct StartBody {
    #[serde(default)]
    prompt: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct StopBody {
    #[serde(default)]
    reason: Option<String>,
}

async fn start(
    State(state): State<AppState>,
    Path(task_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let task_id = parse_task_id(&task_id)?;
    let body: StartBody = parse_body(&body)?;
    // The internal API has no person: a run it starts is the board owner's.
    let view = state
        .orchestration
        .start_task(task_id, body.prompt, "")
        .await?;
    Ok((axum::http::StatusCode::ACCEPTED, Json(view)).into_response())
}

async fn stop(
    State(state): State<AppState>,
    Path(task_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let task_id = parse_task_id(&task_id)?;
    let body: StopBody = parse_body(&body)?;
    let view = state
        .orchestration
        .stop_task(task_id, body.reason.as_deref().unwrap_or(""))
        .await?;
    Ok(Json(view).into_response())
}

async fn status(
    State(state): State<AppState>,
    Path(task_id): Path<String>,
) -> Result<Response, ApiError> {
    let task_id = parse_task_id(&task_id)?;
    Ok(Json(state.orchestration.get_execution(task_id).await?).into_response())
}

#[derive(Debug, Deserialize)]
struct StreamQuery {
    #[serde(default)]
    after: Option<i64>,
}

async fn stream(
    State(state): State<AppState>,
    Path(task_id): Path<String>,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let task_id = parse_task_id(&task_id)?;
    let Query(query) = query.map_err(|e| OrchestratorError::BadRequest(e.body_text()))?;
    let after = query.after.unwrap_or(0).max(0);
    Ok(upgrade
        .read_buffer_size(kandev_common::serve::WS_READ_BUFFER)
        .on_upgrade(move |socket| ws::session(state, task_id, after, socket)))
}

/// Which page of the compacted feed a client asks for.
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    #[serde(default)]
    pub before: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
}

impl PageQuery {
    /// `(before, limit)`, checked: `before` at least 1, `limit` from 1 to
    /// [`feed::PAGE_ITEMS_MAX`] ([`feed::PAGE_ITEMS`] when absent).
    pub fn parse(&self) -> Result<(Option<i64>, i64), OrchestratorError> {
        if let Some(before) = self.before
            && before < 1
        {
            return Err(OrchestratorError::Validation(
                "before must be 1 or more".into(),
            ));
        }
        let limit = self.limit.unwrap_or(feed::PAGE_ITEMS);
        if !(1..=feed::PAGE_ITEMS_MAX).contains(&limit) {
            return Err(OrchestratorError::Validation(format!(
                "limit must be from 1 to {}",
                feed::PAGE_ITEMS_MAX
            )));
        }
        Ok((self.before, limit))
    }
}

async fn feed_page(
    State(state): State<AppState>,
    Path(task_id): Path<String>,
    query: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let task_id = parse_task_id(&task_id)?;
    let Query(query) = query.map_err(|e| OrchestratorError::BadRequest(e.body_text()))?;
    let (before, limit) = query.parse()?;
    let reader = feed::FeedReader {
        store: state.feed.clone(),
        hub: state.hub.clone(),
    };
    let page = reader
        .page(task_id, before, limit)
        .await
        .map_err(OrchestratorError::Database)?;
    Ok(Json(page).into_response())
}
