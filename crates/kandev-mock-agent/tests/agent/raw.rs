//! Raw JSON tests: plain `serde_json` over the agent's pipes.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{
    BIN, RawAgent, TempDir, agent_command, assert_has_kinds, home_of, kinds, message_texts,
    option_kinds, stop_reason, tool_kinds, updates,
};

#[tokio::test]
async fn initialize_advertises_acp_v1() {
    let mut agent = RawAgent::spawn(&[], &[]);
    let resp = agent
        .answer("initialize", json!({ "protocolVersion": 1 }))
        .await;
    let result = &resp["result"];
    assert_eq!(result["protocolVersion"], 1);
    assert_eq!(result["agentCapabilities"]["loadSession"], true);
    assert_eq!(result["authMethods"], json!([]));
    assert_eq!(result["agentInfo"]["name"], "kandev-mock-agent");
    // A client offering a newer version still gets v1.
    let resp = agent
        .answer("initialize", json!({ "protocolVersion": 2 }))
        .await;
    assert_eq!(resp["result"]["protocolVersion"], 1);
    assert!(agent.wait().await.success());
}

#[tokio::test]
async fn echo_streams_the_text_back() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let (ups, resp) = agent.prompt(&sid, "echo hello world").await;
    assert_eq!(message_texts(&ups), ["hello world"]);
    assert!(ups[0]["messageId"].is_string());
    assert_eq!(stop_reason(&resp), "end_turn");
    // Text that names no scenario is echoed whole (the default scenario).
    let (ups, _) = agent.prompt(&sid, "Fix the login bug").await;
    assert_eq!(message_texts(&ups), ["Fix the login bug"]);
    // A `scenario:` line anywhere wins.
    let (ups, _) = agent
        .prompt(&sid, "Fix the login bug\nscenario: echo picked")
        .await;
    assert_eq!(message_texts(&ups), ["picked"]);
    assert!(agent.wait().await.success());
}

#[tokio::test]
async fn flood_sends_ordered_stamped_chunks() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let before = now_nanos();
    let (ups, resp) = agent.prompt(&sid, "flood 2000 300").await;
    let after = now_nanos();
    assert_eq!(stop_reason(&resp), "end_turn");
    let (flood, rest) = ups.split_at(2000);
    assert_eq!(
        message_texts(rest),
        ["Flood done: 2000 chunks of 300 bytes."]
    );
    let mut last_sent = 0;
    for (i, u) in flood.iter().enumerate() {
        assert_eq!(u["sessionUpdate"], "agent_message_chunk");
        assert_eq!(u["content"]["text"].as_str().map(str::len), Some(300));
        let meta = &u["_meta"];
        assert_eq!(meta["kandev/index"], json!(i));
        assert_eq!(meta["kandev/count"], 2000);
        let sent = meta["kandev/sentAtNanos"]
            .as_u64()
            .expect("sentAtNanos is a u64");
        assert!(
            sent >= before && sent <= after && sent >= last_sent,
            "bad timestamp {sent}"
        );
        last_sent = sent;
    }
    assert!(agent.wait().await.success());
}

#[tokio::test]
async fn slow_paces_its_chunks() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let started = Instant::now();
    let (ups, resp) = agent.prompt(&sid, "slow 4 60").await;
    assert!(
        started.elapsed() >= Duration::from_millis(180),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        message_texts(&ups),
        ["chunk 1/4\n", "chunk 2/4\n", "chunk 3/4\n", "chunk 4/4\n"]
    );
    // All chunks belong to one message.
    assert!(ups.iter().all(|u| u["messageId"] == ups[0]["messageId"]));
    assert_eq!(stop_reason(&resp), "end_turn");
}

#[tokio::test]
async fn wait_cancel_ends_with_cancelled() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let (id, waiting) = agent.begin_turn(&sid, "wait-cancel").await;
    assert_eq!(
        waiting["params"]["update"]["content"]["text"],
        "Waiting for session/cancel."
    );
    agent.cancel(&sid).await;
    let (_, resp) = agent.until_response(id).await;
    assert_eq!(stop_reason(&resp), "cancelled");
    // The session takes a new prompt afterwards.
    let (_, resp) = agent.prompt(&sid, "echo again").await;
    assert_eq!(stop_reason(&resp), "end_turn");
}

