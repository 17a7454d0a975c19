//! Issue 41, what a workflow column gives the run it starts, end to end on
//! the four services and on `kandev`, with the mock agent in Docker: `{diff}` in a column's
//! prompt is the task's changes so far (read from Kandev's own repository
//! of the task, as the Changes panel reads them), and a column may start a
//! new agent session instead of continuing the task's.

use kandev_e2e::*;
use serde_json::{Value, json};

/// Backlog → Code → Look (same session, sees the diff) → Again (a new
/// session) → Review.
fn columns(ids: &[String]) -> Value {
    let step = |i: usize, name: &str, prompt: &str, next: usize| {
        json!({"id": ids[i], "name": name, "state": "IN_PROGRESS", "agent_type": "mock-agent",
               "prompt_template": prompt, "on_success": ids[next]})
    };
    let mut again = step(3, "Again", "scenario: session-info\nagain: {title}", 4);
    again["new_session"] = json!(true);
    json!([
        {"id": ids[0], "name": "Backlog", "state": "TODO"},
        step(1, "Code", "scenario: code", 2),
        step(2, "Look", "scenario: session-info\nThe work so far:\n{diff}", 3),
        again,
        {"id": ids[4], "name": "Review", "state": "REVIEW"},
    ])
}

/// A task on a board of [`columns`], moved into Code.
async fn diff_and_sessions(name: &str, options: Options) {
    let (stack, api, board) = Stack::start_with_board(name, options, "flow").await;
    let ids: Vec<String> = (0..5).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    let put = api
        .send(
            "PUT",
            &format!("/api/v1/boards/{board}/columns"),
            Some(json!({"columns": columns(&ids)}).to_string()),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.body);
    let cols = &put.body["columns"];
    assert_eq!(cols[3]["new_session"], true, "{cols}");
    assert_eq!(cols[2]["new_session"], false, "{cols}");
    let repo = stack.git_repo("flow-src");
    let task = api
        .task(
            &board,
            json!({"title": "Flow", "repository_url": repo, "max_retries": 0}),
        )
        .await;
    let moved = api
        .post(
            &format!("/api/v1/tasks/{task}/move"),
            json!({"column_id": ids[1]}),
        )
        .await;
    assert_eq!(moved.status, 200, "{}", moved.body);

    let done = eventually(300, "the card reaches Review by itself", || {
        let api = &api;
        let path = format!("/api/v1/tasks/{task}");
        let review = ids[4].clone();
        async move {
            let t = api.get(&path).await;
            (t.body["column_id"] == review.as_str()).then_some(t.body)
        }
    })
    .await;
    assert_eq!(done["state"], "REVIEW", "{done}");

    let frames = replay(&api, &task).await;
    let text = chunk_text(&frames);
    // Look's prompt held Code's change to the README, as a unified diff.
    let look = text
        .split("Session info\n")
        .nth(1)
        .unwrap_or_else(|| panic!("Look's session info in {text:?}"));
    assert!(
        look.contains("The work so far:\ndiff --git a/README.md b/README.md"),
        "{look}"
    );
    assert!(look.contains("\n+"), "an added line: {look}");
    assert!(!look.contains("{diff}"), "{look}");
    // Code and Look share a session; Again's is new.
    let mut sessions = Vec::new();
    for instance in instances_in_order(&frames) {
        let s = api.get(&format!("/api/v1/agents/{instance}/session")).await;
        assert_eq!(s.status, 200, "{}", s.body);
        sessions.push(s.body["session_id"].as_str().unwrap().to_string());
    }
    assert_eq!(sessions.len(), 3, "three runs: {sessions:?}");
    assert_eq!(sessions[0], sessions[1], "Look continued Code's session");
    assert_ne!(sessions[1], sessions[2], "Again started a new session");
    assert!(text.contains("again: Flow"), "{text}");
    stack.stop().await;
}

/// The agent instances of a feed, in the order they first appear.
fn instances_in_order(frames: &[Value]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for f in frames {
        if let Some(id) = f["instance_id"].as_str()
            && !seen.iter().any(|s| s == id)
        {
            seen.push(id.to_string());
        }
    }
    seen
}

deployments! {
    diff_and_sessions("workflow_diff"),
    four: a_column_prompt_gets_the_diff_so_far_and_a_column_may_start_a_new_session,
    single: single_a_column_prompt_gets_the_diff_so_far_and_a_column_may_start_a_new_session,
}
