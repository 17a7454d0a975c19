//! A task's repository is checked when the task is created or its
//! repository changes, by the REAL agent manager (in-process, no Docker:
//! nothing runs): each refusal is a 400 `validation_error` that says why
//! and names the field; nothing is stored. With the agent manager down the
//! task is taken (its launch checks again).

use axum::http::StatusCode;
use kandev_common::CancellationToken;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::helpers::{NATS_URL, Resp, TestApp, spawn_app, spawn_app_with};

/// An agent manager allowing two repository roots: `<dir>/repos` (with a
/// repository `good` on `main`, and a plain directory `plain`) and
/// `<dir>/more`.
struct Manager {
    dir: tempfile::TempDir,
    url: String,
    stop: CancellationToken,
    handle: JoinHandle<()>,
}

impl Manager {
    async fn start() -> Manager {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["workspaces", "repos/good", "repos/plain", "more"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let good = dir.path().join("repos/good");
        std::fs::write(good.join("README.md"), "hi\n").unwrap();
        kandev_testkit::git_init(&good);
        let db = crate::helpers::TestDb::create().await;
        let settings = kandev_agent_manager::Settings {
            common: kandev_testkit::service_settings(
                kandev_agent_manager::Settings::default().common,
                &db.url,
                &NATS_URL,
            ),
            manager_id: db.name.clone(),
            pull_images: false,
            workspaces_root: dir.path().join("workspaces").display().to_string(),
            allowed_repository_roots: vec![
                dir.path().join("repos").display().to_string(),
                dir.path().join("more").display().to_string(),
            ],
            ..Default::default()
        };
        let app = kandev_agent_manager::Application::build(settings)
            .await
            .expect("agent manager builds");
        let url = format!("http://{}", app.local_addr());
        let stop = CancellationToken::new();
        let token = stop.clone();
        let handle = tokio::spawn(async move {
            app.run_until_stopped(token)
                .await
                .expect("agent manager runs");
            db.drop_db().await;
        });
        Manager {
            dir,
            url,
            stop,
            handle,
        }
    }

    fn path(&self, sub: &str) -> String {
        self.dir.path().join(sub).display().to_string()
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.handle.await;
    }
}

async fn create(app: &TestApp, token: &str, board: &str, repo: Value) -> Resp {
    let mut body = json!({"title": "t", "agent_type": "mock-agent", "autostart": false});
    body.as_object_mut()
        .unwrap()
        .extend(repo.as_object().unwrap().clone());
    app.post(&format!("/api/v1/boards/{board}/tasks"), token, body)
        .await
}

/// Asserts a refusal of `field` for `problem`; its message.
fn refusal(resp: &Resp, field: &str, problem: &str) -> String {
    assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.body);
    assert_eq!(resp.error(), "validation_error");
    assert_eq!(
        resp.body["details"],
        json!({"field": field, "problem": problem}),
        "{}",
        resp.body
    );
    resp.body["message"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn repositories_a_task_may_not_use_are_refused_with_the_reason() {
    let manager = Manager::start().await;
    let url = manager.url.clone();
    let app = spawn_app_with(move |s| s.agent_manager_url = url).await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "repos").await;
    let (repos, more) = (manager.path("repos"), manager.path("more"));

    let outside = create(&app, &alice, &board, json!({"repository_url": "/etc"})).await;
    assert_eq!(
        refusal(&outside, "repository_url", "not_allowed"),
        format!("/etc is outside the repositories Kandev may use: {repos}, {more}")
    );
    let escape = format!("file://{repos}/../../etc");
    let outside = create(&app, &alice, &board, json!({"repository_url": escape})).await;
    refusal(&outside, "repository_url", "not_allowed");

    let missing = create(
        &app,
        &alice,
        &board,
        json!({"repository_url": format!("{repos}/missing")}),
    )
    .await;
    assert_eq!(
        refusal(&missing, "repository_url", "not_found"),
        format!("the repository {repos}/missing does not exist")
    );
    let plain = create(
        &app,
        &alice,
        &board,
        json!({"repository_url": format!("{repos}/plain")}),
    )
    .await;
    assert_eq!(
        refusal(&plain, "repository_url", "not_a_repository"),
        format!("{repos}/plain is not a git repository")
    );
    let good = format!("file://{repos}/good");
    let branch = create(
        &app,
        &alice,
        &board,
        json!({"repository_url": good, "branch": "nope"}),
    )
    .await;
    assert_eq!(
        refusal(&branch, "branch", "unknown_branch"),
        format!("the branch nope does not exist in the repository {repos}/good")
    );
    let odd = create(
        &app,
        &alice,
        &board,
        json!({"repository_url": good, "branch": "a..b"}),
    )
    .await;
    refusal(&odd, "branch", "invalid");
    let scheme = create(
        &app,
        &alice,
        &board,
        json!({"repository_url": "ftp://example.com/x.git"}),
    )
    .await;
    refusal(&scheme, "repository_url", "not_allowed");
    let internal = create(
        &app,
        &alice,
        &board,
        json!({"repository_url": "https://127.0.0.1/x.git"}),
    )
    .await;
    refusal(&internal, "repository_url", "not_allowed");
    let listed = app
        .get(&format!("/api/v1/boards/{board}/tasks"), &alice)
        .await;
    assert_eq!(listed.body["tasks"], json!([]), "{}", listed.body);

    // What may be used is taken: a local repository on its branch, or its
    // default one, and a remote, whose host is not even resolved.
    let taken = create(
        &app,
        &alice,
        &board,
        json!({"repository_url": good, "branch": "main"}),
    )
    .await;
    assert_eq!(taken.status, StatusCode::CREATED, "{}", taken.body);
    for repo in [
        json!({"repository_url": format!("{repos}/good")}),
        json!({"repository_url": "https://kandev-never-resolved.invalid/x.git"}),
        json!({}),
    ] {
        let made = create(&app, &alice, &board, repo).await;
        assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    }

    // A change of repository or branch is checked the same way, and a
    // refused one changes nothing.
    let task = taken.body["id"].as_str().unwrap();
    let path = format!("/api/v1/tasks/{task}");
    let moved = app.patch(&path, &alice, json!({"branch": "nope"})).await;
    refusal(&moved, "branch", "unknown_branch");
    let moved = app
        .patch(
            &path,
            &alice,
            json!({"repository_url": format!("{repos}/plain")}),
        )
        .await;
    refusal(&moved, "repository_url", "not_a_repository");
    let kept = app.get(&path, &alice).await;
    assert_eq!(kept.body["branch"], "main", "{}", kept.body);
    assert_eq!(kept.body["repository_url"], good, "{}", kept.body);
    let retitled = app.patch(&path, &alice, json!({"title": "renamed"})).await;
    assert_eq!(retitled.status, StatusCode::OK, "{}", retitled.body);

    app.stop().await;
    manager.stop().await;
}

#[tokio::test]
async fn with_the_agent_manager_down_a_task_is_still_taken() {
    // `spawn_app`'s agent manager URL answers nothing.
    let app = spawn_app().await;
    let alice = app.token("alice", false);
    let board = app.board(&alice, "down").await;
    let made = create(
        &app,
        &alice,
        &board,
        json!({"repository_url": "/srv/git/unchecked", "branch": "main"}),
    )
    .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    app.stop().await;
}
