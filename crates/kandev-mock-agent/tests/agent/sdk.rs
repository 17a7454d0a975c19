//! A client built on the official SDK drives the mock agent. The client
//! serves `fs/*` from an in-memory file map and fakes `terminal/*`, so the
//! tests can tell that the agent really went through the client.

use std::{
    collections::{HashMap, VecDeque},
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
};

use agent_client_protocol::{
    self as acp, Agent, ByteStreams, Client, ErrorCode,
    schema::ProtocolVersion,
    v1::{
        ConnectionTo,
        schema::{
            AuthenticateRequest, CancelNotification, ClientCapabilities, ClientSessionCapabilities,
            CompactionCapabilities, CreateTerminalRequest, CreateTerminalResponse,
            FileSystemCapabilities, InitializeRequest, LoadSessionRequest, NewSessionRequest,
            NoticeCapabilities, PromptRequest, ReadTextFileRequest, ReadTextFileResponse,
            ReleaseTerminalRequest, ReleaseTerminalResponse, RequestPermissionOutcome,
            RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
            SessionNotification, StopReason, TerminalExitStatus, TerminalOutputRequest,
            TerminalOutputResponse, WaitForTerminalExitRequest, WaitForTerminalExitResponse,
            WriteTextFileRequest, WriteTextFileResponse,
        },
    },
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::harness::{
    TIMEOUT, TempDir, agent_command, assert_has_kinds, kinds, option_kinds, tool_kinds,
};

/// The client side of the world: files, a call log, scripted permission answers.
#[derive(Default)]
struct World {
    files: Mutex<HashMap<PathBuf, String>>,
    calls: Mutex<Vec<String>>,
    answers: Mutex<VecDeque<&'static str>>,
    permission_requests: Mutex<Vec<Value>>,
}

impl World {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn log(&self, call: String) {
        self.calls.lock().expect("calls").push(call);
    }

    fn file(&self, path: &Path) -> Option<String> {
        self.files.lock().expect("files").get(path).cloned()
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().expect("calls").clone()
    }
}

type Updates = mpsc::UnboundedReceiver<Value>;

/// Everything received so far, as JSON `update` objects.
fn drain(rx: &mut Updates) -> Vec<Value> {
    let mut out = Vec::new();
    while let Ok(n) = rx.try_recv() {
        out.push(n["update"].clone());
    }
    out
}

fn full_caps() -> ClientCapabilities {
    ClientCapabilities::new()
        .fs(FileSystemCapabilities::new()
            .read_text_file(true)
            .write_text_file(true))
        .terminal(true)
}

/// Spawns the agent in `dir` and runs `main` against it with an SDK client.
async fn run_client<R>(
    dir: &Path,
    envs: &[(&str, &str)],
    world: Arc<World>,
    main: impl AsyncFnOnce(ConnectionTo<Agent>, Updates) -> Result<R, acp::Error>,
) -> R {
    let mut child = agent_command(dir, &[], envs)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn kandev-mock-agent");
    let stdin = child.stdin.take().expect("stdin").compat_write();
    let stdout = child.stdout.take().expect("stdout").compat();
    let (tx, rx) = mpsc::unbounded_channel();

    let w_read = world.clone();
    let w_write = world.clone();
    let w_create = world.clone();
    let w_wait = world.clone();
    let w_output = world.clone();
    let w_release = world.clone();
    let w_perm = world.clone();
    let connection = Client
        .v1()
        .name("kandev-mock-agent-tests")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                let _ = tx.send(serde_json::to_value(&n).expect("notifications serialize"));
                Ok(())
            },
            acp::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: ReadTextFileRequest, responder, _cx| {
                w_read.log(format!("fs/read_text_file {}", req.path.display()));
                match w_read.file(&req.path) {
                    Some(content) => responder.respond(ReadTextFileResponse::new(content)),
                    None => responder.respond_with_error(
                        acp::v1::schema::Error::resource_not_found(Some(
                            req.path.display().to_string(),
                        ))
                        .into(),
                    ),
                }
            },
            acp::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: WriteTextFileRequest, responder, _cx| {
                w_write.log(format!("fs/write_text_file {}", req.path.display()));
                w_write
                    .files
                    .lock()
                    .expect("files")
                    .insert(req.path.clone(), req.content.clone());
                responder.respond(WriteTextFileResponse::new())
            },
            acp::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CreateTerminalRequest, responder, _cx| {
                let args: Vec<String> = req.args.clone();
                w_create.log(format!(
                    "terminal/create {} {}",
                    req.command,
                    args.join(" ")
                ));
                responder.respond(CreateTerminalResponse::new("term-1"))
            },
            acp::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: WaitForTerminalExitRequest, responder, _cx| {
                w_wait.log(format!("terminal/wait_for_exit {}", req.terminal_id));
                responder.respond(WaitForTerminalExitResponse::new(
                    TerminalExitStatus::new().exit_code(0),
                ))
            },
            acp::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: TerminalOutputRequest, responder, _cx| {
                w_output.log(format!("terminal/output {}", req.terminal_id));
                // The fake terminal ran `cat FILE` against the client's files.
                let calls = w_output.calls();
                let created = calls
                    .iter()
                    .rev()
                    .find(|c| c.starts_with("terminal/create cat "));
                let path =
                    created.map(|c| PathBuf::from(c.trim_start_matches("terminal/create cat ")));
                let output = path.and_then(|p| w_output.file(&p)).unwrap_or_default();
                responder.respond(
                    TerminalOutputResponse::new(output, false)
                        .exit_status(TerminalExitStatus::new().exit_code(0)),
                )
            },
            acp::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ReleaseTerminalRequest, responder, _cx| {
                w_release.log(format!("terminal/release {}", req.terminal_id));
                responder.respond(ReleaseTerminalResponse::new())
            },
            acp::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: RequestPermissionRequest, responder, _cx| {
                w_perm
                    .permission_requests
                    .lock()
                    .expect("requests")
                    .push(serde_json::to_value(&req).expect("json"));
                let answer = w_perm
                    .answers
                    .lock()
                    .expect("answers")
                    .pop_front()
                    .unwrap_or("reject-once");
                let outcome = if answer == "cancelled" {
                    RequestPermissionOutcome::Cancelled
                } else {
                    RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(answer))
                };
                responder.respond(RequestPermissionResponse::new(outcome))
            },
            acp::on_receive_request!(),
        )
        .connect_with(ByteStreams::new(stdin, stdout), async move |cx| {
            main(cx, rx).await
        });
    let result = tokio::time::timeout(TIMEOUT, connection)
        .await
        .expect("client finished in time");
    let result = result.expect("the client ran without protocol errors");
    let status = tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .expect("agent exited")
        .expect("wait");
    assert!(status.success(), "agent exit status {status}");
    result
}

