//! The service on a SQLite file (`KANDEV_DATABASE_URL=sqlite://…`), as the
//! one-machine `kandev` runs it: served over gRPC, its events published, its
//! data and its unpublished events kept across a restart.

use kandev_common::CancellationToken;
use kandev_common::trace::traced;
use kandev_proto::v1::{self as pb, task_service_client::TaskServiceClient};
use kandev_task_service::Settings;
use kandev_testkit::{OwnNats, SERVICE_TOKEN, http};

use crate::helpers::{self, EventWatch, channel, task_request};

/// The service on `database_url`, serving until the token fires.
async fn serve(
    database_url: &str,
    nats_url: &str,
) -> (
    std::net::SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    helpers::serve(Settings {
        common: kandev_testkit::service_settings(
            Settings::default().common,
            database_url,
            nats_url,
        ),
        outbox_poll_ms: 100,
        ..Settings::default()
    })
    .await
}

#[tokio::test]
async fn a_service_on_sqlite_keeps_its_tasks_and_events_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let mut nats = OwnNats::start().await;

    let (addr, shutdown, handle) = serve(&url, &nats.url()).await;
    let (status, ready) = http("GET", &format!("http://{addr}/readyz"), None).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["checks"]["sqlite"], "ok", "{ready}");
    let mut client = TaskServiceClient::new(traced(channel(addr).await, &SERVICE_TOKEN.into()));
    let board = client
        .create_board(pb::CreateBoardRequest {
            name: "Local".into(),
            owner: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut watch = EventWatch::start(&nats.url(), &board.id).await;
    let first = client
        .create_task(task_request(&board.id, "first"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(watch.next(1).await[0].0, "task.created");

    // With the bus away, a change is kept in the outbox ...
    nats.stop();
    let second = client
        .create_task(task_request(&board.id, "second"))
        .await
        .unwrap()
        .into_inner();
    shutdown.cancel();
    handle.await.unwrap();

    // ... and published by the next start, with everything still there.
    nats.restart().await;
    let mut watch = EventWatch::start(&nats.url(), &board.id).await;
    let (addr, shutdown, handle) = serve(&url, &nats.url()).await;
    let mut client = TaskServiceClient::new(traced(channel(addr).await, &SERVICE_TOKEN.into()));
    // Delivery is at least once: the first event may come again when NATS
    // went away between its publish and its acknowledgement (consumers drop
    // it by event id); nothing else may come before the second's.
    loop {
        let (subject, event) = watch.next(1).await.remove(0);
        assert_eq!(subject, "task.created");
        let id = event["data"]["task"]["id"].as_str().unwrap().to_string();
        if id == second.id {
            break;
        }
        assert_eq!(id, first.id, "only the first may be republished: {event}");
    }
    let listed = client
        .list_tasks(pb::ListTasksRequest {
            board_id: board.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    let ids: Vec<_> = listed.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [first.id.as_str(), second.id.as_str()]);
    shutdown.cancel();
    handle.await.unwrap();
}
