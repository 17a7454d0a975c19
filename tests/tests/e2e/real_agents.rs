//! Real agents out of the box: Claude Code (and the others in
//! `kandev_e2e::agents`) through their ACP adapters, in the images Kandev
//! builds itself from the repository's recipes, against a scripted
//! stand-in for their vendor's model API on the container's own loopback.
//!
//! Per agent, through the four services and through `kandev`:
//! - picked as a user would (the built-in type, the key stored as a secret),
//!   the image is built on first use and the agent itself answers;
//! - a turn reads and edits a file of the task's clone after a permission
//!   asked and approved through the stream, and the edit shows in Changes;
//! - a follow-up resumes the same session (the answer depends on the first
//!   turn);
//! - a cancel mid-turn ends the turn `cancelled`;
//! - a wrong key ends the task FAILED with the vendor's words.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use kandev_e2e::{
    Api, Feed, Options, Stack, Svc,
    agents::{self, GOOD_KEY, RealAgent},
    chunk_text, deployments, is_turn_end, kind,
    serde_json::{Value, json},
};

/// One agent type's runs take turns across the two stacks of this file.
/// Both log in as `admin` on one Docker engine, so both use the same home
/// volume (one per user and agent type on an engine), and two adapters
/// starting at the same instant on one home race: codex's state database
/// refused the second ("failed to initialize sqlite state runtime").
fn home_turn(agent: &RealAgent) -> Arc<tokio::sync::Mutex<()>> {
    static HOMES: Mutex<BTreeMap<&str, Arc<tokio::sync::Mutex<()>>>> = Mutex::new(BTreeMap::new());
    HOMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(agent.type_id)
        .or_default()
        .clone()
}

/// The built-in type of `agent` picked, then its scripted copy through a
/// permission, a follow-up, a cancel and a wrong key.
async fn scripted_turns_on(agent: RealAgent, test: &str, mut options: Options) {
    let home = home_turn(&agent);
    let _turn = home.lock().await;
    let base = tokio::task::spawn_blocking(kandev_e2e::ensure_agent_base)
        .await
        .unwrap();
    options.env.push((
        Svc::AgentManager,
        "KANDEV_AGENT_BASE_IMAGE".into(),
        base.into(),
    ));
    let stack = Stack::start(test, options).await;
    let api = stack.admin().await;
    api.set_secret(agent.key_env, GOOD_KEY).await;
    let board = api.board(test).await;

    the_built_in_type_builds_its_image_and_reaches_the_agent(&stack, &api, &board, &agent).await;
    let scripted = register_scripted_type(&api, &agent).await;
    let task = edit_after_permission(&stack, &api, &board, &scripted).await;
    follow_up_resumes_then_cancel(&api, &task, &agent).await;
    // A user of this stack only: the other stack of this file must not
    // find what this one's agent left in the user's home volume.
    let mallory = format!("mallory-{test}");
    wrong_key_fails_in_plain_words(&stack, &api, &agent, &scripted, &mallory).await;
    stack.stop().await;
}

/// The built-in type, as the picker offers it: its image is built (or
/// found) and the adapter itself answers `initialize`, never "could not
/// be pulled". The agent has no way to its vendor here, so the task is
/// cancelled once the agent answered.
async fn the_built_in_type_builds_its_image_and_reaches_the_agent(
    stack: &Stack,
    api: &Api,
    board: &str,
    agent: &RealAgent,
) {
    let listed = listed_type(api, agent.type_id).await;
    assert!(
        ["present", "missing", "building"].contains(&listed["image_status"].as_str().unwrap_or("")),
        "{listed}"
    );
    assert_eq!(listed["missing_env"], json!([]), "{listed}");
    let repo = stack.git_repo(&format!("{}-builtin", agent.type_id));
    let task = api
        .task(
            board,
            json!({"title": "Say hello", "description": "hello",
                   "agent_type": agent.type_id, "repository_url": repo, "max_retries": 0}),
        )
        .await;
    let mut feed = Feed::open(api, &task).await;
    let name = agent.acp_name;
    feed.wait_for(900, "the agent's own initialize answer", move |f| {
        f["event"]["data"]["method"] == "initialize"
            && f["event"]["direction"] == "from_agent"
            && f.to_string().contains(name)
    })
    .await;
    let listed = listed_type(api, agent.type_id).await;
    assert_eq!(listed["image_status"], "present", "{listed}");
    let t = api.get(&format!("/api/v1/tasks/{task}")).await;
    let said = t.body["metadata"]["agent_image"]
        .as_str()
        .unwrap_or_default();
    assert!(
        said.is_empty() || said.contains(&agent.image()),
        "the card names the image it prepared: {}",
        t.body
    );
    let cancelled = api
        .post(
            &format!("/api/v1/orchestrator/tasks/{task}/stop"),
            json!({}),
        )
        .await;
    assert!(cancelled.status < 300, "{}", cancelled.body);
    feed.close().await;
}

