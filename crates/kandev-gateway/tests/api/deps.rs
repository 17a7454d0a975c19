//! Subtasks and "blocked by" links (issue 41) through the gateway and the
//! real task service: blockers set with `PUT /tasks/{id}/blockers` and
//! shown on the task with the reason, a task blocked by two freed only when
//! both complete (a failed one keeps it blocked), subtasks one level deep;
//! and bad input (a malformed or unknown id, the task itself, another
//! user's task, a cycle, a subtask's subtask) answered with the seed's
//! error shape.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Resp, TestApp, spawn_app};

async fn put_blockers(app: &TestApp, token: &str, task: &str, by: &[&str]) -> Resp {
    app.call(
        Method::PUT,
        &format!("/api/v1/tasks/{task}/blockers"),
        Some(token),
        Some(json!({ "blocked_by": by })),
    )
    .await
}

async fn to(app: &TestApp, token: &str, task: &str, state: &str) {
    let resp = app
        .patch(
            &format!("/api/v1/tasks/{task}/state"),
            token,
            json!({ "state": state }),
        )
        .await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.body);
}

async fn get(app: &TestApp, token: &str, task: &str) -> Value {
    let resp = app.get(&format!("/api/v1/tasks/{task}"), token).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.body);
    resp.body
}

fn id(task: &Value) -> &str {
    task["id"].as_str().unwrap()
}

async fn subtask(app: &TestApp, token: &str, board: &str, parent: &str) -> Resp {
    app.post(
        &format!("/api/v1/boards/{board}/tasks"),
        token,
        json!({"title": "sub", "parent_id": parent}),
    )
    .await
}

#[tokio::test]
async fn a_task_blocked_by_two_is_freed_only_when_both_complete() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "deps").await;
    let build = app.task(&alice, &board, "build").await;
    let lint = app.task(&alice, &board, "lint").await;
    let deploy = app.task(&alice, &board, "deploy").await;
    assert_eq!(deploy["blocked"], false);
    assert_eq!(deploy["blocked_by"], json!([]));

    let put = put_blockers(&app, &alice, id(&deploy), &[id(&build), id(&lint)]).await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    assert_eq!(put.body["blocked"], true);
    assert_eq!(
        put.body["blocked_by"],
        json!([
            {"id": build["id"], "title": "build", "state": "TODO"},
            {"id": lint["id"], "title": "lint", "state": "TODO"},
        ])
    );
    assert_eq!(
        put.body["blocked_reason"],
        "waiting for 'build' (TODO); waiting for 'lint' (TODO)"
    );

    to(&app, &alice, id(&build), "IN_PROGRESS").await;
    to(&app, &alice, id(&build), "COMPLETED").await;
    let read = get(&app, &alice, id(&deploy)).await;
    assert_eq!(read["blocked"], true, "{read}");
    assert_eq!(read["blocked_reason"], "waiting for 'lint' (TODO)");

    to(&app, &alice, id(&lint), "IN_PROGRESS").await;
    to(&app, &alice, id(&lint), "FAILED").await;
    let read = get(&app, &alice, id(&deploy)).await;
    assert_eq!(read["blocked"], true, "a failed blocker keeps it blocked");
    assert_eq!(read["blocked_reason"], "blocker 'lint' FAILED");

    to(&app, &alice, id(&lint), "IN_PROGRESS").await;
    to(&app, &alice, id(&lint), "COMPLETED").await;
    let read = get(&app, &alice, id(&deploy)).await;
    assert_eq!(read["blocked"], false, "{read}");
    assert_eq!(read["blocked_reason"], "");
    assert_eq!(read["blocked_by"][1]["state"], "COMPLETED");

    // The board's list shows the same.
    let list = app
        .get(&format!("/api/v1/boards/{board}/tasks"), &alice)
        .await;
    let listed = list.body["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == deploy["id"])
        .unwrap()
        .clone();
    assert_eq!(listed["blocked_by"].as_array().unwrap().len(), 2);

    // An empty list clears the blockers.
    let cleared = put_blockers(&app, &alice, id(&deploy), &[]).await;
    assert_eq!(cleared.status, StatusCode::OK, "{}", cleared.body);
    assert_eq!(cleared.body["blocked_by"], json!([]));
}

