//! The orchestrator answers only callers with the service token: its gRPC
//! API, its REST routes and its WebSocket feed alike; probes stay open. A
//! task service started alongside refuses calls without it too, and a
//! service without a token does not start.

use std::process::Command;

use kandev_proto::v1::{
    self as pb, orchestrator_client::OrchestratorClient, task_service_client::TaskServiceClient,
};
use tonic::transport::Channel;
use uuid::Uuid;

use crate::helpers::*;
use crate::task_steps::*;

fn bare_channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

#[tokio::test]
async fn calls_without_the_service_token_are_refused() {
    let app = spawn_with_tasks(|_| {}).await;
    let task = Uuid::new_v4().to_string();

    // gRPC, no token: UNAUTHENTICATED; with it: answered.
    let request = pb::GetTaskExecutionRequest {
        task_id: task.clone(),
    };
    let status = OrchestratorClient::new(bare_channel(app.addr))
        .get_task_execution(request.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    let wrong = kandev_common::trace::traced(bare_channel(app.addr), &"w".repeat(40).into());
    let status = OrchestratorClient::new(wrong)
        .get_task_execution(request.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    let answered = OrchestratorClient::new(service_channel(app.addr))
        .get_task_execution(request)
        .await;
    assert!(
        answered
            .as_ref()
            .map_or_else(|s| s.code() != tonic::Code::Unauthenticated, |_| true),
        "{answered:?}"
    );

    // The task service beside it: the same.
    let ts = app.settings.task_service_url.clone();
    let ts_addr = ts.trim_start_matches("http://").parse().unwrap();
    let status = TaskServiceClient::new(bare_channel(ts_addr))
        .list_boards(pb::ListBoardsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    app.tasks()
        .list_boards(pb::ListBoardsRequest::default())
        .await
        .expect("answered with the service token");

    // REST, no token: 401 with the common error body; with it: answered.
    let status_url = app.url(&format!("/api/v1/orchestrator/tasks/{task}/status"));
    for (method, url) in [
        ("GET", status_url.clone()),
        (
            "POST",
            app.url(&format!("/api/v1/orchestrator/tasks/{task}/start")),
        ),
    ] {
        let (code, body) = kandev_testkit::http(method, &url, None).await;
        assert_eq!(code, 401, "{method} {url}: {body}");
        assert_eq!(body["error"], "unauthorized", "{body}");
        assert_eq!(body["http_status"], 401, "{body}");
    }
    let (code, body) = http("GET", &status_url, None).await;
    assert_ne!(code, 401, "{body}");

    // The WebSocket feed, no token: the upgrade is refused with 401.
    let err = tokio_tungstenite::connect_async(app.ws_url(Uuid::new_v4(), None))
        .await
        .expect_err("no upgrade without the token");
    match err {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status().as_u16(), 401);
        }
        other => panic!("refused with {other:?}"),
    }
    let _ws = ws_connect(&app.ws_url(Uuid::new_v4(), None)).await;

    // Probes: open.
    for probe in ["/healthz", "/readyz", "/metrics"] {
        let (code, _) = kandev_testkit::http("GET", &app.url(probe), None).await;
        assert_eq!(code, 200, "{probe}");
    }
    app.stop().await;
}

#[tokio::test]
async fn an_orchestrator_without_the_service_token_does_not_start() {
    // In-process: refused before it connects to anything.
    let settings = kandev_orchestrator::Settings {
        common: kandev_common::config::ServiceSettings {
            listen_addr: "127.0.0.1:0".into(),
            ..kandev_orchestrator::Settings::default().common
        },
        ..Default::default()
    };
    let Err(err) = kandev_orchestrator::Application::build(settings).await else {
        panic!("the orchestrator started without a service token");
    };
    assert!(
        err.to_string().contains("KANDEV_SERVICE_TOKEN is required"),
        "{err}"
    );

    // The binary: exits at once, saying what is missing.
    let out = Command::new(env!("CARGO_BIN_EXE_kandev-orchestrator"))
        .env_remove("KANDEV_SERVICE_TOKEN")
        .env(
            "KANDEV_LISTEN_ADDR",
            format!("127.0.0.1:{}", kandev_testkit::free_port()),
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("KANDEV_SERVICE_TOKEN is required"),
        "{stderr}"
    );
}
