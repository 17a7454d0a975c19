//! A follow-up prompt over the WebSocket resumes the same ACP session.

use std::time::Duration;

use kandev_e2e::{Feed, Options, Stack, is_turn_end, replay, serde_json::json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_up_prompt_resumes_the_session() {
    follow_up_prompt_resumes_the_session_on("follow_up", Options::default()).await;
}

/// The same with every service on SQLite, as the one-machine `kandev` keeps
/// its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_up_prompt_resumes_the_session_on_sqlite() {
    follow_up_prompt_resumes_the_session_on("follow_up_sqlite", Options::sqlite()).await;
}

/// The same through the `kandev` binary: the four services in one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_up_prompt_resumes_the_session_single() {
    follow_up_prompt_resumes_the_session_on("follow_up_single", Options::single()).await;
}

async fn follow_up_prompt_resumes_the_session_on(test: &str, options: Options) {
    let stack = Stack::start(test, options).await;
    let api = stack.admin().await;
    let board = api.board("follow-up").await;
    let repo = stack.git_repo("follow-up");
    let task = api
        .task(
            &board,
            json!({"title": "Edit twice", "description": "scenario: code",
                   "agent_type": "mock-agent", "repository_url": repo, "max_retries": 0}),
        )
        .await;
    let mut feed = Feed::open(&api, &task).await;
    feed.wait_for(120, "the first turn_end", is_turn_end).await;
    let first = api.wait_state(&task, &["COMPLETED"], 60).await;
    let session = first["metadata"]["acp_session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the session id is recorded: {first}"))
        .to_string();
    feed.drain(Duration::from_millis(1000)).await;
    let first_len = feed.frames.len();

    // The follow-up, as the UI sends it.
    let ack = feed
        .command(json!({"type": "prompt", "text": "scenario: code"}), 60)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let end = feed.wait_for(120, "the second turn_end", is_turn_end).await;
    assert_eq!(end["event"]["data"]["stop_reason"], "end_turn", "{end}");
    assert_eq!(end["event"]["session_id"], session.as_str(), "{end}");
    // Every event of the second turn belongs to the same session.
    for f in &feed.frames[first_len..] {
        let s = &f["event"]["session_id"];
        assert!(s.is_null() || *s == session.as_str(), "{f}");
    }
    let done = api.wait_state(&task, &["COMPLETED"], 60).await;
    assert_eq!(
        done["metadata"]["acp_session_id"],
        session.as_str(),
        "{done}"
    );

    // The agent knew the session: this was its turn 2.
    let readme = std::fs::read_to_string(stack.workspace(&task).join("README.md")).unwrap();
    assert!(
        readme.contains("Edited by kandev-mock-agent (turn 1).")
            && readme.contains("Edited by kandev-mock-agent (turn 2)."),
        "{readme}"
    );
    feed.drain(Duration::from_millis(1000)).await;
    let seen = feed.frames.len();
    feed.close().await;
    assert_eq!(replay(&api, &task).await.len(), seen);
    stack.stop().await;
}
