//! Agent profiles through the gateway and the whole stack (real agent
//! manager, orchestrator, task service; the mock agent in Docker): bad
//! input is a 400 naming its field, a user sees only their own and the
//! shared profiles, secret values never come back, and a task created with
//! a profile runs with its model, mode, instructions and two MCP servers,
//! which the mock agent reports in the feed (`scenario: session-info`).

use std::net::SocketAddr;

use axum::http::{Method, StatusCode};
use kandev_testkit::eventually;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::{
    helpers::{Resp, TestApp},
    stack::{Stack, next_json},
};

const PROFILES: &str = "/api/v1/agent-profiles";

/// The mock agent's digest of a value (64-bit FNV-1a, as in its
/// `session-info`).
fn fnv(value: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in value.as_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= 0xff;
    hash = hash.wrapping_mul(0x0100_0000_01b3);
    format!("fnv:{hash:016x}")
}

fn profile_body() -> Value {
    json!({
        "agent_type": "mock-agent",
        "name": "haiku",
        "model": "mock-smart",
        "mode": "plan",
        "instructions": "Always answer in haiku.",
        "env": {"PROFILE_TOKEN": "GH_TOKEN"},
        "mcp_servers": [
            {"name": "fs", "transport": "stdio", "command": "/usr/local/bin/mcp-fs",
             "args": ["--root", "/workspace"], "env": {"FS_TOKEN": "FS_TOKEN"}},
            {"name": "docs", "transport": "http", "url": "https://mcp.example/docs",
             "headers": {"Authorization": "DOCS_TOKEN"}}
        ]
    })
}