#[tokio::test]
async fn slow_turn_can_be_cancelled() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let (id, _) = agent.begin_turn(&sid, "slow 100 50").await;
    agent.cancel(&sid).await;
    let (msgs, resp) = agent.until_response(id).await;
    assert!(msgs.len() < 10);
    assert_eq!(stop_reason(&resp), "cancelled");
}

#[tokio::test]
async fn cancel_request_answers_request_cancelled() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let (id, _) = agent.begin_turn(&sid, "wait-cancel").await;
    agent
        .notify("$/cancel_request", json!({ "requestId": id }))
        .await;
    let (_, resp) = agent.until_response(id).await;
    assert_eq!(resp["error"]["code"], -32800);
}

#[tokio::test]
async fn crash_exits_mid_turn() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    agent.send_prompt(&sid, "crash").await;
    let chunk = agent.read_json().await;
    assert_eq!(
        chunk["params"]["update"]["content"]["text"],
        "Crashing now with exit code 1."
    );
    assert_eq!(agent.read_line().await, None, "no response after the crash");
    let status = agent.child.wait().await.expect("wait");
    assert_eq!(status.code(), Some(1));

    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    agent.send_prompt(&sid, "crash 7").await;
    assert_eq!(agent.wait().await.code(), Some(7));
}

#[tokio::test]
async fn garbage_lines_then_a_normal_end() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let id = agent.send_prompt(&sid, "garbage").await;
    let mut bad = Vec::new();
    let resp = loop {
        let line = agent.read_line().await.expect("line");
        match serde_json::from_slice::<Value>(&line) {
            Ok(v) if v["id"] == json!(id) => break v,
            Ok(v) if v["method"] == "session/update" => {
                assert_eq!(
                    v["params"]["update"]["content"]["text"],
                    "Garbage done; the stream is healthy again."
                );
            }
            _ => bad.push(line),
        }
    };
    assert_eq!(stop_reason(&resp), "end_turn");
    assert!(bad.iter().any(|l| l == b"this line is not JSON"));
    assert!(
        bad.iter().any(|l| std::str::from_utf8(l).is_err()),
        "an invalid UTF-8 line"
    );
    assert!(bad.iter().any(Vec::is_empty), "an empty line");
    assert!(
        bad.iter()
            .any(|l| l.starts_with(br#"{"jsonrpc":"2.0","method":"session/update","params":{"#))
    );
    // Valid JSON lines that are no ACP message ({"hello"}, [1,2,3], a stray response) are
    // matched by the first arms or collected; either way the turn ended normally.
    assert!(bad.len() >= 5, "got {} bad lines", bad.len());
}

#[tokio::test]
async fn oversized_line_then_a_normal_end() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let id = agent.send_prompt(&sid, "oversized 9000000").await;
    let big = agent.read_line().await.expect("the big line");
    assert!(big.len() > 9_000_000, "line is {} bytes", big.len());
    let v: Value = serde_json::from_slice(&big).expect("the big line is still valid JSON");
    assert_eq!(
        v["params"]["update"]["content"]["text"]
            .as_str()
            .map(str::len),
        Some(9_000_000)
    );
    let (msgs, resp) = agent.until_response(id).await;
    assert_eq!(message_texts(&updates(&msgs)), ["Oversized line done."]);
    assert_eq!(stop_reason(&resp), "end_turn");
}

