//! A user's own secret reaches the agents of that user's tasks, through the
//! whole path (gateway → agent manager's sealed store; task → orchestrator
//! → launch for its creator), and no other user's.

use kandev_e2e::{Feed, Options, Stack, kind, serde_json::json};

async fn env_of(stack: &Stack, task: &str) -> String {
    let ids = stack.containers(Some(task), true).await;
    assert_eq!(ids.len(), 1, "{ids:?}");
    let out = tokio::process::Command::new("docker")
        .args(["inspect", "--format", "{{json .Config.Env}}", &ids[0]])
        .output()
        .await
        .expect("docker inspect");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_secret_reaches_only_that_users_agents() {
    let stack = Stack::start("secrets", Options::default()).await;
    let admin = stack.admin().await;
    for user in ["alice", "bob"] {
        let made = admin
            .post(
                "/api/v1/users",
                json!({"username": user, "password": "a-long-password", "is_admin": false}),
            )
            .await;
        assert_eq!(made.status, 201, "{}", made.body);
    }
    let made = admin
        .post(
            "/api/v1/agent-types",
            json!({"id": "mock-env", "name": "Mock agent (env)",
                   "image": "kandev/mock-agent:latest", "capabilities": ["acp", "fs"],
                   "memory_mb": 256, "cpu_cores": 0.5, "pids_limit": 64, "timeout_seconds": 600,
                   "network_mode": "none", "optional_env": ["ALICE_TOKEN"]}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);

    let alice = stack.login("alice", "a-long-password").await;
    let bob = stack.login("bob", "a-long-password").await;
    let set = alice
        .send(
            "PUT",
            "/api/v1/users/me/secrets/ALICE_TOKEN",
            Some(json!({"value": "alice-own-value"}).to_string()),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);

    for (api, name, expect) in [(&alice, "alice", true), (&bob, "bob", false)] {
        let board = api.board(name).await;
        let task = api
            .task(
                &board,
                json!({"title": "Wait", "description": "scenario: wait-cancel",
                       "agent_type": "mock-env", "max_retries": 0}),
            )
            .await;
        let mut feed = Feed::open(api, &task).await;
        feed.wait_for(120, "the waiting message", |f| {
            kind(f) == "message_chunk"
                && f["event"]["data"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("Waiting for session/cancel"))
        })
        .await;
        let env = env_of(&stack, &task).await;
        assert_eq!(
            env.contains("ALICE_TOKEN=alice-own-value"),
            expect,
            "{name}'s agent: {env}"
        );
        let stopped = api
            .post(
                &format!("/api/v1/orchestrator/tasks/{task}/stop"),
                json!({"reason": "seen"}),
            )
            .await;
        assert_eq!(stopped.status, 200, "{}", stopped.body);
        feed.close().await;
    }
    stack.stop().await;
}
