//! The Gemini API stand-in, as Gemini CLI calls it with
//! `GOOGLE_GEMINI_BASE_URL` pointing here:
//!
//! - `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`: the
//!   agent's turns, as Server-Sent Events (`data: {GenerateContentResponse}`);
//! - `POST /v1beta/models/{model}:generateContent`: the same as one JSON
//!   answer. Gemini CLI's side calls (its model router, the "next speaker"
//!   and loop checks, edit correction) ask for JSON matching a schema
//!   (`generationConfig.responseJsonSchema`): they get the plainest value of
//!   that schema, which never extends or breaks the turn ([`reply::fill`]);
//! - `POST ...:countTokens`, `...:embedContent`, `...:batchEmbedContents`,
//!   `GET /v1beta/models` and `GET /v1beta/models/{model}`.
//!
//! The key comes in `x-goog-api-key` or `?key=`; a key failing
//! [`script::key_ok`] gets Google's own 400 `API_KEY_INVALID`, a missing one
//! its 403 for unregistered callers.

mod reply;
mod request;

use std::collections::HashMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::script;

/// The models `GET /v1beta/models` lists (any model name is answered).
const MODELS: &[&str] = &[
    "gemini-2.5-pro",
    "gemini-2.5-flash",
    "gemini-2.5-flash-lite",
    "gemini-3-pro-preview",
    "gemini-3-flash-preview",
];

/// The Gemini API's routes.
pub fn routes() -> Router {
    Router::new()
        .route("/v1beta/models", get(list_models))
        .route("/v1beta/models/{call}", post(model_call).get(get_model))
}

/// `POST /v1beta/models/{model}:{method}`.
async fn model_call(
    Path(call): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(denied) = denial(&headers, &query) {
        return denied;
    }
    let Some((model, method)) = call.split_once(':') else {
        return not_found(&call, "generateContent");
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let message = format!("Invalid JSON payload received. {e}");
            return google_error(StatusCode::BAD_REQUEST, &message, None);
        }
    };
    tracing::debug!(%model, %method, body = %request, "gemini request");
    let tokens = estimate_tokens(body.len());
    match method {
        "streamGenerateContent" => {
            let sse = query.get("alt").is_some_and(|a| a == "sse");
            reply::stream(model, &request, tokens, sse)
        }
        "generateContent" => reply::whole(model, &request, tokens),
        "countTokens" => axum::Json(json!({ "totalTokens": tokens })).into_response(),
        "embedContent" => axum::Json(json!({ "embedding": reply::embedding() })).into_response(),
        "batchEmbedContents" => {
            let n = request["requests"].as_array().map_or(0, Vec::len);
            let all: Vec<Value> = (0..n).map(|_| reply::embedding()).collect();
            axum::Json(json!({ "embeddings": all })).into_response()
        }
        other => not_found(model, other),
    }
}

/// `GET /v1beta/models`.
async fn list_models(Query(query): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    if let Some(denied) = denial(&headers, &query) {
        return denied;
    }
    let models: Vec<Value> = MODELS.iter().map(|m| model_info(m)).collect();
    axum::Json(json!({ "models": models })).into_response()
}

/// `GET /v1beta/models/{model}`.
async fn get_model(
    Path(model): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Some(denied) = denial(&headers, &query) {
        return denied;
    }
    axum::Json(model_info(&model)).into_response()
}

fn model_info(model: &str) -> Value {
    json!({
        "name": format!("models/{model}"),
        "version": "001",
        "displayName": model,
        "inputTokenLimit": 1_048_576,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
    })
}

/// The `details` Google sends with a bad key, as its API prints them.
const BAD_KEY_DETAILS: &str = r#"[
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
        "metadata": {
          "service": "generativelanguage.googleapis.com"
        }
      },
      {
        "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
        "locale": "en-US",
        "message": "API key not valid. Please pass a valid API key."
      }
    ]"#;

/// Google's refusal when the request's key (from `x-goog-api-key` or
/// `?key=`) is missing or not one the stand-ins accept.
fn denial(headers: &HeaderMap, query: &HashMap<String, String>) -> Option<Response> {
    let key = headers
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
        .or_else(|| query.get("key").map(String::as_str))
        .unwrap_or_default();
    if script::key_ok(key) {
        return None;
    }
    if key.is_empty() {
        let message = "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.";
        return Some(google_error(StatusCode::FORBIDDEN, message, None));
    }
    let message = "API key not valid. Please pass a valid API key.";
    Some(google_error(
        StatusCode::BAD_REQUEST,
        message,
        Some(BAD_KEY_DETAILS),
    ))
}

fn not_found(model: &str, method: &str) -> Response {
    let message = format!(
        "models/{model} is not found for API version v1beta, or is not supported for {method}. Call ListModels to see the list of available models and their supported methods."
    );
    google_error(StatusCode::NOT_FOUND, &message, None)
}

/// Google's error body, laid out (field order, indentation) as its API
/// sends it: `{"error":{"code","message","status","details"}}`. Gemini CLI
/// shows this body verbatim as the turn's error message.
fn google_error(code: StatusCode, message: &str, details: Option<&str>) -> Response {
    let status = match code {
        StatusCode::BAD_REQUEST => "INVALID_ARGUMENT",
        StatusCode::FORBIDDEN => "PERMISSION_DENIED",
        StatusCode::NOT_FOUND => "NOT_FOUND",
        _ => "INTERNAL",
    };
    let message = Value::String(message.to_string());
    let details = details.map_or_else(String::new, |d| format!(",\n    \"details\": {d}"));
    let body = format!(
        "{{\n  \"error\": {{\n    \"code\": {},\n    \"message\": {message},\n    \"status\": \"{status}\"{details}\n  }}\n}}\n",
        code.as_u16()
    );
    (
        code,
        [(header::CONTENT_TYPE, "application/json; charset=UTF-8")],
        body,
    )
        .into_response()
}

/// A rough token count for a request body (four bytes a token).
fn estimate_tokens(bytes: usize) -> u64 {
    u64::try_from(bytes / 4).unwrap_or(u64::MAX).max(1)
}
