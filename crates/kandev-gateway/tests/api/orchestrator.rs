//! Orchestrator routes: the gRPC routes and the stream's handshake are
//! tested here for auth, ownership and 503 while the orchestrator is down
//! (`stack.rs` runs them against the real orchestrator; the stream
//! session's mechanics are tested in `src/stream/session.rs`).

use std::net::SocketAddr;

use axum::http::{Method, StatusCode};
use serde_json::json;
use tokio_tungstenite::tungstenite::{self as tg, client::IntoClientRequest};

use crate::helpers::spawn_app;

#[tokio::test]
async fn grpc_routes_check_auth_and_ownership_then_report_the_orchestrator_down() {
    let app = spawn_app().await;
    let (alice, bob, id) = app.alice_task().await;

    for (method, path) in [
        (
            Method::POST,
            format!("/api/v1/orchestrator/tasks/{id}/start"),
        ),
        (
            Method::POST,
            format!("/api/v1/orchestrator/tasks/{id}/stop"),
        ),
        (
            Method::GET,
            format!("/api/v1/orchestrator/tasks/{id}/status"),
        ),
        (
            Method::GET,
            format!("/api/v1/orchestrator/tasks/{id}/feed?limit=20"),
        ),
    ] {
        let body = (method == Method::POST).then(|| json!({}));
        let none = app.call(method.clone(), &path, None, body.clone()).await;
        assert_eq!(none.status, StatusCode::UNAUTHORIZED, "{path}");
        let other = app
            .call(method.clone(), &path, Some(&bob), body.clone())
            .await;
        assert_eq!(other.status, StatusCode::NOT_FOUND, "{path}");
        let down = app.call(method.clone(), &path, Some(&alice), body).await;
        assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
        assert_eq!(down.error(), "service_unavailable");
        assert!(
            down.body["message"]
                .as_str()
                .unwrap()
                .contains("orchestrator")
        );
    }
    let bad = app
        .post(
            &format!("/api/v1/orchestrator/tasks/{id}/start"),
            &alice,
            json!({"prompt": 3}),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    app.stop().await;
}

fn ws_request(addr: SocketAddr, path: &str) -> tg::handshake::client::Request {
    format!("ws://{addr}{path}").into_client_request().unwrap()
}

fn http_status(err: tg::Error) -> u16 {
    match err {
        tg::Error::Http(resp) => resp.status().as_u16(),
        other => panic!("expected an HTTP refusal, got {other}"),
    }
}

#[tokio::test]
async fn stream_auth_and_503_while_the_orchestrator_is_down() {
    let mut app = spawn_app().await;
    let (alice, bob, id) = app.alice_task().await;
    let addr = app.serve();
    let path = format!("/api/v1/orchestrator/tasks/{id}/stream");

    let err = tokio_tungstenite::connect_async(ws_request(addr, &path))
        .await
        .unwrap_err();
    assert_eq!(http_status(err), 401);

    let mut req = ws_request(addr, &path);
    req.headers_mut().insert(
        "sec-websocket-protocol",
        "kandev.bearer, forged.token.value".parse().unwrap(),
    );
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    assert_eq!(http_status(err), 401);

    let mut req = ws_request(addr, &path);
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("kandev.bearer, {bob}").parse().unwrap(),
    );
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    assert_eq!(http_status(err), 404);

    // Authenticated by subprotocol or header, but the orchestrator is down.
    let mut req = ws_request(addr, &path);
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("kandev.bearer, {alice}").parse().unwrap(),
    );
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    assert_eq!(http_status(err), 503);
    let mut req = ws_request(addr, &path);
    req.headers_mut()
        .insert("authorization", format!("Bearer {alice}").parse().unwrap());
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    assert_eq!(http_status(err), 503);

    // A plain GET (no upgrade) is a bad request.
    let plain = app.call(Method::GET, &path, Some(&alice), None).await;
    assert_eq!(plain.status, StatusCode::BAD_REQUEST);
    app.stop().await;
}

/// A board's tracker link: for whoever may see the board (others get the
/// board's 404), its body checked, then the orchestrator asked. The
/// tracker webhook is public, but without a sha256 signature it is refused
/// before any service is asked.
#[tokio::test]
async fn tracker_routes_check_auth_and_ownership_and_an_unsigned_webhook_is_refused() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let board = app.board(&alice, "b").await;
    let path = format!("/api/v1/boards/{board}/tracker");
    let link = json!({"kind": "github", "repository_url": "https://github.com/acme/app",
                      "label": "kandev", "webhook_secret": "s3cret"});
    for method in [Method::POST, Method::GET, Method::DELETE] {
        let body = (method == Method::POST).then(|| link.clone());
        let none = app.call(method.clone(), &path, None, body.clone()).await;
        assert_eq!(none.status, StatusCode::UNAUTHORIZED, "{method}");
        let other = app
            .call(method.clone(), &path, Some(&bob), body.clone())
            .await;
        assert_eq!(other.status, StatusCode::NOT_FOUND, "{method}");
        let down = app.call(method.clone(), &path, Some(&alice), body).await;
        assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE, "{method}");
        assert!(!down.body.to_string().contains("s3cret"));
    }
    let unknown = app
        .post(&path, &alice, json!({"kind": "github", "repo": "acme/app"}))
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{}", unknown.body);
    let bad_id = app.get("/api/v1/boards/nope/tracker", &alice).await;
    assert_eq!(bad_id.status, StatusCode::BAD_REQUEST);

    let webhook = |signature: Option<&str>| {
        let mut req = axum::http::Request::builder()
            .method(Method::POST)
            .uri("/api/v1/trackers/github/webhook")
            .header("x-github-event", "issues")
            .header("content-type", "application/json");
        if let Some(signature) = signature {
            req = req.header("x-hub-signature-256", signature);
        }
        req.body(axum::body::Body::from(r#"{"action":"opened"}"#))
            .unwrap()
    };
    for signature in [None, Some("sha1=0123"), Some("")] {
        let refused = app.send(webhook(signature)).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{signature:?}");
        assert_eq!(refused.error(), "unauthorized");
    }
    // Signed: the orchestrator checks it (here, it is down).
    let asked = app
        .send(webhook(Some(&format!("sha256={}", "0".repeat(64)))))
        .await;
    assert_eq!(asked.status, StatusCode::SERVICE_UNAVAILABLE);
    app.stop().await;
}
