//! Interop: an agent written with the official SDK (`agent-client-protocol`
//! 5.2, agent side) is driven by our client through a full turn with
//! permission, fs and terminal requests, over in-memory pipes.

use std::{sync::Arc, time::Duration};

use agent_client_protocol::{
    Agent, ByteStreams, Client,
    schema::ProtocolVersion,
    v1::{
        ConnectionTo, Responder,
        schema::{
            AgentCapabilities, ContentBlock, ContentChunk, CreateTerminalRequest,
            InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse,
            PermissionOption, PermissionOptionKind, PromptRequest, PromptResponse,
            ReadTextFileRequest, ReleaseTerminalRequest, RequestPermissionOutcome,
            RequestPermissionRequest, SessionNotification, SessionUpdate, StopReason,
            TerminalOutputRequest, ToolCall, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
            WaitForTerminalExitRequest, WriteTextFileRequest,
        },
    },
};
use kandev_acp::{AcpClient, ClientOptions, Dialect, EventKind, LocalExecutor, Workspace};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// The agent's turn: a tool call gated by a permission, a file written and
/// read back, a command run in a terminal, and a final message.
async fn run_turn(
    cx: ConnectionTo<Client>,
    request: PromptRequest,
) -> Result<String, agent_client_protocol::Error> {
    let session = request.session_id.clone();
    cx.send_notification(SessionNotification::new(
        session.clone(),
        SessionUpdate::ToolCall(ToolCall::new("call-1", "Write notes.txt")),
    ))?;
    let permission = cx
        .send_request(RequestPermissionRequest::new(
            session.clone(),
            ToolCallUpdate::new("call-1", ToolCallUpdateFields::new()),
            vec![
                PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
                PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            ],
        ))
        .block_task()
        .await?;
    let RequestPermissionOutcome::Selected(selected) = permission.outcome else {
        return Ok("permission cancelled".to_owned());
    };
    assert_eq!(selected.option_id.0.as_ref(), "allow");

    cx.send_request(WriteTextFileRequest::new(
        session.clone(),
        "/workspace/notes.txt",
        "line one\nline two\n",
    ))
    .block_task()
    .await?;
    let read = cx
        .send_request(ReadTextFileRequest::new(session.clone(), "/workspace/notes.txt").line(2))
        .block_task()
        .await?;

    let terminal = cx
        .send_request(
            CreateTerminalRequest::new(session.clone(), "sh")
                .args(vec!["-c".into(), "cat notes.txt; echo done".into()])
                .cwd(std::path::PathBuf::from("/workspace")),
        )
        .block_task()
        .await?;
    let exit = cx
        .send_request(WaitForTerminalExitRequest::new(
            session.clone(),
            terminal.terminal_id.clone(),
        ))
        .block_task()
        .await?;
    let output = cx
        .send_request(TerminalOutputRequest::new(
            session.clone(),
            terminal.terminal_id.clone(),
        ))
        .block_task()
        .await?;
    cx.send_request(ReleaseTerminalRequest::new(
        session.clone(),
        terminal.terminal_id.clone(),
    ))
    .block_task()
    .await?;

    cx.send_notification(SessionNotification::new(
        session.clone(),
        SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            "call-1",
            ToolCallUpdateFields::new().status(ToolCallStatus::Completed),
        )),
    ))?;
    let summary = format!(
        "read={:?} exit={:?} output={:?}",
        read.content, exit.exit_status.exit_code, output.output
    );
    cx.send_notification(SessionNotification::new(
        session,
        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::from(summary.clone()))),
    ))?;
    Ok(summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_agent_completes_a_turn_with_permission_fs_and_terminal() {
    let root = tempfile::tempdir().expect("tempdir");
    let (agent_in, client_out) = tokio::io::duplex(64 * 1024);
    let (client_in, agent_out) = tokio::io::duplex(64 * 1024);

    let agent = Agent
        .v1()
        .name("sdk-test-agent")
        .on_receive_request(
            async |request: InitializeRequest,
                   responder: Responder<InitializeResponse>,
                   _cx: ConnectionTo<Client>| {
                assert_eq!(request.protocol_version, ProtocolVersion::V1);
                let caps = request.client_capabilities;
                assert!(caps.fs.read_text_file && caps.fs.write_text_file && caps.terminal);
                responder.respond(
                    InitializeResponse::new(ProtocolVersion::V1)
                        .agent_capabilities(AgentCapabilities::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async |_request: NewSessionRequest,
                   responder: Responder<NewSessionResponse>,
                   _cx: ConnectionTo<Client>| {
                responder.respond(NewSessionResponse::new("sdk-session"))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async |request: PromptRequest,
                   responder: Responder<PromptResponse>,
                   cx: ConnectionTo<Client>| {
                // Never block the dispatch loop: the turn runs in its own task.
                let turn_cx = cx.clone();
                cx.spawn(async move {
                    run_turn(turn_cx, request).await?;
                    responder.respond(PromptResponse::new(StopReason::EndTurn))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(ByteStreams::new(
            agent_out.compat_write(),
            agent_in.compat(),
        ));
    let agent_task = tokio::spawn(agent);

    let workspace = Workspace::new(root.path(), "/workspace").expect("workspace");
    let options = ClientOptions {
        terminal: Some(Arc::new(LocalExecutor::new(Some(workspace.clone())))),
        workspace: Some(workspace),
        ..ClientOptions::default()
    };
    let (client, mut events) = AcpClient::connect(client_in, client_out, options);
    let collector = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(event) = events.recv().await {
            all.push(event);
        }
        all
    });

    let handshake = client.initialize().await.expect("initialize");
    assert_eq!(handshake.dialect, Dialect::V1);
    let session = client
        .new_session("/workspace", vec![])
        .await
        .expect("session");
    assert_eq!(session.session_id, "sdk-session");
    let stop = tokio::time::timeout(
        Duration::from_secs(20),
        client.prompt(vec!["take notes".into()]),
    )
    .await
    .expect("turn finished in time")
    .expect("prompt");
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(
        std::fs::read_to_string(root.path().join("notes.txt")).expect("written"),
        "line one\nline two\n"
    );

    // Updates may trail the prompt response; give them a moment, then stop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(client);
    agent_task.abort();
    let all = collector.await.expect("collector");
    for (i, event) in all.iter().enumerate() {
        assert_eq!(event.seq, 1 + i as u64);
    }
    let kinds: Vec<&str> = all.iter().map(|e| e.kind.name()).collect();
    for expected in [
        "tool_call",
        "permission_request",
        "permission_response",
        "tool_call_update",
        "message_chunk",
        "turn_end",
    ] {
        assert!(kinds.contains(&expected), "missing {expected} in {kinds:?}");
    }
    let response = all
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::PermissionResponse(p) => Some(p),
            _ => None,
        })
        .expect("permission response");
    assert_eq!(response.option_id.as_deref(), Some("allow"));
    let summary = all
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::MessageChunk(c) => c.text.clone(),
            _ => None,
        })
        .expect("summary");
    assert_eq!(
        summary,
        r#"read="line two\n" exit=Some(0) output="line one\nline two\ndone\n""#
    );
    for method in [
        "fs/write_text_file",
        "fs/read_text_file",
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ] {
        let answered = all.iter().any(|e| {
            e.raw.get("result").is_some()
                && matches!(&e.kind, EventKind::Other(o) if o.method.as_deref() == Some(method))
        });
        assert!(answered, "{method} was not answered with a result");
    }
}
