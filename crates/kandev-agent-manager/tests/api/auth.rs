//! The agent manager answers only callers with the service token: nobody
//! else launches an agent or reads an instance.

use kandev_proto::v1::{self as pb, agent_manager_client::AgentManagerClient};
use tonic::transport::Channel;

use crate::helpers::spawn_app;

#[tokio::test]
async fn a_call_without_the_service_token_is_unauthenticated() {
    let mut app = spawn_app().await;
    let channel = Channel::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut bare = AgentManagerClient::new(channel);
    let status = bare
        .launch_agent(pb::LaunchAgentRequest {
            task_id: uuid::Uuid::new_v4().to_string(),
            agent_type: "mock-agent".into(),
            prompt: "scenario: code".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    let status = bare
        .list_instances(pb::ListInstancesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    // With the token the same call is answered.
    app.client
        .list_instances(pb::ListInstancesRequest::default())
        .await
        .expect("answered with the service token");
    // Probes stay open.
    let (code, _) = kandev_testkit::http("GET", &format!("http://{}/readyz", app.addr), None).await;
    assert!(code == 200 || code == 503, "{code}");
    let (code, _) =
        kandev_testkit::http("GET", &format!("http://{}/metrics", app.addr), None).await;
    assert_eq!(code, 200);
    app.stop().await;
}
