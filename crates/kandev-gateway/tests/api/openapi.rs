//! `docs/openapi.yaml` is generated from the code; this test fails when the
//! committed file is stale. Regenerate with
//! `KANDEV_UPDATE_OPENAPI=1 cargo test -p kandev-gateway openapi`.

use std::path::PathBuf;

use axum::http::{Method, StatusCode};
use kandev_gateway::openapi::ApiDoc;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self as tg, client::IntoClientRequest};
use utoipa::OpenApi;

use crate::helpers::spawn_app;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.yaml")
}

#[test]
fn openapi_yaml_is_up_to_date() {
    let generated = kandev_gateway::openapi::yaml();
    let path = committed_path();
    if std::env::var("KANDEV_UPDATE_OPENAPI").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.yaml is stale; run KANDEV_UPDATE_OPENAPI=1 cargo test -p kandev-gateway openapi"
    );
}

#[test]
fn openapi_documents_every_route() {
    let doc = kandev_gateway::openapi::yaml();
    for path in [
        "/api/v1/auth/login:",
        "/api/v1/boards/{id}/tasks:",
        "/api/v1/tasks/{id}/state:",
        "/api/v1/agents/launch:",
        "/api/v1/agents/{instanceId}/logs:",
        "/api/v1/agent-types/{id}/disable:",
        "/api/v1/orchestrator/tasks/{taskId}/stream:",
    ] {
        assert!(doc.contains(path), "{path} missing");
    }
}

#[tokio::test]
async fn openapi_json_and_the_ui_are_served() {
    let app = spawn_app().await;
    let doc = app
        .call(Method::GET, "/api/v1/openapi.json", None, None)
        .await;
    assert_eq!(doc.status, StatusCode::OK);
    assert_eq!(doc.body["info"]["title"], "Kandev API");
    assert!(doc.body["paths"]["/api/v1/boards"].is_object());

    for path in ["/", "/boards/123"] {
        let page = app.call(Method::GET, path, None, None).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        let html = page.body.as_str().unwrap();
        assert!(html.contains("<title>Kandev</title>"), "{html}");
        assert!(
            page.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        // The UI runs no inline script and cannot be framed or sniffed.
        let csp = page.headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self';"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(page.headers["x-frame-options"], "DENY");
        assert_eq!(page.headers["x-content-type-options"], "nosniff");
        assert_eq!(page.headers["referrer-policy"], "no-referrer");
    }
    // API answers carry them too.
    assert_eq!(doc.headers["x-content-type-options"], "nosniff");
    // The UI's task states are generated from the services' contract, in
    // board order, with the transitions the task service enforces.
    let states = app.call(Method::GET, "/js/states.js", None, None).await;
    assert_eq!(states.status, StatusCode::OK);
    assert!(
        states.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    let module = states.body.as_str().unwrap();
    let names: Vec<&str> = kandev_events::TaskState::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    assert!(
        module.contains(&format!(
            "export const STATES = Object.freeze({});",
            serde_json::json!(names)
        )),
        "{module}"
    );
    assert!(module.contains("export const TRANSITIONS"), "{module}");
    // The execution states too, every name the API's `state` takes.
    assert!(
        module.contains(
            r#"export const EXEC_STATES = Object.freeze(["unknown","idle","queued","launching","running","retry_wait","completed","failed","stopped"]);"#
        ),
        "{module}"
    );
    let missing = app.call(Method::GET, "/missing.js", None, None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    app.stop().await;
}

/// Schema properties that hold a board, task, task event or agent
/// instance id: UUIDs in every service's database. (Any other `id` or
/// `*_id` property must be a UUID too, unless listed in
/// [`OTHER_ID_PROPERTIES`].)
const UUID_PROPERTIES: &[(&str, &str)] = &[
    ("Board", "id"),
    ("Task", "id"),
    ("Task", "board_id"),
    ("TaskEvent", "id"),
    ("TaskEvent", "task_id"),
    ("TaskEvent", "board_id"),
    ("LaunchAgentRequest", "task_id"),
    ("AgentInstance", "id"),
    ("AgentInstance", "task_id"),
    ("AgentSession", "instance_id"),
    ("AgentSession", "task_id"),
    ("TaskExecution", "task_id"),
    ("TaskExecution", "instance_id"),
    ("FeedText", "instance_id"),
    ("FeedEvent", "instance_id"),
];

/// Id properties that are not UUIDs: agent type names (`mock-agent`),
/// Docker container ids and the agents' own ACP session ids.
const OTHER_ID_PROPERTIES: &[(&str, &str)] = &[
    ("AgentType", "id"),
    ("AgentInstance", "container_id"),
    ("AgentInstance", "acp_session_id"),
    ("AgentSession", "session_id"),
    ("TaskExecution", "acp_session_id"),
    ("LaunchAgentRequest", "resume_session_id"),
    ("FeedText", "message_id"),
];

fn document() -> Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap()
}

/// Every operation of the document: `(method, path, operation)`.
fn operations(doc: &Value) -> Vec<(Method, String, Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if let Ok(method) = method.to_uppercase().parse::<Method>() {
                ops.push((method, path.clone(), op.clone()));
            }
        }
    }
    ops
}

