//! Test helpers shared by Kandev's integration tests (dev-dependency only).
//!
//! # Layout
//! - [`TestDb`]: a fresh, empty Postgres database per test.
//! - [`OwnNats`]: a `nats-server -js` of the test's own on a free port, that
//!   can be stopped and restarted on the same port and store.
//! - [`free_port`]: a port nobody listens on right now.
//! - [`ensure_docker`]: a Docker engine that answers (started without bridge
//!   or iptables when none does) and the `kandev/mock-agent:latest` image
//!   (built by `dockerfiles/mock-agent/build.sh` when missing; never pulled).
//!
//! `KANDEV_TEST_PG_BASE` overrides the Postgres server URL
//! (default `postgres://postgres@127.0.0.1:5432`).

use std::{
    net::TcpListener as StdListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::LazyLock,
    time::Duration,
};

use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

/// Postgres server URL without a database; overridable for other machines.
pub static PG_BASE: LazyLock<String> = LazyLock::new(|| {
    std::env::var("KANDEV_TEST_PG_BASE")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
});

/// A fresh, empty database; dropped by [`TestDb::drop_db`].
#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        let name = format!("kandev_test_{}", Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&format!("{}/postgres", *PG_BASE))
            .await
            .expect("postgres must be running");
        admin
            .execute(format!(r#"CREATE DATABASE "{name}""#).as_str())
            .await
            .expect("create test database");
        TestDb {
            url: format!("{}/{name}", *PG_BASE),
            name,
        }
    }

    pub async fn drop_db(&self) {
        if let Ok(mut admin) = PgConnection::connect(&format!("{}/postgres", *PG_BASE)).await {
            let _ = admin
                .execute(
                    format!(r#"DROP DATABASE IF EXISTS "{}" WITH (FORCE)"#, self.name).as_str(),
                )
                .await;
        }
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// A `nats-server` of the test's own, with JetStream.
#[derive(Debug)]
pub struct OwnNats {
    pub port: u16,
    store: PathBuf,
    child: Option<Child>,
}

impl OwnNats {
    pub async fn start() -> OwnNats {
        let store = std::env::temp_dir().join(format!("kandev-nats-{}", Uuid::new_v4().simple()));
        let mut nats = OwnNats {
            port: free_port(),
            store,
            child: None,
        };
        nats.restart().await;
        nats
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub async fn restart(&mut self) {
        let child = Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server is installed");
        self.child = Some(child);
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("nats-server did not start");
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// The mock agent's image.
pub const MOCK_IMAGE: &str = "kandev/mock-agent:latest";

fn docker_answers() -> bool {
    Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

static DOCKER_READY: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Makes sure a Docker engine answers and the mock-agent image exists.
/// Blocking: call it from `spawn_blocking`.
// dockerd is meant to outlive the tests; it is never waited for.
#[allow(clippy::zombie_processes)]
pub fn ensure_docker() {
    let mut ready = DOCKER_READY.lock().unwrap_or_else(|p| p.into_inner());
    if *ready {
        return;
    }
    if !docker_answers() {
        Command::new("setsid")
            .args(["dockerd", "--bridge=none", "--iptables=false"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dockerd is installed");
        let up = (0..120).any(|_| {
            std::thread::sleep(Duration::from_millis(500));
            docker_answers()
        });
        assert!(up, "dockerd did not start within 60 s");
    }
    let present = Command::new("docker")
        .args(["image", "inspect", MOCK_IMAGE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../dockerfiles/mock-agent/build.sh");
        let status = Command::new("bash")
            .arg(script)
            .status()
            .expect("bash runs");
        assert!(status.success(), "building {MOCK_IMAGE} failed");
    }
    *ready = true;
}

/// Removes every container (running or not) that an agent manager with this
/// `manager_id` labelled. Agent containers outlive their manager on purpose
/// (it re-attaches after a restart), so a test stack removes its own at the
/// end.
pub fn remove_containers(manager_id: &str) {
    let Ok(out) = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=kandev.manager={manager_id}"))
        .output()
    else {
        return;
    };
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if !ids.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
