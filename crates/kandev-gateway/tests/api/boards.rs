//! Boards and the task list, through the real task service.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn board_crud() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);

    let created = app
        .post(
            "/api/v1/boards",
            &alice,
            json!({"name": "Roadmap", "description": "Q1"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    assert_eq!(created.body["name"], "Roadmap");
    assert_eq!(created.body["description"], "Q1");
    assert_eq!(created.body["owner"], "alice");
    assert!(created.body["created_at"].is_string());

    let got = app.get(&format!("/api/v1/boards/{id}"), &alice).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body["id"], id.as_str());

    let updated = app
        .patch(
            &format!("/api/v1/boards/{id}"),
            &alice,
            json!({"name": "Plan"}),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.body);
    assert_eq!(updated.body["name"], "Plan");
    assert_eq!(updated.body["description"], "Q1");

    let list = app.get("/api/v1/boards", &alice).await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.body["boards"].as_array().unwrap().len(), 1);
    assert!(list.body["next_page_token"].is_null());

    let deleted = app.delete(&format!("/api/v1/boards/{id}"), &alice).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = app.get(&format!("/api/v1/boards/{id}"), &alice).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.error(), "not_found");
    app.stop().await;
}

#[tokio::test]
async fn board_errors() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);

    // Validation by the service, mapped through the error table.
    let empty = app
        .post("/api/v1/boards", &alice, json!({"name": "  "}))
        .await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    assert_eq!(empty.error(), "validation_error");

    // Body rejections in the common shape.
    let missing = app
        .post("/api/v1/boards", &alice, json!({"description": "x"}))
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.error(), "validation_error");
    let wrong_type = app.post("/api/v1/boards", &alice, json!({"name": 5})).await;
    assert_eq!(wrong_type.status, StatusCode::BAD_REQUEST);
    let unknown_field = app
        .post("/api/v1/boards", &alice, json!({"name": "a", "colour": 1}))
        .await;
    assert_eq!(unknown_field.status, StatusCode::BAD_REQUEST);
    let malformed = app
        .send(
            axum::http::Request::post("/api/v1/boards")
                .header("authorization", format!("Bearer {alice}"))
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{not json"))
                .unwrap(),
        )
        .await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    assert_eq!(malformed.error(), "bad_request");
    let no_content_type = app
        .send(
            axum::http::Request::post("/api/v1/boards")
                .header("authorization", format!("Bearer {alice}"))
                .body(axum::body::Body::from(r#"{"name":"a"}"#))
                .unwrap(),
        )
        .await;
    assert_eq!(no_content_type.status, StatusCode::BAD_REQUEST);
    assert_eq!(no_content_type.error(), "bad_request");

    // Ids that are not UUIDs, and ones that do not exist.
    let bad_id = app.get("/api/v1/boards/not-a-uuid", &alice).await;
    assert_eq!(bad_id.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad_id.error(), "bad_request");
    let missing = app
        .get(
            "/api/v1/boards/00000000-0000-0000-0000-000000000000",
            &alice,
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let missing = app
        .delete(
            "/api/v1/boards/00000000-0000-0000-0000-000000000000",
            &alice,
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    // Unknown routes and methods answer in the same shape.
    let nope = app.get("/api/v1/nope", &alice).await;
    assert_eq!(nope.status, StatusCode::NOT_FOUND);
    assert_eq!(nope.error(), "not_found");
    let put = app
        .call(Method::PUT, "/api/v1/boards", Some(&alice), None)
        .await;
    assert_eq!(put.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(put.error(), "bad_request");
    app.stop().await;
}

#[tokio::test]
async fn create_and_list_tasks_with_state_filters_and_paging() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "b").await;
    let t1 = app.task(&alice, &board, "one").await;
    assert_eq!(t1["state"], "TODO");
    assert_eq!(t1["title"], "one");
    assert_eq!(t1["agent_type"], "auggie-cli");
    assert_eq!(t1["repository_url"], "https://github.com/user/repo");
    assert_eq!(t1["branch"], "main");
    assert_eq!(t1["priority"], 2);
    assert_eq!(t1["workspace_path"], "/tmp/ws");
    assert_eq!(t1["max_retries"], 1);
    assert_eq!(t1["metadata"]["auggie_session_id"], "s-1");
    assert_eq!(t1["created_by"], "alice");
    assert_eq!(t1["board_id"], board.as_str());
    let t2 = app.task(&alice, &board, "two").await;
    let t3 = app.task(&alice, &board, "three").await;
    let id2 = t2["id"].as_str().unwrap();
    let id3 = t3["id"].as_str().unwrap();
    let r = app
        .patch(
            &format!("/api/v1/tasks/{id2}/state"),
            &alice,
            json!({"state": "IN_PROGRESS"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = app
        .patch(
            &format!("/api/v1/tasks/{id3}/state"),
            &alice,
            json!({"state": "BLOCKED"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);

    let titles = |v: &serde_json::Value| -> Vec<String> {
        let mut t: Vec<String> = v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["title"].as_str().unwrap().to_string())
            .collect();
        t.sort();
        t
    };
    let all = app
        .get(&format!("/api/v1/boards/{board}/tasks"), &alice)
        .await;
    assert_eq!(all.status, StatusCode::OK);
    assert_eq!(titles(&all.body), vec!["one", "three", "two"]);
    let todo = app
        .get(&format!("/api/v1/boards/{board}/tasks?state=TODO"), &alice)
        .await;
    assert_eq!(titles(&todo.body), vec!["one"]);
    let repeated = app
        .get(
            &format!("/api/v1/boards/{board}/tasks?state=TODO&state=BLOCKED"),
            &alice,
        )
        .await;
    assert_eq!(titles(&repeated.body), vec!["one", "three"]);
    let comma = app
        .get(
            &format!("/api/v1/boards/{board}/tasks?state=IN_PROGRESS,BLOCKED"),
            &alice,
        )
        .await;
    assert_eq!(titles(&comma.body), vec!["three", "two"]);

    let bad_state = app
        .get(&format!("/api/v1/boards/{board}/tasks?state=DONE"), &alice)
        .await;
    assert_eq!(bad_state.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad_state.error(), "validation_error");
    let bad_param = app
        .get(&format!("/api/v1/boards/{board}/tasks?colour=red"), &alice)
        .await;
    assert_eq!(bad_param.status, StatusCode::BAD_REQUEST);

    // Paging: two pages of two and one.
    let page1 = app
        .get(&format!("/api/v1/boards/{board}/tasks?page_size=2"), &alice)
        .await;
    assert_eq!(page1.body["tasks"].as_array().unwrap().len(), 2);
    let next = page1.body["next_page_token"]
        .as_str()
        .expect("a next page")
        .to_string();
    let page2 = app
        .get(
            &format!("/api/v1/boards/{board}/tasks?page_size=2&page_token={next}"),
            &alice,
        )
        .await;
    assert_eq!(page2.status, StatusCode::OK, "{}", page2.body);
    assert_eq!(page2.body["tasks"].as_array().unwrap().len(), 1);
    assert!(page2.body["next_page_token"].is_null());

    // Task creation errors.
    let no_title = app
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            &alice,
            json!({"description": "x"}),
        )
        .await;
    assert_eq!(no_title.status, StatusCode::BAD_REQUEST);
    let blank = app
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            &alice,
            json!({"title": " "}),
        )
        .await;
    assert_eq!(blank.status, StatusCode::BAD_REQUEST);
    assert_eq!(blank.error(), "validation_error");
    let bad_state = app
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            &alice,
            json!({"title": "x", "state": "DONE"}),
        )
        .await;
    assert_eq!(bad_state.status, StatusCode::BAD_REQUEST);
    let bad_meta = app
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            &alice,
            json!({"title": "x", "metadata": [1]}),
        )
        .await;
    assert_eq!(bad_meta.status, StatusCode::BAD_REQUEST);
    let negative = app
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            &alice,
            json!({"title": "x", "priority": -1}),
        )
        .await;
    assert_eq!(negative.status, StatusCode::BAD_REQUEST);

    // NUL characters anywhere are refused before they reach Postgres, and
    // nothing is created.
    let before = app
        .get(&format!("/api/v1/boards/{board}/tasks"), &alice)
        .await;
    for body in [
        json!({"title": "a\u{0}b"}),
        json!({"title": "x", "description": "\u{0}"}),
        json!({"title": "x", "branch": "main\u{0}"}),
        json!({"title": "x", "metadata": {"k\u{0}": "v"}}),
        json!({"title": "x", "metadata": {"k": ["v\u{0}"]}}),
    ] {
        let nul = app
            .post(&format!("/api/v1/boards/{board}/tasks"), &alice, body)
            .await;
        assert_eq!(nul.status, StatusCode::BAD_REQUEST, "{}", nul.body);
        assert_eq!(nul.error(), "validation_error");
        assert!(nul.body["message"].as_str().unwrap().contains("NUL"));
    }
    let nul_board = app
        .post("/api/v1/boards", &alice, json!({"name": "b\u{0}"}))
        .await;
    assert_eq!(nul_board.status, StatusCode::BAD_REQUEST);
    let nul_rename = app
        .patch(
            &format!("/api/v1/boards/{board}"),
            &alice,
            json!({"name": "\u{0}"}),
        )
        .await;
    assert_eq!(nul_rename.status, StatusCode::BAD_REQUEST);
    // So are NULs in a query parameter (a state filter is no known state).
    for (path, says) in [
        (
            "/api/v1/agent-profiles?agent_type=%21%2Br9u%00".to_owned(),
            "NUL",
        ),
        (format!("/api/v1/boards/{board}/tasks?state=%00"), "state"),
    ] {
        let nul = app.get(&path, &alice).await;
        assert_eq!(nul.status, StatusCode::BAD_REQUEST, "{path}: {}", nul.body);
        let message = nul.body["message"].as_str().unwrap();
        assert!(message.contains(says), "{path}: {message}");
    }
    let after = app
        .get(&format!("/api/v1/boards/{board}/tasks"), &alice)
        .await;
    assert_eq!(before.body["tasks"], after.body["tasks"]);
    app.stop().await;
}