async fn put_secret(app: &TestApp, token: &str, name: &str, value: &str) {
    let path = format!("/api/v1/users/me/secrets/{name}");
    let r = app
        .call(
            Method::PUT,
            &path,
            Some(token),
            Some(json!({ "value": value })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

async fn put(app: &TestApp, token: &str, id: &str, body: Value) -> Resp {
    app.call(
        Method::PUT,
        &format!("{PROFILES}/{id}"),
        Some(token),
        Some(body),
    )
    .await
}

/// Each refused body: 400 validation_error whose details name the field.
async fn bad_input_names_its_field(app: &TestApp, alice: &str) {
    let with = |patch: Value| {
        let mut body = profile_body();
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    for (body, field) in [
        (with(json!({"mode": "yolo"})), "mode"),
        (with(json!({"agent_type": "no-such-type"})), "agent_type"),
        (with(json!({"name": ""})), "name"),
        (
            with(json!({"env": {"lower-case": "GH_TOKEN"}})),
            "env.lower-case",
        ),
        (
            with(json!({"mcp_servers": [{"name": "x", "transport": "http", "url": "ftp://x"}]})),
            "mcp_servers[0].url",
        ),
        (
            with(json!({"mcp_servers": [{"name": "x", "transport": "stdio"}]})),
            "mcp_servers[0].command",
        ),
        (
            with(json!({"mcp_servers": [{"name": "x", "transport": "carrier-pigeon"}]})),
            "mcp_servers[0].transport",
        ),
        (
            with(json!({"mcp_servers": [{"name": "x", "transport": "http",
                "url": "https://h/", "headers": {"Authorization": "not a secret name"}}]})),
            "mcp_servers[0].headers.Authorization",
        ),
    ] {
        let r = app.post(PROFILES, alice, body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{field}: {}", r.body);
        assert_eq!(r.error(), "validation_error", "{}", r.body);
        assert_eq!(r.body["details"]["field"], field, "{}", r.body);
    }
    // Not JSON the contract knows, and a secret's value where its name goes.
    let unknown = app
        .post(PROFILES, alice, with(json!({"colour": "red"})))
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{}", unknown.body);
    let value = app
        .post(
            PROFILES,
            alice,
            with(json!({"env": {"GH": {"value": "x"}}})),
        )
        .await;
    assert_eq!(value.status, StatusCode::BAD_REQUEST, "{}", value.body);
    // Only an admin shares a profile.
    let shared = app
        .post(PROFILES, alice, with(json!({"shared": true})))
        .await;
    assert_eq!(shared.status, StatusCode::FORBIDDEN, "{}", shared.body);
}

/// Bob and the admin never see, change or delete Alice's profile; the
/// admin's shared profile is everyone's to read, not to change.
async fn others_see_only_their_own_and_shared(
    app: &TestApp,
    alice: &str,
    bob: &str,
    admin: &str,
    id: &str,
) {
    let path = format!("{PROFILES}/{id}");
    for other in [bob, admin] {
        assert_eq!(app.get(&path, other).await.status, StatusCode::NOT_FOUND);
        let listed = app.get(PROFILES, other).await;
        assert!(!listed.body.to_string().contains(id), "{}", listed.body);
        let changed = put(app, other, id, profile_body()).await;
        assert_eq!(changed.status, StatusCode::NOT_FOUND, "{}", changed.body);
        assert_eq!(app.delete(&path, other).await.status, StatusCode::NOT_FOUND);
    }
    let mut team = profile_body();
    team["name"] = json!("team");
    team["shared"] = json!(true);
    team["mcp_servers"] = json!([]);
    team["env"] = json!({});
    let shared = app.post(PROFILES, admin, team.clone()).await;
    assert_eq!(shared.status, StatusCode::CREATED, "{}", shared.body);
    assert_eq!(shared.body["shared"], true);
    let shared_id = shared.body["id"].as_str().unwrap();
    let seen = app
        .get(&format!("{PROFILES}?agent_type=mock-agent"), alice)
        .await;
    let names: Vec<&str> = seen.body["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["team", "haiku"], "{}", seen.body);
    let changed = put(app, bob, shared_id, team).await;
    assert_eq!(changed.status, StatusCode::FORBIDDEN, "{}", changed.body);
    let gone = app.delete(&format!("{PROFILES}/{shared_id}"), admin).await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
}

/// The text of the first feed frame holding `marker`, read through the
/// gateway's stream from the start.
async fn feed_text(addr: SocketAddr, token: &str, task_id: &str, marker: &str) -> String {
    let mut req = format!("ws://{addr}/api/v1/orchestrator/tasks/{task_id}/stream?after=0")
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("kandev.bearer, {token}").parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    fn find(v: &Value, marker: &str) -> Option<String> {
        match v {
            Value::String(s) if s.contains(marker) => Some(s.clone()),
            Value::Array(items) => items.iter().find_map(|i| find(i, marker)),
            Value::Object(map) => map.values().find_map(|i| find(i, marker)),
            _ => None,
        }
    }
    loop {
        let frame = next_json(&mut ws).await;
        if let Some(text) = find(&frame, marker) {
            return text;
        }
    }
}

async fn create_task(
    app: &TestApp,
    token: &str,
    board: &str,
    profile: &str,
    agent_type: &str,
) -> Resp {
    app.post(
        &format!("/api/v1/boards/{board}/tasks"),
        token,
        json!({"title": "Profile", "description": "scenario: session-info",
               "agent_type": agent_type, "max_retries": 0, "profile_id": profile}),
    )
    .await
}

/// A workflow column's profile: checked when the columns are saved (the
/// caller's, of the column's agent type), then the run the column starts
/// uses it, and the task keeps its own (none here).
async fn a_column_profile_reaches_the_agent(
    app: &TestApp,
    addr: SocketAddr,
    alice: &str,
    bob: &str,
    profile: &str,
) {
    let board = app.board(alice, "profiled workflow").await;
    let (backlog, step) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let columns = |agent: &str, profile: &str| {
        json!({"columns": [
            {"id": backlog, "name": "Backlog", "state": "TODO"},
            {"id": step, "name": "Step", "state": "IN_PROGRESS", "agent_type": agent,
             "profile_id": profile, "prompt_template": "scenario: session-info"},
        ]})
    };
    let path = format!("/api/v1/boards/{board}/columns");
    let other_type = app.put(&path, alice, columns("codex", profile)).await;
    assert_eq!(
        other_type.status,
        StatusCode::BAD_REQUEST,
        "{}",
        other_type.body
    );
    assert_eq!(other_type.body["details"]["field"], "profile_id");
    let bobs_board = app.board(bob, "bob's workflow").await;
    let not_his = app
        .put(
            &format!("/api/v1/boards/{bobs_board}/columns"),
            bob,
            columns("mock-agent", profile),
        )
        .await;
    assert_eq!(not_his.status, StatusCode::BAD_REQUEST, "{}", not_his.body);
    let saved = app.put(&path, alice, columns("mock-agent", profile)).await;
    assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
    assert_eq!(saved.body["columns"][1]["profile_id"], profile);

    let task = app
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            alice,
            json!({"title": "Column profile", "max_retries": 0}),
        )
        .await;
    let task = task.body["id"].as_str().unwrap().to_string();
    let moved = app
        .post(
            &format!("/api/v1/tasks/{task}/move"),
            alice,
            json!({"column_id": step}),
        )
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.body);
    let done = wait_state(app, alice, &task, &["COMPLETED", "REVIEW"]).await;
    assert!(done["metadata"]["agent_profile_id"].is_null(), "{done}");
    let info = feed_text(addr, alice, &task, "Session info").await;
    assert!(info.contains("mode: plan"), "{info}");
    assert!(info.contains("model: mock-smart"), "{info}");
}

async fn wait_state(app: &TestApp, token: &str, task_id: &str, states: &[&str]) -> Value {
    eventually(180, "the task's run ends", || async {
        let t = app.get(&format!("/api/v1/tasks/{task_id}"), token).await;
        states
            .iter()
            .any(|s| t.body["state"] == *s)
            .then_some(t.body)
    })
    .await
}

#[tokio::test]
async fn stack_a_tasks_profile_reaches_the_agent_and_profiles_stay_their_owners() {
    let mut stack = Stack::start().await;
    let addr = stack.gateway.serve();
    let app = &stack.gateway;
    let (alice, bob, admin) = (
        app.token("alice", false),
        app.token("bob", false),
        app.token("admin", true),
    );
    eventually(10, "the agent manager answers", || async {
        let r = app.get(PROFILES, &alice).await;
        (r.status == StatusCode::OK).then_some(())
    })
    .await;
    for (name, value) in [
        ("GH_TOKEN", "gh-secret-value"),
        ("FS_TOKEN", "fs-secret-value"),
        ("DOCS_TOKEN", "docs-secret-value"),
    ] {
        put_secret(app, &alice, name, value).await;
    }
    bad_input_names_its_field(app, &alice).await;

    let made = app.post(PROFILES, &alice, profile_body()).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    assert!(
        !made.body.to_string().contains("secret-value"),
        "{}",
        made.body
    );
    assert_eq!(made.body["owner"], "alice");
    assert_eq!(
        made.body["mcp_servers"][1]["headers"]["Authorization"],
        "DOCS_TOKEN"
    );
    let id = made.body["id"].as_str().unwrap().to_string();
    let read = app.get(&format!("{PROFILES}/{id}"), &alice).await;
    assert_eq!(read.body, made.body);
    others_see_only_their_own_and_shared(app, &alice, &bob, &admin, &id).await;

    // A task names the profile; another user's, or one of another type, is refused.
    let board = app.board(&alice, "profiles").await;
    let bobs_board = app.board(&bob, "bob's").await;
    let refused = create_task(app, &bob, &bobs_board, &id, "mock-agent").await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert_eq!(refused.body["details"]["field"], "profile_id");
    let other_type = create_task(app, &alice, &board, &id, "codex").await;
    assert_eq!(
        other_type.status,
        StatusCode::BAD_REQUEST,
        "{}",
        other_type.body
    );
    let created = create_task(app, &alice, &board, &id, "mock-agent").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["metadata"]["agent_profile_id"], id.as_str());
    let task_id = created.body["id"].as_str().unwrap().to_string();
    wait_state(app, &alice, &task_id, &["COMPLETED", "REVIEW"]).await;

    let info = feed_text(addr, &alice, &task_id, "Session info").await;
    for line in [
        "mode: plan".to_string(),
        "model: mock-smart".into(),
        "mcp servers: 2".into(),
        format!(
            "- fs: stdio /usr/local/bin/mcp-fs args [--root /workspace] env [FS_TOKEN={}]",
            fnv("fs-secret-value")
        ),
        format!(
            "- docs: http https://mcp.example/docs headers [Authorization={}]",
            fnv("docs-secret-value")
        ),
    ] {
        assert!(info.contains(&line), "{line:?} not in {info}");
    }
    let prompt = info.split("prompt:\n").nth(1).unwrap_or_default();
    assert!(prompt.starts_with("Always answer in haiku.\n\n"), "{info}");
    assert!(prompt.contains("scenario: session-info"), "{info}");
    assert!(!info.contains("secret-value"), "{info}");

    // An sse server the mock agent does not advertise fails the run plainly.
    let mut sse = profile_body();
    sse["name"] = json!("sse");
    sse["mcp_servers"] =
        json!([{"name": "events", "transport": "sse", "url": "https://mcp.example/sse"}]);
    let sse = app.post(PROFILES, &alice, sse).await;
    assert_eq!(sse.status, StatusCode::CREATED, "{}", sse.body);
    let sse_id = sse.body["id"].as_str().unwrap();
    let task = create_task(app, &alice, &board, sse_id, "mock-agent").await;
    let sse_task = task.body["id"].as_str().unwrap().to_string();
    wait_state(app, &alice, &sse_task, &["FAILED"]).await;
    let status = app
        .get(
            &format!("/api/v1/orchestrator/tasks/{sse_task}/status"),
            &alice,
        )
        .await;
    let error = status.body["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("\"events\" (sse)") && error.contains("mcpCapabilities"),
        "{}",
        status.body
    );

    a_column_profile_reaches_the_agent(app, addr, &alice, &bob, &id).await;

    let path = format!("{PROFILES}/{id}");
    assert_eq!(
        app.delete(&path, &alice).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(app.get(&path, &alice).await.status, StatusCode::NOT_FOUND);
    stack.stop().await;
}