#[tokio::test]
async fn agent_auth_requires_authenticate() {
    let mut agent = RawAgent::spawn(&[], &[("KANDEV_MOCK_AUTH", "agent")]);
    let init = agent.initialize().await;
    assert_eq!(init["authMethods"][0]["id"], "mock-login");
    let (_, resp) = agent.request_session().await;
    assert_eq!(resp["error"]["code"], -32000);
    let resp = agent
        .answer("authenticate", json!({ "methodId": "nope" }))
        .await;
    assert_eq!(resp["error"]["code"], -32602);
    let resp = agent
        .answer("authenticate", json!({ "methodId": "mock-login" }))
        .await;
    assert_eq!(resp["result"], json!({}));
    let (_, resp) = agent.request_session().await;
    assert!(resp["result"]["sessionId"].is_string(), "{resp}");

    // An API key in the environment counts as logged in.
    let (mut agent, _) =
        RawAgent::start(&["--auth", "agent"], &[("KANDEV_MOCK_API_KEY", "k")]).await;
    assert!(agent.wait().await.success());
}

#[tokio::test]
async fn terminal_auth_runs_login_then_reconnects() {
    let dir = TempDir::new();
    let creds = dir.path().join("creds/credentials");
    let creds_s = creds.to_str().expect("utf-8").to_owned();
    let env = [
        ("KANDEV_MOCK_AUTH", "terminal"),
        ("KANDEV_MOCK_CREDENTIALS", creds_s.as_str()),
    ];

    // Without auth.terminal the method is not offered.
    let mut agent = RawAgent::spawn(&[], &env);
    assert_eq!(agent.initialize().await["authMethods"], json!([]));
    assert!(agent.wait().await.success());

    let mut agent = RawAgent::spawn(&[], &env);
    let init = agent
        .initialize_with(json!({ "auth": { "terminal": true } }))
        .await;
    let method = &init["authMethods"][0];
    assert_eq!(method["type"], "terminal");
    assert_eq!(method["id"], "mock-terminal-login");
    assert_eq!(init["authMethods"].as_array().map(Vec::len), Some(1));
    let (_, resp) = agent.request_session().await;
    assert_eq!(resp["error"]["code"], -32000);
    let resp = agent
        .answer("authenticate", json!({ "methodId": "mock-terminal-login" }))
        .await;
    assert_eq!(
        resp["error"]["code"], -32602,
        "terminal methods are never sent to authenticate"
    );
    assert!(agent.wait().await.success());

    // The client runs the same command with the method's args in a terminal.
    let args: Vec<&str> = method["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let status = agent_command(dir.path(), &args, &env)
        .status()
        .await
        .expect("run --login");
    assert!(status.success());
    assert!(creds.exists());

    let mut agent = RawAgent::spawn(&[], &env);
    agent
        .initialize_with(json!({ "auth": { "terminal": true } }))
        .await;
    agent.new_session().await;
    assert!(agent.wait().await.success());
}

#[tokio::test]
async fn session_load_replays_history_after_a_restart() {
    let mut agent = RawAgent::spawn(&[], &[]);
    agent.initialize().await;
    let sid = agent.new_session().await;
    agent.prompt(&sid, "echo remember me").await;
    assert!(agent.wait().await.success());
    let dir = std::mem::replace(&mut agent.dir, TempDir::new());
    // In the agent's home, as a real agent keeps its sessions; nothing in
    // the workspace.
    let file = home_of(dir.path())
        .join(".kandev-mock/sessions")
        .join(format!("{sid}.json"));
    assert!(file.exists(), "session persisted to {}", file.display());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the workspace holds {left:?}");

    let mut agent = RawAgent::spawn_in(dir, &[], &[]);
    agent.initialize().await;
    let cwd = agent.cwd();
    let (msgs, resp) = agent
        .request(
            "session/load",
            json!({ "sessionId": sid, "cwd": cwd, "mcpServers": [] }),
        )
        .await;
    assert!(
        resp["result"]["modes"]["currentModeId"].is_string(),
        "{resp}"
    );
    let replay = updates(&msgs);
    assert_eq!(
        kinds(&replay),
        ["user_message_chunk", "agent_message_chunk"]
    );
    assert_eq!(replay[0]["content"]["text"], "echo remember me");
    assert_eq!(replay[1]["content"]["text"], "remember me");
    assert!(msgs.iter().all(|m| m["params"]["sessionId"] == json!(sid)));

    // The loaded session takes prompts, and a new session gets a fresh id.
    let (_, resp) = agent.prompt(&sid, "echo more").await;
    assert_eq!(stop_reason(&resp), "end_turn");
    assert_ne!(agent.new_session().await, sid);

    let (_, resp) = agent
        .request(
            "session/load",
            json!({ "sessionId": "sess_missing", "cwd": cwd, "mcpServers": [] }),
        )
        .await;
    assert_eq!(resp["error"]["code"], -32002);
}

#[tokio::test]
async fn session_ids_are_deterministic() {
    let ids = |seed: &'static str| async move {
        let state_dir = TempDir::new();
        let state = state_dir.path().to_str().expect("utf-8").to_owned();
        let mut agent = RawAgent::spawn(&["--seed", seed, "--state-dir", &state], &[]);
        agent.initialize().await;
        let mut out = Vec::new();
        for _ in 0..2 {
            let (_, resp) = agent
                .request(
                    "session/new",
                    json!({ "cwd": "/kandev-fixed-cwd", "mcpServers": [] }),
                )
                .await;
            out.push(resp["result"]["sessionId"].as_str().expect("id").to_owned());
        }
        out
    };
    let a = ids("").await;
    assert_eq!(a, ids("").await);
    assert_ne!(a[0], a[1]);
    assert_ne!(a, ids("other").await);
}

