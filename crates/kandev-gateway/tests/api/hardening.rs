//! Rate limits, request ids, CORS, the body limit, health and readiness,
//! a task service that is down, and clients that never finish a request.

use axum::{
    body::Body,
    http::{Method, Request, StatusCode},
};
use serde_json::json;
use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{ADMIN, ADMIN_PASSWORD, dead_url, spawn_app, spawn_app_with};

#[tokio::test]
async fn login_is_rate_limited_per_address() {
    let app = spawn_app_with(|s| {
        s.rate_limit.login_burst = 2;
        s.rate_limit.login_per_minute = 1;
    })
    .await;
    assert_eq!(
        app.login(ADMIN, "wrong-password").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        app.login(ADMIN, ADMIN_PASSWORD).await.status,
        StatusCode::OK
    );
    let limited = app.login(ADMIN, ADMIN_PASSWORD).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.error(), "rate_limited");
    let retry: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    app.stop().await;
}

#[tokio::test]
async fn api_is_rate_limited_per_user() {
    let app = spawn_app_with(|s| {
        s.rate_limit.api_burst = 3;
        s.rate_limit.api_per_minute = 1;
    })
    .await;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    for _ in 0..3 {
        assert_eq!(
            app.get("/api/v1/auth/me", &alice).await.status,
            StatusCode::OK
        );
    }
    let limited = app.get("/api/v1/auth/me", &alice).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.error(), "rate_limited");
    assert!(limited.headers.contains_key("retry-after"));
    // Another user has a bucket of their own.
    assert_eq!(
        app.get("/api/v1/auth/me", &bob).await.status,
        StatusCode::OK
    );
    app.stop().await;
}

#[tokio::test]
async fn refused_tokens_are_rate_limited_per_address() {
    let app = spawn_app_with(|s| {
        s.rate_limit.api_burst = 2;
        s.rate_limit.api_per_minute = 1;
    })
    .await;
    for _ in 0..2 {
        let resp = app.get("/api/v1/boards", "guess").await;
        assert_eq!(resp.status, StatusCode::UNAUTHORIZED);
    }
    let limited = app.call(Method::GET, "/api/v1/boards", None, None).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.error(), "rate_limited");
    assert!(limited.headers.contains_key("retry-after"));
    // A valid token still works: users have buckets of their own.
    let alice = app.token("alice", false);
    assert_eq!(
        app.get("/api/v1/auth/me", &alice).await.status,
        StatusCode::OK
    );
    app.stop().await;
}

#[tokio::test]
async fn request_ids_are_generated_or_echoed() {
    let app = spawn_app().await;
    let resp = app.call(Method::GET, "/healthz", None, None).await;
    let generated = resp.headers["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(generated).is_ok(), "{generated}");

    let resp = app
        .send(
            Request::get("/api/v1/boards")
                .header("x-request-id", "req-42")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status, StatusCode::UNAUTHORIZED);
    assert_eq!(resp.headers["x-request-id"], "req-42");
    app.stop().await;
}

#[tokio::test]
async fn cors_allows_only_configured_origins() {
    let app = spawn_app().await;
    let preflight = |origin: &'static str| {
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/api/v1/boards")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .body(Body::empty())
            .unwrap()
    };
    let ok = app.send(preflight("https://ui.example")).await;
    assert!(ok.status.is_success());
    assert_eq!(
        ok.headers["access-control-allow-origin"],
        "https://ui.example"
    );
    let other = app.send(preflight("https://evil.example")).await;
    assert!(other.headers.get("access-control-allow-origin").is_none());
    app.stop().await;
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused() {
    let app = spawn_app_with(|s| s.body_limit_bytes = 256).await;
    let alice = app.token("alice", false);
    let resp = app
        .post(
            "/api/v1/boards",
            &alice,
            json!({"name": "x", "description": "y".repeat(1024)}),
        )
        .await;
    assert_eq!(resp.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(resp.error(), "bad_request");
    let small = app
        .post("/api/v1/boards", &alice, json!({"name": "x"}))
        .await;
    assert_eq!(small.status, StatusCode::CREATED);
    app.stop().await;
}

#[tokio::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    let health = app.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(health.status, StatusCode::OK);
    let ready = app.call(Method::GET, "/readyz", None, None).await;
    // The agent manager and orchestrator are down in these tests.
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.body["checks"]["postgres"], "ok");
    assert_eq!(ready.body["checks"]["task service"], "ok");
    assert_ne!(ready.body["checks"]["agent manager"], "ok");
    assert_ne!(ready.body["checks"]["orchestrator"], "ok");
    app.stop().await;
}

