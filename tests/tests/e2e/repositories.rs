//! A task's repository is checked when the task is taken, and a run that
//! cannot succeed fails once. Through both deployments: the four services
//! (Postgres, NATS) and the `kandev` binary (one process, SQLite).
//!
//! - Creating (or changing) a task whose repository the agent manager
//!   refuses (a path outside the allowed roots, one that does not exist, a
//!   directory that is no git repository, an unknown branch) answers 400
//!   with the reason, and no task is made.
//! - A run whose repository disappeared, or whose branch was deleted,
//!   after the task was made fails at once: one attempt, no retry wait.
//!   So does one whose agent type is unknown or needs a secret nobody
//!   saved.

use std::process::Command;

use kandev_e2e::{Api, Options, Stack, deployments, mock_type, serde_json::json};

/// The stack's allowed repository root (where `Stack::git_repo` makes
/// repositories).
fn repos_root(stack: &Stack) -> String {
    stack
        .data_dir()
        .parent()
        .expect("the stack's directory")
        .join("repos")
        .display()
        .to_string()
}

/// Posts a task; asserts the 400 and its error shape; the body.
async fn refused(api: &Api, board: &str, fields: kandev_e2e::serde_json::Value) -> String {
    let mut body = json!({"title": "refused", "agent_type": "mock-agent"});
    body.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    let r = api
        .post(&format!("/api/v1/boards/{board}/tasks"), body)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"], "validation_error", "{}", r.body);
    assert_eq!(r.body["http_status"], 400, "{}", r.body);
    r.body["message"].as_str().unwrap_or_default().to_string()
}

/// Tasks made (and changed) with repositories the agent manager refuses.
async fn refusals_on(test: &str, options: Options) {
    let (stack, api, board) = Stack::start_with_board(test, options, "repositories").await;
    let root = repos_root(&stack);
    let repo = stack.git_repo("good");
    std::fs::create_dir_all(format!("{root}/plain")).unwrap();

    for (fields, reason) in [
        (
            json!({"repository_url": "/etc"}),
            format!("/etc is outside the repositories Kandev may use: {root}"),
        ),
        (
            json!({"repository_url": format!("{root}/missing")}),
            format!("the repository {root}/missing does not exist"),
        ),
        (
            json!({"repository_url": format!("file://{root}/plain")}),
            format!("{root}/plain is not a git repository"),
        ),
        (
            json!({"repository_url": repo.clone(), "branch": "nope"}),
            format!("the branch nope does not exist in the repository {root}/good"),
        ),
    ] {
        assert_eq!(refused(&api, &board, fields).await, reason);
    }
    let listed = api.get(&format!("/api/v1/boards/{board}/tasks")).await;
    assert_eq!(
        listed.body["tasks"],
        json!([]),
        "no task made: {}",
        listed.body
    );

    // What can be used is taken; a remote is not contacted.
    let task = api
        .task(
            &board,
            json!({"repository_url": repo.clone(), "branch": "main", "autostart": false}),
        )
        .await;
    api.task(
        &board,
        json!({"repository_url": "https://github.com/kandev/never-contacted.git",
               "autostart": false}),
    )
    .await;
    // A change is checked as a creation is, and a refused one changes
    // nothing.
    let changed = api
        .patch(&format!("/api/v1/tasks/{task}"), json!({"branch": "gone"}))
        .await;
    assert_eq!(changed.status, 400, "{}", changed.body);
    assert_eq!(
        changed.body["details"]["field"], "branch",
        "{}",
        changed.body
    );
    let kept = api.get(&format!("/api/v1/tasks/{task}")).await;
    assert_eq!(kept.body["branch"], "main", "{}", kept.body);
    stack.stop().await;
}

/// Starts a task made with `autostart: false`; waits for FAILED and
/// asserts one attempt that left no retry behind; the failure message.
async fn fails_once(api: &Api, task: &str) -> String {
    api.start_task(task).await;
    let failed = api.wait_state(task, &["FAILED"], 60).await;
    assert_eq!(failed["metadata"]["attempts"], 1, "{failed}");
    let exec = api.execution(task).await;
    assert_eq!(exec.body["state"], "failed", "no retry wait: {}", exec.body);
    assert_eq!(exec.body["attempts"], 1, "{}", exec.body);
    failed["metadata"]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `git <args>` in `dir`.
fn git(dir: &str, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// Runs whose repository, branch or agent type went wrong after their
/// task was made.
async fn fail_once_on(test: &str, options: Options) {
    let (stack, api, board) = Stack::start_with_board(test, options, "fail once").await;
    let root = repos_root(&stack);

    // The repository goes away after the task was made.
    let repo = stack.git_repo("vanishing");
    let task = api
        .task(
            &board,
            json!({"agent_type": "mock-agent", "repository_url": repo, "max_retries": 3,
                   "autostart": false}),
        )
        .await;
    std::fs::remove_dir_all(format!("{root}/vanishing")).unwrap();
    let error = fails_once(&api, &task).await;
    assert!(
        error.ends_with(&format!("the repository {root}/vanishing does not exist")),
        "{error}"
    );

    // The branch is deleted after the task was made.
    let repo = stack.git_repo("branchy");
    git(&format!("{root}/branchy"), &["branch", "feature"]);
    let task = api
        .task(
            &board,
            json!({"agent_type": "mock-agent", "repository_url": repo, "branch": "feature",
                   "max_retries": 3, "autostart": false}),
        )
        .await;
    git(&format!("{root}/branchy"), &["branch", "-D", "feature"]);
    let error = fails_once(&api, &task).await;
    assert!(
        error.ends_with(&format!(
            "the branch feature does not exist in the repository {root}/branchy"
        )),
        "{error}"
    );

    // An agent type nobody registered.
    let task = api
        .task(
            &board,
            json!({"agent_type": "no-such-agent", "max_retries": 3, "autostart": false}),
        )
        .await;
    let error = fails_once(&api, &task).await;
    assert!(error.contains("no-such-agent"), "{error}");

    // An agent type that needs a secret nobody saved.
    let needs = json!({"required_env": ["KANDEV_E2E_NEVER_SAVED"]});
    api.agent_type(mock_type("needs-key", "Needs a key", needs))
        .await;
    let task = api
        .task(
            &board,
            json!({"agent_type": "needs-key", "max_retries": 3, "autostart": false}),
        )
        .await;
    let error = fails_once(&api, &task).await;
    assert!(error.contains("KANDEV_E2E_NEVER_SAVED"), "{error}");
    stack.stop().await;
}

deployments! {
    refusals_on("repo_refusals"),
    four: a_task_is_refused_a_repository_it_cannot_use,
    single: a_task_is_refused_a_repository_it_cannot_use_single,
}

deployments! {
    fail_once_on("fail_once"),
    four: a_run_that_cannot_succeed_fails_once,
    single: a_run_that_cannot_succeed_fails_once_single,
}
