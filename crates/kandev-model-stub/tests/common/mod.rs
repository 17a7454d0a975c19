//! What the three APIs' wire tests share: the stub on a loopback port, a
//! captured request body, and a streamed answer read back as its
//! Server-Sent Events.
#![allow(dead_code)] // Each test binary uses its part.

use std::time::Duration;

use serde_json::Value;

/// Serves `kandev_model_stub::router()` on a loopback port: its base URL.
pub async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        axum::serve(listener, kandev_model_stub::router())
            .await
            .expect("serve");
    });
    format!("http://{addr}")
}

pub fn fixture(text: &str) -> Value {
    serde_json::from_str(text).expect("fixture is JSON")
}

/// The body of a streamed answer: a 200 of `text/event-stream`.
pub async fn sse_body(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    let kind = response.headers()["content-type"].to_str().expect("ascii");
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    response.text().await.expect("body")
}

/// The `event:` name (empty when none) and `data:` JSON of each event of
/// a Server-Sent Events body that has data.
pub fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::trim)
            };
            let data = serde_json::from_str(field("data:")?).expect("event data is JSON");
            Some((field("event:").unwrap_or_default().to_string(), data))
        })
        .collect()
}

/// What a streamed answer sent until `enough` holds of it, each chunk
/// within 5 s.
pub async fn read_until(response: &mut reqwest::Response, enough: impl Fn(&str) -> bool) -> String {
    let mut seen = String::new();
    while !enough(&seen) {
        let chunk = tokio::time::timeout(Duration::from_secs(5), response.chunk())
            .await
            .expect("a chunk in time")
            .expect("read")
            .expect("stream open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

pub async fn send(request: reqwest::RequestBuilder) -> reqwest::Response {
    request.send().await.expect("request")
}

/// The JSON answer to `request`.
pub async fn json_of(request: reqwest::RequestBuilder) -> Value {
    send(request).await.json().await.expect("JSON")
}
