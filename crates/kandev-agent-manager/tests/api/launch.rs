use kandev_proto::v1 as pb;
use uuid::Uuid;

use crate::helpers::{
    Launched, TaskWatch, containers_of, git_repo, inspect, launch_request, spawn_app,
    spawn_app_with,
};

#[tokio::test]
async fn coding_turn_streams_in_order_and_edits_the_workspace() {
    let mut app = spawn_app().await;
    let Launched {
        task,
        mut watch,
        instance,
        ..
    } = app.launch_watched("mock-agent", "code README.md").await;
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    assert_eq!(done["instance_id"], instance.id.as_str());
    assert!(
        done["summary"].as_str().unwrap().contains("README.md"),
        "summary: {done}"
    );
    watch.assert_one_completed_run();

    // Every event, in order, with contiguous seq from 1.
    watch.assert_contiguous();
    let seqs = watch.seqs();
    let kinds = watch.kinds();
    for kind in [
        "lifecycle",
        "plan",
        "tool_call",
        "tool_call_update",
        "message_chunk",
        "turn_end",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in {kinds:?}");
    }

    // The file really changed, through fs/* on the host workspace.
    let readme = app
        .path("workspaces")
        .join(task.to_string())
        .join("README.md");
    let text = std::fs::read_to_string(readme).unwrap();
    assert!(
        text.contains("Edited by kandev-mock-agent (turn 1)"),
        "{text}"
    );

    // The task worked on its own branch; its changes are the agent's edit.
    let changes = app.changes(task).await;
    let short = &task.simple().to_string()[24..];
    assert_eq!(changes.branch, format!("kandev/{short}-edit-the-readme"));
    assert_eq!(changes.base_branch, "main");
    assert_ne!(changes.base_commit, "");
    let readme = changes
        .files
        .iter()
        .find(|f| f.path == "README.md")
        .unwrap_or_else(|| panic!("README.md not in {:?}", changes.files));
    assert_eq!(readme.status, "modified");
    assert!(readme.additions >= 1, "{readme:?}");
    let diff = app.file_diff(task, "README.md").await;
    assert!(
        diff.diff.contains("+Edited by kandev-mock-agent (turn 1)"),
        "{}",
        diff.diff
    );
    let unknown = app
        .client
        .get_changes(pb::GetChangesRequest {
            task_id: Uuid::new_v4().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);

    let status = app.status(&instance.id).await;
    assert_eq!(status.status, pb::AgentStatus::Completed as i32);
    assert_eq!(status.progress, 1.0);
    assert_eq!(status.stop_reason, "end_turn");
    assert_eq!(status.last_seq, *seqs.last().unwrap() as i64);
    assert!(!status.acp_session_id.is_empty());
    assert!(
        containers_of(&instance.id).is_empty(),
        "container left behind"
    );
    app.stop().await;
}

#[tokio::test]
async fn follow_up_prompt_continues_the_session() {
    let mut app = spawn_app().await;
    let (mut watch, instance) = app
        .launch_watched("mock-agent", "echo first question")
        .await
        .split();
    let first = watch.until("agent.completed", 0).await;
    let first_count = watch.events.len();
    app.send_prompt(&instance.id, "echo second question").await;
    let second = watch.until("agent.completed", 1).await;
    assert_eq!(first["acp_session_id"], second["acp_session_id"]);
    assert!(
        second["summary"]
            .as_str()
            .unwrap()
            .contains("second question")
    );
    // The session was loaded (its history replayed), and numbering went on.
    watch.assert_contiguous();
    let later = &watch.events[first_count..];
    assert!(
        later
            .iter()
            .any(|e| e["kind"] == "lifecycle" && e["data"]["phase"] == "session_loaded"),
        "no session_loaded in {later:?}"
    );
    let session = app.session(&instance.id).await;
    assert_eq!(
        session.session_id,
        first["acp_session_id"].as_str().unwrap()
    );
    app.stop().await;
}

#[tokio::test]
async fn cancel_ends_the_turn_cancelled() {
    let mut app = spawn_app().await;
    let (mut watch, instance) = app
        .launch_until_it_speaks("mock-agent", "wait-cancel")
        .await;
    // A prompt sent mid-turn is queued; cancelling the turn drops it.
    app.send_prompt(&instance.id, "echo never sent").await;
    assert!(app.cancel(&instance.id).await);
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "cancelled");
    assert!(containers_of(&instance.id).is_empty());
    assert!(
        !watch.events.iter().any(|e| e["data"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("never sent"))),
        "the queued prompt ran after the cancel"
    );
    app.stop().await;
}

