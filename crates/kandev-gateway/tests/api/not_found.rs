//! Issue 37: a 404 does not tell whether something exists. Another user's
//! board, task or agent instance and an id nobody has answer with the same
//! status and byte-identical bodies, on every route that takes the id.

use std::{
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
};

use axum::{
    Router,
    body::{Body, Bytes},
    http::{HeaderMap, Method, StatusCode},
    response::Response,
    routing::post,
};
use hyper::body::{Frame, SizeHint};
use kandev_proto::v1 as pb;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tower::ServiceExt as _;
use uuid::Uuid;

use crate::helpers::{TestApp, spawn_app, spawn_app_with};

/// The raw answer to `method path` as `token`: status and body bytes.
async fn raw(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Bytes) {
    let mut request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"));
    let body = match body {
        Some(body) => {
            request = request.header("content-type", "application/json");
            Body::from(body.to_string())
        }
        None => Body::empty(),
    };
    let response = app
        .router
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, bytes)
}

/// Asserts `theirs` (someone else's id) and `missing` (nobody's) get the
/// same 404, byte for byte, on every route of `routes` (`{}` is the id).
async fn same_404(
    app: &TestApp,
    token: &str,
    routes: &[(Method, &str, Option<Value>)],
    theirs: &str,
    missing: &str,
) {
    for (method, route, body) in routes {
        let (status, hidden) = raw(
            app,
            method.clone(),
            &route.replace("{}", theirs),
            token,
            body.clone(),
        )
        .await;
        let (missing_status, absent) = raw(
            app,
            method.clone(),
            &route.replace("{}", missing),
            token,
            body.clone(),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "{method} {route}: {hidden:?}"
        );
        assert_eq!(
            missing_status,
            StatusCode::NOT_FOUND,
            "{method} {route}: {absent:?}"
        );
        assert_eq!(hidden, absent, "{method} {route}");
        let body: Value = serde_json::from_slice(&hidden).unwrap();
        assert_eq!(body["error"], "not_found", "{body}");
        assert!(!body.to_string().contains(theirs), "{body}");
    }
}

#[tokio::test]
async fn another_users_board_and_task_look_exactly_like_missing_ones() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let board = app.board(&alice, "alice's").await;
    let task = app.task(&alice, &board, "alice's task").await;
    let task = task["id"].as_str().unwrap();
    let missing = Uuid::new_v4().to_string();

    let board_routes = [
        (Method::GET, "/api/v1/boards/{}", None),
        (
            Method::PATCH,
            "/api/v1/boards/{}",
            Some(json!({"name": "x"})),
        ),
        (Method::DELETE, "/api/v1/boards/{}", None),
        (Method::GET, "/api/v1/boards/{}/tasks", None),
        (Method::GET, "/api/v1/boards/{}/cards", None),
        (
            Method::POST,
            "/api/v1/boards/{}/tasks",
            Some(json!({"title": "x"})),
        ),
    ];
    same_404(&app, &bob, &board_routes, &board, &missing).await;

    let task_routes = [
        (Method::GET, "/api/v1/tasks/{}", None),
        (
            Method::PATCH,
            "/api/v1/tasks/{}",
            Some(json!({"title": "x"})),
        ),
        (Method::DELETE, "/api/v1/tasks/{}", None),
        (
            Method::PATCH,
            "/api/v1/tasks/{}/state",
            Some(json!({"state": "IN_PROGRESS"})),
        ),
        (Method::GET, "/api/v1/tasks/{}/events", None),
        (Method::GET, "/api/v1/tasks/{}/changes", None),
        (Method::GET, "/api/v1/orchestrator/tasks/{}/status", None),
        (
            Method::POST,
            "/api/v1/orchestrator/tasks/{}/start",
            Some(json!({})),
        ),
    ];
    same_404(&app, &bob, &task_routes, task, &missing).await;
    // A launch names its task in the body.
    let launch = |id: &str| json!({"task_id": id, "agent_type": "mock-agent"});
    let (status, theirs) = raw(
        &app,
        Method::POST,
        "/api/v1/agents/launch",
        &bob,
        Some(launch(task)),
    )
    .await;
    let (_, absent) = raw(
        &app,
        Method::POST,
        "/api/v1/agents/launch",
        &bob,
        Some(launch(&missing)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(theirs, absent);

    // The owner still sees both.
    let own = app.get(&format!("/api/v1/tasks/{task}"), &alice).await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
    app.stop().await;
}

#[tokio::test]
async fn another_users_agent_instance_looks_exactly_like_a_missing_one() {
    // The agent manager knows one instance, of Alice's task; it is made
    // once the task exists, so the gateway starts against a placeholder.
    let instance = Uuid::new_v4().to_string();
    let (addr, task_slot, manager) = stand_in_agent_manager(instance.clone()).await;
    let app = spawn_app_with(|s| s.agent_manager_url = format!("http://{addr}")).await;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let board = app.board(&alice, "alice's").await;
    let task = app.task(&alice, &board, "alice's task").await;
    task_slot
        .set(task["id"].as_str().unwrap().to_string())
        .unwrap();

    let own = app
        .get(&format!("/api/v1/agents/{instance}/status"), &alice)
        .await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
    let routes = [
        (Method::GET, "/api/v1/agents/{}/status", None),
        (Method::GET, "/api/v1/agents/{}/logs", None),
        (Method::GET, "/api/v1/agents/{}/session", None),
        (Method::POST, "/api/v1/agents/{}/cancel", None),
        (
            Method::POST,
            "/api/v1/agents/{}/prompt",
            Some(json!({"message": "hi"})),
        ),
    ];
    same_404(&app, &bob, &routes, &instance, &Uuid::new_v4().to_string()).await;
    manager.abort();
    app.stop().await;
}

/// An agent manager that answers `GetStatus` only: `instance`, of the task
/// later set in the returned slot, exists; any other id is NOT_FOUND with
/// the real manager's wording (naming the id).
async fn stand_in_agent_manager(
    instance: String,
) -> (
    SocketAddr,
    std::sync::Arc<std::sync::OnceLock<String>>,
    JoinHandle<()>,
) {
    let task_slot = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let task = task_slot.clone();
    let router = Router::new().route(
        "/kandev.v1.AgentManager/GetStatus",
        post(move |body: Bytes| {
            let instance = instance.clone();
            let task = task.clone();
            async move {
                let request = pb::GetStatusRequest::decode(body.slice(5..)).unwrap();
                match task.get() {
                    Some(task_id) if request.instance_id == instance => {
                        grpc_ok(&pb::AgentInstance {
                            id: instance,
                            task_id: task_id.clone(),
                            agent_type: "mock-agent".into(),
                            ..Default::default()
                        })
                    }
                    _ => {
                        grpc_not_found(&format!("agent instance {} not found", request.instance_id))
                    }
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (addr, task_slot, handle)
}

fn grpc_ok(message: &pb::AgentInstance) -> Response {
    let encoded = message.encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(&encoded);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    Response::builder()
        .header("content-type", "application/grpc")
        .body(Body::new(Unary {
            data: Some(Bytes::from(framed)),
            trailers: Some(trailers),
        }))
        .unwrap()
}

/// A trailers-only answer: the status in the headers, no body.
fn grpc_not_found(message: &str) -> Response {
    Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", "5")
        .header("grpc-message", message)
        .body(Body::empty())
        .unwrap()
}

/// One message, then the trailers.
struct Unary {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl hyper::body::Body for Unary {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = match self.data.take() {
            Some(data) => Some(Frame::data(data)),
            None => self.trailers.take().map(Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
