use std::net::SocketAddr;

use axum::{
    Router,
    body::Body,
    extract::connect_info::MockConnectInfo,
    http::{HeaderMap, Method, Request, StatusCode},
};
use kandev_common::{CancellationToken, config::ServiceSettings};
use kandev_gateway::{Application, Settings, auth::CurrentUser, config::RateLimitSettings};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tower::ServiceExt;

pub const ADMIN: &str = "admin";
pub const ADMIN_PASSWORD: &str = "admin-password-1";
pub const JWT_SECRET: &str = "test-secret-test-secret-test-secret!";

/// A fresh, empty database shared by the task service and the gateway
/// (each in its own schema).
pub use kandev_testkit::{NATS_URL, TestDb};

/// An address nothing listens on: a service that is down.
pub fn dead_url(scheme: &str) -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("{scheme}://127.0.0.1:{port}")
}

pub struct TestApp {
    pub router: Router,
    pub app: Option<Application>,
    db: Option<TestDb>,
    task_service: Option<(CancellationToken, JoinHandle<()>)>,
    gateway: Option<(CancellationToken, JoinHandle<()>)>,
}

/// A test service's shared settings: its `defaults` on any port, on the
/// test's database and the shared NATS, with the service token.
fn on_test_db(defaults: ServiceSettings, db: &TestDb) -> ServiceSettings {
    ServiceSettings {
        database_max_connections: 4,
        ..kandev_testkit::service_settings(defaults, &db.url, &NATS_URL)
    }
}

