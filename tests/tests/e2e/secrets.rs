//! A user's own secret reaches the agents of that user's tasks, through the
//! whole path (gateway → agent manager's sealed store; task → orchestrator
//! → launch for its creator), and no other user's.

use kandev_e2e::{Feed, Options, Stack, merged, mock_task, mock_type, serde_json::json};

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
    let alice = stack.user(&admin, "alice", "a-long-password").await;
    let bob = stack.user(&admin, "bob", "a-long-password").await;
    let env = json!({"optional_env": ["ALICE_TOKEN"]});
    admin
        .agent_type(mock_type("mock-env", "Mock agent (env)", env))
        .await;
    alice.set_secret("ALICE_TOKEN", "alice-own-value").await;

    for (api, name, expect) in [(&alice, "alice", true), (&bob, "bob", false)] {
        let board = api.board(name).await;
        let wait = mock_task("Wait", "scenario: wait-cancel");
        let task = api
            .task(&board, merged(wait, json!({"agent_type": "mock-env"})))
            .await;
        let mut feed = Feed::open(api, &task).await;
        feed.wait_for_chunk(120, "Waiting for session/cancel").await;
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
