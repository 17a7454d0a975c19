//! The Responses API's streaming answer, as Server-Sent Events whose `event`
//! names the type and whose `data` is the JSON event (with `type` and
//! `sequence_number`):
//!
//! `response.created`, `response.in_progress`, then per output item
//! `response.output_item.added`, its content (`response.content_part.added`,
//! `response.output_text.delta`…, `response.output_text.done`,
//! `response.content_part.done`; or `response.function_call_arguments.delta`
//! / `.done`; or `response.custom_tool_call_input.delta` / `.done`),
//! `response.output_item.done`, and last `response.completed` with the
//! output and usage.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt, stream};
use serde_json::{Value, json};

use super::tools::Call;
use crate::script::{SLOW_EVERY, SLOW_FOR};

/// What the answer carries.
#[derive(Debug, Clone)]
pub enum Output {
    Text(String),
    Call(Call),
    /// `kandev: slow`: text deltas every [`SLOW_EVERY`] for [`SLOW_FOR`].
    Slow,
}

/// The streaming answer for `output`.
pub fn respond(model: &str, output: Output) -> Response {
    let mut b = Builder::new(model);
    let events: std::pin::Pin<Box<dyn Stream<Item = Value> + Send>> = match output {
        Output::Text(text) => {
            let item = b.message_item();
            let chunks = chunks(&text);
            Box::pin(stream::iter(b.text_events(&item, &chunks)))
        }
        Output::Call(call) => Box::pin(stream::iter(b.call_events(&call))),
        Output::Slow => slow(b),
    };
    let sse = events.map(|data| Ok::<_, Infallible>(to_sse(&data)));
    Sse::new(sse)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn to_sse(data: &Value) -> Event {
    let kind = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    Event::default().event(kind).data(data.to_string())
}

/// Splits text into a few deltas, at word boundaries.
fn chunks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for word in text.split_inclusive(' ') {
        current.push_str(word);
        if current.len() >= 16 {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    out
}

/// `kandev: slow`: the head at once, then one delta every [`SLOW_EVERY`]
/// for [`SLOW_FOR`], then the tail. A client that goes away drops the
/// stream, which ends it.
fn slow(mut b: Builder) -> std::pin::Pin<Box<dyn Stream<Item = Value> + Send>> {
    let item = b.message_item();
    let count = (SLOW_FOR.as_millis() / SLOW_EVERY.as_millis().max(1)) as usize;
    let chunks: Vec<String> = (1..=count).map(crate::script::slow_chunk).collect();
    let mut events = b.text_events(&item, &chunks);
    // Head: created, in_progress, item added, part added; tail: the rest.
    let tail = events.split_off(4 + chunks.len());
    let deltas = events.split_off(4);
    let head = events;
    let ticks = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(SLOW_EVERY));
    let paced = ticks.zip(stream::iter(deltas)).map(|(_, delta)| delta);
    Box::pin(stream::iter(head).chain(paced).chain(stream::iter(tail)))
}

/// Numbers the events and names the response and its items.
struct Builder {
    response_id: String,
    model: String,
    created_at: u64,
    sequence: u64,
}

impl Builder {
    fn new(model: &str) -> Self {
        Builder {
            response_id: format!("resp_{}", uuid::Uuid::new_v4().simple()),
            model: model.to_string(),
            created_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            sequence: 0,
        }
    }

    fn event(&mut self, kind: &str, fields: Value) -> Value {
        let mut data = json!({"type": kind, "sequence_number": self.sequence});
        self.sequence += 1;
        if let (Some(data), Value::Object(fields)) = (data.as_object_mut(), fields) {
            data.extend(fields);
        }
        data
    }

    fn response(&self, status: &str, output: &[Value], output_chars: usize) -> Value {
        let usage = (status == "completed").then(|| {
            let output_tokens = output_chars / 4 + 1;
            json!({
                "input_tokens": 1000,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 1000 + output_tokens,
            })
        });
        json!({
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": false,
            "tool_choice": "auto",
            "usage": usage,
        })
    }

    fn head(&mut self) -> Vec<Value> {
        let created = json!({"response": self.response("in_progress", &[], 0)});
        let progress = created.clone();
        vec![
            self.event("response.created", created),
            self.event("response.in_progress", progress),
        ]
    }

    fn completed(&mut self, item: Value, output_chars: usize) -> Value {
        let response = self.response("completed", &[item], output_chars);
        self.event("response.completed", json!({"response": response}))
    }

    fn message_item(&self) -> String {
        format!("msg_{}", uuid::Uuid::new_v4().simple())
    }

    /// A whole message answer: head, deltas of `chunks`, tail.
    fn text_events(&mut self, item_id: &str, chunks: &[String]) -> Vec<Value> {
        let text: String = chunks.concat();
        let ids = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
        let with = |mut v: Value, extra: Value| {
            if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
                v.extend(extra);
            }
            v
        };
        let empty_part = json!({"type": "output_text", "text": "", "annotations": []});
        let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
        let added = json!({"type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []});
        let done = json!({"type": "message", "id": item_id, "status": "completed", "role": "assistant", "content": [part]});
        let mut events = self.head();
        events.push(self.event(
            "response.output_item.added",
            json!({"output_index": 0, "item": added}),
        ));
        events.push(self.event(
            "response.content_part.added",
            with(ids.clone(), json!({"part": empty_part})),
        ));
        for chunk in chunks {
            events.push(self.event(
                "response.output_text.delta",
                with(ids.clone(), json!({"delta": chunk, "logprobs": []})),
            ));
        }
        events.push(self.event(
            "response.output_text.done",
            with(ids.clone(), json!({"text": text, "logprobs": []})),
        ));
        events.push(self.event(
            "response.content_part.done",
            with(ids, json!({"part": part})),
        ));
        events.push(self.event(
            "response.output_item.done",
            json!({"output_index": 0, "item": done.clone()}),
        ));
        events.push(self.completed(done, text.len()));
        events
    }

    /// A whole tool-call answer.
    fn call_events(&mut self, call: &Call) -> Vec<Value> {
        let call_id = format!("call_{}", uuid::Uuid::new_v4().simple());
        let (prefix, kind, field, name, namespace, payload) = match call {
            Call::Function {
                name,
                namespace,
                arguments,
            } => (
                "fc",
                "function_call",
                "arguments",
                name,
                namespace,
                arguments,
            ),
            Call::Custom {
                name,
                namespace,
                input,
            } => ("ctc", "custom_tool_call", "input", name, namespace, input),
        };
        let item_id = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let item = |status: &str, payload: &str| {
            let mut item = json!({"type": kind, "id": item_id, "call_id": call_id, "name": name, field: payload, "status": status});
            if let (Some(ns), Some(obj)) = (namespace, item.as_object_mut()) {
                obj.insert("namespace".into(), json!(ns));
            }
            item
        };
        let (delta, done) = match call {
            Call::Function { .. } => (
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
            ),
            Call::Custom { .. } => (
                "response.custom_tool_call_input.delta",
                "response.custom_tool_call_input.done",
            ),
        };
        let finished = item("completed", payload);
        let mut events = self.head();
        events.push(self.event(
            "response.output_item.added",
            json!({"output_index": 0, "item": item("in_progress", "")}),
        ));
        events.push(self.event(
            delta,
            json!({"item_id": item_id, "output_index": 0, "delta": payload}),
        ));
        events.push(self.event(
            done,
            json!({"item_id": item_id, "output_index": 0, field: payload}),
        ));
        events.push(self.event(
            "response.output_item.done",
            json!({"output_index": 0, "item": finished.clone()}),
        ));
        events.push(self.completed(finished, payload.len()));
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_words_and_kept_whole() {
        let text = "Hello from the scripted model.";
        let parts = chunks(text);
        assert!(parts.len() > 1);
        assert_eq!(parts.concat(), text);
        assert_eq!(chunks(""), vec![String::new()]);
    }
}
