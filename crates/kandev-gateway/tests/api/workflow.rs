//! Workflow columns (issue 41) through the gateway and the real task
//! service: a board's columns read and replaced, a card moved into an
//! automated column with a WIP limit, and bad input (an unknown column, a
//! WIP limit below 1, an unknown next step, another user's board or task,
//! another board's column) answered with the seed's error shape.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app};

async fn put_columns(
    app: &TestApp,
    token: &str,
    board: &str,
    columns: Value,
) -> crate::helpers::Resp {
    app.call(
        Method::PUT,
        &format!("/api/v1/boards/{board}/columns"),
        Some(token),
        Some(json!({ "columns": columns })),
    )
    .await
}

fn plan_then_review() -> Value {
    let (plan, review) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    json!([
        {"name": "Backlog", "state": "TODO", "colour": "#112233"},
        {"id": plan, "name": "Plan", "state": "IN_PROGRESS", "wip_limit": 1,
         "agent_type": "mock-agent", "prompt_template": "plan {title}", "on_success": review},
        {"id": review, "name": "Review", "state": "REVIEW"},
    ])
}

#[tokio::test]
async fn columns_are_listed_replaced_and_cards_move_into_them() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "flow").await;

    let got = app
        .get(&format!("/api/v1/boards/{board}/columns"), &alice)
        .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let defaults = got.body["columns"].as_array().unwrap();
    assert_eq!(
        defaults.len(),
        8,
        "the default workflow: one column per state"
    );
    assert_eq!(
        (defaults[0]["name"].as_str(), defaults[0]["state"].as_str()),
        (Some("To do"), Some("TODO"))
    );

    let put = put_columns(&app, &alice, &board, plan_then_review()).await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    let cols = put.body["columns"].as_array().unwrap().clone();
    assert_eq!(cols.len(), 3);
    assert_eq!(cols[1]["wip_limit"], 1);
    assert_eq!(cols[1]["on_success"], cols[2]["id"]);
    assert_eq!(cols[0]["colour"], "#112233");

    let first = app.task(&alice, &board, "first").await;
    let second = app.task(&alice, &board, "second").await;
    assert_eq!(first["column_id"], cols[0]["id"], "created in the backlog");
    let plan = cols[1]["id"].as_str().unwrap();
    let moved = app
        .post(
            &format!("/api/v1/tasks/{}/move", first["id"].as_str().unwrap()),
            &alice,
            json!({"column_id": plan}),
        )
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.body);
    assert_eq!(
        (
            moved.body["column_id"].as_str(),
            moved.body["queued"].as_bool()
        ),
        (Some(plan), Some(false))
    );
    assert_eq!(moved.body["agent_type"], "mock-agent");
    assert_eq!(moved.body["metadata"]["workflow_prompt"], "plan first");
    let queued = app
        .post(
            &format!("/api/v1/tasks/{}/move", second["id"].as_str().unwrap()),
            &alice,
            json!({"column_id": plan}),
        )
        .await;
    assert_eq!(queued.status, StatusCode::OK, "{}", queued.body);
    assert_eq!(
        queued.body["queued"], true,
        "the WIP limit of 1 holds the second card"
    );
    app.stop().await;
}

#[tokio::test]
async fn bad_columns_and_moves_are_refused_with_the_error_shape() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let board = app.board(&alice, "flow").await;
    let bobs = app.board(&bob, "his").await;
    let task = app.task(&alice, &board, "t").await;
    let task_id = task["id"].as_str().unwrap();

    // A WIP limit below 1 (here below 0).
    let wip = json!([{"name": "Doing", "state": "IN_PROGRESS", "wip_limit": -1}]);
    let resp = put_columns(&app, &alice, &board, wip).await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.body);
    assert_eq!(resp.error(), "validation_error");
    assert!(
        resp.body["message"].as_str().unwrap().contains("wip_limit"),
        "{}",
        resp.body
    );
    // A next step naming no column of the list.
    let next =
        json!([{"name": "Doing", "state": "IN_PROGRESS", "on_success": uuid::Uuid::now_v7()}]);
    let resp = put_columns(&app, &alice, &board, next).await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.body);
    assert!(
        resp.body["message"]
            .as_str()
            .unwrap()
            .contains("unknown column"),
        "{}",
        resp.body
    );
    // An unknown state, an unknown field, no columns.
    for bad in [
        json!([{"name": "x", "state": "DONE"}]),
        json!([{"name": "x", "state": "TODO", "wip": 1}]),
        json!([]),
    ] {
        let resp = put_columns(&app, &alice, &board, bad).await;
        assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.body);
        assert_eq!(resp.error(), "validation_error");
    }
    // Another user's board: not found, for reading and for writing.
    let resp = app
        .get(&format!("/api/v1/boards/{bobs}/columns"), &alice)
        .await;
    assert_eq!(resp.status, StatusCode::NOT_FOUND);
    assert_eq!(resp.error(), "not_found");
    let resp = put_columns(&app, &alice, &bobs, plan_then_review()).await;
    assert_eq!(resp.status, StatusCode::NOT_FOUND);
    // Another board's column id is not taken over.
    let his = app
        .get(&format!("/api/v1/boards/{bobs}/columns"), &bob)
        .await;
    let his_col = his.body["columns"][0]["id"].as_str().unwrap().to_string();
    let stolen = json!([{"id": his_col, "name": "Mine", "state": "TODO"}]);
    let resp = put_columns(&app, &alice, &board, stolen).await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.body);
    assert!(
        resp.body["message"]
            .as_str()
            .unwrap()
            .contains("another board"),
        "{}",
        resp.body
    );

    let path = format!("/api/v1/tasks/{task_id}/move");
    let move_to = |column: Value| app.post(&path, &alice, json!({ "column_id": column }));
    // An unknown column, another board's column: not found.
    for column in [json!(uuid::Uuid::now_v7()), json!(his_col)] {
        let resp = move_to(column).await;
        assert_eq!(resp.status, StatusCode::NOT_FOUND, "{}", resp.body);
        assert_eq!(resp.error(), "not_found");
    }
    // A column id that is no id.
    let resp = move_to(json!("plan")).await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.body);
    assert_eq!(resp.error(), "validation_error");
    // Another user's task: not found, whatever the column.
    let mine = app
        .get(&format!("/api/v1/boards/{board}/columns"), &alice)
        .await;
    let col = mine.body["columns"][1]["id"].clone();
    let resp = app
        .post(
            &format!("/api/v1/tasks/{task_id}/move"),
            &bob,
            json!({"column_id": col}),
        )
        .await;
    assert_eq!(resp.status, StatusCode::NOT_FOUND, "{}", resp.body);
    assert_eq!(resp.error(), "not_found");
    app.stop().await;
}