async fn init(cx: &ConnectionTo<Agent>, caps: ClientCapabilities) -> Result<(), acp::Error> {
    let init = cx
        .send_request(InitializeRequest::new(ProtocolVersion::V1).client_capabilities(caps))
        .block_task()
        .await?;
    assert_eq!(init.protocol_version, ProtocolVersion::V1);
    assert!(init.agent_capabilities.load_session);
    Ok(())
}

async fn prompt(
    cx: &ConnectionTo<Agent>,
    sid: &acp::v1::schema::SessionId,
    text: &str,
) -> Result<StopReason, acp::Error> {
    let resp = cx
        .send_request(PromptRequest::new(sid.clone(), vec![text.into()]))
        .block_task()
        .await?;
    Ok(resp.stop_reason)
}

#[tokio::test]
async fn coding_turn_goes_through_client_fs_and_terminal() {
    let dir = TempDir::new();
    let readme = dir.path().join("README.md");
    let world = World::new();
    world
        .files
        .lock()
        .expect("files")
        .insert(readme.clone(), "# Demo\n".into());
    let cwd = dir.path().to_path_buf();
    let (stop, ups) = run_client(dir.path(), &[], world.clone(), async move |cx, mut rx| {
        init(&cx, full_caps()).await?;
        let session = cx
            .send_request(NewSessionRequest::new(cwd))
            .block_task()
            .await?;
        let stop = prompt(&cx, &session.session_id, "code").await?;
        Ok((stop, drain(&mut rx)))
    })
    .await;
    assert_eq!(stop, StopReason::EndTurn);

    let expected = "# Demo\nEdited by kandev-mock-agent (turn 1).\n";
    assert_eq!(world.file(&readme).as_deref(), Some(expected));
    assert!(
        !readme.exists(),
        "the agent wrote through the client, not to disk"
    );
    let p = readme.display();
    assert_eq!(
        world.calls(),
        [
            format!("fs/read_text_file {p}"),
            format!("fs/write_text_file {p}"),
            format!("terminal/create cat {p}"),
            "terminal/wait_for_exit term-1".to_owned(),
            "terminal/output term-1".to_owned(),
            "terminal/release term-1".to_owned(),
        ]
    );

    // Every update parsed in the SDK and came back out.
    assert_has_kinds(
        &ups,
        &[
            "session_info_update",
            "plan",
            "agent_thought_chunk",
            "tool_call",
            "tool_call_update",
            "usage_update",
        ],
    );
    assert_eq!(tool_kinds(&ups), ["read", "edit", "execute"]);
    let statuses: Vec<&str> = ups
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == "call_edit_1")
        .filter_map(|u| u["status"].as_str())
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"]);
    let contents: Vec<&Value> = ups
        .iter()
        .filter_map(|u| u["content"].as_array())
        .flatten()
        .collect();
    assert!(contents.iter().any(|c| c["type"] == "diff"
        && c["oldText"] == "# Demo\n"
        && c["newText"] == expected
        && c["path"] == json!(readme)));
    assert!(
        contents
            .iter()
            .any(|c| c["type"] == "terminal" && c["terminalId"] == "term-1")
    );
    let exec_done = ups
        .iter()
        .find(|u| u["toolCallId"] == "call_exec_1" && u["status"] == "completed")
        .expect("execute completed");
    assert_eq!(exec_done["rawOutput"]["output"], expected);
    let plans: Vec<&Value> = ups
        .iter()
        .filter(|u| u["sessionUpdate"] == "plan")
        .collect();
    assert_eq!(plans.len(), 4);
    assert!(
        plans[3]["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .all(|e| e["status"] == "completed")
    );
    let summary: String = ups
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(summary.contains("appended one line"), "{summary}");
}

