//! The orchestrator: start, stop and inspect a task's execution, and the
//! task's live stream (see [`crate::stream`]).

use std::sync::Arc;

use axum::{
    Json,
    extract::{
        State,
        ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection},
    },
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use http::{HeaderMap, header};
use kandev_proto::v1 as pb;

use super::access::visible_task;
use crate::{
    api::{StartTaskRequest, StopTaskRequest, StreamParams, TaskExecution},
    auth::{CurrentUser, WS_BEARER_PROTOCOL},
    clients::{Answer, orch_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath, ApiQuery},
    state::AppState,
    stream::{
        OrchestratorUpstream,
        session::{self, Limits, Outcome},
    },
};

#[utoipa::path(operation_id = "start_task_execution", post, path = "/api/v1/orchestrator/tasks/{taskId}/start", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id")),
    request_body = StartTaskRequest,
    responses((status = 200, body = TaskExecution),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 429, description = "too many requests: retry after `Retry-After` seconds; or, without `Retry-After`, the run already has its most follow-ups waiting until its turn ends", body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn start(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
    ApiJson(body): ApiJson<StartTaskRequest>,
) -> ApiResult<Json<TaskExecution>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let exec = state
        .orchestrator()
        .start_task(pb::StartTaskRequest {
            task_id: task.id,
            prompt: body.prompt,
            actor: user.username,
        })
        .await
        .answer(orch_err)?;
    Ok(Json(exec.into()))
}

#[utoipa::path(operation_id = "stop_task_execution", post, path = "/api/v1/orchestrator/tasks/{taskId}/stop", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id")),
    request_body = StopTaskRequest,
    responses((status = 200, body = TaskExecution),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn stop(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
    ApiJson(body): ApiJson<StopTaskRequest>,
) -> ApiResult<Json<TaskExecution>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let exec = state
        .orchestrator()
        .stop_task(pb::StopTaskRequest {
            task_id: task.id,
            reason: body.reason,
            actor: user.username,
        })
        .await
        .answer(orch_err)?;
    Ok(Json(exec.into()))
}

#[utoipa::path(operation_id = "get_task_execution", get, path = "/api/v1/orchestrator/tasks/{taskId}/status", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id")),
    responses((status = 200, body = TaskExecution),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn status(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
) -> ApiResult<Json<TaskExecution>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let exec = state
        .orchestrator()
        .get_task_execution(pb::GetTaskExecutionRequest { task_id: task.id })
        .await
        .answer(orch_err)?;
    Ok(Json(exec.into()))
}

/// Whether the client offered the `kandev.bearer` subprotocol.
pub(super) fn offers_bearer_protocol(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == WS_BEARER_PROTOCOL)
}

/// The live stream of a task: every feed frame from `?after=` (stored, then
/// live), each exactly once and in order, and commands (`prompt`,
/// `cancel`, `permission`) answered with `ack` or `error` frames. A client
/// that falls more than `stream_client_buffer` frames behind gets a
/// `lagging` notice and close code 1008; a message over the body limit,
/// 1009; a gateway shutting down, 1001.
///
/// Authenticate with `Authorization: Bearer <token>`, or from a browser
/// with the subprotocols `["kandev.bearer", "<token>"]`; the gateway then
/// answers with the `kandev.bearer` subprotocol.
#[utoipa::path(operation_id = "stream_task", get, path = "/api/v1/orchestrator/tasks/{taskId}/stream", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id"), StreamParams),
    responses((status = 101, description = "switching to the WebSocket protocol"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn stream(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
    ApiQuery(params): ApiQuery<StreamParams>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let upgrade =
        upgrade.map_err(|_| ApiError::bad_request("this endpoint needs a WebSocket upgrade"))?;
    let task = visible_task(&state, &user, &task_id).await?;
    let after = params.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::validation("after must be 0 or more"));
    }
    let upstream = OrchestratorUpstream {
        client: state.orchestrator(),
        task_id: task.id.clone(),
        actor: user.username.clone(),
    };
    // The feed must be readable before the upgrade, so a client is told
    // over HTTP when it is not (503 while the orchestrator is down).
    upstream.read_limit(after, 1).await?;
    let upgrade = if offers_bearer_protocol(&headers) {
        upgrade.protocols([WS_BEARER_PROTOCOL])
    } else {
        upgrade
    };
    let max = state.stream_max_message();
    let task_uuid = uuid::Uuid::parse_str(&task.id)
        .map_err(|_| ApiError::internal(format!("task id {:?} is not a uuid", task.id)))?;
    Ok(upgrade
        .read_buffer_size(kandev_common::serve::WS_READ_BUFFER)
        .max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| async move {
            let live = state.live().subscribe(task_uuid).await;
            let limiter_state = state.clone();
            let key = format!("user:{}", user.username);
            let limits = Limits {
                buffer: state.live().buffer(),
                rate: Arc::new(move || limiter_state.api_limiter().check(&key)),
            };
            let (sink, source) = socket.split();
            let outcome = session::run(
                sink,
                source,
                &upstream,
                live,
                after,
                &limits,
                state.streams_stop(),
            )
            .await;
            match outcome {
                Outcome::Lagged => {
                    tracing::warn!(task_id = %task_uuid, user = %user.username, "stream client lagging, disconnected");
                }
                Outcome::Broken(why) => {
                    tracing::warn!(task_id = %task_uuid, %why, "stream closed: the feed cannot be read");
                }
                other => tracing::debug!(task_id = %task_uuid, ?other, "stream closed"),
            }
        })
        .into_response())
}
