//! The Anthropic Messages API stand-in on the wire, served by
//! `kandev_model_stub::router()` on a loopback port, against request bodies
//! Claude Code really sent (trimmed copies under
//! `tests/fixtures/anthropic/`, captured from claude-agent-acp 0.101.0 with
//! Claude Code 2.1.318 inside).

use std::time::{Duration, Instant};

use kandev_model_stub::anthropic;
use serde_json::{Value, json};

mod common;
use common::{fixture, json_of, read_until, send, serve, sse_body, sse_events as events};

/// Claude Code's main request after its `Read` of `notes.txt` for the prompt
/// `kandev: edit notes.txt => changed by claude` (12 tools offered).
const EDIT_AFTER_READ: &str = include_str!("fixtures/anthropic/claude_code_edit_after_read.json");
/// Claude Code's title side request (no tools, JSON-schema output).
const TITLE: &str = include_str!("fixtures/anthropic/claude_code_title.json");
/// The working directory the fixtures name.
const CWD: &str = "/tmp/kandev-fixture/repo";

/// The main fixture cut back to its first `keep` messages (the first user
/// message and Claude Code's `system` message are 2).
fn edit_request(keep: usize) -> Value {
    let mut body = fixture(EDIT_AFTER_READ);
    let messages = body["messages"].as_array_mut().expect("messages");
    messages.truncate(keep);
    body
}

/// The main fixture with the user's prompt replaced and no tool results.
fn prompt_request(prompt: &str) -> Value {
    let mut body = edit_request(2);
    let blocks = body["messages"][0]["content"]
        .as_array_mut()
        .expect("blocks");
    let last = blocks.last_mut().expect("prompt block");
    last["text"] = json!(prompt);
    body
}

async fn post(base: &str, body: &Value, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/v1/messages?beta=true"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .expect("request")
}

async fn stream_of(body: &Value) -> Vec<(String, Value)> {
    let base = serve().await;
    let response = post(&base, body, "kandev-test-key").await;
    events(&sse_body(response).await)
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

/// Each event's `data.type` is its `event:` name.
fn assert_typed(events: &[(String, Value)]) {
    for (name, data) in events {
        assert_eq!(data["type"], json!(name), "{data}");
    }
}

/// The one tool_use block of a streamed answer: its name and its input, put
/// together from the `input_json_delta` partials.
fn streamed_tool_use(events: &[(String, Value)]) -> (String, Value) {
    let start = events
        .iter()
        .find(|(n, _)| n == "content_block_start")
        .map(|(_, d)| d["content_block"].clone())
        .expect("a block");
    assert_eq!(start["type"], "tool_use");
    assert!(
        start["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("toolu_"))
    );
    let json: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"]
                .as_str()
                .expect("partial")
                .to_string()
        })
        .collect();
    let name = start["name"].as_str().expect("name").to_string();
    (name, serde_json::from_str(&json).expect("input is JSON"))
}