#[tokio::test]
async fn subtasks_are_created_under_a_parent_one_level_deep() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "deps").await;
    let parent = app.task(&alice, &board, "parent").await;
    let sub = subtask(&app, &alice, &board, id(&parent)).await;
    assert_eq!(sub.status, StatusCode::CREATED, "{}", sub.body);
    assert_eq!(sub.body["parent_id"], parent["id"]);
    let read = get(&app, &alice, id(&parent)).await;
    assert_eq!(read["subtasks"], json!([sub.body["id"]]));
    assert_eq!(read["parent_id"], Value::Null);

    let deeper = subtask(&app, &alice, &board, id(&sub.body)).await;
    assert_eq!(deeper.status, StatusCode::BAD_REQUEST, "{}", deeper.body);
    deeper.error();
    assert!(
        deeper.body["message"]
            .as_str()
            .unwrap()
            .contains("one level"),
        "{}",
        deeper.body
    );
    let unknown = subtask(&app, &alice, &board, &uuid::Uuid::now_v7().to_string()).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{}", unknown.body);
    unknown.error();
    let malformed = subtask(&app, &alice, &board, "nope").await;
    assert_eq!(
        malformed.status,
        StatusCode::BAD_REQUEST,
        "{}",
        malformed.body
    );
    malformed.error();

    // Another user's task is no parent on alice's board.
    let bob = app.token("bob", false);
    let bobs = app.board(&bob, "his").await;
    let his = app.task(&bob, &bobs, "his").await;
    let theirs = subtask(&app, &alice, &board, id(&his)).await;
    assert_eq!(theirs.status, StatusCode::BAD_REQUEST, "{}", theirs.body);
    theirs.error();
}

#[tokio::test]
async fn bad_blockers_are_refused_with_the_error_shape() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let board = app.board(&alice, "deps").await;
    let a = app.task(&alice, &board, "a").await;
    let b = app.task(&alice, &board, "b").await;
    let c = app.task(&alice, &board, "c").await;
    let bobs = app.board(&bob, "his").await;
    let his = app.task(&bob, &bobs, "his").await;

    let refused = |resp: &Resp, status: StatusCode, words: &str| {
        assert_eq!(resp.status, status, "{}", resp.body);
        resp.error();
        let message = resp.body["message"].as_str().unwrap();
        assert!(message.contains(words), "{message} lacks {words:?}");
    };
    let resp = put_blockers(&app, &alice, id(&a), &["nope"]).await;
    refused(&resp, StatusCode::BAD_REQUEST, "nope");
    let resp = put_blockers(&app, &alice, id(&a), &[id(&a)]).await;
    refused(&resp, StatusCode::BAD_REQUEST, "itself");
    let resp = put_blockers(&app, &alice, id(&a), &[id(&b), id(&b)]).await;
    refused(&resp, StatusCode::BAD_REQUEST, "twice");
    let unknown = uuid::Uuid::now_v7().to_string();
    let resp = put_blockers(&app, &alice, id(&a), &[&unknown]).await;
    assert_eq!(resp.status, StatusCode::NOT_FOUND, "{}", resp.body);
    resp.error();
    // Another user's task: refused, saying which.
    let resp = put_blockers(&app, &alice, id(&a), &[id(&his)]).await;
    refused(&resp, StatusCode::BAD_REQUEST, id(&his));
    // Another user's task's blockers: not found, as if it did not exist.
    let resp = put_blockers(&app, &bob, id(&a), &[]).await;
    assert_eq!(resp.status, StatusCode::NOT_FOUND, "{}", resp.body);
    resp.error();

    // a waits for b, b for c: c waiting for a is a cycle, named.
    let resp = put_blockers(&app, &alice, id(&a), &[id(&b)]).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.body);
    let resp = put_blockers(&app, &alice, id(&b), &[id(&c)]).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.body);
    let resp = put_blockers(&app, &alice, id(&c), &[id(&a)]).await;
    refused(&resp, StatusCode::BAD_REQUEST, "cycle");
    refused(&resp, StatusCode::BAD_REQUEST, "'a'");
    let read = get(&app, &alice, id(&c)).await;
    assert_eq!(read["blocked_by"], json!([]), "nothing written");

    // A field the body does not have is refused.
    let resp = app
        .call(
            Method::PUT,
            &format!("/api/v1/tasks/{}/blockers", id(&a)),
            Some(&alice),
            Some(json!({"blocked_by": [], "blockers": []})),
        )
        .await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.body);
    resp.error();
}