#[tokio::test]
async fn permission_outcomes_are_acted_on() {
    let dir = TempDir::new();
    let world = World::new();
    world.answers.lock().expect("answers").extend([
        "reject-once",
        "allow-once",
        "cancelled",
        "allow-always",
    ]);
    let cwd = dir.path().to_path_buf();
    let stops = run_client(dir.path(), &[], world.clone(), async move |cx, _rx| {
        init(&cx, full_caps()).await?;
        let session = cx
            .send_request(NewSessionRequest::new(cwd))
            .block_task()
            .await?;
        let mut stops = Vec::new();
        for file in ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"] {
            stops.push(prompt(&cx, &session.session_id, &format!("permission {file}")).await?);
        }
        Ok(stops)
    })
    .await;
    assert_eq!(
        stops,
        [
            StopReason::EndTurn,
            StopReason::EndTurn,
            StopReason::Cancelled,
            StopReason::EndTurn,
            StopReason::EndTurn
        ]
    );
    let has = |f: &str| world.file(&dir.path().join(f)).is_some();
    assert!(!has("a.txt"), "rejected");
    assert!(has("b.txt"), "allowed once");
    assert!(!has("c.txt"), "cancelled");
    assert!(has("d.txt"), "allowed always");
    assert!(has("e.txt"), "remembered allow_always");
    let requests = world.permission_requests.lock().expect("requests").clone();
    assert_eq!(requests.len(), 4, "no request after allow_always");
    let first = &requests[0];
    assert_eq!(first["toolCall"]["toolCallId"], "call_write_1");
    assert_eq!(
        option_kinds(first),
        ["allow_once", "allow_always", "reject_once"]
    );
}

#[tokio::test]
async fn wait_cancel_is_ended_by_session_cancel() {
    let dir = TempDir::new();
    let cwd = dir.path().to_path_buf();
    let (stop, after) = run_client(dir.path(), &[], World::new(), async move |cx, mut rx| {
        init(&cx, ClientCapabilities::new()).await?;
        let session = cx
            .send_request(NewSessionRequest::new(cwd))
            .block_task()
            .await?;
        let sid = session.session_id.clone();
        let turn = cx
            .send_request(PromptRequest::new(sid.clone(), vec!["wait-cancel".into()]))
            .block_task();
        let cancel = async {
            while let Some(n) = rx.recv().await {
                if n["update"]["content"]["text"] == "Waiting for session/cancel." {
                    break;
                }
            }
            cx.send_notification(CancelNotification::new(sid.clone()))
        };
        let (resp, sent) = tokio::join!(turn, cancel);
        sent?;
        let stop = resp?.stop_reason;
        // The session is usable afterwards.
        let again = prompt(&cx, &sid, "echo after cancel").await?;
        assert_eq!(again, StopReason::EndTurn);
        Ok((stop, drain(&mut rx)))
    })
    .await;
    assert_eq!(stop, StopReason::Cancelled);
    assert_eq!(
        after.last().map(|u| u["content"]["text"].clone()),
        Some(json!("after cancel"))
    );
}

