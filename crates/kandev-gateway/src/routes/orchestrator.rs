//! The orchestrator: start, stop and inspect a task's execution, and the
//! task's live stream, proxied WebSocket to WebSocket.

use std::time::Duration;

use axum::{
    Json,
    extract::{
        State,
        ws::{self, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection},
    },
    response::{IntoResponse, Response},
};
use futures::{Sink, SinkExt, Stream, StreamExt};
use http::{HeaderMap, HeaderValue, header};
use kandev_common::{CancellationToken, ErrorCode};
use kandev_proto::v1 as pb;
use tokio_tungstenite::tungstenite::{
    self as tg, client::IntoClientRequest, protocol::frame::coding::CloseCode,
};

use super::access::visible_task;
use crate::{
    api::{StartTaskRequest, StopTaskRequest, StreamParams, TaskExecution},
    auth::{CurrentUser, WS_BEARER_PROTOCOL},
    clients::ORCHESTRATOR,
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath, ApiQuery},
    state::AppState,
};

/// How long the second direction may take to finish the closing handshake
/// once the first has closed.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The header telling the orchestrator who is watching.
pub const USER_HEADER: &str = "x-kandev-user";

fn orch_err(status: tonic::Status) -> ApiError {
    ApiError::from_status(ORCHESTRATOR, status)
}

#[utoipa::path(operation_id = "start_task_execution", post, path = "/api/v1/orchestrator/tasks/{taskId}/start", tag = "orchestrator",
    params(("taskId" = String, Path, description = "task id")),
    request_body = StartTaskRequest,
    responses((status = 200, body = TaskExecution), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn start(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
    ApiJson(body): ApiJson<StartTaskRequest>,
) -> ApiResult<Json<TaskExecution>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let exec = state
        .downstream()
        .orchestrator
        .clone()
        .start_task(pb::StartTaskRequest {
            task_id: task.id,
            prompt: body.prompt,
            actor: user.username,
        })
        .await
        .map_err(orch_err)?
        .into_inner();
    Ok(Json(exec.into()))
}

#[utoipa::path(operation_id = "stop_task_execution", post, path = "/api/v1/orchestrator/tasks/{taskId}/stop", tag = "orchestrator",
    params(("taskId" = String, Path, description = "task id")),
    request_body = StopTaskRequest,
    responses((status = 200, body = TaskExecution), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn stop(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
    ApiJson(body): ApiJson<StopTaskRequest>,
) -> ApiResult<Json<TaskExecution>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let exec = state
        .downstream()
        .orchestrator
        .clone()
        .stop_task(pb::StopTaskRequest {
            task_id: task.id,
            reason: body.reason,
            actor: user.username,
        })
        .await
        .map_err(orch_err)?
        .into_inner();
    Ok(Json(exec.into()))
}

#[utoipa::path(operation_id = "get_task_execution", get, path = "/api/v1/orchestrator/tasks/{taskId}/status", tag = "orchestrator",
    params(("taskId" = String, Path, description = "task id")),
    responses((status = 200, body = TaskExecution), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn status(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
) -> ApiResult<Json<TaskExecution>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let exec = state
        .downstream()
        .orchestrator
        .clone()
        .get_task_execution(pb::GetTaskExecutionRequest { task_id: task.id })
        .await
        .map_err(orch_err)?
        .into_inner();
    Ok(Json(exec.into()))
}

/// Whether the client offered the `kandev.bearer` subprotocol.
fn offers_bearer_protocol(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == WS_BEARER_PROTOCOL)
}

/// The live stream of a task: the gateway checks the caller and the task,
/// connects to the orchestrator's stream (passing `?after=`), then upgrades
/// the client and relays frames one at a time in each direction.
///
/// Authenticate with `Authorization: Bearer <token>`, or from a browser
/// with the subprotocols `["kandev.bearer", "<token>"]`; the gateway then
/// answers with the `kandev.bearer` subprotocol.
#[utoipa::path(operation_id = "stream_task", get, path = "/api/v1/orchestrator/tasks/{taskId}/stream", tag = "orchestrator",
    params(("taskId" = String, Path, description = "task id"), StreamParams),
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
    let mut url = format!(
        "{}/api/v1/orchestrator/tasks/{}/stream",
        state.downstream().orchestrator_ws_url,
        task.id
    );
    if let Some(after) = params.after {
        url.push_str(&format!("?after={after}"));
    }
    let mut request = url
        .into_client_request()
        .map_err(|e| ApiError::internal(format!("orchestrator stream url: {e}")))?;
    if let Ok(value) = HeaderValue::from_str(&user.username) {
        request.headers_mut().insert(USER_HEADER, value);
    }
    let connect = tokio_tungstenite::connect_async(request);
    let upstream = match tokio::time::timeout(state.downstream().connect_timeout, connect).await {
        Ok(Ok((upstream, _))) => upstream,
        Ok(Err(tg::Error::Http(resp))) => {
            let code = match resp.status().as_u16() {
                404 => ErrorCode::NotFound,
                400 | 422 => ErrorCode::Validation,
                409 => ErrorCode::Conflict,
                429 => ErrorCode::RateLimited,
                _ => ErrorCode::Unavailable,
            };
            tracing::warn!(status = %resp.status(), "orchestrator refused the stream");
            return Err(ApiError::new(
                code,
                format!("the orchestrator refused the stream ({})", resp.status()),
            ));
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "orchestrator stream unreachable");
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                "the orchestrator is unavailable, try again later",
            ));
        }
        Err(_) => {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                "the orchestrator did not answer in time",
            ));
        }
    };
    let upgrade = if offers_bearer_protocol(&headers) {
        upgrade.protocols([WS_BEARER_PROTOCOL])
    } else {
        upgrade
    };
    let task_id = task.id;
    let stop = state.streams_stop().clone();
    Ok(upgrade
        .on_upgrade(move |client| async move {
            tracing::debug!(%task_id, "stream proxy open");
            proxy(client, upstream, stop).await;
            tracing::debug!(%task_id, "stream proxy closed");
        })
        .into_response())
}

