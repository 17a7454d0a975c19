//! `docs/openapi.yaml` is generated from the code; this test fails when the
//! committed file is stale. Regenerate with
//! `KANDEV_UPDATE_OPENAPI=1 cargo test -p kandev-gateway openapi`.

use std::path::PathBuf;

use axum::http::{Method, StatusCode};

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
    let missing = app.call(Method::GET, "/missing.js", None, None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    app.stop().await;
}
