//! The Gemini API stand-in on the wire, served by
//! `kandev_model_stub::router()` on a loopback port, against request bodies
//! Gemini CLI really sent (trimmed copies under `tests/fixtures/gemini/`,
//! captured from gemini-cli 0.61.0 in ACP mode with `GOOGLE_GEMINI_BASE_URL`
//! pointing at the stub, for the prompt
//! `kandev: edit notes.txt => changed by gemini`).

use std::time::{Duration, Instant};

use kandev_model_stub::script;
use serde_json::{Value, json};

mod common;
use common::{fixture, json_of, read_until, serve, sse_body, sse_events};

/// Gemini CLI's first main request of the turn (15 tools offered, the
/// `<session_context>` part before the prompt in the same user message).
const EDIT_FIRST: &str = include_str!("fixtures/gemini/edit_first_request.json");
/// Its next request, after the `read_file` call and its `functionResponse`.
const EDIT_AFTER_READ: &str = include_str!("fixtures/gemini/edit_after_read_request.json");
/// Its model-router side call (`generateContent`, a JSON schema to answer).
const ROUTER: &str = include_str!("fixtures/gemini/router_request.json");
/// The workspace the fixtures name.
const CWD: &str = "/tmp/gemini-drive/h-fix/repo";
const KEY: &str = "kandev-test-key";

/// The first request with the user's prompt replaced.
fn prompt_request(prompt: &str) -> Value {
    let mut body = fixture(EDIT_FIRST);
    body["contents"][0]["parts"][1]["text"] = json!(prompt);
    body
}

async fn post(base: &str, call: &str, body: &Value, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/v1beta/models/{call}"))
        .header("x-goog-api-key", key)
        .json(body)
        .send()
        .await
        .expect("request")
}

/// The `data:` events of a whole SSE body, as JSON.
fn events(body: &str) -> Vec<Value> {
    sse_events(body).into_iter().map(|(_, data)| data).collect()
}

/// The streamed answer to `body`, as its events.
async fn stream(base: &str, body: &Value) -> Vec<Value> {
    let call = "gemini-2.5-flash:streamGenerateContent?alt=sse";
    let response = post(base, call, body, KEY).await;
    events(&sse_body(response).await)
}

fn parts(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .flat_map(|e| e["candidates"][0]["content"]["parts"].as_array().cloned())
        .flatten()
        .collect()
}

fn text(events: &[Value]) -> String {
    parts(events)
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_plain_prompt_streams_its_text_in_sse_events_ending_with_stop() {
    let base = serve().await;
    let events = stream(&base, &prompt_request("say hi")).await;
    assert!(events.len() >= 2, "the text comes in pieces: {events:?}");
    assert_eq!(text(&events), script::HELLO);
    let last = events.last().expect("events");
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["candidates"][0]["content"]["role"], "model");
    assert_eq!(last["modelVersion"], "gemini-2.5-flash");
    let usage = &last["usageMetadata"];
    assert!(usage["promptTokenCount"].as_u64() > Some(0), "{usage}");
    assert!(
        events[..events.len() - 1]
            .iter()
            .all(|e| e["candidates"][0].get("finishReason").is_none())
    );
}

#[tokio::test]
async fn an_edit_calls_gemini_clis_read_file_then_write_file_then_says_so() {
    let base = serve().await;
    let first = stream(&base, &fixture(EDIT_FIRST)).await;
    let path = format!("{CWD}/notes.txt");
    assert_eq!(
        parts(&first),
        vec![json!({ "functionCall": { "name": "read_file", "args": { "file_path": path } } })]
    );
    assert_eq!(
        first.last().expect("event")["candidates"][0]["finishReason"],
        "STOP"
    );

    let second = stream(&base, &fixture(EDIT_AFTER_READ)).await;
    let call = &parts(&second)[0]["functionCall"];
    assert_eq!(call["name"], "write_file");
    assert_eq!(
        call["args"],
        json!({ "file_path": path, "content": "changed by gemini" })
    );

    let mut done = fixture(EDIT_AFTER_READ);
    let contents = done["contents"].as_array_mut().expect("contents");
    let (call, result) = (contents[1].clone(), contents[2].clone());
    contents.extend([call, result]);
    assert_eq!(text(&stream(&base, &done).await), "Edited notes.txt.");
}

