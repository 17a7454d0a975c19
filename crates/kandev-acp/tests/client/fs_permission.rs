//! `fs/write_text_file` under the permission policy: the scripted agent
//! writes without asking, and the client puts the write to the policy.

use std::{path::Path, sync::Arc, time::Duration};

use kandev_acp::{
    AcpEvent, AutoApprove, ClientOptions, Deny, Direction, EventKind, PermissionAsk,
    PermissionDecision, PermissionPolicy, Workspace,
    error::codes,
    permission::{SYNTHESIZED_META, WRITE_ALLOW, WRITE_REJECT},
    schema::{PermissionOptionKind, StopReason, ToolKind},
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::mpsc;

use super::{Events, FakeAgent, ask_options, prompt_in_background, v1_session};

/// A session whose workspace is a fresh temporary directory.
async fn session_in_workspace(
    options: ClientOptions,
) -> (TempDir, kandev_acp::AcpClient, Events, FakeAgent) {
    let root = tempfile::tempdir().expect("tempdir");
    let options = ClientOptions {
        workspace: Some(Workspace::new(root.path(), "/workspace").expect("workspace")),
        ..options
    };
    let (client, events, agent) = v1_session(options).await;
    (root, client, events, agent)
}

fn with_policy(policy: impl PermissionPolicy) -> ClientOptions {
    ClientOptions {
        permission: Arc::new(policy),
        ..ClientOptions::default()
    }
}

async fn send_write(agent: &mut FakeAgent, id: u64, file: &str, content: &str) {
    agent
        .send(
            json!({"jsonrpc":"2.0","id":id,"method":"fs/write_text_file",
            "params":{"sessionId":"s1","path":format!("/workspace/{file}"),"content":content}}),
        )
        .await;
}

async fn next_ask(asks: &mut mpsc::Receiver<PermissionAsk>) -> PermissionAsk {
    tokio::time::timeout(Duration::from_secs(10), asks.recv())
        .await
        .expect("the policy was not asked")
        .expect("ask channel open")
}

/// Asserts that the ask is the question for writing `file` with id `id`.
fn assert_write_question(ask: &PermissionAsk, id: u64, file: &str) {
    assert_eq!(ask.request_id, json!(id));
    let fields = &ask.request.tool_call.fields;
    let path = format!("/workspace/{file}");
    assert_eq!(
        fields.title.as_deref(),
        Some(format!("Write {path}").as_str())
    );
    assert_eq!(fields.kind, Some(ToolKind::Edit));
    let locations = fields.locations.as_ref().expect("locations");
    assert_eq!(locations[0].path, Path::new(&path));
    let options: Vec<_> = ask
        .request
        .options
        .iter()
        .map(|o| (o.option_id.0.to_string(), o.kind))
        .collect();
    assert_eq!(
        options,
        [
            (WRITE_ALLOW.to_owned(), PermissionOptionKind::AllowOnce),
            (WRITE_REJECT.to_owned(), PermissionOptionKind::RejectOnce),
        ]
    );
    let meta = ask.request.meta.as_ref().expect("meta");
    assert_eq!(meta[SYNTHESIZED_META], "fs/write_text_file");
}

/// The answer is a permission error and nothing was written.
fn assert_refused(answer: &Value, code: i64, root: &TempDir, file: &str) {
    assert_eq!(answer["error"]["code"], code, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("permission denied: "), "{answer}");
    assert!(message.contains(file), "{answer}");
    assert!(!root.path().join(file).exists());
}

#[tokio::test]
async fn deny_refuses_a_write_and_leaves_no_file_while_reads_go_on() {
    let (root, _client, mut events, mut agent) = session_in_workspace(with_policy(Deny)).await;
    std::fs::write(root.path().join("old.txt"), "old").expect("write");
    send_write(&mut agent, 3, "new.txt", "x").await;
    let answer = agent.recv().await;
    assert_eq!(answer["id"], 3);
    assert_refused(&answer, codes::PERMISSION_DENIED, &root, "new.txt");
    // Overwriting an existing file is refused too, and leaves it as it was.
    send_write(&mut agent, 4, "old.txt", "pwned").await;
    let answer = agent.recv().await;
    assert_eq!(
        answer["error"]["code"],
        codes::PERMISSION_DENIED,
        "{answer}"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("old.txt")).expect("read"),
        "old"
    );
    // Reads are not asked about.
    agent
        .send(json!({"jsonrpc":"2.0","id":5,"method":"fs/read_text_file",
            "params":{"sessionId":"s1","path":"/workspace/old.txt"}}))
        .await;
    let answer = agent.recv().await;
    assert_eq!(answer["result"]["content"], "old", "{answer}");
    // Nobody could answer a question: none is shown.
    let seen = events.drain();
    assert!(
        !seen.iter().any(|e| e.kind.name() == "permission_request"),
        "{seen:#?}"
    );
}

