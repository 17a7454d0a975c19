use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use kandev_common::CancellationToken;
use kandev_common::trace::{TracedChannel, traced};
use kandev_proto::v1::{self as pb, task_service_client::TaskServiceClient};
use kandev_task_service::{Application, Settings, startup::Storage};
pub use kandev_testkit::{NATS_URL, OwnNats, TestDb, free_port};
use tokio::{sync::Notify, task::JoinHandle};
use tonic::transport::Channel;

pub struct TestApp {
    pub client: TaskServiceClient<TracedChannel>,
    pub addr: std::net::SocketAddr,
    pub db: TestDb,
    shutdown: CancellationToken,
    handle: JoinHandle<()>,
}

pub fn settings(db: &TestDb, nats_url: &str) -> Settings {
    Settings {
        common: kandev_testkit::service_settings(Settings::default().common, &db.url, nats_url),
        outbox_poll_ms: 200,
        ..Settings::default()
    }
}

/// The service's default settings on the database at `database_url`.
pub fn on_database(database_url: &str) -> Settings {
    Settings {
        common: kandev_common::config::ServiceSettings {
            database_url: database_url.into(),
            ..Settings::default().common
        },
        ..Settings::default()
    }
}

/// The service's storage on the database at `database_url`, migrated.
pub async fn open_storage(database_url: &str) -> Storage {
    Storage::open(&on_database(database_url), Arc::new(Notify::new()))
        .await
        .expect("the database opens")
}

/// The service with `settings`, serving until the token fires.
pub async fn serve(
    settings: Settings,
) -> (std::net::SocketAddr, CancellationToken, JoinHandle<()>) {
    let app = Application::build(settings).await.expect("app builds");
    let addr = app.local_addr();
    let (shutdown, handle) =
        kandev_testkit::run_until_cancelled("server runs", |stop| app.run_until_stopped(stop));
    (addr, shutdown, handle)
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with_nats(&NATS_URL).await
}

pub async fn spawn_app_with_nats(nats_url: &str) -> TestApp {
    kandev_testkit::init_tracing();
    let db = TestDb::create().await;
    let (addr, shutdown, handle) = serve(settings(&db, nats_url)).await;
    let client = TaskServiceClient::new(traced(
        channel(addr).await,
        &kandev_testkit::SERVICE_TOKEN.into(),
    ));
    TestApp {
        client,
        addr,
        db,
        shutdown,
        handle,
    }
}

/// A connected channel to `addr`, carrying nothing of its own.
pub async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("client connects")
}

impl TestApp {
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.handle.await;
        self.db.drop_db().await;
    }

    pub async fn board(&mut self) -> pb::Board {
        self.client
            .create_board(pb::CreateBoardRequest {
                name: "Board".into(),
                description: "a board".into(),
                owner: "alice".into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn task(&mut self, board_id: &str, title: &str) -> pb::Task {
        self.client
            .create_task(task_request(board_id, title))
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn get_task(&mut self, id: &str) -> Result<pb::Task, tonic::Status> {
        self.client
            .get_task(pb::GetTaskRequest { id: id.into() })
            .await
            .map(|r| r.into_inner())
    }

    /// Applies `request` (a patch of the task) as given.
    pub async fn update(
        &mut self,
        request: pb::UpdateTaskRequest,
    ) -> Result<pb::Task, tonic::Status> {
        self.client
            .update_task(request)
            .await
            .map(|r| r.into_inner())
    }

    /// The board's tasks, only those in `states` unless it is empty.
    pub async fn list_tasks(
        &mut self,
        board_id: &str,
        states: &[pb::TaskState],
    ) -> Result<Vec<pb::Task>, tonic::Status> {
        let request = pb::ListTasksRequest {
            board_id: board_id.into(),
            states: states.iter().map(|s| *s as i32).collect(),
            ..Default::default()
        };
        let list = self.client.list_tasks(request).await?;
        Ok(list.into_inner().tasks)
    }

    /// The task's audit log, oldest first.
    pub async fn history(&mut self, task_id: &str) -> Result<Vec<pb::TaskEvent>, tonic::Status> {
        let request = pb::ListTaskEventsRequest {
            task_id: task_id.into(),
            ..Default::default()
        };
        let history = self.client.list_task_events(request).await?;
        Ok(history.into_inner().events)
    }

    pub async fn set_state(
        &mut self,
        id: &str,
        state: pb::TaskState,
    ) -> Result<pb::Task, tonic::Status> {
        self.client
            .change_task_state(pb::ChangeTaskStateRequest {
                id: id.into(),
                state: state as i32,
                actor: "tester".into(),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
    }
}

pub fn task_request(board_id: &str, title: &str) -> pb::CreateTaskRequest {
    pb::CreateTaskRequest {
        board_id: board_id.into(),
        title: title.into(),
        description: "do the thing".into(),
        priority: 2,
        agent_type: Some("mock-agent".into()),
        repository_url: "file:///tmp/repo".into(),
        branch: "main".into(),
        metadata_json: r#"{"labels":["x"]}"#.into(),
        created_by: "alice".into(),
        ..Default::default()
    }
}

/// Every `task.*` event on NATS whose task is on `board_id`, in arrival order.
pub struct EventWatch {
    sub: async_nats::Subscriber,
    board_id: String,
}

impl EventWatch {
    pub async fn start(nats_url: &str, board_id: &str) -> EventWatch {
        let client = async_nats::connect(nats_url)
            .await
            .expect("nats is running");
        let sub = client.subscribe("task.>").await.unwrap();
        client.flush().await.unwrap();
        EventWatch {
            sub,
            board_id: board_id.to_string(),
        }
    }

    /// The next `n` events of the board, as (subject, envelope).
    pub async fn next(&mut self, n: usize) -> Vec<(String, serde_json::Value)> {
        let mut out = vec![];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while out.len() < n {
            let msg = tokio::time::timeout_at(deadline, self.sub.next())
                .await
                .unwrap_or_else(|_| panic!("timed out after {} of {n} events: {out:?}", out.len()))
                .expect("subscription open");
            let env: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
            if env["data"]["task"]["board_id"] == self.board_id.as_str() {
                out.push((msg.subject.to_string(), env));
            }
        }
        out
    }

    /// Asserts no further event of the board arrives within `wait`.
    pub async fn assert_quiet(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, self.sub.next()).await {
            let env: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
            assert_ne!(
                env["data"]["task"]["board_id"],
                self.board_id.as_str(),
                "unexpected event {env}"
            );
        }
    }
}