/// Agents sharing one home (a user's home volume) never hand out the same
/// session id, even for the same cwd and seed at the same time.
#[tokio::test]
async fn agents_sharing_a_home_get_distinct_session_ids() {
    let state_dir = TempDir::new();
    let state = state_dir.path().to_str().expect("utf-8").to_owned();
    let mut first = RawAgent::spawn(&["--state-dir", &state], &[]);
    let mut second = RawAgent::spawn(&["--state-dir", &state], &[]);
    first.initialize().await;
    second.initialize().await;
    let mut ids = Vec::new();
    for agent in [&mut first, &mut second] {
        let (_, resp) = agent
            .request(
                "session/new",
                json!({ "cwd": "/workspace", "mcpServers": [] }),
            )
            .await;
        ids.push(resp["result"]["sessionId"].as_str().expect("id").to_owned());
    }
    assert_ne!(ids[0], ids[1]);
    for id in &ids {
        assert!(
            state_dir
                .path()
                .join("sessions")
                .join(format!("{id}.json"))
                .exists(),
            "{id} has its file"
        );
    }
    assert!(first.wait().await.success());
    assert!(second.wait().await.success());
}

#[tokio::test]
async fn protocol_errors() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    agent.send_raw(b"{not json").await;
    let resp = agent.read_json().await;
    assert_eq!(resp["error"]["code"], -32700);
    assert_eq!(resp["id"], Value::Null);
    let (_, resp) = agent.request("no/such_method", json!({})).await;
    assert_eq!(resp["error"]["code"], -32601);
    let (_, resp) = agent
        .request(
            "session/new",
            json!({ "cwd": "relative" , "mcpServers": [] }),
        )
        .await;
    assert_eq!(resp["error"]["code"], -32602);
    let cwd = agent.cwd();
    let (_, resp) = agent.request("session/new", json!({ "cwd": cwd })).await;
    assert_eq!(resp["error"]["code"], -32602, "mcpServers is required");
    let (_, resp) = agent.prompt("sess_unknown", "echo x").await;
    assert_eq!(resp["error"]["code"], -32002);
    let (_, resp) = agent.prompt(&sid, "scenario: teleport").await;
    assert_eq!(resp["error"]["code"], -32602);
    // One turn at a time per session.
    let first = agent.send_prompt(&sid, "slow 2 100").await;
    let (_, resp) = agent.prompt(&sid, "echo overlap").await;
    assert_eq!(resp["error"]["code"], -32600);
    let (_, resp) = agent.until_response(first).await;
    assert_eq!(stop_reason(&resp), "end_turn");
}

