use std::{
    process::{Command, Stdio},
    time::Duration,
};

use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::helpers::{TestDb, free_port};

#[test]
fn help_describes_the_service() {
    kandev_testkit::assert_help(
        env!("CARGO_BIN_EXE_kandev-task-service"),
        &["--config", "KANDEV_DATABASE_URL"],
    );
}

#[tokio::test]
async fn binary_serves_health_and_exits_zero_on_sigterm() {
    let db = TestDb::create().await;
    let port = free_port();
    let mut child =
        kandev_testkit::service_command(env!("CARGO_BIN_EXE_kandev-task-service"), port, &db.url)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();

    let mut status = None;
    for _ in 0..100 {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await;
        if let Ok(channel) = channel {
            let mut health = HealthClient::new(channel);
            let reply = health
                .check(HealthCheckRequest {
                    service: "kandev.v1.TaskService".into(),
                })
                .await;
            if let Ok(reply) = reply {
                status = Some(reply.into_inner().status);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, Some(ServingStatus::Serving as i32));

    let ready = reqwest_like_get(port, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let mut log = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut log)
            .unwrap();
        (status, log)
    })
    .await
    .unwrap();
    assert!(out.0.success(), "exit status {:?}; log:\n{}", out.0, out.1);
    assert!(
        out.1.contains("listening"),
        "logs where it listens:\n{}",
        out.1
    );
    assert!(!out.1.contains(&db.url), "the database URL is not logged");
    db.drop_db().await;
}

#[test]
fn binary_without_the_service_token_refuses_to_start() {
    for (token, says) in [
        (None, "KANDEV_SERVICE_TOKEN is required"),
        (
            Some("too-short"),
            "KANDEV_SERVICE_TOKEN must be at least 32 bytes",
        ),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kandev-task-service"));
        command
            .env_remove("KANDEV_SERVICE_TOKEN")
            .env("KANDEV_LISTEN_ADDR", format!("127.0.0.1:{}", free_port()));
        if let Some(token) = token {
            command.env("KANDEV_SERVICE_TOKEN", token);
        }
        let out = command.output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
        assert!(
            !err.contains("too-short"),
            "the value is not printed: {err}"
        );
    }
}

/// A minimal HTTP/1.1 GET, enough for a health probe.
async fn reqwest_like_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}
