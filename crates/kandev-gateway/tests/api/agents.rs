//! Agent and agent-type routes: the gateway's own behaviour (auth,
//! ownership through the task service, validation, 503 while the agent
//! manager is down). `stack.rs` runs them against the real agent manager.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;

const INSTANCE: &str = "7b0c5a8e-2f4e-4c1a-9d3e-5f6a7b8c9d0e";

#[tokio::test]
async fn agent_routes_need_a_token() {
    let app = spawn_app().await;
    let routes = [
        (Method::POST, "/api/v1/agents/launch".to_string()),
        (Method::POST, format!("/api/v1/agents/{INSTANCE}/prompt")),
        (Method::POST, format!("/api/v1/agents/{INSTANCE}/cancel")),
        (Method::GET, format!("/api/v1/agents/{INSTANCE}/status")),
        (
            Method::GET,
            format!("/api/v1/agents/{INSTANCE}/logs?tail=10"),
        ),
        (Method::GET, format!("/api/v1/agents/{INSTANCE}/session")),
        (Method::GET, "/api/v1/agent-types".to_string()),
        (Method::POST, "/api/v1/agent-types".to_string()),
        (Method::PUT, "/api/v1/agent-types/x".to_string()),
        (Method::PATCH, "/api/v1/agent-types/x".to_string()),
        (Method::DELETE, "/api/v1/agent-types/x".to_string()),
        (Method::POST, "/api/v1/agent-types/x/disable".to_string()),
    ];
    for (method, path) in routes {
        let resp = app.call(method.clone(), &path, None, Some(json!({}))).await;
        assert_eq!(resp.status, StatusCode::UNAUTHORIZED, "{method} {path}");
        assert_eq!(resp.error(), "unauthorized");
    }
    app.stop().await;
}

#[tokio::test]
async fn launch_checks_the_body_and_the_task_before_the_agent_manager() {
    let app = spawn_app().await;
    let (alice, bob, task_id) = app.alice_task().await;

    let missing = app
        .post("/api/v1/agents/launch", &alice, json!({"task_id": task_id}))
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.error(), "validation_error");
    let both = app
        .post(
            "/api/v1/agents/launch",
            &alice,
            json!({"task_id": task_id, "agent_type": "augment-agent",
                   "workspace_path": "/w", "repository_url": "https://x/y"}),
        )
        .await;
    assert_eq!(both.status, StatusCode::BAD_REQUEST);
    let bad_env = app
        .post(
            "/api/v1/agents/launch",
            &alice,
            json!({"task_id": task_id, "agent_type": "augment-agent", "env": {"A": 1}}),
        )
        .await;
    assert_eq!(bad_env.status, StatusCode::BAD_REQUEST);

    // The seed's request body.
    let seed_body = json!({
        "task_id": task_id,
        "agent_type": "augment-agent",
        "workspace_path": "/absolute/path/to/project",
        "env": {"TASK_DESCRIPTION": "Fix the bug in auth/login.go"},
        "priority": 1,
        "metadata": {}
    });
    // Someone else's task: 404 before the agent manager is asked.
    let other = app
        .post("/api/v1/agents/launch", &bob, seed_body.clone())
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert_eq!(other.error(), "not_found");
    // Own task, agent manager down: 503 naming it.
    let down = app.post("/api/v1/agents/launch", &alice, seed_body).await;
    assert_eq!(
        down.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        down.body
    );
    assert_eq!(down.error(), "service_unavailable");
    assert!(
        down.body["message"]
            .as_str()
            .unwrap()
            .contains("agent manager")
    );
    app.stop().await;
}

#[tokio::test]
async fn instance_routes_validate_then_answer_503_while_the_agent_manager_is_down() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);

    let empty = app
        .post(
            &format!("/api/v1/agents/{INSTANCE}/prompt"),
            &alice,
            json!({"message": " "}),
        )
        .await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    let no_message = app
        .post(
            &format!("/api/v1/agents/{INSTANCE}/prompt"),
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(no_message.status, StatusCode::BAD_REQUEST);
    let tail = app
        .get(&format!("/api/v1/agents/{INSTANCE}/logs?tail=0"), &alice)
        .await;
    assert_eq!(tail.status, StatusCode::BAD_REQUEST);
    let tail = app
        .get(&format!("/api/v1/agents/{INSTANCE}/logs?tail=abc"), &alice)
        .await;
    assert_eq!(tail.status, StatusCode::BAD_REQUEST);

    for (method, path, body) in [
        (
            Method::POST,
            format!("/api/v1/agents/{INSTANCE}/prompt"),
            Some(json!({"message": "Please also add unit tests"})),
        ),
        (
            Method::POST,
            format!("/api/v1/agents/{INSTANCE}/cancel"),
            Some(json!({"reason": "User requested cancellation"})),
        ),
        // The seed's cancel takes its body as optional: none is no reason.
        (
            Method::POST,
            format!("/api/v1/agents/{INSTANCE}/cancel"),
            None,
        ),
        (
            Method::GET,
            format!("/api/v1/agents/{INSTANCE}/status"),
            None,
        ),
        (
            Method::GET,
            format!("/api/v1/agents/{INSTANCE}/logs?tail=100"),
            None,
        ),
        (
            Method::GET,
            format!("/api/v1/agents/{INSTANCE}/session"),
            None,
        ),
    ] {
        let resp = app.call(method.clone(), &path, Some(&alice), body).await;
        assert_eq!(
            resp.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{method} {path}"
        );
        assert_eq!(resp.error(), "service_unavailable");
    }
    app.stop().await;
}

#[tokio::test]
async fn agent_types_are_admin_only_to_change() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let admin = app.token("admin", true);
    let body = json!({"id": "my-agent", "name": "Mine", "image": "kandev/mine:latest"});

    for (method, path, body) in [
        (Method::POST, "/api/v1/agent-types", Some(body.clone())),
        (
            Method::PUT,
            "/api/v1/agent-types/my-agent",
            Some(body.clone()),
        ),
        (
            Method::PATCH,
            "/api/v1/agent-types/my-agent",
            Some(json!({"enabled": false})),
        ),
        (Method::DELETE, "/api/v1/agent-types/my-agent", None),
        (Method::POST, "/api/v1/agent-types/my-agent/disable", None),
    ] {
        let resp = app.call(method.clone(), path, Some(&alice), body).await;
        assert_eq!(resp.status, StatusCode::FORBIDDEN, "{method} {path}");
        assert_eq!(resp.error(), "forbidden");
    }

    // Admins pass the check; validation and the down service come next.
    let invalid = app
        .post(
            "/api/v1/agent-types",
            &admin,
            json!({"id": "", "name": "x", "image": "y"}),
        )
        .await;
    assert_eq!(invalid.status, StatusCode::BAD_REQUEST);
    let mismatch = app
        .call(
            Method::PUT,
            "/api/v1/agent-types/other",
            Some(&admin),
            Some(body.clone()),
        )
        .await;
    assert_eq!(mismatch.status, StatusCode::BAD_REQUEST);
    let down = app.post("/api/v1/agent-types", &admin, body).await;
    assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE);
    let list = app.get("/api/v1/agent-types", &alice).await;
    assert_eq!(list.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(list.error(), "service_unavailable");
    app.stop().await;
}
