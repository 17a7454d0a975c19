//! The follow-ups a task's run holds until its turn ends (issue 40), as the
//! gateway routes them: auth, ownership, bad ids and 503 while the
//! orchestrator is down (`stack.rs` and the e2e suite run them against the
//! real orchestrator).

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn pending_prompt_routes_check_auth_ownership_and_ids() {
    let app = spawn_app().await;
    let (alice, bob, id) = app.alice_task().await;
    let base = format!("/api/v1/orchestrator/tasks/{id}/pending-prompts");
    let one = format!("{base}/{}", uuid::Uuid::now_v7());
    for (method, path, body) in [
        (Method::GET, base.clone(), None),
        (Method::PUT, one.clone(), Some(json!({"text": "go on"}))),
        (Method::DELETE, one.clone(), None),
    ] {
        let none = app.call(method.clone(), &path, None, body.clone()).await;
        assert_eq!(none.status, StatusCode::UNAUTHORIZED, "{method} {path}");
        let other = app
            .call(method.clone(), &path, Some(&bob), body.clone())
            .await;
        assert_eq!(other.status, StatusCode::NOT_FOUND, "{method} {path}");
        let down = app.call(method.clone(), &path, Some(&alice), body).await;
        assert_eq!(
            down.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{method} {path}"
        );
        assert_eq!(down.error(), "service_unavailable");
    }
    // A bad id is a bad request whoever asks; an unknown field is refused.
    for (method, body) in [
        (Method::PUT, Some(json!({"text": "go on"}))),
        (Method::DELETE, None),
    ] {
        let bad = app
            .call(
                method.clone(),
                &format!("{base}/not-a-uuid"),
                Some(&bob),
                body,
            )
            .await;
        assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{method}");
        assert!(
            bad.body["message"]
                .as_str()
                .unwrap()
                .contains("follow-up id"),
            "{}",
            bad.body
        );
    }
    let unknown = app
        .call(
            Method::PUT,
            &one,
            Some(&alice),
            Some(json!({"text": "go on", "priority": 1})),
        )
        .await;
    assert_eq!(unknown.error(), "validation_error", "{}", unknown.body);
}
