//! One task through the real task service: read, update with versions,
//! state changes, history, delete.

use axum::http::StatusCode;
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn get_update_and_version_conflicts() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "b").await;
    let task = app.task(&alice, &board, "fix login").await;
    let id = task["id"].as_str().unwrap();
    let v1 = task["version"].as_i64().unwrap();

    let got = app.get(&format!("/api/v1/tasks/{id}"), &alice).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body["metadata"]["auggie_session_id"], "s-1");

    let updated = app
        .patch(
            &format!("/api/v1/tasks/{id}"),
            &alice,
            json!({"title": "fix login for real", "version": v1, "metadata": {"k": 1, "auggie_session_id": null}}),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.body);
    assert_eq!(updated.body["title"], "fix login for real");
    assert_eq!(updated.body["metadata"], json!({"k": 1}));
    let v2 = updated.body["version"].as_i64().unwrap();
    assert!(v2 > v1);

    // The stale version loses.
    let stale = app
        .patch(
            &format!("/api/v1/tasks/{id}"),
            &alice,
            json!({"title": "again", "version": v1}),
        )
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert_eq!(stale.error(), "conflict");

    // null clears the agent type.
    let cleared = app
        .patch(
            &format!("/api/v1/tasks/{id}"),
            &alice,
            json!({"agent_type": null}),
        )
        .await;
    assert_eq!(cleared.status, StatusCode::OK);
    assert!(cleared.body["agent_type"].is_null());

    let invalid = app
        .patch(
            &format!("/api/v1/tasks/{id}"),
            &alice,
            json!({"max_retries": 1000}),
        )
        .await;
    assert_eq!(invalid.status, StatusCode::BAD_REQUEST);
    assert_eq!(invalid.error(), "validation_error");
    let wrong_type = app
        .patch(
            &format!("/api/v1/tasks/{id}"),
            &alice,
            json!({"priority": "high"}),
        )
        .await;
    assert_eq!(wrong_type.status, StatusCode::BAD_REQUEST);

    let missing = app
        .get("/api/v1/tasks/00000000-0000-0000-0000-000000000000", &alice)
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.error(), "not_found");
    let bad = app.get("/api/v1/tasks/nope", &alice).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    app.stop().await;
}

#[tokio::test]
async fn state_changes_events_and_delete() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "b").await;
    let task = app.task(&alice, &board, "t").await;
    let id = task["id"].as_str().unwrap();

    let moved = app
        .patch(
            &format!("/api/v1/tasks/{id}/state"),
            &alice,
            json!({"state": "IN_PROGRESS"}),
        )
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.body);
    assert_eq!(moved.body["state"], "IN_PROGRESS");

    // IN_PROGRESS -> COMPLETED is allowed, COMPLETED -> BLOCKED is not.
    let done = app
        .patch(
            &format!("/api/v1/tasks/{id}/state"),
            &alice,
            json!({"state": "COMPLETED", "reason": "done"}),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK);
    let forbidden = app
        .patch(
            &format!("/api/v1/tasks/{id}/state"),
            &alice,
            json!({"state": "BLOCKED"}),
        )
        .await;
    assert_eq!(forbidden.status, StatusCode::CONFLICT);
    assert_eq!(forbidden.error(), "conflict");
    assert_eq!(
        forbidden.body["message"],
        "transition from COMPLETED to BLOCKED is not allowed"
    );

    let unknown = app
        .patch(
            &format!("/api/v1/tasks/{id}/state"),
            &alice,
            json!({"state": "DONE"}),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    let missing = app
        .patch(&format!("/api/v1/tasks/{id}/state"), &alice, json!({}))
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    let stale = app
        .patch(
            &format!("/api/v1/tasks/{id}/state"),
            &alice,
            json!({"state": "TODO", "version": 1}),
        )
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT);

    let events = app.get(&format!("/api/v1/tasks/{id}/events"), &alice).await;
    assert_eq!(events.status, StatusCode::OK);
    let kinds: Vec<&str> = events.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["created", "state_changed", "state_changed"]);
    let last = &events.body["events"][2];
    assert_eq!(last["actor"], "alice");
    assert!(last["new_value"].is_object() || last["new_value"].is_string());
    let paged = app
        .get(&format!("/api/v1/tasks/{id}/events?page_size=1"), &alice)
        .await;
    assert_eq!(paged.body["events"].as_array().unwrap().len(), 1);
    assert!(paged.body["next_page_token"].is_string());
    let bad_page = app
        .get(&format!("/api/v1/tasks/{id}/events?page_size=x"), &alice)
        .await;
    assert_eq!(bad_page.status, StatusCode::BAD_REQUEST);

    let stale_delete = app
        .delete(&format!("/api/v1/tasks/{id}?version=1"), &alice)
        .await;
    assert_eq!(stale_delete.status, StatusCode::CONFLICT);
    let deleted = app.delete(&format!("/api/v1/tasks/{id}"), &alice).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = app.get(&format!("/api/v1/tasks/{id}"), &alice).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    app.stop().await;
}