#[tokio::test]
async fn session_load_replays_before_responding() {
    let dir = TempDir::new();
    let cwd = dir.path().to_path_buf();
    let sid = run_client(dir.path(), &[], World::new(), async move |cx, _rx| {
        init(&cx, ClientCapabilities::new()).await?;
        let session = cx
            .send_request(NewSessionRequest::new(cwd))
            .block_task()
            .await?;
        prompt(&cx, &session.session_id, "echo remember me").await?;
        prompt(&cx, &session.session_id, "echo and me").await?;
        Ok(session.session_id)
    })
    .await;

    // A new agent process in the same workspace (a restarted container).
    let cwd = dir.path().to_path_buf();
    let load_sid = sid.clone();
    let replay = run_client(dir.path(), &[], World::new(), async move |cx, mut rx| {
        init(&cx, ClientCapabilities::new()).await?;
        let loaded = cx
            .send_request(LoadSessionRequest::new(load_sid.clone(), cwd))
            .block_task()
            .await?;
        assert!(loaded.modes.is_some());
        // Everything was replayed before the response arrived.
        let replay = drain(&mut rx);
        assert_eq!(
            prompt(&cx, &load_sid, "echo continued").await?,
            StopReason::EndTurn
        );
        Ok(replay)
    })
    .await;
    assert_eq!(
        kinds(&replay),
        [
            "user_message_chunk",
            "agent_message_chunk",
            "user_message_chunk",
            "agent_message_chunk"
        ]
    );
    let texts: Vec<&str> = replay
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(
        texts,
        ["echo remember me", "remember me", "echo and me", "and me"]
    );
}

#[tokio::test]
async fn every_update_variant_parses_in_the_sdk() {
    let dir = TempDir::new();
    let cwd = dir.path().to_path_buf();
    let caps = ClientCapabilities::new().session(
        ClientSessionCapabilities::new()
            .notices(NoticeCapabilities::new())
            .compaction(CompactionCapabilities::new()),
    );
    let ups = run_client(dir.path(), &[], World::new(), async move |cx, mut rx| {
        init(&cx, caps).await?;
        let session = cx
            .send_request(NewSessionRequest::new(cwd))
            .block_task()
            .await?;
        assert_eq!(
            prompt(&cx, &session.session_id, "all-updates").await?,
            StopReason::EndTurn
        );
        Ok(drain(&mut rx))
    })
    .await;
    // 17 sent; an update the SDK could not parse would be missing.
    assert_eq!(ups.len(), 17, "{:?}", kinds(&ups));
    let mut k = kinds(&ups);
    k.sort_unstable();
    k.dedup();
    assert_eq!(k.len(), 14, "{k:?}");
}

#[tokio::test]
async fn flood_chunks_keep_their_meta_through_the_sdk() {
    let dir = TempDir::new();
    let cwd = dir.path().to_path_buf();
    let ups = run_client(dir.path(), &[], World::new(), async move |cx, mut rx| {
        init(&cx, ClientCapabilities::new()).await?;
        let session = cx
            .send_request(NewSessionRequest::new(cwd))
            .block_task()
            .await?;
        prompt(&cx, &session.session_id, "flood 1000 64").await?;
        Ok(drain(&mut rx))
    })
    .await;
    assert_eq!(ups.len(), 1001);
    for (i, u) in ups[..1000].iter().enumerate() {
        assert_eq!(u["_meta"]["kandev/index"], json!(i));
        assert!(u["_meta"]["kandev/sentAtNanos"].as_u64().is_some());
    }
}

#[tokio::test]
async fn auth_required_then_authenticate() {
    let dir = TempDir::new();
    let cwd = dir.path().to_path_buf();
    run_client(
        dir.path(),
        &[("KANDEV_MOCK_AUTH", "agent")],
        World::new(),
        async move |cx, _rx| {
            let init = cx
                .send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            assert_eq!(init.auth_methods.len(), 1);
            let err = cx
                .send_request(NewSessionRequest::new(cwd.clone()))
                .block_task()
                .await
                .expect_err("auth required");
            assert_eq!(err.code, ErrorCode::from(-32000));
            cx.send_request(AuthenticateRequest::new("mock-login"))
                .block_task()
                .await?;
            cx.send_request(NewSessionRequest::new(cwd))
                .block_task()
                .await?;
            Ok(())
        },
    )
    .await;
}
