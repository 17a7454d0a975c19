//! The set-up and the requests many scenarios share: a stack with a board,
//! the body of a mock-agent task or agent type, users and their secrets,
//! reviews, and [`deployments!`](crate::deployments) for a scenario run on
//! each deployment.

use std::{future::Future, time::Duration};

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{Api, Options, Resp, Stack, eventually, replay};

/// The fields of a `mock-agent` task that is not retried: its `title` and
/// its `description` (the mock agent's scenario).
pub fn mock_task(title: &str, description: &str) -> Value {
    json!({"title": title, "description": description, "agent_type": "mock-agent",
           "max_retries": 0})
}

/// `n` tasks of [`mock_task`] on `board`, made through each client of
/// `apis` in turn (gateways of one stack), titled `title 0`, `title 1`...;
/// their ids.
pub async fn mock_tasks_through(
    apis: &[Api],
    board: &str,
    n: usize,
    title: &str,
    description: &str,
) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let fields = mock_task(&format!("{title} {i}"), description);
        ids.push(apis[i % apis.len()].task(board, fields).await);
    }
    ids
}

/// `base` (an object) with the fields of `more` over it.
pub fn merged(mut base: Value, more: Value) -> Value {
    if let (Some(b), Value::Object(m)) = (base.as_object_mut(), more) {
        b.extend(m);
    }
    base
}

/// An agent type on the mock agent's image with the usual limits
/// (`fs` capable, no network), `more` over it.
pub fn mock_type(id: &str, name: &str, more: Value) -> Value {
    merged(
        json!({"id": id, "name": name, "image": "kandev/mock-agent:latest",
               "capabilities": ["acp", "fs"], "memory_mb": 256, "cpu_cores": 0.5,
               "pids_limit": 64, "timeout_seconds": 600, "network_mode": "none"}),
        more,
    )
}

/// Whether a feed frame is a `session/prompt` whose wire message holds
/// every one of `needles`.
pub fn is_prompt_with(frame: &Value, needles: &[&str]) -> bool {
    let raw = frame["event"]["raw"].to_string();
    raw.contains("session/prompt") && needles.iter().all(|n| raw.contains(n))
}

/// The check named `name` of a task's checks (as [`Api::checks`] answers).
pub fn check_named(checks: &Value, name: &str) -> Value {
    checks["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in {checks}"))
}

impl Stack {
    /// [`Stack::start`], then the administrator logged in and a board of
    /// theirs named `board`.
    pub async fn start_with_board(
        test: &str,
        options: Options,
        board: &str,
    ) -> (Stack, Api, String) {
        let stack = Stack::start(test, options).await;
        let api = stack.admin().await;
        let board = api.board(board).await;
        (stack, api, board)
    }

    /// A user `username` (not an administrator) made by `admin`, logged in.
    pub async fn user(&self, admin: &Api, username: &str, password: &str) -> Api {
        let made = admin
            .post(
                "/api/v1/users",
                json!({"username": username, "password": password, "is_admin": false}),
            )
            .await;
        assert_eq!(made.status, 201, "{}", made.body);
        self.login(username, password).await
    }
}

impl Api {
    /// `POST /tasks/{task}/review` with `body` (approve or request changes).
    pub async fn review(&self, task: &str, body: Value) -> Resp {
        self.post(&format!("/api/v1/tasks/{task}/review"), body)
            .await
    }

    /// `n` tasks of [`mock_task`] on `board`, titled `title 0`, `title 1`...;
    /// their ids.
    pub async fn mock_tasks(
        &self,
        board: &str,
        n: usize,
        title: &str,
        description: &str,
    ) -> Vec<String> {
        mock_tasks_through(std::slice::from_ref(self), board, n, title, description).await
    }

    /// Approves the task (with the commit `message` when one is given) and
    /// asserts it was; the approval's `delivery`.
    pub async fn approve(&self, task: &str, message: Option<&str>) -> Value {
        let mut body = json!({"action": "approve"});
        if let Some(message) = message {
            body["message"] = json!(message);
        }
        let approved = self.review(task, body).await;
        assert_eq!(approved.status, 200, "{}", approved.body);
        approved.body["delivery"].clone()
    }

    /// Stores the user's secret `name`.
    pub async fn set_secret(&self, name: &str, value: &str) {
        let path = format!("/api/v1/users/me/secrets/{name}");
        let set = self
            .send("PUT", &path, Some(json!({ "value": value }).to_string()))
            .await;
        assert_eq!(set.status, 200, "{}", set.body);
    }

    /// Registers the agent type `body`; the type as stored.
    pub async fn agent_type(&self, body: Value) -> Value {
        let made = self.post("/api/v1/agent-types", body).await;
        assert_eq!(made.status, 201, "{}", made.body);
        made.body
    }

    /// Deletes a task, and asserts it was.
    pub async fn delete_task(&self, task: &str) {
        let deleted = self
            .send("DELETE", &format!("/api/v1/tasks/{task}"), None)
            .await;
        assert!(
            deleted.status == 204 || deleted.status == 200,
            "{}",
            deleted.body
        );
    }

