//! The OpenAI Responses stand-in over HTTP, as Codex calls it: the event
//! sequence of a text answer, tool-call steps for the tools a real Codex
//! request offers (`tests/fixtures/openai/codex-0.166-request.json`, a
//! trimmed capture from codex-acp 2.6.0 / Codex 0.166.0), the paced `slow`
//! stream, and OpenAI's 401.

use std::time::Instant;

use kandev_model_stub::script::{HELLO, SLOW_EVERY};
use serde_json::{Value, json};

mod common;
use common::{read_until, sse_body, sse_events};

const KEY: &str = "kandev-test-key";

async fn serve() -> String {
    format!("{}/v1/responses", common::serve().await)
}

async fn post(url: &str, key: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .expect("send")
}

/// The JSON `data` of every event, checking each `event:` names its type.
fn events(sse: &str) -> Vec<Value> {
    sse_events(sse)
        .into_iter()
        .map(|(name, data)| {
            assert_eq!(Some(name.as_str()), data["type"].as_str(), "event name");
            data
        })
        .collect()
}

async fn answer(url: &str, body: &Value) -> Vec<Value> {
    let response = post(url, KEY, body).await;
    events(&sse_body(response).await)
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

fn fixture() -> Value {
    common::fixture(include_str!("fixtures/openai/codex-0.166-request.json"))
}

/// The fixture with its prompt replaced and the given items appended.
fn codex_request(prompt: &str, after: &[Value]) -> Value {
    let mut body = fixture();
    let input = body["input"].as_array_mut().expect("input list");
    let last = input.last_mut().expect("a prompt");
    last["content"] = json!([{"type": "input_text", "text": prompt}]);
    input.extend_from_slice(after);
    body
}

/// The single tool call item a tool step streams.
fn call_item(events: &[Value]) -> Value {
    let done: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .collect();
    assert_eq!(done.len(), 1);
    done[0]["item"].clone()
}

fn text_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

#[tokio::test]
async fn a_text_answer_streams_the_full_event_sequence() {
    let url = serve().await;
    let body = json!({"model": "gpt-test", "stream": true, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    ]});
    let events = answer(&url, &body).await;
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    let deltas = types(&events)
        .iter()
        .filter(|t| **t == "response.output_text.delta")
        .count();
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(types(&events), expected);
    assert_eq!(text_of(&events), HELLO);
    let numbers: Vec<_> = events
        .iter()
        .map(|e| e["sequence_number"].clone())
        .collect();
    assert_eq!(
        numbers,
        (0..events.len()).map(|n| json!(n)).collect::<Vec<_>>()
    );
    let completed = &events[events.len() - 1]["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["model"], "gpt-test");
    assert!(
        completed["usage"]["total_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    assert_eq!(completed["output"][0]["content"][0]["text"], HELLO);
}

#[tokio::test]
async fn codex_code_mode_runs_a_command_through_exec_then_answers() {
    let url = serve().await;
    let events = answer(&url, &codex_request("kandev: run echo hi", &[])).await;
    assert!(types(&events).contains(&"response.custom_tool_call_input.delta"));
    let item = call_item(&events);
    assert_eq!(item["type"], "custom_tool_call");
    assert_eq!(item["name"], "exec");
    let input = item["input"].as_str().expect("input");
    assert!(
        input.contains(r#"await tools.exec_command({cmd: "echo hi"})"#),
        "{input}"
    );
    // What Codex sends back after the call (as its rollout records it).
    let call_id = item["call_id"].clone();
    let after = [
        json!({"type": "custom_tool_call", "call_id": call_id, "name": "exec", "namespace": "functions", "input": input}),
        json!({"type": "custom_tool_call_output", "call_id": call_id, "output": [
            {"type": "input_text", "text": "Script completed\nWall time 0.4 seconds\nOutput:\n"},
            {"type": "input_text", "text": "hi\n"}
        ]}),
    ];
    let events = answer(&url, &codex_request("kandev: run echo hi", &after)).await;
    assert_eq!(text_of(&events), "Ran echo hi.");
}

#[tokio::test]
async fn codex_code_mode_edits_by_cat_then_apply_patch() {
    let url = serve().await;
    let prompt = "kandev: edit notes.txt => changed by codex";
    let read = call_item(&answer(&url, &codex_request(prompt, &[])).await);
    let input = read["input"].as_str().expect("input");
    assert!(input.contains(r#"{cmd: "cat 'notes.txt'"}"#), "{input}");
    let output =
        json!({"type": "custom_tool_call_output", "call_id": "c1", "output": "original\n"});
    let write =
        call_item(&answer(&url, &codex_request(prompt, std::slice::from_ref(&output))).await);
    let input = write["input"].as_str().expect("input");
    assert!(
        input.contains(r#"tools.apply_patch("*** Begin Patch\n*** Add File: notes.txt\n+changed by codex\n*** End Patch\n")"#),
        "{input}"
    );
    let done = answer(&url, &codex_request(prompt, &[output.clone(), output])).await;
    assert_eq!(text_of(&done), "Edited notes.txt.");
}

#[tokio::test]
async fn direct_tools_get_function_and_freeform_calls() {
    let url = serve().await;
    let tools = json!([
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}
    ]);
    let user = |text: &str| json!({"type": "message", "role": "user", "content": text});
    let run = json!({"tools": tools, "input": [user("kandev: run ls")]});
    let events = answer(&url, &run).await;
    assert!(types(&events).contains(&"response.function_call_arguments.done"));
    let item = call_item(&events);
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["name"], "exec_command");
    assert_eq!(item["arguments"], r#"{"cmd":"ls"}"#);
    let write = json!({"tools": tools, "input": [user("kandev: write a.txt => A")]});
    let item = call_item(&answer(&url, &write).await);
    assert_eq!(item["type"], "custom_tool_call");
    assert_eq!(item["name"], "apply_patch");
    assert_eq!(
        item["input"],
        "*** Begin Patch\n*** Add File: a.txt\n+A\n*** End Patch\n"
    );
}

#[tokio::test]
async fn slow_streams_paced_deltas_until_the_client_leaves() {
    let url = serve().await;
    let body = json!({"input": [{"type": "message", "role": "user", "content": "kandev: slow"}]});
    let mut response = post(&url, KEY, &body).await;
    assert_eq!(response.status(), 200);
    let started = Instant::now();
    let seen = read_until(&mut response, |seen| {
        seen.matches(r#""type":"response.output_text.delta""#)
            .count()
            >= 6
    })
    .await;
    assert!(
        started.elapsed() >= SLOW_EVERY * 4,
        "{:?}",
        started.elapsed()
    );
    assert!(!seen.contains("response.completed"));
    drop(response);
}

#[tokio::test]
async fn a_wrong_key_gets_openais_401() {
    let url = serve().await;
    let response = post(&url, "wrong-key", &json!({"input": "hi"})).await;
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body,
        json!({"error": {
            "message": "Incorrect API key provided: wron*-key. You can find your API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": null,
            "code": "invalid_api_key"
        }})
    );
    let response = reqwest::Client::new()
        .post(&url)
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["type"], "invalid_request_error");
}