#[tokio::test]
async fn stop_and_error_scenarios() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    for reason in ["max_tokens", "max_turn_requests", "refusal"] {
        let (_, resp) = agent.prompt(&sid, &format!("stop {reason}")).await;
        assert_eq!(stop_reason(&resp), reason);
    }
    let (ups, resp) = agent.prompt(&sid, "error disk on fire").await;
    assert_eq!(message_texts(&ups), ["Something went wrong: disk on fire"]);
    assert_eq!(resp["error"]["code"], -32603);
    assert_eq!(resp["error"]["data"]["details"], "disk on fire");
    let (ups, resp) = agent.prompt(&sid, "stderr 2").await;
    assert_eq!(message_texts(&ups), ["Wrote 2 lines to stderr."]);
    assert_eq!(stop_reason(&resp), "end_turn");
    let (ups, _) = agent.prompt(&sid, "help").await;
    assert!(message_texts(&ups)[0].contains("wait-cancel"));
}

#[tokio::test]
async fn code_scenario_edits_files_on_disk_without_client_fs() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let readme = agent.dir.path().join("README.md");
    std::fs::write(&readme, "# Demo").expect("write README");
    let (ups, resp) = agent.prompt(&sid, "code").await;
    assert_eq!(stop_reason(&resp), "end_turn");
    assert_eq!(
        std::fs::read_to_string(&readme).expect("README"),
        "# Demo\nEdited by kandev-mock-agent (turn 1).\n"
    );
    assert_has_kinds(
        &ups,
        &[
            "plan",
            "agent_thought_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
            "usage_update",
        ],
    );
    assert_eq!(tool_kinds(&ups), ["read", "edit", "execute"]);
    let diff = ups
        .iter()
        .find_map(|u| {
            u["content"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "diff"))
        })
        .expect("a diff");
    assert_eq!(diff["oldText"], "# Demo");
    assert_eq!(diff["path"], readme.to_str().expect("utf-8"));
    let last_plan = ups
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "plan")
        .expect("plan");
    assert!(
        last_plan["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .all(|e| e["status"] == "completed")
    );

    // A second turn edits again, and a missing file is created.
    agent.prompt(&sid, "code notes/new.txt").await;
    let created = std::fs::read_to_string(agent.dir.path().join("notes/new.txt")).expect("created");
    assert_eq!(created, "Edited by kandev-mock-agent (turn 2).\n");
}

#[tokio::test]
async fn modes_and_config_options() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let mode = |id: &str| json!({ "sessionId": sid, "modeId": id });
    let model = |value: &str| json!({ "sessionId": sid, "configId": "model", "value": value });
    let resp = agent.answer("session/set_mode", mode("plan")).await;
    assert_eq!(resp["result"], json!({}));
    let resp = agent.answer("session/set_mode", mode("warp")).await;
    assert_eq!(resp["error"]["code"], -32602);
    agent.prompt(&sid, "code").await;
    assert!(
        !agent.dir.path().join("README.md").exists(),
        "plan mode does not edit"
    );

    let resp = agent
        .answer("session/set_config_option", model("mock-smart"))
        .await;
    assert_eq!(
        resp["result"]["configOptions"][0]["currentValue"],
        "mock-smart"
    );
    let resp = agent
        .answer("session/set_config_option", model("gpt-9"))
        .await;
    assert_eq!(resp["error"]["code"], -32602);
}

#[tokio::test]
async fn permission_over_raw_json() {
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let target = agent.dir.path().join("permitted.txt");
    for (option, written) in [("reject-once", false), ("allow-once", true)] {
        let id = agent.send_prompt(&sid, "permission").await;
        let request = loop {
            let msg = agent.read_json().await;
            if msg["method"] == "session/request_permission" {
                break msg;
            }
        };
        assert_eq!(
            option_kinds(&request["params"]),
            ["allow_once", "allow_always", "reject_once"]
        );
        assert_eq!(request["params"]["toolCall"]["kind"], "edit");
        agent
            .send(&json!({
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": { "outcome": { "outcome": "selected", "optionId": option } },
            }))
            .await;
        let (_, resp) = agent.until_response(id).await;
        assert_eq!(stop_reason(&resp), "end_turn");
        assert_eq!(target.exists(), written, "after {option}");
    }
}