    /// `POST /orchestrator/tasks/{task}/start` (a task made with
    /// `autostart: false`), and asserts it was taken.
    pub async fn start_task(&self, task: &str) {
        let path = format!("/api/v1/orchestrator/tasks/{task}/start");
        let started = self.post(&path, json!({})).await;
        assert_eq!(started.status, 200, "{}", started.body);
    }

    /// The task's states, in the order its history recorded them.
    pub async fn state_history(&self, task: &str) -> Vec<String> {
        let history = self
            .get(&format!("/api/v1/tasks/{task}/events?page_size=100"))
            .await;
        history.body["events"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", history.body))
            .iter()
            .filter(|e| e["kind"] == "state_changed")
            .map(|e| {
                e["new_value"]["state"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    /// `GET /orchestrator/tasks/{task}/checks`: the CI checks of its
    /// pushed commit.
    pub async fn checks(&self, task: &str) -> Resp {
        self.get(&format!("/api/v1/orchestrator/tasks/{task}/checks"))
            .await
    }

    /// The task's checks once their `state` is `state`.
    pub async fn wait_checks(&self, task: &str, state: &str) -> Value {
        eventually(60, &format!("the {state} checks"), || async {
            let r = self.checks(task).await;
            (r.status == 200 && r.body["state"] == state).then_some(r.body)
        })
        .await
    }

    /// Waits until the task's card shows `checks` in its metadata: the
    /// orchestrator records the card's copy just after the checks.
    pub async fn wait_card_checks(&self, task: &str, checks: Value) {
        eventually(30, &format!("the card's checks {checks}"), || async {
            let shown = self.get(&format!("/api/v1/tasks/{task}")).await;
            (shown.body["metadata"]["checks"] == checks).then_some(())
        })
        .await;
    }

    /// `POST /orchestrator/tasks/{task}/fix-ci`.
    pub async fn fix_ci(&self, task: &str) -> Resp {
        let path = format!("/api/v1/orchestrator/tasks/{task}/fix-ci");
        self.post(&path, json!({})).await
    }

    /// The task's stored feed once it holds a `session/prompt` to the agent
    /// with every one of `needles` ([`is_prompt_with`]); waits `secs`.
    pub async fn wait_prompt(&self, task: &str, secs: u64, needles: &[&str]) -> Vec<Value> {
        eventually(
            secs,
            &format!("a prompt with {needles:?} in the feed"),
            || async {
                let frames = replay(self, task).await;
                frames
                    .iter()
                    .any(|f| is_prompt_with(f, needles))
                    .then_some(frames)
            },
        )
        .await
    }

    /// Polls until `n` of the board's tasks are COMPLETED, for at most
    /// `secs`; `watch` runs every round (50 ms apart): the checks that must
    /// hold all along.
    pub async fn wait_completed<F, Fut>(&self, board: &str, n: usize, secs: u64, mut watch: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ()>,
    {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            watch().await;
            let completed = self.completed(board).await;
            if completed == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {completed} of {n} tasks completed in {secs} s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many of the board's tasks are COMPLETED.
    pub async fn completed(&self, board: &str) -> usize {
        let path = format!("/api/v1/boards/{board}/tasks?state=COMPLETED&page_size=100");
        let r = self.get(&path).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["tasks"].as_array().map_or(0, Vec::len)
    }
}

/// The tests of one scenario on each deployment. `run("test", args...)`
/// names an `async fn run(args..., test: &str, options: Options)` of the
/// calling file and the name its logs go under; then `four: name` is the
/// test `name` on the four services (as `test`), `sqlite: name` with every
/// service on SQLite (`test_sqlite`) and `single: name` through the
/// `kandev` binary (`test_single`). `run`'s doc comment says what the
/// scenario is.
#[macro_export]
macro_rules! deployments {
    ($run:ident($test:literal $(, $arg:expr)* $(,)?) $(, $on:ident: $name:ident)+ $(,)?) => {
        $crate::deployments!(@each [$($arg,)*] $run $test $(, $on: $name)+);
    };
    (@each $args:tt $run:ident $test:literal $(, $on:ident: $name:ident)+) => {
        $( $crate::deployment_test!($on, $run, $args, $test, $name); )+
    };
}

/// One test of [`deployments!`](crate::deployments).
#[macro_export]
macro_rules! deployment_test {
    (four, $run:ident, [$($arg:expr,)*], $test:literal, $name:ident) => {
        /// On the four services, Postgres and NATS.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            $run($($arg,)* $test, $crate::Options::default()).await;
        }
    };
    (sqlite, $run:ident, [$($arg:expr,)*], $test:literal, $name:ident) => {
        /// The same with every service on SQLite, as the one-machine
        /// `kandev` keeps its state.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let test = concat!($test, "_sqlite");
            $run($($arg,)* test, $crate::Options::sqlite()).await;
        }
    };
    (single, $run:ident, [$($arg:expr,)*], $test:literal, $name:ident) => {
        /// The same through the `kandev` binary: the four services in one
        /// process.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let test = concat!($test, "_single");
            $run($($arg,)* test, $crate::Options::single()).await;
        }
    };
}
