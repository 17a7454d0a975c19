//! Bad input at the API is refused with the right status and error body.

use kandev_e2e::{Options, Stack, serde_json::json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused() {
    let stack = Stack::start("bad_input", Options::default()).await;
    let api = stack.admin().await;
    let board = api.board("bad input").await;
    let tasks = format!("/api/v1/boards/{board}/tasks");

    // Malformed JSON.
    let r = api.send("POST", &tasks, Some("{\"title\": ".into())).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.error(), "bad_request");

    // No title, and an empty title.
    for body in [json!({"description": "no title"}), json!({"title": "  "})] {
        let r = api.post(&tasks, body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.error(), "validation_error");
    }

    // An unknown board.
    let unknown = "00000000-0000-4000-8000-000000000000";
    let r = api
        .post(
            &format!("/api/v1/boards/{unknown}/tasks"),
            json!({"title": "lost"}),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.error(), "not_found");
    let r = api.get(&format!("/api/v1/tasks/{unknown}")).await;
    assert_eq!(r.status, 404, "{}", r.body);

    // Bad states: an unknown one, and a forbidden transition.
    let task = api.task(&board, json!({"title": "no agent"})).await;
    let state = format!("/api/v1/tasks/{task}/state");
    let r = api.patch(&state, json!({"state": "SLEEPING"})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.error(), "validation_error");
    let r = api.patch(&state, json!({"state": "COMPLETED"})).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.error(), "conflict");
    // A stale version.
    let r = api
        .patch(&state, json!({"state": "IN_PROGRESS", "version": 999}))
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.error(), "conflict");
    let t = api.get(&format!("/api/v1/tasks/{task}")).await;
    assert_eq!(t.body["state"], "TODO", "{}", t.body);

    // No token, and a forged one.
    let anon = stack.anonymous();
    let r = anon.get("/api/v1/boards").await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.error(), "unauthorized");
    let r = anon.post(&tasks, json!({"title": "anonymous"})).await;
    assert_eq!(r.status, 401, "{}", r.body);
    let mut forged = api.clone();
    forged.token = Some("not.a.jwt".into());
    let r = forged.get("/api/v1/boards").await;
    assert_eq!(r.status, 401, "{}", r.body);
    // A wrong password.
    let r = anon
        .post(
            "/api/v1/auth/login",
            json!({"username": "admin", "password": "wrong-password"}),
        )
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
    stack.stop().await;
}