#[tokio::test]
async fn all_updates_covers_every_variant() {
    let mut agent = RawAgent::spawn(&[], &[]);
    agent
        .initialize_with(json!({ "session": { "notices": {}, "compaction": {} } }))
        .await;
    let sid = agent.new_session().await;
    let (ups, resp) = agent.prompt(&sid, "all-updates").await;
    assert_eq!(stop_reason(&resp), "end_turn");
    // Every update Kandev knows, so each is exercised end to end.
    assert_has_kinds(&ups, kandev_acp::KNOWN_UPDATES);
    // Without the capabilities, no notice or compaction.
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let (ups, _) = agent.prompt(&sid, "all-updates").await;
    assert!(
        !kinds(&ups)
            .iter()
            .any(|k| *k == "notice" || k.starts_with("compaction"))
    );
}

#[tokio::test]
async fn quirks_mimic_real_agents() {
    let mut agent = RawAgent::spawn(
        &[],
        &[(
            "KANDEV_MOCK_QUIRKS",
            "early-updates,late-updates,cancel-end-turn",
        )],
    );
    agent.initialize().await;
    let (before, resp) = agent.request_session().await;
    let sid = resp["result"]["sessionId"].as_str().expect("id").to_owned();
    assert_eq!(kinds(&updates(&before)), ["available_commands_update"]);
    assert_eq!(before[0]["params"]["sessionId"], json!(sid));

    let (_, resp) = agent.prompt(&sid, "echo hi").await;
    assert_eq!(stop_reason(&resp), "end_turn");
    let late = agent.read_json().await;
    assert_eq!(
        late["params"]["update"]["sessionUpdate"],
        "agent_message_chunk"
    );

    let (id, _) = agent.begin_turn(&sid, "wait-cancel").await;
    agent.cancel(&sid).await;
    let (_, resp) = agent.until_response(id).await;
    assert_eq!(
        stop_reason(&resp),
        "end_turn",
        "cancel-end-turn answers end_turn"
    );
}

#[tokio::test]
async fn lingering_and_forgetful_quirks_mimic_node_adapters() {
    let mut agent = RawAgent::spawn(
        &[],
        &[(
            "KANDEV_MOCK_QUIRKS",
            "ignore-eof,ignore-sigterm,lose-sessions",
        )],
    );
    agent.initialize().await;
    let sid = agent.new_session().await;
    let cwd = agent.cwd();
    let (_, resp) = agent
        .request(
            "session/load",
            json!({ "sessionId": sid, "cwd": cwd, "mcpServers": [] }),
        )
        .await;
    assert_eq!(resp["error"]["code"], -32603, "{resp}");
    assert_eq!(resp["error"]["message"], "Session not found");

    // Neither the end of its input nor SIGTERM ends it; SIGKILL does.
    agent.close_stdin();
    let pid = agent.child.id().expect("running");
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let waited =
        tokio::time::timeout(std::time::Duration::from_millis(500), agent.child.wait()).await;
    assert!(waited.is_err(), "the agent exited: {waited:?}");
    agent.child.kill().await.unwrap();
}

#[tokio::test]
async fn silent_initialize_never_answers() {
    let mut agent = RawAgent::spawn(&[], &[("KANDEV_MOCK_QUIRKS", "silent-initialize")]);
    agent
        .send_request("initialize", json!({ "protocolVersion": 1 }))
        .await;
    agent.close_stdin();
    assert_eq!(agent.read_line().await, None, "no answer before EOF");
    assert_eq!(agent.wait().await.code(), Some(0));
}

