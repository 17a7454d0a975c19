//! Issue 37: requests with made-up HTTP methods and made-up gRPC paths,
//! authenticated or not, add no series to `/metrics`: every label value
//! comes from a fixed set, so the registry (which keeps every series it
//! ever saw) does not grow with what unauthenticated clients send.
//!
//! One test in its own binary: the process's recorder is global, and this
//! test counts every series in it.

use std::collections::BTreeSet;

use axum::{
    Router,
    body::Body,
    routing::{get, post},
};
use http::{Method, Request, StatusCode};
use kandev_common::{metrics, serve, service_auth};
use tower::ServiceExt as _;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A service's router as the services build it: gRPC (health, one Kandev
/// method), a REST route, probes, the service token, then metrics.
fn app() -> Router {
    let (routes, _) = serve::grpc_base(None).unwrap();
    let router = routes
        .routes()
        .into_axum_router()
        .route("/kandev.v1.TaskService/GetTask", post(|| async { "task" }))
        .route("/api/v1/things/{id}", get(|| async { "thing" }))
        .merge(serve::health_routes(vec![]));
    let router = service_auth::require(router, TOKEN.into());
    metrics::instrument("labels-test", router, metrics::Scrape::Open)
}

async fn send(app: &Router, method: &str, path: &str, grpc: bool, token: bool) -> StatusCode {
    let mut request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(path);
    if grpc {
        request = request
            .header("content-type", "application/grpc")
            .header("te", "trailers");
    }
    if token {
        request = request.header("authorization", format!("Bearer {TOKEN}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    response.status()
}

/// Made-up methods and paths, numbered `from..to` so each is new.
async fn attack(app: &Router, from: usize, to: usize) {
    for i in from..to {
        let made_up = format!("M{i}X");
        send(app, &made_up, &format!("/api/v1/things/{i}"), false, true).await;
        send(app, &made_up, &format!("/nope/{i}"), false, false).await;
        // Unauthenticated (16) and authenticated but unimplemented (12).
        let rpc = format!("/kandev.v1.TaskService/Made{i}");
        send(app, "POST", &rpc, true, false).await;
        send(app, "POST", &rpc, true, true).await;
        send(app, "POST", &format!("/evil{i}.Service/Call"), true, false).await;
        send(app, &made_up, "/grpc.health.v1.Health/Check", true, true).await;
    }
}

/// Every series of the scrape: name and labels (bucket bounds aside).
async fn series(app: &Router) -> BTreeSet<String> {
    let response = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let samples = metrics::parse_text(std::str::from_utf8(&bytes).unwrap()).unwrap();
    samples
        .iter()
        .map(|s| {
            let labels: Vec<String> = s
                .labels
                .iter()
                .filter(|(k, _)| k != "le" && k != "quantile")
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("{}{{{}}}", s.name, labels.join(","))
        })
        .collect()
}

#[tokio::test]
async fn made_up_methods_and_rpc_paths_add_no_series() {
    let app = app();
    // The legitimate requests, whose series exist from here on.
    assert_eq!(
        send(&app, "GET", "/api/v1/things/1", false, true).await,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, "POST", "/kandev.v1.TaskService/GetTask", true, true).await,
        StatusCode::OK
    );
    attack(&app, 0, 2000).await;
    let first = series(&app).await;

    let allowed_methods = [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other",
    ];
    let allowed_routes = [
        "/api/v1/things/{id}",
        "/kandev.v1.TaskService/GetTask",
        "/grpc.health.v1.Health/Check",
        "unknown",
        "unmatched",
    ];
    let requests: Vec<&String> = first
        .iter()
        .filter(|s| s.starts_with("http_request"))
        .collect();
    assert!(!requests.is_empty(), "{first:?}");
    for series in &requests {
        let labels = &series[series.find('{').unwrap() + 1..series.len() - 1];
        for label in labels.split(',') {
            let (key, value) = label.split_once('=').unwrap();
            match key {
                "method" => assert!(allowed_methods.contains(&value), "{series}"),
                "route" => assert!(allowed_routes.contains(&value), "{series}"),
                _ => {}
            }
        }
    }
    // 12,000 requests with 10,000 distinct methods and paths: a handful of
    // series (method x route x status), whatever the number of inputs.
    assert!(
        requests.len() <= 40,
        "{} series: {requests:#?}",
        requests.len()
    );

    // As many new inputs again: not one series more in the whole registry.
    attack(&app, 2000, 4000).await;
    let second = series(&app).await;
    assert_eq!(
        second.difference(&first).collect::<Vec<_>>(),
        Vec::<&String>::new()
    );
    assert_eq!(second.len(), first.len());
}