/// The type as `GET /api/v1/agent-types` lists it.
async fn listed_type(api: &Api, id: &str) -> Value {
    let types = api.get("/api/v1/agent-types").await;
    assert_eq!(types.status, 200, "{}", types.body);
    types.body["agent_types"]
        .as_array()
        .or(types.body.as_array())
        .and_then(|all| all.iter().find(|t| t["id"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("{id} listed: {}", types.body))
}

/// A copy of the built-in type whose container also runs the stand-in;
/// its image layers the stand-in onto the one Kandev built.
async fn register_scripted_type(api: &Api, agent: &RealAgent) -> String {
    let agent = *agent;
    let image = tokio::task::spawn_blocking(move || agents::scripted_image(&agent))
        .await
        .unwrap();
    let id = format!("{}-scripted", agent.type_id);
    let made = api
        .post(
            "/api/v1/agent-types",
            json!({"id": id, "name": format!("{} (scripted)", agent.type_id),
                   "image": image, "command": agent.scripted_command(),
                   "capabilities": ["acp", "fs", "terminal"],
                   "required_env": [agent.key_env],
                   "memory_mb": 2048, "cpu_cores": 1.0, "pids_limit": 512, "timeout_seconds": 600,
                   "network_mode": "none", "permission_policy": "ask",
                   "home_volume": "/home/agent"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    id
}

/// The first turn: read, ask, write; the edit is in the clone and in
/// Changes.
async fn edit_after_permission(stack: &Stack, api: &Api, board: &str, scripted: &str) -> String {
    let repo = stack.git_repo(&format!("{scripted}-edit"));
    let task = api
        .task(
            board,
            json!({"title": "Edit the readme",
                   "description": "Please edit.\nkandev: edit README.md => changed by a real agent",
                   "agent_type": scripted, "repository_url": repo, "max_retries": 0}),
        )
        .await;
    let mut feed = Feed::open(api, &task).await;
    let ask = feed
        .wait_for(300, "a permission request", |f| {
            kind(f) == "permission_request"
        })
        .await;
    api.wait_state(&task, &["WAITING_FOR_INPUT"], 60).await;
    let data = &ask["event"]["data"];
    let once = data["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["option_kind"] == "allow_once" || o["kind"] == "allow_once")
        .unwrap_or_else(|| panic!("an allow_once option: {ask}"));
    let option = once["option_id"]
        .as_str()
        .or(once["optionId"].as_str())
        .unwrap();
    let ack = feed
        .command(
            json!({"type": "permission", "request_id": data["request_id"].to_string(),
                   "option_id": option}),
            30,
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let end = feed.wait_for(300, "turn_end", is_turn_end).await;
    assert_eq!(end["event"]["data"]["stop_reason"], "end_turn", "{end}");
    assert!(
        chunk_text(&feed.frames).contains("Edited"),
        "{:?}",
        feed.kinds()
    );
    // One question for the one edit: the agent's own, never Kandev's again
    // for the file write it asked about.
    let asked = feed
        .frames
        .iter()
        .filter(|f| kind(f) == "permission_request");
    assert_eq!(asked.count(), 1, "{:?}", feed.kinds());
    no_unknown_frames(&feed.frames);
    api.wait_state(&task, &["COMPLETED"], 60).await;

    let written = std::fs::read_to_string(stack.workspace(&task).join("README.md")).unwrap();
    assert_eq!(written.trim(), "changed by a real agent");
    let changes = api.get(&format!("/api/v1/tasks/{task}/changes")).await;
    assert_eq!(changes.status, 200, "{}", changes.body);
    let files = changes.body["files"].to_string();
    assert!(files.contains("README.md"), "{}", changes.body);
    // Whatever the agent wrote about itself stays out of Changes.
    assert!(!files.contains(".claude"), "{}", changes.body);
    feed.close().await;
    task
}

/// A follow-up resumes the session (the answer names the first prompt);
/// a slow turn is cancelled mid-way.
async fn follow_up_resumes_then_cancel(api: &Api, task: &str, agent: &RealAgent) {
    let session = api.execution(task).await.body["acp_session_id"].clone();
    assert!(session.as_str().is_some_and(|s| !s.is_empty()), "{session}");
    if agent.resume_in_a_later_minute {
        // See `RealAgent::resume_in_a_later_minute`: a condition on the
        // clock, not a guess at a duration.
        let minute = chrono::Utc::now().format("%H:%M").to_string();
        kandev_e2e::eventually(70, "a later minute", || {
            let minute = minute.clone();
            async move { (chrono::Utc::now().format("%H:%M").to_string() != minute).then_some(()) }
        })
        .await;
    }
    let mut feed = Feed::open(api, task).await;
    feed.drain(Duration::from_millis(500)).await;
    let seen = feed.frames.len();
    let ack = feed
        .command(json!({"type": "prompt", "text": "kandev: recall"}), 60)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let end = feed
        .wait_for(300, "the follow-up's turn_end", is_turn_end)
        .await;
    assert_eq!(end["event"]["data"]["stop_reason"], "end_turn", "{end}");
    let answer = chunk_text(&feed.frames[seen..]);
    assert!(
        answer.contains("You first asked: Edit the readme"),
        "the resumed session knows the first turn: {answer}"
    );
    api.wait_state(task, &["COMPLETED"], 60).await;
    assert_eq!(api.execution(task).await.body["acp_session_id"], session);

    let seen = feed.frames.len();
    feed.command(json!({"type": "prompt", "text": "kandev: slow"}), 60)
        .await;
    feed.wait_for(300, "the slow answer streaming", move |f| {
        kind(f) == "message_chunk" && f.to_string().contains("Working slowly, step")
    })
    .await;
    let ack = feed.command(json!({"type": "cancel"}), 30).await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let end = feed
        .wait_for(120, "the cancelled turn_end", is_turn_end)
        .await;
    assert_eq!(end["event"]["data"]["stop_reason"], "cancelled", "{end}");
    no_unknown_frames(&feed.frames[seen..]);
    feed.close().await;
}

/// A wrong key: FAILED soon, with the vendor's own words. Another user's
/// (their own key, their own agent home: an agent that keeps a login in
/// its home, as Codex does, starts from nothing).
async fn wrong_key_fails_in_plain_words(
    stack: &Stack,
    admin: &Api,
    agent: &RealAgent,
    scripted: &str,
    user: &str,
) {
    let api = stack.user(admin, user, "a-long-password").await;
    api.set_secret(agent.key_env, "wrong-key").await;
    let board = api.board("wrong key").await;
    let repo = stack.git_repo(&format!("{scripted}-wrong-key"));
    let started = Instant::now();
    let task = api
        .task(
            &board,
            json!({"title": "Wrong key", "description": "hello",
                   "agent_type": scripted, "repository_url": repo, "max_retries": 0}),
        )
        .await;
    let failed = api.wait_state(&task, &["FAILED"], 120).await;
    let took = started.elapsed();
    let text = failed.to_string();
    assert!(text.contains(agent.wrong_key_words), "{failed}");
    assert!(took < Duration::from_secs(30), "failed after {took:?}");
    eprintln!(
        "{}: a wrong key failed the task after {took:?}",
        agent.type_id
    );
}

/// Every frame is one the feed knows how to show: no raw protocol errors.
fn no_unknown_frames(frames: &[Value]) {
    for f in frames {
        assert_ne!(kind(f), "protocol_error", "{f}");
    }
}

deployments! {
    scripted_turns_on("claude", agents::CLAUDE),
    four: claude_code_completes_scripted_turns,
    single: claude_code_completes_scripted_turns_single,
}

deployments! {
    scripted_turns_on("codex", agents::CODEX),
    four: codex_completes_scripted_turns,
    single: codex_completes_scripted_turns_single,
}

deployments! {
    scripted_turns_on("gemini", agents::GEMINI),
    four: gemini_completes_scripted_turns,
    single: gemini_completes_scripted_turns_single,
}