#[tokio::test]
async fn eof_exits_zero() {
    let mut agent = RawAgent::spawn(&[], &[]);
    assert_eq!(agent.wait().await.code(), Some(0));

    // A running turn finishes (and answers) before the exit.
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let id = agent.send_prompt(&sid, "slow 3 30").await;
    agent.close_stdin();
    let (msgs, resp) = agent.until_response(id).await;
    assert_eq!(msgs.len(), 3);
    assert_eq!(stop_reason(&resp), "end_turn");
    assert_eq!(agent.wait().await.code(), Some(0));

    // A turn waiting on the client gives up: wait-cancel ends cancelled.
    let (mut agent, sid) = RawAgent::start(&[], &[]).await;
    let (id, _) = agent.begin_turn(&sid, "wait-cancel").await;
    agent.close_stdin();
    let (_, resp) = agent.until_response(id).await;
    assert_eq!(stop_reason(&resp), "cancelled");
    assert_eq!(agent.wait().await.code(), Some(0));
}

#[tokio::test]
async fn seed_dialect() {
    let mut agent = RawAgent::spawn(&["--acp"], &[("KANDEV_MOCK_DIALECT", "seed")]);
    let resp = agent.answer("initialize", json!({ "protocolVersion": "1.0", "clientInfo": { "name": "kandev", "version": "0.1.0" } })).await;
    assert_eq!(resp["result"]["protocolVersion"], "1.0");
    assert_eq!(resp["result"]["serverInfo"]["name"], "kandev-mock-agent");
    assert_eq!(resp["result"]["capabilities"]["streaming"], true);
    let (_, resp) = agent.request("session/new", json!({})).await;
    let sid = resp["result"]["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();

    let id = agent
        .send_request("session/prompt", json!({ "message": "echo hi there" }))
        .await;
    let accepted = agent.read_json().await;
    assert_eq!(
        accepted,
        json!({ "jsonrpc": "2.0", "id": id, "result": { "accepted": true } })
    );
    let content = agent.read_json().await;
    assert_eq!(
        content["params"],
        json!({ "type": "content", "data": { "text": "hi there" } })
    );
    let complete = agent.read_json().await;
    assert_eq!(complete["params"]["type"], "complete");
    assert_eq!(complete["params"]["data"]["success"], true);
    assert_eq!(complete["params"]["data"]["sessionId"], json!(sid));
    assert_eq!(complete["params"]["data"]["summary"], "hi there");

    // Tool calls become `toolCall` updates; the file is edited on disk.
    agent
        .send_request("session/prompt", json!({ "message": "code" }))
        .await;
    assert_eq!(agent.read_json().await["result"]["accepted"], true);
    let mut seen = Vec::new();
    loop {
        let msg = agent.read_json().await;
        let params = &msg["params"];
        if params["type"] == "complete" {
            assert_eq!(params["data"]["success"], true);
            break;
        }
        assert!(
            params["type"] == "content" || params["type"] == "toolCall",
            "{msg}"
        );
        if params["type"] == "toolCall" {
            seen.push(format!(
                "{}:{}",
                params["data"]["toolName"].as_str().unwrap_or(""),
                params["data"]["status"].as_str().unwrap_or("")
            ));
        }
    }
    assert!(
        seen.contains(&"edit:running".to_owned()) && seen.contains(&"edit:completed".to_owned()),
        "{seen:?}"
    );
    assert!(agent.dir.path().join("README.md").exists());

    // session/cancel names no session in the seed dialect.
    agent
        .send_request("session/prompt", json!({ "message": "wait-cancel" }))
        .await;
    agent.read_json().await;
    agent.read_json().await;
    agent
        .notify(
            "session/cancel",
            json!({ "reason": "User requested cancellation" }),
        )
        .await;
    let complete = agent.read_json().await;
    assert_eq!(complete["params"]["data"]["success"], false);
    assert_eq!(complete["params"]["data"]["cancelled"], true);

    let resp = agent
        .answer("session/load", json!({ "sessionId": sid }))
        .await;
    assert_eq!(resp["result"], json!({ "sessionId": sid, "loaded": true }));
    assert!(agent.wait().await.success());
}

fn check_legacy_line(line: &Value) {
    for key in ["type", "timestamp", "agent_id", "task_id", "data"] {
        assert!(line.get(key).is_some(), "missing {key} in {line}");
    }
    assert!(line.get("jsonrpc").is_none());
}

#[tokio::test]
async fn legacy_dialect_from_env() {
    let mut agent = RawAgent::spawn(
        &["--dialect", "legacy"],
        &[
            ("TASK_DESCRIPTION", "slow 2 10"),
            ("KANDEV_AGENT_ID", "agent-1"),
            ("KANDEV_TASK_ID", "task-1"),
        ],
    );
    let mut lines = Vec::new();
    while let Some(line) = agent.read_line().await {
        lines.push(serde_json::from_slice::<Value>(&line).expect("JSON line"));
    }
    assert!(agent.wait().await.success());
    lines.iter().for_each(check_legacy_line);
    let types: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "status",
            "heartbeat",
            "status",
            "progress",
            "progress",
            "result",
            "status"
        ]
    );
    assert_eq!(lines[0]["agent_id"], "agent-1");
    assert_eq!(lines[0]["task_id"], "task-1");
    assert_eq!(lines[3]["data"]["message"], "chunk 1/2\n");
    assert_eq!(lines[5]["data"]["status"], "completed");
    assert_eq!(lines[6]["data"]["status"], "stopped");
}

