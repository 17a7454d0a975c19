//! The model's answer to one request ([`plan`]) and its two wire forms:
//! the Server-Sent Events stream (`message_start`, `ping`, per block
//! `content_block_start` / `content_block_delta` (`text_delta` or
//! `input_json_delta`) / `content_block_stop`, then `message_delta` with the
//! stop reason and usage, then `message_stop`), and the whole JSON message.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use axum::Json;
use axum::response::sse::{Event, Sse};
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{Value, json};

use super::conversation::{conversation, working_dir};
use super::tools;
use crate::script::{self, Step};

/// How many bytes of a text or of a tool's input go in one delta.
const DELTA_BYTES: usize = 24;

/// `kandev: slow` streams being served now (a stream ends, and this drops,
/// when its client goes away).
static SLOW_LIVE: AtomicUsize = AtomicUsize::new(0);

/// One content block of an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// These blocks, then stop for this reason (`end_turn` or `tool_use`).
    Blocks {
        blocks: Vec<Block>,
        stop_reason: &'static str,
    },
    /// Text chunks every [`script::SLOW_EVERY`] for [`script::SLOW_FOR`].
    Slow,
}

/// How many `kandev: slow` streams are being served right now.
pub fn slow_streams_live() -> usize {
    SLOW_LIVE.load(Ordering::SeqCst)
}

/// The answer to a request: the script's next step with the offered tools,
/// or, for a side request offering no tools, [`side_answer`].
pub fn plan(body: &Value) -> Reply {
    let offered = body.get("tools").and_then(Value::as_array);
    let Some(offered) = offered.filter(|t| !t.is_empty()) else {
        return say(side_answer(body));
    };
    match script::next_step(&conversation(body)) {
        Step::Say(text) => say(text),
        Step::Slow => Reply::Slow,
        Step::Call(action) => {
            let cwd = working_dir(body);
            match tools::call_for(&action, offered, cwd.as_deref()) {
                Some(call) => Reply::Blocks {
                    blocks: vec![Block::ToolUse {
                        id: new_id("toolu_"),
                        name: call.name,
                        input: call.input,
                    }],
                    stop_reason: "tool_use",
                },
                None => say(tools::missing(&action)),
            }
        }
    }
}

fn say(text: String) -> Reply {
    Reply::Blocks {
        blocks: vec![Block::Text(text)],
        stop_reason: "end_turn",
    }
}

/// The answer to a request offering no tools (Claude Code's titles,
/// summaries and probes): JSON fitting the schema when structured output is
/// asked for, else [`script::HELLO`].
pub fn side_answer(body: &Value) -> String {
    let schema = body
        .pointer("/output_config/format")
        .or_else(|| body.get("output_format"))
        .filter(|f| f.get("type").and_then(Value::as_str) == Some("json_schema"))
        .and_then(|f| f.get("schema"));
    match schema {
        Some(schema) => fill(schema).to_string(),
        None => script::HELLO.to_string(),
    }
}

/// A value of the schema's shape: required properties filled, strings
/// saying where they came from.
fn fill(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let object = properties
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), fill(v)))
                .collect();
            Value::Object(object)
        }
        Some("array") => json!([]),
        Some("boolean") => json!(false),
        Some("integer" | "number") => json!(0),
        Some("null") => Value::Null,
        _ => json!("Scripted answer"),
    }
}

/// About four bytes a token, at least one.
pub fn estimate_tokens(body: &Value) -> usize {
    (body.to_string().len() / 4).max(1)
}

/// A fresh id with Anthropic's prefix (`msg_`, `toolu_`, `req_`).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

fn model(body: &Value) -> String {
    body.get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-opus-5-5")
        .to_string()
}

fn output_tokens(blocks: &[Block]) -> usize {
    let bytes: usize = blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) => t.len(),
            Block::ToolUse { input, .. } => input.to_string().len(),
        })
        .sum();
    (bytes / 4).max(1)
}

/// The whole message, as `stream: false` gets it.
pub async fn whole(reply: Reply, body: &Value) -> Json<Value> {
    let (blocks, stop_reason) = match reply {
        Reply::Blocks {
            blocks,
            stop_reason,
        } => (blocks, stop_reason),
        Reply::Slow => {
            // Dropped, and so ended, when the client goes away.
            tokio::time::sleep(script::SLOW_FOR).await;
            (vec![Block::Text("Slow answer done.".into())], "end_turn")
        }
    };
    let content: Vec<Value> = blocks.iter().map(block_json).collect();
    Json(json!({
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model(body),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": estimate_tokens(body),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens(&blocks),
        },
    }))
}

fn block_json(block: &Block) -> Value {
    match block {
        Block::Text(text) => json!({ "type": "text", "text": text }),
        Block::ToolUse { id, name, input } => {
            json!({ "type": "tool_use", "id": id, "name": name, "input": input })
        }
    }
}