pub fn gateway_settings(db: &TestDb, task_service: SocketAddr) -> Settings {
    Settings {
        common: on_test_db(Settings::default().common, db),
        task_service_url: format!("http://{task_service}"),
        agent_manager_url: dead_url("http"),
        orchestrator_url: dead_url("http"),
        downstream_connect_timeout_ms: 1000,
        downstream_timeout_ms: 5000,
        jwt_secret: Some(JWT_SECRET.into()),
        admin_username: ADMIN.into(),
        admin_password: Some(ADMIN_PASSWORD.into()),
        cors_allowed_origins: vec!["https://ui.example".into()],
        rate_limit: RateLimitSettings {
            login_per_minute: 6000,
            login_burst: 1000,
            api_per_minute: 60_000,
            api_burst: 10_000,
        },
        ..Settings::default()
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    kandev_testkit::init_tracing();
    let db = TestDb::create().await;
    let task_settings = kandev_task_service::Settings {
        common: on_test_db(kandev_task_service::Settings::default().common, &db),
        outbox_poll_ms: 200,
        ..Default::default()
    };
    let tasks = kandev_task_service::Application::build(task_settings)
        .await
        .expect("task service builds");
    let task_service_addr = tasks.local_addr();
    let (tasks_stop, tasks_handle) =
        kandev_testkit::run_until_cancelled("task service runs", |stop| {
            tasks.run_until_stopped(stop)
        });

    let mut settings = gateway_settings(&db, task_service_addr);
    configure(&mut settings);
    let mut app = spawn_gateway(db, settings).await;
    app.task_service = Some((tasks_stop, tasks_handle));
    app
}

/// The gateway alone, with the given settings, owning `db`.
pub async fn spawn_gateway(db: TestDb, settings: Settings) -> TestApp {
    kandev_testkit::init_tracing();
    let app = Application::build(settings).await.expect("gateway builds");
    let router = app
        .router()
        .layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    TestApp {
        router,
        app: Some(app),
        db: Some(db),
        task_service: None,
        gateway: None,
    }
}

/// A response: status, headers and the body as JSON (`Null` when empty,
/// a string when not JSON).
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Resp {
    /// Asserts the common error shape and returns the `error` code.
    pub fn error(&self) -> &str {
        assert_eq!(
            self.body["http_status"].as_u64(),
            Some(u64::from(self.status.as_u16())),
            "{}",
            self.body
        );
        assert!(self.body["message"].is_string(), "{}", self.body);
        assert!(self.body.get("details").is_some(), "{}", self.body);
        self.body["error"].as_str().expect("error code")
    }
}

impl TestApp {
    /// Serves the gateway on its port (for WebSocket tests); returns its address.
    pub fn serve(&mut self) -> SocketAddr {
        let app = self.app.take().expect("not served yet");
        let addr = app.local_addr();
        self.gateway = Some(kandev_testkit::run_until_cancelled(
            "gateway runs",
            |stop| app.run_until_stopped(stop),
        ));
        addr
    }

    /// Stops only the served gateway (its dependencies keep running).
    pub fn shutdown_gateway(&self) {
        if let Some((stop, _)) = &self.gateway {
            stop.cancel();
        }
    }

    /// Stops the gateway, then its task service, then drops the database
    /// (unless taken with [`TestApp::take_db`]).
    pub async fn stop(self) {
        for (stop, handle) in [self.gateway, self.task_service].into_iter().flatten() {
            stop.cancel();
            let _ = handle.await;
        }
        drop(self.app);
        if let Some(db) = self.db {
            db.drop_db().await;
        }
    }

    /// Takes the database, for a caller that stops other services first.
    pub fn take_db(&mut self) -> TestDb {
        self.db.take().expect("the database is still owned")
    }

    /// A token for `username`, minted with the gateway's key (no login).
    pub fn token(&self, username: &str, is_admin: bool) -> String {
        jwt_for(username, is_admin)
    }

    pub async fn send(&self, req: Request<Body>) -> Resp {
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Resp {
            status,
            headers,
            body,
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = match body {
            Some(body) => req
                .header("content-type", "application/json")
                .body(Body::from(body.to_string())),
            None => req.body(Body::empty()),
        };
        self.send(req.unwrap()).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Resp {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::PUT, path, Some(token), Some(body)).await
    }

    pub async fn patch(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::PATCH, path, Some(token), Some(body))
            .await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Resp {
        self.call(Method::DELETE, path, Some(token), None).await
    }

    pub async fn login(&self, username: &str, password: &str) -> Resp {
        self.call(
            Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({"username": username, "password": password})),
        )
        .await
    }

    /// Creates a board owned by `token`'s user; returns its id.
    pub async fn board(&self, token: &str, name: &str) -> String {
        let resp = self
            .post(
                "/api/v1/boards",
                token,
                json!({"name": name, "description": "d"}),
            )
            .await;
        assert_eq!(resp.status, StatusCode::CREATED, "{}", resp.body);
        resp.body["id"].as_str().unwrap().to_string()
    }

    /// Alice's and Bob's tokens, and the id of Alice's task "t" on her
    /// board "b", which Bob may not see: where a test of who may do what
    /// starts.
    pub async fn alice_task(&self) -> (String, String, String) {
        let alice = self.token("alice", false);
        let bob = self.token("bob", false);
        let board = self.board(&alice, "b").await;
        let task = self.task(&alice, &board, "t").await;
        let task_id = task["id"].as_str().unwrap().to_string();
        (alice, bob, task_id)
    }

    /// Creates a task on `board`; returns its JSON.
    pub async fn task(&self, token: &str, board: &str, title: &str) -> Value {
        let resp = self
            .post(
                &format!("/api/v1/boards/{board}/tasks"),
                token,
                json!({
                    "title": title,
                    "description": "Users can't login with email",
                    "agent_type": "auggie-cli",
                    "repository_url": "https://github.com/user/repo",
                    "branch": "main",
                    "priority": 2,
                    "workspace_path": "/tmp/ws",
                    "max_retries": 1,
                    "metadata": {"auggie_session_id": "s-1"}
                }),
            )
            .await;
        assert_eq!(resp.status, StatusCode::CREATED, "{}", resp.body);
        resp.body
    }
}

/// A token signed with the test key.
pub fn jwt_for(username: &str, is_admin: bool) -> String {
    let keys =
        kandev_gateway::auth::JwtKeys::new(&JWT_SECRET.into(), std::time::Duration::from_secs(600));
    keys.issue(&CurrentUser {
        username: username.into(),
        is_admin,
    })
    .unwrap()
    .0
}
