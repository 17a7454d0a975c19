//! The task service answers only callers with the service token.

use kandev_common::trace::traced;
use kandev_proto::v1::{self as pb, task_service_client::TaskServiceClient};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::helpers::{channel, spawn_app};

#[tokio::test]
async fn a_call_without_the_service_token_is_unauthenticated() {
    let mut app = spawn_app().await;
    let board = app.board().await;
    let get = pb::GetBoardRequest {
        id: board.id.clone(),
    };

    // No token: refused before the service sees the call.
    let mut bare = TaskServiceClient::new(channel(app.addr).await);
    let status = bare.get_board(get.clone()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(
        status.message().contains("service credential"),
        "{status:?}"
    );
    let status = bare
        .create_board(pb::CreateBoardRequest {
            name: "Intruder".into(),
            owner: "mallory".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);

    // Another token: refused too.
    let wrong = "x".repeat(40).into();
    let mut wrong = TaskServiceClient::new(traced(channel(app.addr).await, &wrong));
    let status = wrong.get_board(get.clone()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);

    // The right one: answered.
    let found = app.client.get_board(get).await.unwrap().into_inner();
    assert_eq!(found.id, board.id);

    // Probes need none.
    let mut health = HealthClient::new(channel(app.addr).await);
    health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("the health service is open");
    app.stop().await;
}
