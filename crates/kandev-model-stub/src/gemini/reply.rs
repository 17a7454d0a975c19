//! The stand-in's answers: the script's next step as Gemini
//! `GenerateContentResponse`s (streamed or whole), and the plainest JSON for
//! Gemini CLI's schema-bound side calls.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use serde_json::{Map, Value, json};

use super::request;
use crate::script::{self, Action, SLOW_EVERY, SLOW_FOR, Step};

/// What the model answers a request with.
enum Answer {
    /// These parts, then `STOP`.
    Parts(Vec<Value>),
    /// Text chunks every [`SLOW_EVERY`] for [`SLOW_FOR`] (streamed only).
    Slow,
}

/// The answer to a request: the JSON a side call asks for, or the script's
/// next step.
fn answer(request: &Value) -> Answer {
    if let Some(schema) = request::response_schema(request) {
        return Answer::Parts(vec![json!({ "text": fill(schema).to_string() })]);
    }
    let conversation = request::conversation(request);
    match script::next_step(&conversation) {
        Step::Say(text) => Answer::Parts(vec![json!({ "text": text })]),
        Step::Slow => Answer::Slow,
        Step::Call(action) => Answer::Parts(vec![call(request, &action)]),
    }
}

/// The `functionCall` part for `action`, using the functions the request
/// offers (by their declared parameter names); a text part saying so when
/// none fits.
fn call(request: &Value, action: &Action) -> Value {
    const PATH: &[&str] = &["file_path", "absolute_path", "path"];
    let workspace = request::workspace(request);
    let absolute = |path: &str| match &workspace {
        Some(dir) if !path.starts_with('/') => format!("{dir}/{path}"),
        _ => path.to_string(),
    };
    let (wanted, values): (&str, Vec<(&[&str], String)>) = match action {
        Action::Read { path } => ("read_file", vec![(PATH, absolute(path))]),
        Action::Write { path, content } => (
            "write_file",
            vec![(PATH, absolute(path)), (&["content"], content.clone())],
        ),
        Action::Shell { command } => (
            "run_shell_command",
            vec![
                (&["command"], command.clone()),
                (&["description"], format!("Run {command}")),
            ],
        ),
    };
    let functions = request::functions(request);
    match functions.iter().find(|f| f.name == wanted) {
        Some(function) => {
            let args = request::args(function, &values);
            json!({ "functionCall": { "name": wanted, "args": args } })
        }
        None => {
            json!({ "text": format!("The scripted model wanted the tool {wanted}, which this request does not offer.") })
        }
    }
}

/// `:generateContent`: the answer as one `GenerateContentResponse`.
pub(super) fn whole(model: &str, request: &Value, prompt_tokens: u64) -> Response {
    let parts = match answer(request) {
        Answer::Parts(parts) => parts,
        Answer::Slow => vec![json!({ "text": "Slowly." })],
    };
    axum::Json(response(model, parts, true, prompt_tokens)).into_response()
}

/// `:streamGenerateContent`: the answer in chunks, as Server-Sent Events
/// with `alt=sse`, else as one JSON array of the chunks.
pub(super) fn stream(model: &str, request: &Value, prompt_tokens: u64, sse: bool) -> Response {
    let chunks: BoxStream<'static, Value> = match (answer(request), sse) {
        (Answer::Parts(parts), true) => stream::iter(split(model, parts, prompt_tokens)).boxed(),
        (Answer::Slow, true) => slow(model.to_string(), prompt_tokens),
        (Answer::Parts(parts), false) => {
            return axum::Json(split(model, parts, prompt_tokens)).into_response();
        }
        (Answer::Slow, false) => {
            let parts = vec![json!({ "text": "Slowly." })];
            return axum::Json(split(model, parts, prompt_tokens)).into_response();
        }
    };
    let events = chunks.map(|c| Ok::<_, Infallible>(Bytes::from(format!("data: {c}\r\n\r\n"))));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events),
    )
        .into_response()
}

/// The chunks of an answer: a text is streamed in two pieces (the first
/// word, then the rest with `STOP`); other parts come in one final chunk.
fn split(model: &str, parts: Vec<Value>, prompt_tokens: u64) -> Vec<Value> {
    let text = match parts.as_slice() {
        [only] => only["text"].as_str().map(str::to_string),
        _ => None,
    };
    match text.as_deref().and_then(|t| t.split_once(' ')) {
        Some((head, tail)) => vec![
            response(
                model,
                vec![json!({ "text": format!("{head} ") })],
                false,
                prompt_tokens,
            ),
            response(model, vec![json!({ "text": tail })], true, prompt_tokens),
        ],
        None => vec![response(model, parts, true, prompt_tokens)],
    }
}

/// `kandev: slow`: a chunk every [`SLOW_EVERY`] until [`SLOW_FOR`] has
/// passed, then `STOP`. The stream ends early when the client goes away
/// (the body is dropped with the connection).
fn slow(model: String, prompt_tokens: u64) -> BoxStream<'static, Value> {
    let every = SLOW_EVERY.max(Duration::from_millis(1));
    let total = u32::try_from(SLOW_FOR.as_millis() / every.as_millis()).unwrap_or(u32::MAX);
    stream::unfold(0u32, move |i| {
        let model = model.clone();
        async move {
            if i > total {
                return None;
            }
            if i > 0 {
                tokio::time::sleep(every).await;
            }
            let last = i == total;
            // Numbered, so no stretch repeats: Gemini CLI's loop detection
            // ends a turn whose streamed text repeats itself.
            let text = if last {
                "Done slowly.".to_string()
            } else {
                script::slow_chunk(i as usize)
            };
            let chunk = response(&model, vec![json!({ "text": text })], last, prompt_tokens);
            Some((chunk, i + 1))
        }
    })
    .boxed()
}

/// One `GenerateContentResponse`.
fn response(model: &str, parts: Vec<Value>, last: bool, prompt_tokens: u64) -> Value {
    let output: usize = parts.iter().map(|p| p.to_string().len() / 4 + 1).sum();
    let output = u64::try_from(output).unwrap_or(u64::MAX);
    let mut candidate = json!({
        "content": { "role": "model", "parts": parts },
        "index": 0,
    });
    if last {
        candidate["finishReason"] = json!("STOP");
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt_tokens.saturating_add(output),
        },
        "modelVersion": model,
        "responseId": uuid::Uuid::new_v4().simple().to_string(),
    })
}

/// An embedding (`{"values": [...]}`): a fixed small vector.
pub(super) fn embedding() -> Value {
    json!({ "values": vec![0.0_f32; 8] })
}

/// The plainest value matching a (Gemini or JSON) schema: enums take their
/// first value, strings are empty, integers 1 and numbers 0 (or their
/// `minimum`), booleans false, arrays empty, objects filled property by
/// property. So the "next speaker" check says `user`, the loop check sees no
/// loop, the router picks its first model, and an edit correction changes
/// nothing.
pub(super) fn fill(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let kind = schema["type"]
        .as_str()
        .unwrap_or("object")
        .to_ascii_lowercase();
    let minimum = schema.get("minimum").filter(|m| m.is_number()).cloned();
    match kind.as_str() {
        "string" => json!(""),
        "integer" => minimum.unwrap_or(json!(1)),
        "number" => minimum.unwrap_or(json!(0)),
        "boolean" => json!(false),
        "array" => json!([]),
        "null" => Value::Null,
        _ => {
            let properties = schema["properties"].as_object();
            let filled: Map<String, Value> = properties
                .into_iter()
                .flatten()
                .map(|(name, sub)| (name.clone(), fill(sub)))
                .collect();
            Value::Object(filled)
        }
    }
}