fn path_params(op: &Value) -> Vec<&Value> {
    op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "path")
        .collect()
}

#[test]
fn path_ids_are_declared_as_uuids_except_agent_type_ids() {
    let doc = document();
    let mut uuid_params = 0;
    for (method, path, op) in operations(&doc) {
        for param in path_params(&op) {
            let name = param["name"].as_str().unwrap();
            let schema = &param["schema"];
            assert_eq!(schema["type"], "string", "{method} {path} {{{name}}}");
            if path.starts_with("/api/v1/agent-types/") {
                // Agent type ids are names such as `mock-agent`.
                assert_eq!(name, "id", "{method} {path}");
                assert!(schema.get("format").is_none(), "{method} {path}");
                continue;
            }
            if path.starts_with("/api/v1/users/me/secrets/") {
                // Secrets are named by environment variable names.
                assert_eq!(name, "name", "{method} {path}");
                assert!(schema.get("format").is_none(), "{method} {path}");
                continue;
            }
            assert!(
                ["id", "taskId", "instanceId", "commentId", "promptId"].contains(&name),
                "{method} {path}: unexpected path parameter {name}"
            );
            assert_eq!(schema["format"], "uuid", "{method} {path} {{{name}}}");
            // The gateway answers 400 to an id that is not a UUID.
            assert!(
                op["responses"]["400"]["content"]["application/json"]["schema"]["$ref"]
                    .as_str()
                    .is_some_and(|r| r.ends_with("/ErrorBody")),
                "{method} {path} does not document its 400"
            );
            uuid_params += 1;
        }
    }
    // Boards (6), tasks (5 and more), agent instances (5), task
    // executions (4).
    assert!(uuid_params >= 20, "{uuid_params}");
}

#[test]
fn id_properties_are_uuids_exactly_when_they_hold_one() {
    let doc = document();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let property = |schema: &str, name: &str| -> &Value {
        let prop = &schemas[schema]["properties"][name];
        assert!(prop.is_object(), "{schema}.{name} missing");
        prop
    };
    for (schema, name) in UUID_PROPERTIES {
        assert_eq!(property(schema, name)["format"], "uuid", "{schema}.{name}");
    }
    for (schema, name) in OTHER_ID_PROPERTIES {
        assert!(
            property(schema, name).get("format").is_none(),
            "{schema}.{name} is not a UUID"
        );
    }
    // Any other id property is a UUID, unless it is listed as not one.
    for (schema, body) in schemas {
        for (name, prop) in body["properties"].as_object().into_iter().flatten() {
            let key = (schema.as_str(), name.as_str());
            if (name == "id" || name.ends_with("_id")) && !OTHER_ID_PROPERTIES.contains(&key) {
                assert_eq!(
                    prop["format"], "uuid",
                    "{schema}.{name}: declare it a UUID, or list it in OTHER_ID_PROPERTIES"
                );
            }
        }
    }
}

