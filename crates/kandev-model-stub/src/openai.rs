//! The OpenAI Responses API stand-in, as Codex (driven by `codex-acp`)
//! calls it.
//!
//! - `POST /v1/responses`: answers with Server-Sent Events in the Responses
//!   API's shape (`response.created` … `response.completed` with usage). The
//!   step comes from [`script::next_step`] over the conversation read from the
//!   request's `input` ([`request`]); a tool step becomes a call of one of the
//!   tools the request offers ([`tools`]), streamed by [`stream`].
//! - No `GET /v1/models`: Codex with a custom provider never asks (its
//!   model list is built in), and the Anthropic stand-in owns that path.
//! - Any key failing [`script::key_ok`] gets OpenAI's own 401 body.
//!
//! Codex reaches this server through a custom model provider in its
//! `config.toml` (`base_url = "http://127.0.0.1:PORT/v1"`,
//! `wire_api = "responses"`, `supports_websockets = false`,
//! `requires_openai_auth = true`); with the built-in `openai` provider it
//! first tries a websocket (`GET /v1/responses` upgrade), which this stand-in
//! does not serve, then falls back to HTTP with a warning.

mod request;
mod stream;
mod tools;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::script;

/// The model named in answers when the request names none.
const DEFAULT_MODEL: &str = "gpt-5-codex";

/// `POST /v1/responses`.
pub fn routes() -> Router {
    Router::new().route("/v1/responses", post(responses))
}

async fn responses(headers: HeaderMap, body: Bytes) -> Response {
    if let Err(denied) = authorize(&headers) {
        return denied;
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("We could not parse the JSON body of your request: {e}"),
                None,
            );
        }
    };
    let conversation = request::conversation(&body);
    let offered = request::offered_tools(&body);
    let step = script::next_step(&conversation);
    tracing::info!(
        prompt = %conversation.prompt,
        tool_results = conversation.tool_results,
        ?step,
        "openai responses"
    );
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_MODEL);
    let output = match step {
        script::Step::Say(text) => stream::Output::Text(text),
        script::Step::Slow => stream::Output::Slow,
        script::Step::Call(action) => match tools::call_for(&action, &offered) {
            Some(call) => stream::Output::Call(call),
            None => stream::Output::Text(format!(
                "The scripted model cannot {action:?}: no fitting tool was offered."
            )),
        },
    };
    stream::respond(model, output)
}

/// Checks the `Authorization: Bearer` key, answering OpenAI's 401 if it fails.
#[allow(clippy::result_large_err)]
fn authorize(headers: &HeaderMap) -> Result<(), Response> {
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match key {
        Some(key) if script::key_ok(key) => Ok(()),
        Some(key) => Err(error(
            StatusCode::UNAUTHORIZED,
            &format!(
                "Incorrect API key provided: {}. You can find your API key at https://platform.openai.com/account/api-keys.",
                redact(key)
            ),
            Some("invalid_api_key"),
        )),
        None => Err(error(
            StatusCode::UNAUTHORIZED,
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            None,
        )),
    }
}

/// A key as OpenAI echoes it: the first and last four characters.
fn redact(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 8 {
        return key.to_string();
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 8))
}

/// An error in OpenAI's shape.
fn error(status: StatusCode, message: &str, code: Option<&str>) -> Response {
    let body = json!({
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": null,
            "code": code,
        }
    });
    (status, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn keys_are_redacted_like_openai_does() {
        assert_eq!(redact("wrong-key"), "wron*-key");
        assert_eq!(redact("short"), "short");
    }
}