type Events = BoxStream<'static, Result<Event, Infallible>>;

/// The answer as Server-Sent Events.
pub fn stream(reply: Reply, body: &Value) -> Sse<Events> {
    let head = vec![
        message_start(body),
        event("ping", json!({ "type": "ping" })),
    ];
    let events: Events = match reply {
        Reply::Blocks {
            blocks,
            stop_reason,
        } => {
            let mut all = head;
            for (index, block) in blocks.iter().enumerate() {
                all.extend(block_events(index, block));
            }
            all.extend(message_end(stop_reason, output_tokens(&blocks)));
            stream::iter(all.into_iter().map(Ok)).boxed()
        }
        Reply::Slow => {
            let mut start = head;
            start.push(block_start(0, json!({ "type": "text", "text": "" })));
            let mut end = vec![event(
                "content_block_stop",
                json!({ "type": "content_block_stop", "index": 0 }),
            )];
            end.extend(message_end("end_turn", 1));
            stream::iter(start)
                .chain(slow_chunks())
                .chain(stream::iter(end))
                .map(Ok)
                .boxed()
        }
    };
    Sse::new(events)
}

fn event(name: &str, data: Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

fn message_start(body: &Value) -> Event {
    event(
        "message_start",
        json!({
            "type": "message_start",
            "message": {
                "id": new_id("msg_"),
                "type": "message",
                "role": "assistant",
                "model": model(body),
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": estimate_tokens(body),
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 1,
                },
            },
        }),
    )
}

fn block_start(index: usize, content_block: Value) -> Event {
    event(
        "content_block_start",
        json!({ "type": "content_block_start", "index": index, "content_block": content_block }),
    )
}

fn delta(index: usize, delta: Value) -> Event {
    event(
        "content_block_delta",
        json!({ "type": "content_block_delta", "index": index, "delta": delta }),
    )
}

/// One block's start, deltas and stop.
fn block_events(index: usize, block: &Block) -> Vec<Event> {
    let mut events = Vec::new();
    match block {
        Block::Text(text) => {
            events.push(block_start(index, json!({ "type": "text", "text": "" })));
            for piece in pieces(text) {
                events.push(delta(index, json!({ "type": "text_delta", "text": piece })));
            }
        }
        Block::ToolUse { id, name, input } => {
            let start = json!({ "type": "tool_use", "id": id, "name": name, "input": {} });
            events.push(block_start(index, start));
            // Anthropic opens a tool's input with an empty partial.
            let partials = std::iter::once(String::new()).chain(pieces(&input.to_string()));
            for partial in partials {
                let d = json!({ "type": "input_json_delta", "partial_json": partial });
                events.push(delta(index, d));
            }
        }
    }
    events.push(event(
        "content_block_stop",
        json!({ "type": "content_block_stop", "index": index }),
    ));
    events
}

fn message_end(stop_reason: &str, output_tokens: usize) -> Vec<Event> {
    vec![
        event(
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": { "stop_reason": stop_reason, "stop_sequence": null },
                "usage": { "output_tokens": output_tokens },
            }),
        ),
        event("message_stop", json!({ "type": "message_stop" })),
    ]
}

/// `text` cut into pieces of about [`DELTA_BYTES`], on character bounds.
fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        current.push(c);
        if current.len() >= DELTA_BYTES {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    out
}

/// Counts a live slow stream while it exists; says how it ended.
struct SlowGuard {
    chunks: usize,
    finished: bool,
}

impl SlowGuard {
    fn new() -> Self {
        SLOW_LIVE.fetch_add(1, Ordering::SeqCst);
        SlowGuard {
            chunks: 0,
            finished: false,
        }
    }
}

impl Drop for SlowGuard {
    fn drop(&mut self) {
        SLOW_LIVE.fetch_sub(1, Ordering::SeqCst);
        if self.finished {
            tracing::info!(chunks = self.chunks, "slow stream finished");
        } else {
            tracing::info!(chunks = self.chunks, "slow stream stopped: client gone");
        }
    }
}

/// A text delta every [`script::SLOW_EVERY`] until [`script::SLOW_FOR`] has
/// passed; dropped (and so stopped) when the client disconnects.
fn slow_chunks() -> BoxStream<'static, Event> {
    let started = Instant::now();
    stream::unfold(SlowGuard::new(), move |mut guard| async move {
        if started.elapsed() >= script::SLOW_FOR {
            guard.finished = true;
            drop(guard);
            return None;
        }
        if guard.chunks > 0 {
            tokio::time::sleep(script::SLOW_EVERY).await;
        }
        guard.chunks += 1;
        let text = script::slow_chunk(guard.chunks);
        Some((
            delta(0, json!({ "type": "text_delta", "text": text })),
            guard,
        ))
    })
    .boxed()
}