/// A body the operation accepts, so that only the path id is wrong.
fn valid_body(method: &Method, path: &str) -> Option<Value> {
    if *method == Method::GET || *method == Method::DELETE {
        return None;
    }
    Some(if path.ends_with("/tasks") {
        json!({"title": "t"})
    } else if path.ends_with("/state") {
        json!({"state": "IN_PROGRESS"})
    } else if path.ends_with("/prompt") {
        json!({"message": "hello"})
    } else if path.ends_with("/review") {
        json!({"action": "approve"})
    } else if path.contains("/review/comments/") {
        json!({"resolved": true})
    } else if path.contains("/pending-prompts/") {
        json!({"text": "hello"})
    } else if path.ends_with("/columns") {
        json!({"columns": []})
    } else if path.starts_with("/api/v1/agent-profiles") {
        json!({"agent_type": "mock-agent", "name": "p"})
    } else if path.ends_with("/blockers") {
        json!({"blocked_by": []})
    } else if path.ends_with("/tracker") {
        json!({"kind": "github", "repository_url": "https://github.com/acme/app"})
    } else if path.ends_with("/move") {
        json!({"column_id": "7b0c5a8e-2f4e-4c1a-9d3e-5f6a7b8c9d0e"})
    } else {
        json!({})
    })
}

/// The path with every `{param}` replaced by `id`, and a value for every
/// required query parameter.
fn with_id(path: &str, op: &Value, id: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').unwrap() + open;
        out.push_str(&rest[..open]);
        out.push_str(id);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    let required = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query" && p["required"] == true);
    for (i, param) in required.enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(param["name"].as_str().unwrap());
        out.push_str("=x");
    }
    out
}

/// What the document promises: a path id that is not a UUID is refused
/// with 400 in the common error shape, on every route that takes one,
/// before any service is asked (the agent manager and the orchestrator are
/// down here, so asking them would be a 503).
#[tokio::test]
async fn path_ids_that_are_not_uuids_are_refused_with_400() {
    let mut app = spawn_app().await;
    let alice = app.token("alice", false);
    let admin = app.token("admin", true);
    let doc = document();
    let mut checked = 0;
    for (method, path, op) in operations(&doc) {
        if path.starts_with("/api/v1/agent-types/")
            || path.starts_with("/api/v1/users/me/secrets/")
            || path_params(&op).is_empty()
        {
            continue;
        }
        for bad in [
            "not-a-uuid",
            "123",
            "7b0c5a8e-2f4e-4c1a-9d3e-5f6a7b8c9d0g",
            "7b0c5a8e-2f4e-4c1a-9d3e-5f6a7b8c9d0e0",
            "%00",
        ] {
            for token in [&alice, &admin] {
                let uri = with_id(&path, &op, bad);
                let resp = app
                    .call(
                        method.clone(),
                        &uri,
                        Some(token),
                        valid_body(&method, &path),
                    )
                    .await;
                assert_eq!(
                    resp.status,
                    StatusCode::BAD_REQUEST,
                    "{method} {uri}: {}",
                    resp.body
                );
                assert_eq!(resp.error(), "bad_request", "{method} {uri}");
                // The stream refuses a plain GET before looking at the id
                // (its handshake is checked below).
                if !path.ends_with("/stream") {
                    let message = resp.body["message"].as_str().unwrap();
                    assert!(
                        message.ends_with("is not a UUID"),
                        "{method} {uri}: {message}"
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 20 * 5 * 2, "{checked}");

    // Bytes that are not UTF-8 are refused in the same shape.
    let resp = app.get("/api/v1/tasks/%FF/events", &alice).await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.body);
    assert_eq!(resp.error(), "bad_request");

    // The stream's WebSocket handshake: 400, not the orchestrator's 503.
    let addr = app.serve();
    let mut req = format!("ws://{addr}/api/v1/orchestrator/tasks/not-a-uuid/stream")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {alice}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tg::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 400);
            let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["error"], "bad_request", "{body}");
            assert!(body["message"].as_str().unwrap().ends_with("is not a UUID"));
        }
        other => panic!("expected an HTTP refusal, got {other:?}"),
    }
    app.stop().await;
}
