//! The binary: it refuses to start without a good signing key, and with the
//! development flag it starts on a random key, bootstraps the admin, serves,
//! stops on SIGTERM, and never logs the password or a token.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::helpers::{TestDb, dead_url};

fn gateway() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kandev-gateway"));
    for (key, _) in std::env::vars() {
        if key.starts_with("KANDEV_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUST_LOG", "info");
    cmd
}

/// One HTTP/1.1 request over a plain socket: (status, body).
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn refuses_to_start_without_a_good_signing_key() {
    let out = gateway().output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("KANDEV_JWT_SECRET"), "{err}");

    let out = gateway()
        .env("KANDEV_JWT_SECRET", "too-short")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("32 bytes"), "{err}");
    assert!(!err.contains("too-short"), "the key is never shown: {err}");
}

#[test]
fn refuses_to_start_without_the_service_token() {
    let out = gateway()
        .env("KANDEV_DEV_RANDOM_JWT_SECRET", "true")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("KANDEV_SERVICE_TOKEN is required"), "{err}");

    let out = gateway()
        .env("KANDEV_DEV_RANDOM_JWT_SECRET", "true")
        .env("KANDEV_SERVICE_TOKEN", "too-short")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("KANDEV_SERVICE_TOKEN must be at least 32 bytes"),
        "{err}"
    );
    assert!(
        !err.contains("too-short"),
        "the token is never shown: {err}"
    );
}

#[tokio::test]
async fn starts_with_a_random_dev_key_and_serves() {
    let db = TestDb::create().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let password = "bootstrap-password-123";
    let mut child = gateway()
        .env("KANDEV_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("KANDEV_DATABASE_URL", &db.url)
        .env("KANDEV_DEV_RANDOM_JWT_SECRET", "true")
        .env("KANDEV_SERVICE_TOKEN", kandev_testkit::SERVICE_TOKEN)
        .env("KANDEV_ADMIN_USERNAME", "root")
        .env("KANDEV_ADMIN_PASSWORD", password)
        .env("KANDEV_TASK_SERVICE_URL", dead_url("http"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let mut up = false;
    for _ in 0..200 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the gateway listens");
    let (status, _) =
        tokio::task::spawn_blocking(move || http(port, "GET", "/healthz", None, None))
            .await
            .unwrap();
    assert_eq!(status, 200);

    let (status, body) = tokio::task::spawn_blocking(move || {
        http(
            port,
            "POST",
            "/api/v1/auth/login",
            None,
            Some(json!({"username": "root", "password": password})),
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let token = serde_json::from_str::<Value>(&body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let t = token.clone();
    let (status, body) =
        tokio::task::spawn_blocking(move || http(port, "GET", "/api/v1/auth/me", Some(&t), None))
            .await
            .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"is_admin\":true"), "{body}");

    // SIGTERM: a graceful stop.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status, err)
    })
    .await
    .unwrap();
    let (exit, logs) = status;
    assert!(exit.success(), "{logs}");
    assert!(logs.contains("random signing key"), "{logs}");
    assert!(logs.contains("bootstrap admin created"), "{logs}");
    assert!(!logs.contains(password), "the password is never logged");
    assert!(!logs.contains(&token), "tokens are never logged");
    db.drop_db().await;
}
