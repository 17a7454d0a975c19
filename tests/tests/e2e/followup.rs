//! A follow-up prompt over the WebSocket resumes the same ACP session; a
//! follow-up sent over REST to the run's instance moves the task the same
//! way.

use std::time::Duration;

use kandev_e2e::{
    Api, Feed, Options, Stack, deployments, eventually, is_turn_end, kind, merged, mock_task,
    replay, serde_json::json,
};

/// A task on a repository whose first turn completed, and its feed open
/// since the start (the first turn's end read): the stack, the client,
/// the task and its feed.
async fn first_turn_done(
    test: &str,
    options: Options,
    description: &str,
) -> (Stack, Api, String, Feed) {
    let (stack, api, board) = Stack::start_with_board(test, options, test).await;
    let repo = stack.git_repo(test);
    let fields = merged(
        mock_task("Edit twice", description),
        json!({"repository_url": repo}),
    );
    let task = api.task(&board, fields).await;
    let mut feed = Feed::open(&api, &task).await;
    feed.wait_for(120, "the first turn_end", is_turn_end).await;
    (stack, api, task, feed)
}

/// A `code` turn, then a follow-up over the WebSocket.
async fn follow_up_prompt_resumes_the_session_on(test: &str, options: Options) {
    let (stack, api, task, mut feed) = first_turn_done(test, options, "scenario: code").await;
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

/// Issue 38: a follow-up of a finished run moves the task the same way
/// whichever path it takes, the stream's `prompt` command or
/// `POST /agents/{instanceId}/prompt`: COMPLETED straight to IN_PROGRESS
/// (no TODO between), then COMPLETED, its answer in the task's feed, on the
/// same instance.
async fn both_follow_up_paths_move_the_task_alike_on(test: &str, options: Options) {
    let (stack, api, task, mut feed) = first_turn_done(test, options, "echo the first turn").await;
    api.wait_state(&task, &["COMPLETED"], 60).await;
    let exec = api.execution(&task).await;
    let instance = exec.body["instance_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the run's instance: {}", exec.body))
        .to_string();

    // The stream's prompt command, as the UI sends it.
    let before = api.state_history(&task).await;
    let ack = feed
        .command(
            json!({"type": "prompt", "text": "echo answered on the stream"}),
            60,
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    follow_up_ran(
        &api,
        &mut feed,
        &task,
        before.len(),
        "answered on the stream",
    )
    .await;

    // The seed's REST follow-up, to the finished run's instance.
    let before = api.state_history(&task).await;
    let sent = api
        .post(
            &format!("/api/v1/agents/{instance}/prompt"),
            json!({"message": "echo answered over REST"}),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    assert_eq!(sent.body["accepted"], true, "{}", sent.body);
    follow_up_ran(&api, &mut feed, &task, before.len(), "answered over REST").await;

    // Both were turns of the same run, not new ones.
    let exec = api.execution(&task).await;
    assert_eq!(exec.body["instance_id"], instance.as_str(), "{}", exec.body);
    assert_eq!(exec.body["attempts"], 1, "{}", exec.body);
    feed.close().await;
    stack.stop().await;
}

/// A follow-up sent after `from` recorded states: its answer in the feed,
/// and the task moved COMPLETED → IN_PROGRESS → COMPLETED, nothing between.
async fn follow_up_ran(api: &Api, feed: &mut Feed, task: &str, from: usize, answer: &str) {
    let chunk = feed.wait_for_chunk(120, answer).await;
    assert!(chunk["seq"].as_i64().is_some(), "{chunk}");
    feed.wait_for(120, "the follow-up's turn_end", is_turn_end)
        .await;
    let states = eventually(60, "the follow-up's state changes", || async {
        let states = api.state_history(task).await;
        (states.len() >= from + 2 && states.last().map(String::as_str) == Some("COMPLETED"))
            .then_some(states)
    })
    .await;
    assert_eq!(
        states[from - 1..],
        ["COMPLETED", "IN_PROGRESS", "COMPLETED"],
        "{states:?}"
    );
    api.wait_state(task, &["COMPLETED"], 60).await;
}

/// Issue 40: follow-ups sent over the stream while a turn runs are held by
/// the orchestrator: listed, one cancelled, one edited, then the other goes
/// to the agent when the turn ends, in the same session.
async fn follow_ups_held_on(test: &str, options: Options) {
    let (stack, api, board) = Stack::start_with_board(test, options, "held").await;
    let task = api
        .task(&board, mock_task("A long turn", "scenario: slow 60 250"))
        .await;
    let mut feed = Feed::open(&api, &task).await;
    feed.wait_for(120, "the turn under way", |f| {
        f.to_string().contains("chunk 2/60")
    })
    .await;
    for text in ["echo never sent", "echo held, then edited"] {
        let ack = feed
            .command(json!({"type": "prompt", "text": text}), 60)
            .await;
        assert_eq!(ack["type"], "ack", "{ack}");
    }
    let pending = format!("/api/v1/orchestrator/tasks/{task}/pending-prompts");
    let held = api.get(&pending).await;
    assert_eq!(held.status, 200, "{}", held.body);
    let list = held.body["pending_prompts"].as_array().unwrap().clone();
    let texts: Vec<_> = list.iter().map(|p| p["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["echo never sent", "echo held, then edited"]);
    assert!(list.iter().all(|p| p["author"] == "admin"), "{list:?}");

    // Cancelled, then gone.
    let never_sent = format!("{pending}/{}", list[0]["id"].as_str().unwrap());
    for status in [204, 404] {
        let cancelled = api.send("DELETE", &never_sent, None).await;
        assert_eq!(cancelled.status, status, "{}", cancelled.body);
    }
    let edited = api
        .send(
            "PUT",
            &format!("{pending}/{}", list[1]["id"].as_str().unwrap()),
            Some(json!({"text": "echo the held follow-up ran"}).to_string()),
        )
        .await;
    assert_eq!(edited.status, 200, "{}", edited.body);
    assert_eq!(edited.body["text"], "echo the held follow-up ran");
    assert_eq!(
        api.get(&pending).await.body["pending_prompts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // The turn ends; the held follow-up is the next one, in the same
    // session, and nothing is held any more.
    let first_end = feed.wait_for(120, "the first turn_end", is_turn_end).await;
    let session = first_end["event"]["session_id"].clone();
    feed.wait_for(120, "the held follow-up's answer", |f| {
        kind(f) == "message_chunk" && f.to_string().contains("the held follow-up ran")
    })
    .await;
    let second_end = feed.wait_for(120, "the second turn_end", is_turn_end).await;
    assert_eq!(second_end["event"]["session_id"], session, "{second_end}");
    assert!(
        !feed
            .frames
            .iter()
            .any(|f| f.to_string().contains("never sent") && f["event"]["direction"] == "to_agent"),
        "the cancelled follow-up never reached the agent"
    );
    feed.close().await;
    api.wait_state(&task, &["COMPLETED"], 60).await;
    assert_eq!(api.get(&pending).await.body, json!({"pending_prompts": []}));
    stack.stop().await;
}

deployments! {
    follow_up_prompt_resumes_the_session_on("follow_up"),
    four: follow_up_prompt_resumes_the_session,
    sqlite: follow_up_prompt_resumes_the_session_on_sqlite,
    single: follow_up_prompt_resumes_the_session_single,
}

deployments! {
    both_follow_up_paths_move_the_task_alike_on("follow_up_paths"),
    four: both_follow_up_paths_move_the_task_alike,
    single: both_follow_up_paths_move_the_task_alike_single,
}

deployments! {
    follow_ups_held_on("follow_up_held"),
    four: follow_ups_sent_during_a_turn_are_held_until_it_ends,
    single: follow_ups_sent_during_a_turn_are_held_until_it_ends_single,
}
