//! Login, tokens, users and ownership.

use axum::http::{Method, StatusCode};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

use crate::helpers::{ADMIN, ADMIN_PASSWORD, JWT_SECRET, Resp, TestApp, spawn_app};

fn b64url(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn claims(sub: &str, admin: bool, exp: u64) -> serde_json::Value {
    json!({"sub": sub, "admin": admin, "iat": 1, "exp": exp, "iss": "kandev-gateway"})
}

fn far_future() -> u64 {
    4_000_000_000
}

/// A JWT for Alice (an admin with `admin`), signed with `alg` and `secret`.
fn signed(alg: Algorithm, admin: bool, exp: u64, secret: &[u8]) -> String {
    let header = Header::new(alg);
    let key = EncodingKey::from_secret(secret);
    jsonwebtoken::encode(&header, &claims("alice", admin, exp), &key).unwrap()
}

/// Asks the gateway to create the user `username`.
async fn create_user(app: &TestApp, token: &str, username: &str, password: &str) -> Resp {
    let body = json!({"username": username, "password": password});
    app.post("/api/v1/users", token, body).await
}

/// The ids of the boards `token`'s user lists.
async fn board_ids(app: &TestApp, token: &str) -> Vec<String> {
    let list = app.get("/api/v1/boards", token).await;
    let boards = list.body["boards"].as_array().unwrap();
    boards
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn bootstrapped_admin_logs_in_and_sees_itself() {
    let app = spawn_app().await;
    let resp = app.login(ADMIN, ADMIN_PASSWORD).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.body);
    let token = resp.body["token"].as_str().unwrap().to_string();
    assert!(resp.body["expires_at"].is_string());

    let me = app.get("/api/v1/auth/me", &token).await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(me.body["username"], ADMIN);
    assert_eq!(me.body["is_admin"], true);
    app.stop().await;
}

#[tokio::test]
async fn login_refusals_share_one_message() {
    let app = spawn_app().await;
    let wrong = app.login(ADMIN, "not-the-password").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.error(), "unauthorized");
    let unknown = app.login("nobody", "whatever-password").await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.body["message"], unknown.body["message"]);

    let missing = app
        .call(
            Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({"username": "x"})),
        )
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.error(), "validation_error");
    app.stop().await;
}

#[tokio::test]
async fn admins_create_users_who_can_log_in() {
    let app = spawn_app().await;
    let admin = app.token(ADMIN, true);
    let created = create_user(&app, &admin, "bob", "bob-password").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["is_admin"], false);

    // A taken name, a short password and a name with a space are refused.
    for (username, password, status, error) in [
        (
            "bob",
            "bob-password",
            StatusCode::CONFLICT,
            Some("conflict"),
        ),
        (
            "carol",
            "short",
            StatusCode::BAD_REQUEST,
            Some("validation_error"),
        ),
        ("a b", "long-enough", StatusCode::BAD_REQUEST, None),
    ] {
        let refused = create_user(&app, &admin, username, password).await;
        assert_eq!(refused.status, status, "{username}");
        if let Some(error) = error {
            assert_eq!(refused.error(), error, "{username}");
        }
    }

    let login = app.login("bob", "bob-password").await;
    assert_eq!(login.status, StatusCode::OK);
    let bob = login.body["token"].as_str().unwrap().to_string();
    let me = app.get("/api/v1/auth/me", &bob).await;
    assert_eq!(me.body["username"], "bob");
    assert_eq!(me.body["is_admin"], false);

    let forbidden = create_user(&app, &bob, "eve", "eve-password").await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
    assert_eq!(forbidden.error(), "forbidden");
    app.stop().await;
}