#[tokio::test]
async fn legacy_dialect_from_stdin() {
    let mut agent = RawAgent::spawn(&[], &[("KANDEV_MOCK_DIALECT", "legacy")]);
    agent.send_raw(br#"{"message":"echo from stdin"}"#).await;
    let mut lines = Vec::new();
    while let Some(line) = agent.read_line().await {
        lines.push(serde_json::from_slice::<Value>(&line).expect("JSON line"));
    }
    assert!(agent.wait().await.success());
    let progress = lines
        .iter()
        .find(|l| l["type"] == "progress")
        .expect("progress");
    assert_eq!(progress["data"]["message"], "from stdin");
    let result = lines
        .iter()
        .find(|l| l["type"] == "result")
        .expect("result");
    assert_eq!(
        result["data"],
        json!({ "status": "completed", "summary": "from stdin" })
    );

    // The code scenario reports plan percentages; wait-cancel ends on a `cancel` line.
    let mut agent = RawAgent::spawn(
        &[],
        &[
            ("KANDEV_MOCK_DIALECT", "legacy"),
            ("TASK_DESCRIPTION", "wait-cancel"),
        ],
    );
    loop {
        if agent.read_json().await["type"] == "progress" {
            break;
        }
    }
    agent.send_raw(b"cancel").await;
    let mut rest = Vec::new();
    while let Some(line) = agent.read_line().await {
        rest.push(serde_json::from_slice::<Value>(&line).expect("JSON line"));
    }
    assert_eq!(rest[0]["data"]["status"], "cancelled");
    assert!(agent.wait().await.success());

    // Stdin EOF also ends a waiting task, so a legacy agent cannot outlive its manager.
    let mut agent = RawAgent::spawn(
        &[],
        &[
            ("KANDEV_MOCK_DIALECT", "legacy"),
            ("TASK_DESCRIPTION", "wait-cancel"),
        ],
    );
    agent.close_stdin();
    let mut all = Vec::new();
    while let Some(line) = agent.read_line().await {
        all.push(serde_json::from_slice::<Value>(&line).expect("JSON line"));
    }
    let result = all.iter().find(|l| l["type"] == "result").expect("result");
    assert_eq!(result["data"]["status"], "cancelled");
    assert!(agent.wait().await.success());

    let mut agent = RawAgent::spawn(
        &[],
        &[
            ("KANDEV_MOCK_DIALECT", "legacy"),
            ("TASK_DESCRIPTION", "crash"),
        ],
    );
    assert_eq!(agent.wait().await.code(), Some(1));
}

#[test]
fn binary_path_exists() {
    assert!(std::path::Path::new(BIN).exists());
}

fn now_nanos() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    u64::try_from(since.as_nanos()).expect("fits")
}
