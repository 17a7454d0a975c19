//! The Anthropic Messages API stand-in, as Claude Code calls it with
//! `ANTHROPIC_BASE_URL` pointing here:
//!
//! - `POST /v1/messages` (Claude Code adds `?beta=true`): Server-Sent Events
//!   when the request says `stream: true`, one JSON message otherwise;
//! - `POST /v1/messages/count_tokens`: a rough count;
//! - `GET /v1/models` and `GET /v1/models/{id}`: a small model list;
//! - `HEAD`/`GET /api/hello`: Claude Code's reachability probe (sent unless
//!   `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` is set), always 200.
//!
//! Every `/v1` route wants a key [`script::key_ok`] accepts, in `x-api-key` or
//! `Authorization: Bearer`; any other key gets Anthropic's own 401 shape.
//!
//! The main conversation (a request that offers tools) plays the script
//! ([`script::next_step`]) with the tools the request offers (`tools`);
//! side requests without tools (titles, summaries, probes) get a short,
//! well-formed answer (`reply::side_answer`) so they never break a turn.

mod conversation;
mod reply;
mod tools;

use axum::Router;
use axum::extract::{Path, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::script;

pub use conversation::{conversation, working_dir};
pub use reply::{Block, Reply, plan, slow_streams_live};

/// The most a request body may be (Claude Code's first request is ~50 KiB;
/// long conversations grow).
const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// The models `GET /v1/models` lists (any model name is answered).
const MODELS: &[(&str, &str)] = &[
    ("claude-opus-5-5", "Claude Opus 5.5"),
    ("claude-sonnet-5-5", "Claude Sonnet 5.5"),
    ("claude-haiku-5-5", "Claude Haiku 5.5"),
];

/// The Messages API routes.
pub fn routes() -> Router {
    Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/api/hello", get(hello))
}

/// `POST /v1/messages`.
async fn messages(request: Request) -> Response {
    let body = match authorized_json(request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if !body.get("messages").is_some_and(Value::is_array) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "messages: Field required",
        );
    }
    tracing::trace!(body = %body, "anthropic request");
    let reply = plan(&body);
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    tracing::debug!(
        model,
        stream = is_stream(&body),
        ?reply,
        "anthropic messages"
    );
    if is_stream(&body) {
        reply::stream(reply, &body).into_response()
    } else {
        reply::whole(reply, &body).await.into_response()
    }
}

/// `POST /v1/messages/count_tokens`: about four bytes a token.
async fn count_tokens(request: Request) -> Response {
    match authorized_json(request).await {
        Ok(body) => {
            axum::Json(json!({ "input_tokens": reply::estimate_tokens(&body) })).into_response()
        }
        Err(response) => response,
    }
}

/// `GET /api/hello` (and `HEAD`, which axum answers from `GET`).
async fn hello() -> axum::Json<Value> {
    axum::Json(json!({ "message": "hello" }))
}

/// `GET /v1/models`.
async fn models(headers: HeaderMap) -> Response {
    if let Err(refused) = authorize(&headers) {
        return refused.into_response();
    }
    let data: Vec<Value> = MODELS
        .iter()
        .map(|(id, name)| model_json(id, name))
        .collect();
    axum::Json(json!({
        "data": data,
        "has_more": false,
        "first_id": MODELS.first().map(|m| m.0),
        "last_id": MODELS.last().map(|m| m.0),
    }))
    .into_response()
}

/// `GET /v1/models/{id}`: any id is a model.
async fn model(headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Err(refused) = authorize(&headers) {
        return refused.into_response();
    }
    let name = MODELS
        .iter()
        .find(|m| m.0 == id)
        .map_or(id.as_str(), |m| m.1);
    axum::Json(model_json(&id, name)).into_response()
}

fn model_json(id: &str, name: &str) -> Value {
    json!({
        "type": "model",
        "id": id,
        "display_name": name,
        "created_at": "2026-01-01T00:00:00Z",
    })
}

fn is_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The request's key checked, then its body read as JSON; or the error
/// response Anthropic would send.
async fn authorized_json(request: Request) -> Result<Value, Response> {
    authorize(request.headers()).map_err(IntoResponse::into_response)?;
    let bytes = axum::body::to_bytes(request.into_body(), BODY_LIMIT)
        .await
        .map_err(|e| {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                &e.to_string(),
            )
        })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &format!("invalid JSON body: {e}"),
        )
    })
}

/// A refused key: the message of Anthropic's 401.
struct Refused(&'static str);

impl IntoResponse for Refused {
    /// A 401 marked not worth retrying (`x-should-retry: false`, which the
    /// Anthropic SDK and Claude Code heed; without it Claude Code retries a
    /// 401 for about three minutes before giving up).
    fn into_response(self) -> Response {
        tracing::info!(message = self.0, "anthropic: key refused");
        let mut response = error(StatusCode::UNAUTHORIZED, "authentication_error", self.0);
        response
            .headers_mut()
            .insert("x-should-retry", header::HeaderValue::from_static("false"));
        response
    }
}

/// Accepts a key from `x-api-key` or `Authorization: Bearer`.
fn authorize(headers: &HeaderMap) -> Result<(), Refused> {
    let header_str = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let key = header_str(header::HeaderName::from_static("x-api-key"))
        .or_else(|| header_str(header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer ")));
    match key {
        Some(key) if script::key_ok(key.trim()) => Ok(()),
        Some(_) => Err(Refused("invalid x-api-key")),
        None => Err(Refused("x-api-key header is required")),
    }
}

/// An error in Anthropic's shape, with a `request-id` header.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({
        "type": "error",
        "error": { "type": kind, "message": message },
    });
    (
        status,
        [("request-id", reply::new_id("req_"))],
        axum::Json(body),
    )
        .into_response()
}
