//! The seed's agent contract, as a client written against AGENTS.md uses it
//! through the gateway: the example launch body, a follow-up mid-turn,
//! status, session, logs, a cancel without a body, session resumption in a
//! new container through `AUGGIE_SESSION_ID`, and the seed's own example
//! agent in a container.

use kandev_e2e::{
    Api, Feed, Options, Stack, eventually, is_turn_end, kind,
    serde_json::{Value, json},
};

/// Waits until the instance's status is one of `statuses`; the instance.
async fn wait_instance(api: &Api, id: &str, statuses: &[&str]) -> Value {
    let path = format!("/api/v1/agents/{id}/status");
    eventually(120, "the instance's status", || async {
        let r = api.get(&path).await;
        (r.status == 200 && statuses.iter().any(|s| r.body["status"] == *s)).then_some(r.body)
    })
    .await
}

fn turn_ends(feed: &Feed) -> Vec<&Value> {
    feed.frames.iter().filter(|f| is_turn_end(f)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_agent_endpoints_work_as_documented() {
    let stack = Stack::start("seed_endpoints", Options::default()).await;
    let api = stack.admin().await;
    let board = api.board("seed").await;
    let task = api.task(&board, json!({"title": "Seed launch"})).await;
    let project = stack.project("project");

    // The seed's request body: the task through env.TASK_DESCRIPTION, no
    // prompt; priority and metadata kept on the instance.
    let launched = api
        .post(
            "/api/v1/agents/launch",
            json!({
                "task_id": task,
                "agent_type": "mock-agent",
                "workspace_path": project,
                "env": {"TASK_DESCRIPTION": "slow 30 100"},
                "priority": 1,
                "metadata": {"ticket": "AUTH-1"}
            }),
        )
        .await;
    assert_eq!(launched.status, 201, "{}", launched.body);
    let body = &launched.body;
    let id = body["id"].as_str().expect("instance id").to_string();
    assert_eq!(body["task_id"], task.as_str(), "{body}");
    assert_eq!(body["agent_type"], "mock-agent", "{body}");
    assert!(body["container_id"].is_string(), "{body}");
    assert!(
        ["pending", "starting", "running"].contains(&body["status"].as_str().unwrap_or("")),
        "{body}"
    );
    assert_eq!(body["priority"], 1, "{body}");
    assert_eq!(body["metadata"], json!({"ticket": "AUTH-1"}), "{body}");

    let mut feed = Feed::open(&api, &task).await;
    let running = wait_instance(&api, &id, &["running"]).await;
    for field in ["id", "status", "progress", "started_at", "finished_at"] {
        assert!(running.get(field).is_some(), "{field} in {running}");
    }
    // A follow-up mid-execution is accepted, and runs after the turn.
    let follow = api
        .post(
            &format!("/api/v1/agents/{id}/prompt"),
            json!({"message": "echo the follow-up ran"}),
        )
        .await;
    assert_eq!(follow.status, 200, "{}", follow.body);
    assert_eq!(follow.body["accepted"], true);
    feed.wait_for(120, "the follow-up's reply", |f| {
        f.to_string().contains("the follow-up ran") && kind(f) == "message_chunk"
    })
    .await;
    feed.wait_for(60, "the second turn's end", is_turn_end)
        .await;
    // The feed showed it queued, with its text, before it ran.
    let queued = feed
        .frames
        .iter()
        .find(|f| kind(f) == "lifecycle" && f["event"]["data"]["phase"] == "prompt_queued")
        .unwrap_or_else(|| panic!("the queued prompt is in the feed: {:?}", feed.kinds()));
    assert_eq!(
        queued["event"]["data"]["detail"], "echo the follow-up ran",
        "{queued}"
    );
    let ends = turn_ends(&feed);
    assert!(ends.len() >= 2, "two turns ended: {:?}", feed.kinds());
    let reply_seq = feed
        .frames
        .iter()
        .find(|f| kind(f) == "message_chunk" && f.to_string().contains("the follow-up ran"))
        .and_then(|f| f["seq"].as_i64())
        .unwrap();
    assert!(
        ends[0]["seq"].as_i64().unwrap() < reply_seq,
        "the follow-up ran after the first turn ended"
    );
    assert!(queued["seq"].as_i64().unwrap() < reply_seq);

    let session = api.get(&format!("/api/v1/agents/{id}/session")).await;
    assert_eq!(session.status, 200, "{}", session.body);
    assert_eq!(session.body["instance_id"], id.as_str());
    assert_eq!(session.body["task_id"], task.as_str());
    assert!(
        session.body["session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    assert!(session.body["status"].is_string());
    let logs = api.get(&format!("/api/v1/agents/{id}/logs?tail=100")).await;
    assert_eq!(logs.status, 200, "{}", logs.body);
    let status = api.get(&format!("/api/v1/agents/{id}/status")).await;
    assert_eq!(status.body["priority"], 1, "{}", status.body);
    feed.close().await;

    // Cancel without a body, as the seed's clients send it.
    let waiting = api.task(&board, json!({"title": "Seed cancel"})).await;
    let launched = api
        .post(
            "/api/v1/agents/launch",
            json!({"task_id": waiting, "agent_type": "mock-agent",
                   "workspace_path": stack.project("cancel"),
                   "env": {"TASK_DESCRIPTION": "wait-cancel"}}),
        )
        .await;
    assert_eq!(launched.status, 201, "{}", launched.body);
    let cancel_id = launched.body["id"].as_str().unwrap().to_string();
    let mut feed = Feed::open(&api, &waiting).await;
    feed.wait_for(120, "the agent waiting for session/cancel", |f| {
        f.to_string().contains("Waiting for session/cancel")
    })
    .await;
    let cancelled = api
        .send("POST", &format!("/api/v1/agents/{cancel_id}/cancel"), None)
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["cancelled"], true, "{}", cancelled.body);
    let end = feed
        .wait_for(60, "the cancelled turn's end", is_turn_end)
        .await;
    assert_eq!(end["event"]["data"]["stop_reason"], "cancelled", "{end}");
    feed.close().await;
    stack.stop().await;
}

/// The seed's resumption: the session id from the first task's metadata,
/// `env.AUGGIE_SESSION_ID` on a new task's launch, and the agent continues
/// that session in a new container, because its home directory (here the
/// mock agent's session store) lives in a volume of the agent type and the
/// user. Another user's launch with the same id finds no such session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_in_a_new_container_through_auggie_session_id() {
    let stack = Stack::start("seed_resume", Options::default()).await;
    let api = stack.admin().await;
    // A mock agent whose session store is kept in a home volume.
    let type_id = format!("mock-home-{}", &uuid_suffix());
    let created = api
        .post(
            "/api/v1/agent-types",
            json!({"id": type_id, "name": "Mock agent with a home",
                   "image": "kandev/mock-agent:latest", "memory_mb": 256,
                   "cpu_cores": 0.5, "pids_limit": 64, "timeout_seconds": 600,
                   "capabilities": ["acp", "fs"], "network_mode": "none",
                   "home_volume": "/root/.kandev-mock"}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["home_volume"], "/root/.kandev-mock");
    let env = |extra: Value| {
        let mut env = json!({"TASK_DESCRIPTION": "scenario: code",
                             "KANDEV_MOCK_STATE_DIR": "/root/.kandev-mock"});
        env.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        env
    };
    let board = api.board("resume").await;
    let launch = |api: Api, task: String, env: Value| {
        let repo = stack.git_repo(&task);
        let type_id = type_id.clone();
        async move {
            let r = api
                .post(
                    "/api/v1/agents/launch",
                    json!({"task_id": task, "agent_type": type_id,
                           "repository_url": repo, "env": env}),
                )
                .await;
            assert_eq!(r.status, 201, "{}", r.body);
            r.body["id"].as_str().unwrap().to_string()
        }
    };

    let first_task = api.task(&board, json!({"title": "First"})).await;
    let first = launch(api.clone(), first_task.clone(), env(json!({}))).await;
    let done = wait_instance(&api, &first, &["completed", "failed"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    let session = api.get(&format!("/api/v1/agents/{first}/session")).await;
    let session_id = session.body["session_id"].as_str().unwrap().to_string();

    let second_task = api.task(&board, json!({"title": "Second"})).await;
    let second = launch(
        api.clone(),
        second_task.clone(),
        env(json!({"AUGGIE_SESSION_ID": session_id})),
    )
    .await;
    let done = wait_instance(&api, &second, &["completed", "failed"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_ne!(
        done["container_id"],
        api.get(&format!("/api/v1/agents/{first}/status"))
            .await
            .body["container_id"]
    );
    let resumed = api.get(&format!("/api/v1/agents/{second}/session")).await;
    assert_eq!(resumed.body["session_id"], session_id.as_str());
    // The agent knew the session: the new workspace got its turn 2.
    let readme = std::fs::read_to_string(stack.workspace(&second_task).join("README.md")).unwrap();
    assert!(
        readme.contains("Edited by kandev-mock-agent (turn 2)."),
        "{readme}"
    );

    // Another user's agents have another home: the id resumes nothing. The
    // load fails there, and the run goes on in a new session of its own
    // (its task's conversation, empty, summarised: nothing of the owner's).
    let made = api
        .post(
            "/api/v1/users",
            json!({"username": "bob", "password": "correct horse battery"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let bob = stack.login("bob", "correct horse battery").await;
    let bob_board = bob.board("bob").await;
    let bob_task = bob.task(&bob_board, json!({"title": "Not mine"})).await;
    let stolen = launch(
        bob.clone(),
        bob_task.clone(),
        env(json!({"AUGGIE_SESSION_ID": session_id})),
    )
    .await;
    let done = wait_instance(&bob, &stolen, &["completed", "failed"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    // A first turn of a new session, not the owner's second.
    let readme = std::fs::read_to_string(stack.workspace(&bob_task).join("README.md")).unwrap();
    assert!(
        readme.contains("Edited by kandev-mock-agent (turn 1).") && !readme.contains("(turn 2)"),
        "{readme}"
    );

    stack.stop().await;
    remove_home_volumes(&type_id);
}

/// The seed's example agent (AGENTS.md's `agent.sh`, in its own image) as an
/// agent type through the whole stack, with a prompt containing double
/// quotes: the script then writes a line that is not JSON, which is
/// reported in the feed, and the turn still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_example_agent_completes_a_task_with_a_quoted_prompt() {
    tokio::task::spawn_blocking(kandev_e2e::ensure_seed_agent_image)
        .await
        .expect("the seed agent's image");
    let stack = Stack::start("seed_agent", Options::default()).await;
    let api = stack.admin().await;
    let board = api.board("seed agent").await;
    let task = api
        .task(
            &board,
            json!({"title": "Quoted", "description": "Fix the \"login\" bug",
                   "agent_type": "seed-agent", "max_retries": 0}),
        )
        .await;
    let mut feed = Feed::open(&api, &task).await;
    let end = feed.wait_for(120, "the turn's end", is_turn_end).await;
    assert_eq!(end["event"]["data"]["stop_reason"], "end_turn", "{end}");
    let done = api.wait_state(&task, &["COMPLETED", "FAILED"], 60).await;
    assert_eq!(done["state"], "COMPLETED", "{done}");
    let bad = feed
        .frames
        .iter()
        .find(|f| kind(f) == "protocol_error")
        .unwrap_or_else(|| panic!("the bad line is reported: {:?}", feed.kinds()));
    assert!(
        bad["event"]["raw"]
            .as_str()
            .is_some_and(|raw| raw.contains("\"text\":\"Processing: ")),
        "{bad}"
    );
    feed.close().await;
    stack.stop().await;
}

fn uuid_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{:x}", nanos ^ u128::from(std::process::id()))
}

/// Removes the home volumes of `agent_type` (labelled `kandev.home`); errors
/// are ignored (cleanup).
fn remove_home_volumes(agent_type: &str) {
    let listed = std::process::Command::new("docker")
        .args(["volume", "ls", "-q", "--filter"])
        .arg(format!("label=kandev.home={agent_type}"))
        .output();
    let names = listed
        .map(|out| String::from_utf8_lossy(&out.stdout).to_string())
        .unwrap_or_default();
    let names: Vec<&str> = names.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(names.len(), 2, "one home volume per user: {names:?}");
    let _ = std::process::Command::new("docker")
        .args(["volume", "rm", "-f"])
        .args(&names)
        .output();
}