/// Issue 37: follow-ups sent mid-turn were queued without bound (150 of
/// 1 MiB each grew the manager by 154 MiB). The queue holds at most
/// `MAX_QUEUED_PROMPTS`; the next is refused with ResourceExhausted (HTTP
/// 429), a prompt over `MAX_PROMPT_BYTES` with InvalidArgument, and the
/// cancel drops the queue so a new follow-up is taken again.
#[tokio::test]
async fn follow_ups_beyond_the_cap_are_refused_until_the_turn_is_cancelled() {
    use kandev_agent_manager::runner::{MAX_PROMPT_BYTES, MAX_QUEUED_PROMPTS};
    let mut app = spawn_app().await;
    let (mut watch, instance) = app
        .launch_until_it_speaks("mock-agent", "wait-cancel")
        .await;
    let prompt = |text: String| pb::SendPromptRequest {
        instance_id: instance.id.clone(),
        prompt: text,
    };
    for n in 0..MAX_QUEUED_PROMPTS {
        app.client
            .send_prompt(prompt(format!("echo queued {n}")))
            .await
            .unwrap();
    }
    let refused = app
        .client
        .send_prompt(prompt("echo one too many".into()))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert_eq!(
        refused.message(),
        format!(
            "this run already has {MAX_QUEUED_PROMPTS} follow-ups waiting; wait for the turn to end"
        )
    );
    let huge = app
        .client
        .send_prompt(prompt("x".repeat(MAX_PROMPT_BYTES + 1)))
        .await
        .unwrap_err();
    assert_eq!(huge.code(), tonic::Code::InvalidArgument, "{huge:?}");

    assert!(app.cancel(&instance.id).await);
    // The queue went with the cancel: a follow-up is taken again, and runs
    // as the next turn once the cancelled one ended.
    app.client
        .send_prompt(prompt("echo after the cancel".into()))
        .await
        .unwrap();
    let first = watch.until("agent.completed", 0).await;
    assert_eq!(first["stop_reason"], "cancelled");
    let next = watch.until("agent.completed", 1).await;
    assert_eq!(next["stop_reason"], "end_turn");
    assert!(
        next["summary"]
            .as_str()
            .is_some_and(|s| s.contains("after the cancel")),
        "{next}"
    );
    let ran_queued = watch.events.iter().any(|e| {
        e["kind"] == "message_chunk"
            && e["data"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("queued 0"))
    });
    assert!(!ran_queued, "a prompt queued before the cancel ran");
    let dropped = watch.events.iter().any(|e| {
        e["kind"] == "lifecycle"
            && e["data"]["phase"] == "queue_dropped"
            && e["data"]["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with(&format!("{MAX_QUEUED_PROMPTS} queued prompt(s)")))
    });
    assert!(dropped, "no queue_dropped event: {:?}", watch.events);
    app.stop().await;
}

#[tokio::test]
async fn a_prompt_sent_mid_turn_runs_when_the_current_prompt_ends() {
    let mut app = spawn_app().await;
    let (mut watch, instance) = app
        .launch_until_it_speaks("mock-agent", "slow 10 200")
        .await;
    // The seed's "mid-execution" follow-up: accepted while the turn runs.
    for text in ["echo queued one", "echo queued two"] {
        app.client
            .send_prompt(pb::SendPromptRequest {
                instance_id: instance.id.clone(),
                prompt: text.into(),
            })
            .await
            .unwrap();
    }
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    // Both ran in the same session and container, in order, before the run
    // completed once.
    let text: String = watch
        .events
        .iter()
        .filter(|e| e["kind"] == "message_chunk" && e["data"]["role"] == "agent")
        .filter_map(|e| e["data"]["text"].as_str())
        .collect();
    let one = text.find("queued one").expect("first queued prompt ran");
    let two = text.find("queued two").expect("second queued prompt ran");
    assert!(one < two, "{text}");
    watch.assert_one_completed_run();
    watch.assert_contiguous();
    assert!(containers_of(&instance.id).is_empty());
    app.stop().await;
}

#[tokio::test]
async fn limits_and_read_only_credentials_are_applied_then_stop_removes() {
    let mut app = spawn_app_with(|s| {
        s.workspace_policy = kandev_agent_manager::config::WorkspacePolicy::RemoveOnStop;
        for (k, v) in [
            ("GITHUB_TOKEN", "ghp-test-token"),
            ("GITLAB_TOKEN", "glpat-unused"),
        ] {
            s.agent_env.insert(k.into(), v.to_string().into());
        }
    })
    .await;
    let home = app.path("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_test"), "not a key").unwrap();
    std::fs::write(home.join(".gitconfig"), "[user]\n\tname = t\n").unwrap();
    app.mock_type("mock-limited", |t| {
        t.memory_mb = 128;
        t.cpu_cores = 0.5;
        t.pids_limit = 32;
        t.credential_mounts = Some(pb::CredentialMounts {
            ssh: true,
            gitconfig: true,
            git_credentials: true,
        });
        t.optional_env = vec!["GITHUB_TOKEN".into()];
        // The operator's files are mounted only on an admin's opt-in.
        t.host_credentials = true;
    })
    .await;
    let Launched {
        task,
        mut watch,
        instance,
        ..
    } = app.launch_watched("mock-limited", "wait-cancel").await;
    watch.until("agent.running", 0).await;
    let ids = containers_of(&instance.id);
    assert_eq!(ids.len(), 1);
    let info = inspect(&ids[0]);
    let host = &info["HostConfig"];
    assert_eq!(host["Memory"], 128 * 1024 * 1024);
    assert_eq!(host["NanoCpus"], 500_000_000);
    assert_eq!(host["PidsLimit"], 32);
    assert_eq!(host["NetworkMode"], "none");
    assert_eq!(info["Config"]["NetworkDisabled"], true);
    assert_eq!(
        info["NetworkSettings"]["Networks"],
        serde_json::json!({}),
        "joined to no network"
    );
    // A network namespace of its own, with only the loopback device.
    let pid = info["State"]["Pid"].as_i64().unwrap();
    let netns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_ne!(netns(&pid.to_string()), netns("self"));
    let devices = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap();
    let devices: Vec<_> = devices
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(devices, ["lo"]);
    assert_eq!(host["CapDrop"], serde_json::json!(["ALL"]));
    assert!(
        host["SecurityOpt"]
            .to_string()
            .contains("no-new-privileges")
    );
    assert_eq!(info["Config"]["OpenStdin"], true);
    assert_eq!(info["Config"]["StdinOnce"], false);
    assert_eq!(
        info["Config"]["Labels"]["kandev.task_id"],
        task.to_string().as_str()
    );
    assert_eq!(
        info["Config"]["Labels"]["kandev.instance_id"],
        instance.id.as_str()
    );
    let mounts = info["Mounts"].as_array().unwrap();
    let mount = |dest: &str| {
        mounts
            .iter()
            .find(|m| m["Destination"] == dest)
            .unwrap_or_else(|| panic!("no mount at {dest}: {mounts:?}"))
            .clone()
    };
    assert_eq!(mount("/workspace")["RW"], true);
    assert_eq!(mount("/home/agent/.ssh")["RW"], false);
    assert_eq!(mount("/home/agent/.gitconfig")["RW"], false);
    // No .git-credentials in the fake home, so nothing is mounted for it.
    assert!(
        mounts
            .iter()
            .all(|m| m["Destination"] != "/home/agent/.git-credentials")
    );
    // Configured tokens reach the agent only when its type lists them.
    let env = info["Config"]["Env"].to_string();
    assert!(env.contains("GITHUB_TOKEN=ghp-test-token"), "{env}");
    assert!(!env.contains("GITLAB_TOKEN"), "{env}");
    let workspace = app.path("workspaces").join(task.to_string());
    assert!(workspace.join("README.md").exists());

    let stopped = app
        .client
        .stop_agent(pb::StopAgentRequest {
            instance_id: instance.id.clone(),
            reason: "enough".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .instance
        .unwrap();
    assert_eq!(stopped.status, pb::AgentStatus::Stopped as i32);
    watch.until("agent.stopped", 0).await;
    assert!(containers_of(&instance.id).is_empty());
    // The cloned workspace goes with the instance under remove_on_stop.
    assert!(!workspace.exists());
    // Nothing the API returns carries a secret.
    let listed = format!("{:?}", app.instances_of(task).await);
    assert!(!listed.contains("ghp-test-token"));
    app.stop().await;
}

#[tokio::test]
async fn permission_ask_waits_for_respond_permission() {
    let mut app = spawn_app().await;
    app.mock_type("mock-ask", |t| t.permission_policy = "ask".into())
        .await;
    let Launched {
        task,
        mut watch,
        instance,
        ..
    } = app
        .launch_watched("mock-ask", "permission granted.txt")
        .await;
    watch
        .until_event(|e| e["kind"] == "permission_request")
        .await;
    let request = watch
        .events
        .iter()
        .find(|e| e["kind"] == "permission_request")
        .unwrap()
        .clone();
    let request_id = request["data"]["request_id"].to_string();
    // The request reaches the decider just after the event; retry briefly.
    let mut answered = false;
    for _ in 0..50 {
        let r = app
            .client
            .respond_permission(pb::RespondPermissionRequest {
                instance_id: instance.id.clone(),
                request_id: request_id.clone(),
                option_id: "allow-once".into(),
                cancelled: false,
                actor: "alice".into(),
            })
            .await;
        match r {
            Ok(_) => {
                answered = true;
                break;
            }
            Err(s) if s.code() == tonic::Code::NotFound => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(s) => panic!("{s:?}"),
        }
    }
    assert!(answered);
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    // The feed names who answered.
    let response = watch
        .events
        .iter()
        .find(|e| e["kind"] == "permission_response")
        .expect("the answer is in the feed");
    assert_eq!(response["data"]["answered_by"], "alice", "{response}");
    assert_eq!(response["data"]["option_id"], "allow-once", "{response}");
    let written = app
        .path("workspaces")
        .join(task.to_string())
        .join("granted.txt");
    assert!(
        std::fs::read_to_string(written)
            .unwrap()
            .contains("permission was granted")
    );
    app.stop().await;
}

#[tokio::test]
async fn stderr_lines_become_logs_and_log_events() {
    let mut app = spawn_app().await;
    let (mut watch, instance) = app.launch_watched("mock-agent", "stderr 3").await.split();
    watch.until("agent.completed", 0).await;
    let log_events = watch
        .events
        .iter()
        .filter(|e| e["kind"] == "log" && e["data"]["source"] == "stderr")
        .count();
    assert!(log_events >= 3, "{:?}", watch.kinds());
    let logs = app.logs(&instance.id, 100).await;
    assert!(logs.len() >= 3, "{logs:?}");
    assert!(logs.iter().all(|l| l.stream == "stderr"));
    app.stop().await;
}

#[tokio::test]
async fn terminal_requests_run_as_docker_exec_in_the_agent_container() {
    let mut app = spawn_app().await;
    app.mock_type("mock-term", |t| {
        t.capabilities = vec!["acp".into(), "fs".into(), "terminal".into()];
    })
    .await;
    let Launched { mut watch, .. } = app.launch_watched("mock-term", "code README.md").await;
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");
    let methods: Vec<&str> = watch
        .events
        .iter()
        .filter(|e| e["direction"] == "from_agent")
        .filter_map(|e| e["raw"]["method"].as_str())
        .collect();
    for m in [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ] {
        assert!(methods.contains(&m), "no {m} in {methods:?}");
    }
    // The image is FROM scratch: `cat` is not there, and the exec in the
    // container says so with its own exit status.
    let verify = watch
        .events
        .iter()
        .rev()
        .find(|e| e["kind"] == "tool_call_update" && e["data"]["tool_call_id"] == "call_exec_1")
        .expect("the verify step ran")
        .clone();
    let raw_output = &verify["raw"]["params"]["update"]["rawOutput"];
    assert_ne!(raw_output["exitCode"], 0, "{verify}");
    assert!(!raw_output["exitCode"].is_null(), "{verify}");
    assert!(
        raw_output["output"]
            .as_str()
            .unwrap_or_default()
            .contains("cat"),
        "{verify}"
    );
    app.stop().await;
}

#[tokio::test]
async fn agent_logs_are_bounded_per_instance() {
    let mut app = spawn_app_with(|s| s.max_log_lines = 2).await;
    let (mut watch, instance) = app.launch_watched("mock-agent", "stderr 6").await.split();
    watch.until("agent.completed", 0).await;
    let logs = app.logs(&instance.id, 0).await;
    assert_eq!(logs.len(), 2, "{logs:?}");
    // The newest lines are the ones kept, oldest first.
    let all: Vec<String> = watch
        .events
        .iter()
        .filter(|e| e["kind"] == "log")
        .map(|e| e["data"]["line"].as_str().unwrap().to_string())
        .collect();
    let kept: Vec<String> = logs.into_iter().map(|l| l.line).collect();
    assert_eq!(kept, all[all.len() - 2..], "{all:?}");
    app.stop().await;
}

#[tokio::test]
async fn launch_can_resume_an_earlier_session() {
    let mut app = spawn_app().await;
    let Launched {
        repo,
        task,
        mut watch,
        ..
    } = app.launch_watched("mock-agent", "echo remember this").await;
    let first = watch.until("agent.completed", 0).await;
    let session = first["acp_session_id"].as_str().unwrap().to_string();
    // A new instance for the same task (same workspace) resumes the session.
    let second = app
        .launch_agent(pb::LaunchAgentRequest {
            resume_session_id: Some(session.clone()),
            ..launch_request(task, "mock-agent", &repo, "echo and now")
        })
        .await;
    let done = watch.until("agent.completed", 1).await;
    assert_eq!(done["instance_id"], second.id.as_str());
    assert_eq!(done["acp_session_id"], session.as_str());
    // The replayed history of the first turn arrives before the new turn.
    let second_events: Vec<&serde_json::Value> = watch
        .events
        .iter()
        .filter(|e| e["session_id"] == session.as_str())
        .collect();
    assert!(
        second_events.iter().any(|e| e["kind"] == "message_chunk"
            && e["data"]["role"] == "user"
            && e["data"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("remember this"))),
        "no replay of the first prompt"
    );

    // The seed's way: the session id in `env.AUGGIE_SESSION_ID`.
    let third = app
        .launch_agent(pb::LaunchAgentRequest {
            env: [("AUGGIE_SESSION_ID".to_string(), session.clone())].into(),
            ..launch_request(task, "mock-agent", &repo, "echo once more")
        })
        .await;
    let done = watch.until("agent.completed", 2).await;
    assert_eq!(done["instance_id"], third.id.as_str());
    assert_eq!(done["acp_session_id"], session.as_str());
    app.stop().await;
}

#[tokio::test]
async fn a_launch_without_a_prompt_runs_the_task_description() {
    let mut app = spawn_app().await;
    let repo = git_repo(app.dir.path());
    let task = Uuid::new_v4();
    let request = |env: &[(&str, &str)]| pb::LaunchAgentRequest {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..launch_request(task, "mock-agent", &repo, "")
    };
    // Neither a prompt nor a description: nothing to do, said clearly.
    let refused = app.client.launch_agent(request(&[])).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("TASK_DESCRIPTION"),
        "{}",
        refused.message()
    );

    // The seed's body: the task comes through env.TASK_DESCRIPTION.
    let mut watch = TaskWatch::start(task).await;
    let instance = app
        .launch_agent(request(&[(
            "TASK_DESCRIPTION",
            "echo from the description",
        )]))
        .await;
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["instance_id"], instance.id.as_str());
    assert!(
        watch.events.iter().any(|e| e["kind"] == "message_chunk"
            && e["data"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("from the description"))),
        "the description was not the prompt: {:?}",
        watch.kinds()
    );
    app.stop().await;
}

/// A caller that goes away mid-launch (an orchestrator killed, a call timed
/// out) does not cut the launch short: the instance is not left pending for
/// ever, its turn runs to the end.
#[tokio::test]
async fn a_launch_whose_caller_goes_away_still_runs() {
    let mut app = spawn_app().await;
    let repo = git_repo(app.dir.path());
    let task = Uuid::new_v4();
    let mut watch = TaskWatch::start(task).await;
    // The call is dropped a moment after it is sent: the stream is reset.
    let call = app
        .client
        .launch_agent(launch_request(task, "mock-agent", &repo, "echo hi"));
    let _ = tokio::time::timeout(std::time::Duration::from_millis(2), call).await;
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn", "{done}");
    app.stop().await;
}
