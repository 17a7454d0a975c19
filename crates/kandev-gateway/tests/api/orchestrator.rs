//! Orchestrator routes: the gRPC routes are tested here for auth, ownership
//! and 503 while the orchestrator is down (`stack.rs` runs them against the
//! real orchestrator). The WebSocket proxy's own mechanics (auth by header
//! or subprotocol, `?after=` passed on, frames both ways, close frames with
//! their reasons) are tested against a minimal stand-in WebSocket server
//! defined here; that is a test of the proxy, not an integration test with
//! the orchestrator.

use std::net::SocketAddr;

use axum::http::{Method, StatusCode};
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::{net::TcpListener, sync::oneshot};
use tokio_tungstenite::tungstenite::{
    self as tg, client::IntoClientRequest, protocol::frame::coding::CloseCode,
};

use crate::helpers::{spawn_app, spawn_app_with};

#[tokio::test]
async fn grpc_routes_check_auth_and_ownership_then_report_the_orchestrator_down() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let board = app.board(&alice, "b").await;
    let task = app.task(&alice, &board, "t").await;
    let id = task["id"].as_str().unwrap();

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
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
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
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let board = app.board(&alice, "b").await;
    let task = app.task(&alice, &board, "t").await;
    let id = task["id"].as_str().unwrap().to_string();
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

/// What the stand-in saw of the proxied handshake.
#[derive(Debug)]
struct Seen {
    uri: String,
    user: Option<String>,
}

/// A minimal WebSocket server standing in for the orchestrator's stream
/// endpoint: it greets, echoes text and binary frames, and on "close"
/// closes with a reason. Returns its `ws://` base and what it saw.
// The handshake callback's error type is tungstenite's, not ours.
#[allow(clippy::result_large_err)]
async fn stand_in() -> (
    String,
    oneshot::Receiver<Seen>,
    oneshot::Receiver<Option<tg::protocol::CloseFrame>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("ws://{}", listener.local_addr().unwrap());
    let (seen_tx, seen_rx) = oneshot::channel();
    let (closed_tx, closed_rx) = oneshot::channel();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut seen = None;
        let ws = tokio_tungstenite::accept_hdr_async(
            stream,
            |req: &tg::handshake::server::Request, resp| {
                seen = Some(Seen {
                    uri: req.uri().to_string(),
                    user: req
                        .headers()
                        .get("x-kandev-user")
                        .map(|v| v.to_str().unwrap().to_string()),
                });
                Ok(resp)
            },
        )
        .await
        .unwrap();
        let _ = seen_tx.send(seen.unwrap());
        let (mut tx, mut rx) = ws.split();
        tx.send(tg::Message::text(r#"{"seq":1,"type":"hello"}"#))
            .await
            .unwrap();
        while let Some(Ok(msg)) = rx.next().await {
            match msg {
                tg::Message::Text(t) if t.as_str() == "close" => {
                    tx.send(tg::Message::Close(Some(tg::protocol::CloseFrame {
                        code: CloseCode::Normal,
                        reason: "stream finished".into(),
                    })))
                    .await
                    .unwrap();
                }
                tg::Message::Text(t) => {
                    tx.send(tg::Message::text(format!("echo:{}", t.as_str())))
                        .await
                        .unwrap();
                }
                tg::Message::Binary(b) => tx.send(tg::Message::Binary(b)).await.unwrap(),
                tg::Message::Close(frame) => {
                    let _ = closed_tx.send(frame);
                    break;
                }
                _ => {}
            }
        }
    });
    (base, seen_rx, closed_rx)
}

#[tokio::test]
async fn stream_proxy_relays_both_ways_and_passes_close_reasons() {
    let (base, seen, _closed) = stand_in().await;
    let mut app = spawn_app_with(|s| s.orchestrator_ws_url = base).await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "b").await;
    let task = app.task(&alice, &board, "t").await;
    let id = task["id"].as_str().unwrap().to_string();
    let addr = app.serve();

    let mut req = ws_request(
        addr,
        &format!("/api/v1/orchestrator/tasks/{id}/stream?after=41"),
    );
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("kandev.bearer, {alice}").parse().unwrap(),
    );
    let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "kandev.bearer");

    let seen = seen.await.unwrap();
    assert_eq!(
        seen.uri,
        format!("/api/v1/orchestrator/tasks/{id}/stream?after=41")
    );
    assert_eq!(seen.user.as_deref(), Some("alice"));

    let hello = ws.next().await.unwrap().unwrap();
    assert_eq!(
        hello.into_text().unwrap().as_str(),
        r#"{"seq":1,"type":"hello"}"#
    );
    for i in 0..20 {
        ws.send(tg::Message::text(format!("m{i}"))).await.unwrap();
        let echo = ws.next().await.unwrap().unwrap();
        assert_eq!(echo.into_text().unwrap().as_str(), format!("echo:m{i}"));
    }
    ws.send(tg::Message::binary(vec![1u8, 2, 3])).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        tg::Message::binary(vec![1u8, 2, 3])
    );

    // The upstream closes with a reason; the client gets it.
    ws.send(tg::Message::text("close")).await.unwrap();
    match ws.next().await.unwrap().unwrap() {
        tg::Message::Close(Some(frame)) => {
            assert_eq!(frame.code, CloseCode::Normal);
            assert_eq!(frame.reason.as_str(), "stream finished");
        }
        other => panic!("expected a close frame, got {other:?}"),
    }
    app.stop().await;
}

