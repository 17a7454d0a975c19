//! Test helpers shared by Kandev's integration tests (dev-dependency only).
//!
//! # Layout
//! - [`TestDb`]: a fresh, empty Postgres database per test.
//! - [`OwnNats`]: a `nats-server -js` of the test's own on a free port, that
//!   can be stopped and restarted on the same port and store.
//! - [`free_port`]: a port nobody listens on right now.
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