#[tokio::test]
async fn a_down_task_service_is_a_clear_503() {
    let app = spawn_app_with(|s| s.task_service_url = dead_url("http")).await;
    let alice = app.token("alice", false);
    let resp = app.get("/api/v1/boards", &alice).await;
    assert_eq!(resp.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.error(), "service_unavailable");
    assert_eq!(
        resp.body["message"],
        "the task service is unavailable, try again later"
    );
    let resp = app
        .get("/api/v1/tasks/7b0c5a8e-2f4e-4c1a-9d3e-5f6a7b8c9d0e", &alice)
        .await;
    assert_eq!(resp.status, StatusCode::SERVICE_UNAVAILABLE);
    app.stop().await;
}

#[tokio::test]
async fn a_task_service_that_never_answers_times_out() {
    // Accepts connections and never answers: calls must not hang.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hole = tokio::spawn(async move {
        let mut held = vec![];
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let app = spawn_app_with(|s| {
        s.task_service_url = format!("http://{addr}");
        s.downstream_timeout_ms = 300;
        s.downstream_connect_timeout_ms = 300;
    })
    .await;
    let alice = app.token("alice", false);
    let started = std::time::Instant::now();
    let resp = app.get("/api/v1/boards", &alice).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(resp.status, StatusCode::GATEWAY_TIMEOUT, "{}", resp.body);
    assert_eq!(resp.error(), "service_unavailable");
    assert_eq!(
        resp.body["message"],
        "the task service did not answer in time"
    );
    hole.abort();
    app.stop().await;
}

/// A whole `GET /healthz` on a new connection to `addr` is answered 200.
async fn healthz_answers(addr: SocketAddr) {
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: kandev\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Slowloris: clients that never finish their headers, or trickle them one
/// byte at a time, are disconnected after the header deadline, while a
/// real request on the same server is answered.
#[tokio::test]
async fn clients_that_trickle_their_headers_are_disconnected() {
    let mut app = spawn_app_with(|s| s.header_read_timeout_secs = 1).await;
    let addr = app.serve();

    let mut stalled = Vec::new();
    for _ in 0..50 {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: kandev\r\n")
            .await
            .unwrap();
        stalled.push(socket);
    }
    // One more that sends a byte every 200 ms, forever if let.
    let trickle = tokio::spawn(async move {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .unwrap();
        for _ in 0..300 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if socket.write_all(b"X").await.is_err() {
                return true;
            }
            let mut byte = [0u8; 1];
            if let Ok(Ok(0) | Err(_)) =
                tokio::time::timeout(Duration::from_millis(1), socket.read(&mut byte)).await
            {
                return true;
            }
        }
        false
    });

    // Meanwhile a complete request is served.
    healthz_answers(addr).await;

    for mut socket in stalled {
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(30), socket.read_to_end(&mut rest))
            .await
            .expect("a stalled client is disconnected");
        // EOF (possibly after a 408) or a reset: either way, gone.
        if let Ok(n) = closed {
            let text = String::from_utf8_lossy(&rest[..n]);
            assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
        }
    }
    assert!(
        trickle.await.unwrap(),
        "the trickling client stayed connected"
    );
    app.stop().await;
}

/// Issue 37: a body sent one byte a second is refused with 408 (in the
/// error shape) once the body deadline passes, and its connection is
/// closed, while the server goes on answering.
#[tokio::test]
async fn a_body_trickled_past_its_deadline_is_refused_with_408() {
    let mut app = spawn_app_with(|s| s.body_read_timeout_secs = 2).await;
    let alice = app.token("alice", false);
    let addr = app.serve();

    let socket = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = socket.into_split();
    let head = format!(
        "POST /api/v1/boards HTTP/1.1\r\nHost: kandev\r\nAuthorization: Bearer {alice}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    );
    writer.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    // The attack's pace: one byte a second, for longer than any deadline.
    let trickle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        for _ in 0..99 {
            tick.tick().await;
            if writer.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    // Read until the server closes (EOF, or a reset for the unread bytes).
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = reader.read(&mut buf).await {
            answer.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(closed.is_ok(), "the connection stayed open");
    assert!(started.elapsed() < Duration::from_secs(10));
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    let body: serde_json::Value =
        serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"], "bad_request", "{body}");
    assert_eq!(body["http_status"], 408, "{body}");
    trickle.abort();

    // The server is fine: a whole request on a new connection is answered.
    healthz_answers(addr).await;
    app.stop().await;
}