#[tokio::test]
async fn a_run_calls_run_shell_command_with_its_declared_parameters() {
    let base = serve().await;
    let events = stream(&base, &prompt_request("kandev: run echo hi")).await;
    let call = &parts(&events)[0]["functionCall"];
    assert_eq!(call["name"], "run_shell_command");
    assert_eq!(call["args"]["command"], "echo hi");
    assert!(call["args"]["description"].is_string());
}

#[tokio::test]
async fn recall_skips_gemini_clis_injected_context_and_answers_the_first_prompt() {
    let base = serve().await;
    let mut body = fixture(EDIT_AFTER_READ);
    let contents = body["contents"].as_array_mut().expect("contents");
    contents.push(json!({ "role": "model", "parts": [{ "text": "Edited notes.txt." }] }));
    contents.push(json!({ "role": "user", "parts": [{ "text": "kandev: recall" }] }));
    let answer = text(&stream(&base, &body).await);
    assert_eq!(
        answer,
        "You first asked: kandev: edit notes.txt => changed by gemini"
    );
}

#[tokio::test]
async fn the_router_side_call_gets_json_matching_its_schema() {
    let base = serve().await;
    let call = "gemini-3.5-flash-lite:generateContent";
    let response = post(&base, call, &fixture(ROUTER), KEY).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("JSON");
    let text = body["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .expect("text");
    let answer: Value = serde_json::from_str(text).expect("the text is JSON");
    assert!(answer["complexity_score"].as_i64() >= Some(1), "{answer}");
    assert!(answer["complexity_reasoning"].is_string(), "{answer}");
    assert_eq!(body["candidates"][0]["finishReason"], "STOP");
}

#[tokio::test]
async fn a_wrong_key_gets_googles_api_key_invalid_and_a_missing_one_its_403() {
    let base = serve().await;
    let call = "gemini-2.5-flash:streamGenerateContent?alt=sse";
    let response = post(&base, call, &prompt_request("hi"), "wrong-key").await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("JSON");
    let error = &body["error"];
    assert_eq!(error["code"], 400);
    assert_eq!(
        error["message"],
        "API key not valid. Please pass a valid API key."
    );
    assert_eq!(error["status"], "INVALID_ARGUMENT");
    assert_eq!(error["details"][0]["reason"], "API_KEY_INVALID");

    let by_query = reqwest::Client::new()
        .post(format!(
            "{base}/v1beta/models/gemini-2.5-flash:generateContent?key=wrong"
        ))
        .json(&prompt_request("hi"))
        .send()
        .await
        .expect("request");
    assert_eq!(by_query.status(), 400);
    let by_query = format!("{base}/v1beta/models?key={KEY}");
    let listed = reqwest::get(by_query).await.expect("request");
    assert_eq!(listed.status(), 200);

    let missing = post(&base, call, &prompt_request("hi"), "").await;
    assert_eq!(missing.status(), 403);
    let body: Value = missing.json().await.expect("JSON");
    assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
}

#[tokio::test]
async fn count_tokens_and_model_listing_answer() {
    let base = serve().await;
    let counted = post(
        &base,
        "gemini-2.5-pro:countTokens",
        &prompt_request("hi"),
        KEY,
    )
    .await;
    let counted: Value = counted.json().await.expect("JSON");
    assert!(counted["totalTokens"].as_u64() > Some(0), "{counted}");
    let models = json_of(
        reqwest::Client::new()
            .get(format!("{base}/v1beta/models"))
            .header("x-goog-api-key", KEY),
    )
    .await;
    assert!(models["models"].as_array().is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn slow_streams_distinct_chunks_until_the_client_goes_away() {
    let base = serve().await;
    let call = "gemini-2.5-flash:streamGenerateContent?alt=sse";
    let started = Instant::now();
    let mut response = post(&base, call, &prompt_request("kandev: slow"), KEY).await;
    let seen = read_until(&mut response, |seen| seen.matches("data: ").count() >= 3).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let texts: Vec<String> = events(&seen)
        .iter()
        .map(|e| text(std::slice::from_ref(e)))
        .collect();
    let mut distinct = texts.clone();
    distinct.dedup();
    assert_eq!(
        distinct, texts,
        "no chunk repeats (Gemini CLI's loop check)"
    );
    drop(response);
}