fn to_upstream(msg: ws::Message) -> Option<tg::Message> {
    Some(match msg {
        ws::Message::Text(t) => tg::Message::Text(t.as_str().into()),
        ws::Message::Binary(b) => tg::Message::Binary(b),
        ws::Message::Close(frame) => tg::Message::Close(frame.map(|f| tg::protocol::CloseFrame {
            code: CloseCode::from(f.code),
            reason: f.reason.as_str().into(),
        })),
        // Each hop answers its own pings.
        ws::Message::Ping(_) | ws::Message::Pong(_) => return None,
    })
}

fn to_client(msg: tg::Message) -> Option<ws::Message> {
    Some(match msg {
        tg::Message::Text(t) => ws::Message::Text(t.as_str().into()),
        tg::Message::Binary(b) => ws::Message::Binary(b),
        tg::Message::Close(frame) => ws::Message::Close(frame.map(|f| ws::CloseFrame {
            code: u16::from(f.code),
            reason: f.reason.as_str().into(),
        })),
        tg::Message::Ping(_) | tg::Message::Pong(_) | tg::Message::Frame(_) => return None,
    })
}

/// Relays `source` into `sink` one frame at a time: the next frame is read
/// only once the previous one is written, so a slow reader slows the
/// writer instead of filling a buffer. Ends after relaying a close frame.
async fn pump<S, K, M, N, E1, E2>(mut source: S, mut sink: K, convert: fn(M) -> Option<N>)
where
    S: Stream<Item = Result<M, E1>> + Unpin,
    K: Sink<N, Error = E2> + Unpin,
    E1: std::fmt::Display,
    E2: std::fmt::Display,
    N: IsClose,
{
    while let Some(next) = source.next().await {
        let msg = match next {
            Ok(msg) => msg,
            Err(e) => {
                tracing::debug!(error = %e, "stream proxy read ended");
                break;
            }
        };
        let Some(out) = convert(msg) else { continue };
        let closing = out.is_close();
        if let Err(e) = sink.send(out).await {
            tracing::debug!(error = %e, "stream proxy write ended");
            break;
        }
        if closing {
            return;
        }
    }
    let _ = sink.close().await;
}

trait IsClose {
    fn is_close(&self) -> bool;
}

impl IsClose for ws::Message {
    fn is_close(&self) -> bool {
        matches!(self, ws::Message::Close(_))
    }
}

impl IsClose for tg::Message {
    fn is_close(&self) -> bool {
        self.is_close()
    }
}

async fn proxy<U>(
    client: WebSocket,
    upstream: tokio_tungstenite::WebSocketStream<U>,
    stop: CancellationToken,
) where
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut client_tx, mut client_rx) = client.split();
    let (mut upstream_tx, mut upstream_rx) = upstream.split();
    let stopping = {
        let mut down = Box::pin(pump(&mut upstream_rx, &mut client_tx, to_client));
        let mut up = Box::pin(pump(&mut client_rx, &mut upstream_tx, to_upstream));
        // When one side closes, give the other a moment to finish the
        // closing handshake, then drop both.
        tokio::select! {
            () = &mut down => { let _ = tokio::time::timeout(CLOSE_GRACE, up).await; false }
            () = &mut up => { let _ = tokio::time::timeout(CLOSE_GRACE, down).await; false }
            () = stop.cancelled() => true,
        }
    };
    if stopping {
        const REASON: &str = "the gateway is shutting down";
        let to_client = client_tx.send(ws::Message::Close(Some(ws::CloseFrame {
            code: u16::from(CloseCode::Away),
            reason: REASON.into(),
        })));
        let _ = tokio::time::timeout(CLOSE_GRACE, to_client).await;
        let to_upstream = upstream_tx.send(tg::Message::Close(Some(tg::protocol::CloseFrame {
            code: CloseCode::Away,
            reason: REASON.into(),
        })));
        let _ = tokio::time::timeout(CLOSE_GRACE, to_upstream).await;
    }
}