#[tokio::test]
async fn bad_tokens_get_401() {
    let app = spawn_app().await;
    let path = "/api/v1/boards";

    let none = app.call(Method::GET, path, None, None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    assert_eq!(none.error(), "unauthorized");

    let garbage = app.get(path, "not.a.jwt").await;
    assert_eq!(garbage.status, StatusCode::UNAUTHORIZED);

    let key = JWT_SECRET.as_bytes();
    let expired = signed(Algorithm::HS256, false, 1_000, key);
    let resp = app.get(path, &expired).await;
    assert_eq!(resp.status, StatusCode::UNAUTHORIZED);
    assert!(resp.body["message"].as_str().unwrap().contains("expired"));

    let admin_claims = b64url(claims("alice", true, far_future()).to_string().as_bytes());
    // A valid token with its payload swapped for an admin one.
    let valid = app.token("alice", false);
    let parts: Vec<&str> = valid.split('.').collect();
    for (what, token) in [
        (
            "forged",
            signed(
                Algorithm::HS256,
                true,
                far_future(),
                b"another-secret-another-secret-another",
            ),
        ),
        ("hs512", signed(Algorithm::HS512, true, far_future(), key)),
        (
            "alg none",
            format!(
                "{}.{admin_claims}.",
                b64url(br#"{"alg":"none","typ":"JWT"}"#)
            ),
        ),
        (
            "tampered",
            format!("{}.{admin_claims}.{}", parts[0], parts[2]),
        ),
    ] {
        let resp = app.get(path, &token).await;
        assert_eq!(resp.status, StatusCode::UNAUTHORIZED, "{what}");
    }

    let basic = app
        .send(
            axum::http::Request::get(path)
                .header("authorization", "Basic YWxpY2U6cHc=")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(basic.status, StatusCode::UNAUTHORIZED);

    // The login route and health need no token.
    let health = app.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(health.status, StatusCode::OK);
    app.stop().await;
}

#[tokio::test]
async fn users_see_only_their_boards_and_admins_see_all() {
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let bob = app.token("bob", false);
    let admin = app.token(ADMIN, true);
    let a_board = app.board(&alice, "alice's").await;
    let b_board = app.board(&bob, "bob's").await;
    let a_task = app.task(&alice, &a_board, "alice task").await;
    let a_task = a_task["id"].as_str().unwrap();

    // Bob gets 404 for everything of Alice's, exactly like a missing board.
    for path in [
        format!("/api/v1/boards/{a_board}"),
        format!("/api/v1/boards/{a_board}/tasks"),
        format!("/api/v1/tasks/{a_task}"),
        format!("/api/v1/tasks/{a_task}/events"),
    ] {
        let resp = app.get(&path, &bob).await;
        assert_eq!(resp.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(resp.error(), "not_found");
    }
    for (method, path, body) in [
        (
            Method::PATCH,
            format!("/api/v1/boards/{a_board}"),
            Some(json!({"name": "mine"})),
        ),
        (Method::DELETE, format!("/api/v1/boards/{a_board}"), None),
        (
            Method::POST,
            format!("/api/v1/boards/{a_board}/tasks"),
            Some(json!({"title": "x"})),
        ),
        (
            Method::PATCH,
            format!("/api/v1/tasks/{a_task}"),
            Some(json!({"title": "x"})),
        ),
        (
            Method::PATCH,
            format!("/api/v1/tasks/{a_task}/state"),
            Some(json!({"state": "IN_PROGRESS"})),
        ),
        (Method::DELETE, format!("/api/v1/tasks/{a_task}"), None),
    ] {
        let resp = app.call(method.clone(), &path, Some(&bob), body).await;
        assert_eq!(resp.status, StatusCode::NOT_FOUND, "{method} {path}");
    }

    // Each lists only their own; the admin lists both and reads Alice's task.
    assert_eq!(board_ids(&app, &bob).await, vec![b_board.clone()]);
    let ids = board_ids(&app, &admin).await;
    assert!(ids.contains(&a_board) && ids.contains(&b_board));
    for path in [
        format!("/api/v1/tasks/{a_task}"),
        format!("/api/v1/boards/{a_board}"),
    ] {
        assert_eq!(
            app.get(&path, &admin).await.status,
            StatusCode::OK,
            "{path}"
        );
    }
    app.stop().await;
}

/// Issue 20: with neither `KANDEV_JWT_SECRET` nor `KANDEV_ADMIN_PASSWORD`,
/// a gateway with a data directory generates both on its first start,
/// keeps them there, and a restarted gateway reuses them: tokens stay
/// valid and the admin logs in with the password from the file.
#[tokio::test]
async fn without_a_key_or_password_the_gateway_generates_and_keeps_both() {
    use std::os::unix::fs::PermissionsExt as _;

    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("gateway");
    let generated = |s: &mut kandev_gateway::Settings| {
        s.jwt_secret = None;
        s.admin_password = Some("".into());
        s.data_dir = dir.display().to_string();
    };
    let mut first = crate::helpers::spawn_app_with(generated).await;
    let key = std::fs::read_to_string(dir.join("jwt-secret")).unwrap();
    let password = std::fs::read_to_string(dir.join("admin-password")).unwrap();
    let password = password.trim();
    assert!(key.trim().len() >= 32);
    assert_eq!(password.len(), 24);
    for file in ["jwt-secret", "admin-password"] {
        let mode = std::fs::metadata(dir.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    let login = first.login(ADMIN, password).await;
    assert_eq!(login.status, StatusCode::OK, "{}", login.body);
    let token = login.body["token"].as_str().unwrap().to_string();
    // The test suite's own key is not the one in use.
    assert_eq!(
        first.login(ADMIN, ADMIN_PASSWORD).await.status,
        StatusCode::UNAUTHORIZED
    );

    // A restart on the same database and directory keeps both.
    let db = first.take_db();
    first.stop().await;
    let mut settings = crate::helpers::gateway_settings(&db, "127.0.0.1:9".parse().unwrap());
    generated(&mut settings);
    let second = crate::helpers::spawn_gateway(db, settings).await;
    let me = second
        .call(Method::GET, "/api/v1/auth/me", Some(&token), None)
        .await;
    assert_eq!(me.status, StatusCode::OK, "{}", me.body);
    assert_eq!(me.body["username"], ADMIN);
    assert_eq!(second.login(ADMIN, password).await.status, StatusCode::OK);
    assert_eq!(
        std::fs::read_to_string(dir.join("jwt-secret")).unwrap(),
        key,
        "the key was replaced"
    );

    // Explicit values still win over what is kept.
    let db = {
        let mut second = second;
        let db = second.take_db();
        second.stop().await;
        db
    };
    let mut settings = crate::helpers::gateway_settings(&db, "127.0.0.1:9".parse().unwrap());
    settings.data_dir = dir.display().to_string();
    let explicit = crate::helpers::spawn_gateway(db, settings).await;
    let refused = explicit
        .call(Method::GET, "/api/v1/auth/me", Some(&token), None)
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    explicit.stop().await;
}