fn stop_reason(events: &[(String, Value)]) -> Value {
    let (_, delta) = events
        .iter()
        .find(|(n, _)| n == "message_delta")
        .expect("message_delta");
    assert!(
        delta["usage"]["output_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    delta["delta"]["stop_reason"].clone()
}

#[tokio::test]
async fn a_text_answer_streams_anthropics_event_sequence() {
    let events = stream_of(&fixture_after_write()).await;
    assert_eq!(
        names(&events)[..4],
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta"
        ]
    );
    assert_eq!(
        names(&events)[events.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert_typed(&events);
    let message = &events[0].1["message"];
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "claude-opus-5-5");
    assert_eq!(message["content"], json!([]));
    assert!(
        message["usage"]["input_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    assert_eq!(
        events[2].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().expect("text").to_string()
        })
        .collect();
    assert_eq!(text, "Edited notes.txt.");
    assert_eq!(stop_reason(&events), "end_turn");
}

/// The main fixture after Claude Code's `Write` came back too.
fn fixture_after_write() -> Value {
    let mut body = fixture(EDIT_AFTER_READ);
    let messages = body["messages"].as_array_mut().expect("messages");
    messages.push(json!({"role": "assistant", "content": [{"type": "tool_use",
        "id": "toolu_w", "name": "Write",
        "input": {"file_path": format!("{CWD}/notes.txt"), "content": "changed by claude"}}]}));
    messages.push(json!({"role": "user", "content": [{"type": "tool_result",
        "tool_use_id": "toolu_w", "content": "The file has been updated successfully."}]}));
    body
}

#[tokio::test]
async fn an_edit_reads_then_writes_with_claude_codes_own_tools() {
    let events = stream_of(&edit_request(2)).await;
    assert_typed(&events);
    assert_eq!(
        streamed_tool_use(&events),
        (
            "Read".into(),
            json!({"file_path": format!("{CWD}/notes.txt")})
        )
    );
    assert_eq!(stop_reason(&events), "tool_use");

    let events = stream_of(&fixture(EDIT_AFTER_READ)).await;
    let expected = json!({"file_path": format!("{CWD}/notes.txt"), "content": "changed by claude"});
    assert_eq!(streamed_tool_use(&events), ("Write".into(), expected));
    assert_eq!(stop_reason(&events), "tool_use");
}

#[tokio::test]
async fn a_run_calls_bash_with_the_description_its_schema_declares() {
    let events = stream_of(&prompt_request("kandev: run echo hi")).await;
    let expected = json!({"command": "echo hi", "description": "Run echo hi"});
    assert_eq!(streamed_tool_use(&events), ("Bash".into(), expected));
}

#[tokio::test]
async fn the_acp_adapters_mcp_tools_are_preferred_when_offered() {
    let mut body = edit_request(2);
    let tools = body["tools"].as_array_mut().expect("tools");
    tools.push(
        json!({"name": "mcp__acp__Read", "description": "Read via the client",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}),
    );
    let events = stream_of(&body).await;
    assert_eq!(streamed_tool_use(&events).0, "mcp__acp__Read");
}

#[tokio::test]
async fn without_stream_the_answer_is_one_message() {
    let base = serve().await;
    let mut body = edit_request(2);
    body["stream"] = json!(false);
    let response = post(&base, &body, "kandev-test-key").await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.expect("JSON");
    assert_eq!(message["type"], "message");
    assert_eq!(message["stop_reason"], "tool_use");
    assert!(
        message["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("msg_"))
    );
    let block = &message["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "Read");
    assert_eq!(
        block["input"],
        json!({"file_path": format!("{CWD}/notes.txt")})
    );
}

#[tokio::test]
async fn the_title_side_request_gets_json_for_its_schema() {
    let events = stream_of(&fixture(TITLE)).await;
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .filter_map(|(_, d)| d["delta"]["text"].as_str().map(str::to_string))
        .collect();
    let answer: Value = serde_json::from_str(&text).expect("JSON answer");
    assert!(answer["title"].is_string(), "{answer}");
    assert_eq!(stop_reason(&events), "end_turn");
}

#[tokio::test]
async fn a_wrong_or_missing_key_gets_anthropics_401() {
    let base = serve().await;
    let response = post(&base, &edit_request(2), "sk-ant-wrong").await;
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["x-should-retry"], "false");
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
    );
    let unsigned = || {
        reqwest::Client::new()
            .post(format!("{base}/v1/messages"))
            .json(&edit_request(2))
    };
    let missing = send(unsigned()).await;
    assert_eq!(missing.status(), 401);
    let body: Value = missing.json().await.expect("JSON");
    assert_eq!(body["error"]["type"], "authentication_error");
    let bearer = send(unsigned().bearer_auth("kandev-test-token")).await;
    assert_eq!(bearer.status(), 200);
}

#[tokio::test]
async fn count_tokens_models_and_the_reachability_probe() {
    let base = serve().await;
    let client = reqwest::Client::new();
    let count = json_of(
        client
            .post(format!("{base}/v1/messages/count_tokens?beta=true"))
            .header("x-api-key", "kandev-test-key")
            .json(&edit_request(2)),
    )
    .await;
    assert!(count["input_tokens"].as_u64().is_some_and(|n| n > 0));
    let models = json_of(
        client
            .get(format!("{base}/v1/models"))
            .header("x-api-key", "kandev-test-key"),
    )
    .await;
    assert_eq!(models["data"][0]["type"], "model");
    let hello = send(client.head(format!("{base}/api/hello"))).await;
    assert_eq!(hello.status(), 200);
}

#[tokio::test]
async fn slow_streams_every_slow_every_and_stops_when_the_client_goes() {
    let base = serve().await;
    let mut response = post(&base, &prompt_request("kandev: slow"), "kandev-test-key").await;
    assert_eq!(response.status(), 200);
    let started = Instant::now();
    let seen = read_until(&mut response, |seen| {
        seen.matches("text_delta").count() >= 3
    })
    .await;
    // Three chunks: the first at once, then two pauses.
    assert!(started.elapsed() >= kandev_model_stub::script::SLOW_EVERY * 2);
    assert!(!seen.contains("message_stop"));
    assert!(anthropic::slow_streams_live() >= 1);
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(5);
    while anthropic::slow_streams_live() > 0 {
        assert!(
            Instant::now() < deadline,
            "the slow stream outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