#[tokio::test]
async fn auto_approve_writes_as_before() {
    let (root, _client, _events, mut agent) = session_in_workspace(with_policy(AutoApprove)).await;
    send_write(&mut agent, 3, "dir/new.txt", "hello").await;
    let answer = agent.recv().await;
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":3,"result":{}}));
    assert_eq!(
        std::fs::read_to_string(root.path().join("dir/new.txt")).expect("read"),
        "hello"
    );
}

/// The local question event, then its answer event, of request `id`.
async fn question_events(events: &mut Events, id: u64) -> (AcpEvent, AcpEvent) {
    let asked = events.until("permission_request").await;
    let answered = events.until("permission_response").await;
    for event in [&asked, &answered] {
        assert_eq!(event.direction, Direction::Local, "{event:#?}");
        assert_eq!(event.session_id.as_deref(), Some("s1"));
    }
    match &asked.kind {
        EventKind::PermissionRequest(p) => {
            assert_eq!(p.request_id, json!(id));
            assert_eq!(p.title.as_deref(), Some("Write /workspace/a.txt"));
            assert_eq!(p.options.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    (asked, answered)
}

#[tokio::test]
async fn under_ask_a_write_waits_for_the_answer_allowed() {
    let (options, mut asks) = ask_options();
    let (root, _client, mut events, mut agent) = session_in_workspace(options).await;
    send_write(&mut agent, 7, "a.txt", "hello").await;
    let ask = next_ask(&mut asks).await;
    assert_write_question(&ask, 7, "a.txt");
    // Nothing is written, nor answered, before the person answers.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!root.path().join("a.txt").exists());
    assert!(ask.respond(PermissionDecision::Select(WRITE_ALLOW.into())));
    let answer = agent.recv().await;
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":7,"result":{}}));
    assert_eq!(
        std::fs::read_to_string(root.path().join("a.txt")).expect("read"),
        "hello"
    );
    let (_, answered) = question_events(&mut events, 7).await;
    assert!(matches!(&answered.kind, EventKind::PermissionResponse(p)
        if p.request_id == json!(7) && p.outcome == "selected"
            && p.option_id.as_deref() == Some(WRITE_ALLOW)));
}

#[tokio::test]
async fn under_ask_a_rejected_write_is_refused() {
    let (options, mut asks) = ask_options();
    let (root, _client, mut events, mut agent) = session_in_workspace(options).await;
    send_write(&mut agent, 8, "a.txt", "hello").await;
    let ask = next_ask(&mut asks).await;
    assert_write_question(&ask, 8, "a.txt");
    assert!(ask.respond(PermissionDecision::Select(WRITE_REJECT.into())));
    let answer = agent.recv().await;
    assert_eq!(answer["id"], 8);
    assert_refused(&answer, codes::PERMISSION_DENIED, &root, "a.txt");
    let (_, answered) = question_events(&mut events, 8).await;
    assert!(matches!(&answered.kind, EventKind::PermissionResponse(p)
        if p.outcome == "selected" && p.option_id.as_deref() == Some(WRITE_REJECT)));
}

#[tokio::test]
async fn under_ask_a_write_open_when_the_turn_is_cancelled_is_refused() {
    let (options, mut asks) = ask_options();
    let (root, client, mut events, mut agent) = session_in_workspace(options).await;
    let prompt = prompt_in_background(&client, "go");
    let request = agent.recv().await;
    assert_eq!(request["method"], "session/prompt");
    send_write(&mut agent, 9, "a.txt", "hello").await;
    let ask = next_ask(&mut asks).await;
    assert_write_question(&ask, 9, "a.txt");

    client.cancel().await.expect("cancel");
    let mut answer = agent.recv().await;
    if answer["method"] == "session/cancel" {
        answer = agent.recv().await;
    } else {
        assert_eq!(agent.recv().await["method"], "session/cancel");
    }
    assert_eq!(answer["id"], 9);
    assert_refused(&answer, codes::REQUEST_CANCELLED, &root, "a.txt");
    // The person's late answer is refused, and writes nothing.
    assert!(!ask.respond(PermissionDecision::Select(WRITE_ALLOW.into())));
    agent.end_turn(&request, "cancelled").await;
    assert_eq!(
        prompt.await.expect("join").expect("prompt"),
        StopReason::Cancelled
    );
    assert!(!root.path().join("a.txt").exists());
    let (_, answered) = question_events(&mut events, 9).await;
    assert!(matches!(&answered.kind, EventKind::PermissionResponse(p)
        if p.outcome == "cancelled" && p.option_id.is_none()));
}

/// The agent's own permission request for a tool call on `file`.
async fn agent_asks(agent: &mut FakeAgent, id: u64, kind: &str, file: &str) {
    agent
        .send(
            json!({"jsonrpc":"2.0","id":id,"method":"session/request_permission",
            "params":{"sessionId":"s1",
                "toolCall":{"toolCallId":format!("call-{id}"),"title":format!("Write {file}"),
                    "kind":kind,"locations":[{"path":format!("/workspace/{file}")}]},
                "options":[{"optionId":"yes","name":"Allow","kind":"allow_once"},
                           {"optionId":"no","name":"Reject","kind":"reject_once"}]}}),
        )
        .await;
}

#[tokio::test]
async fn an_allowed_edit_is_not_asked_again_when_written() {
    let (options, mut asks) = ask_options();
    let (root, client, _events, mut agent) = session_in_workspace(options).await;
    let prompt = prompt_in_background(&client, "go");
    let request = agent.recv().await;
    // The agent asks to edit g.txt and to read r.txt; both allowed.
    agent_asks(&mut agent, 20, "edit", "g.txt").await;
    next_ask(&mut asks)
        .await
        .respond(PermissionDecision::Select("yes".into()));
    assert_eq!(agent.recv().await["result"]["outcome"]["optionId"], "yes");
    agent_asks(&mut agent, 21, "read", "r.txt").await;
    next_ask(&mut asks)
        .await
        .respond(PermissionDecision::Select("yes".into()));
    assert_eq!(agent.recv().await["result"]["outcome"]["optionId"], "yes");

    // Writing g.txt (twice) is covered by the edit permission: not asked.
    for id in [22, 23] {
        send_write(&mut agent, id, "g.txt", "granted").await;
        assert_eq!(agent.recv().await["result"], json!({}));
    }
    assert!(asks.try_recv().is_err());
    assert_eq!(
        std::fs::read_to_string(root.path().join("g.txt")).expect("read"),
        "granted"
    );
    // A permission to read is none to write.
    send_write(&mut agent, 24, "r.txt", "x").await;
    let ask = next_ask(&mut asks).await;
    assert_write_question(&ask, 24, "r.txt");
    assert!(ask.respond(PermissionDecision::Select(WRITE_REJECT.into())));
    let answer = agent.recv().await;
    assert_refused(&answer, codes::PERMISSION_DENIED, &root, "r.txt");

    // The grant ends with the turn: the next turn asks again.
    agent.end_turn(&request, "end_turn").await;
    prompt.await.expect("join").expect("prompt");
    let prompt = prompt_in_background(&client, "again");
    let request = agent.recv().await;
    send_write(&mut agent, 25, "g.txt", "again").await;
    let ask = next_ask(&mut asks).await;
    assert_write_question(&ask, 25, "g.txt");
    assert!(ask.respond(PermissionDecision::Select(WRITE_ALLOW.into())));
    assert_eq!(agent.recv().await["result"], json!({}));
    agent.end_turn(&request, "end_turn").await;
    prompt.await.expect("join").expect("prompt");
}

/// A `session/update` of the agent about tool call `id`.
async fn tool_call_update(agent: &mut FakeAgent, update: Value) {
    agent
        .send(json!({"jsonrpc":"2.0","method":"session/update",
            "params":{"sessionId":"s1","update":update}}))
        .await;
}

/// The `request_id` of the next `permission_request` event.
async fn next_question(events: &mut Events) -> Value {
    match events.until("permission_request").await.kind {
        EventKind::PermissionRequest(p) => p.request_id,
        other => panic!("{other:?}"),
    }
}

/// claude-code-acp's way: the kind and the file are in the `tool_call`
/// notification; its permission request names the tool call only.
#[tokio::test]
async fn under_ask_an_edit_the_agent_asked_about_is_asked_once() {
    let (options, mut asks) = ask_options();
    let (root, client, mut events, mut agent) = session_in_workspace(options).await;
    let prompt = prompt_in_background(&client, "go");
    let request = agent.recv().await;
    tool_call_update(
        &mut agent,
        json!({"sessionUpdate":"tool_call","toolCallId":"X","title":"Write a.txt",
            "kind":"edit","status":"pending","locations":[{"path":"/workspace/a.txt"}],
            "rawInput":{"file_path":"/workspace/a.txt","content":"hello"}}),
    )
    .await;
    agent
        .send(
            json!({"jsonrpc":"2.0","id":30,"method":"session/request_permission",
            "params":{"sessionId":"s1",
                "toolCall":{"toolCallId":"X","title":"Write a.txt",
                    "rawInput":{"file_path":"/workspace/a.txt","content":"hello"}},
                "options":[{"optionId":"allow_always","name":"Always Allow","kind":"allow_always"},
                           {"optionId":"allow","name":"Allow","kind":"allow_once"},
                           {"optionId":"reject","name":"Reject","kind":"reject_once"}]}}),
        )
        .await;
    let ask = next_ask(&mut asks).await;
    assert_eq!(ask.request_id, json!(30));
    assert!(ask.respond(PermissionDecision::Select("allow".into())));
    assert_eq!(agent.recv().await["result"]["outcome"]["optionId"], "allow");

    // The write of that tool call is answered without a second question
    // (one would hold the answer until the person answered it).
    send_write(&mut agent, 31, "a.txt", "hello").await;
    assert_eq!(
        agent.recv().await,
        json!({"jsonrpc":"2.0","id":31,"result":{}})
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("a.txt")).expect("read"),
        "hello"
    );
    // A file no answered request names is asked about.
    send_write(&mut agent, 32, "b.txt", "other").await;
    let ask = next_ask(&mut asks).await;
    assert_write_question(&ask, 32, "b.txt");
    assert!(ask.respond(PermissionDecision::Select(WRITE_REJECT.into())));
    assert_refused(
        &agent.recv().await,
        codes::PERMISSION_DENIED,
        &root,
        "b.txt",
    );
    // The person saw two questions: the agent's, then the one for b.txt.
    assert_eq!(next_question(&mut events).await, json!(30));
    assert_eq!(next_question(&mut events).await, json!(32));

    // Allowed once: the tool call's end ends the grant.
    tool_call_update(
        &mut agent,
        json!({"sessionUpdate":"tool_call_update","toolCallId":"X","status":"completed"}),
    )
    .await;
    send_write(&mut agent, 33, "a.txt", "again").await;
    let ask = next_ask(&mut asks).await;
    assert_write_question(&ask, 33, "a.txt");
    assert!(ask.respond(PermissionDecision::Select(WRITE_ALLOW.into())));
    assert_eq!(agent.recv().await["result"], json!({}));
    agent.end_turn(&request, "end_turn").await;
    prompt.await.expect("join").expect("prompt");
}