#[tokio::test]
async fn stream_proxy_passes_the_clients_close_reason_upstream() {
    let (base, _seen, closed) = stand_in().await;
    let mut app = spawn_app_with(|s| s.orchestrator_ws_url = base).await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "b").await;
    let task = app.task(&alice, &board, "t").await;
    let id = task["id"].as_str().unwrap().to_string();
    let addr = app.serve();

    let mut req = ws_request(addr, &format!("/api/v1/orchestrator/tasks/{id}/stream"));
    req.headers_mut()
        .insert("authorization", format!("Bearer {alice}").parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert!(resp.headers().get("sec-websocket-protocol").is_none());
    let _hello = ws.next().await.unwrap().unwrap();
    ws.close(Some(tg::protocol::CloseFrame {
        code: CloseCode::Away,
        reason: "tab closed".into(),
    }))
    .await
    .unwrap();
    let frame = tokio::time::timeout(std::time::Duration::from_secs(10), closed)
        .await
        .expect("upstream saw the close")
        .unwrap()
        .expect("with a frame");
    assert_eq!(frame.code, CloseCode::Away);
    assert_eq!(frame.reason.as_str(), "tab closed");
    app.stop().await;
}

#[tokio::test]
async fn stream_proxy_closes_both_sides_when_the_gateway_stops() {
    let (base, _seen, closed) = stand_in().await;
    let mut app = spawn_app_with(|s| s.orchestrator_ws_url = base).await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "b").await;
    let task = app.task(&alice, &board, "t").await;
    let id = task["id"].as_str().unwrap().to_string();
    let addr = app.serve();

    let mut req = ws_request(addr, &format!("/api/v1/orchestrator/tasks/{id}/stream"));
    req.headers_mut()
        .insert("authorization", format!("Bearer {alice}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let _hello = ws.next().await.unwrap().unwrap();
    app.shutdown_gateway();
    let wait = std::time::Duration::from_secs(10);
    match tokio::time::timeout(wait, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        tg::Message::Close(Some(frame)) => {
            assert_eq!(frame.code, CloseCode::Away);
            assert_eq!(frame.reason.as_str(), "the gateway is shutting down");
        }
        other => panic!("expected a close frame, got {other:?}"),
    }
    let upstream = tokio::time::timeout(wait, closed)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(upstream.code, CloseCode::Away);
    app.stop().await;
}

/// A stand-in that sends 1 MiB binary frames as fast as it is allowed to,
/// counting the frames its socket accepted.
async fn flooding_stand_in() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("ws://{}", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        for i in 0..FLOOD_FRAMES {
            let mut frame = vec![0u8; 1 << 20];
            frame[..8].copy_from_slice(&(i as u64).to_be_bytes());
            if ws.send(tg::Message::binary(frame)).await.is_err() {
                return;
            }
            counter.fetch_add(1, Ordering::SeqCst);
        }
        let _ = ws.close(None).await;
    });
    (base, sent)
}

const FLOOD_FRAMES: usize = 400;

#[tokio::test]
async fn stream_proxy_keeps_backpressure_when_the_client_does_not_read() {
    use std::sync::atomic::Ordering;
    let (base, sent) = flooding_stand_in().await;
    let mut app = spawn_app_with(|s| s.orchestrator_ws_url = base).await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "b").await;
    let task = app.task(&alice, &board, "t").await;
    let id = task["id"].as_str().unwrap().to_string();
    let addr = app.serve();

    let mut req = ws_request(addr, &format!("/api/v1/orchestrator/tasks/{id}/stream"));
    req.headers_mut()
        .insert("authorization", format!("Bearer {alice}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();

    // The client reads nothing: the upstream must stall once the socket
    // buffers between the hops are full, far below the 400 MiB it offers.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let stalled_at = sent.load(Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        sent.load(Ordering::SeqCst),
        stalled_at,
        "the upstream is stalled"
    );
    assert!(
        stalled_at < FLOOD_FRAMES / 4,
        "the proxy buffered {stalled_at} MiB for a client that reads nothing"
    );

    // Reading resumes the flow, in order and complete.
    for i in 0..FLOOD_FRAMES {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(30), ws.next())
            .await
            .expect("a frame in time")
            .unwrap()
            .unwrap();
        let data = frame.into_data();
        assert_eq!(data.len(), 1 << 20);
        assert_eq!(u64::from_be_bytes(data[..8].try_into().unwrap()), i as u64);
    }
    assert_eq!(sent.load(Ordering::SeqCst), FLOOD_FRAMES);
    app.stop().await;
}
