//! Client behaviour against a scripted agent on the other end of in-memory
//! pipes: the test plays the agent line by line.

#[path = "client/fs_permission.rs"]
mod fs_permission;

use std::{path::Path, sync::Arc, time::Duration};

use kandev_acp::{
    AcpClient, AcpError, AcpEvent, AskDecider, ClientOptions, Dialect, Direction, EventKind,
    EventStream, PermissionDecision, Workspace, event::LifecyclePhase, schema::StopReason,
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines},
    sync::mpsc,
    task::JoinHandle,
};

/// The agent side of the pipes.
struct FakeAgent {
    input: Lines<BufReader<DuplexStream>>,
    output: DuplexStream,
}

impl FakeAgent {
    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.input.next_line())
            .await
            .expect("client wrote nothing")
            .expect("read")
            .expect("client closed stdin");
        serde_json::from_str(&line).expect("client wrote JSON")
    }

    async fn send(&mut self, message: Value) {
        let mut line = serde_json::to_vec(&message).expect("json");
        line.push(b'\n');
        self.send_raw(&line).await;
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        self.output.write_all(bytes).await.expect("write");
        self.output.flush().await.expect("flush");
    }

    /// Ends the turn of the `session/prompt` `request` with `stop_reason`.
    async fn end_turn(&mut self, request: &Value, stop_reason: &str) {
        self.send(
            json!({"jsonrpc": "2.0", "id": request["id"], "result": {"stopReason": stop_reason}}),
        )
        .await;
    }

    async fn answer_v1_initialize(&mut self, extra: Value) -> Value {
        let request = self.recv().await;
        assert_eq!(request["method"], "initialize");
        let mut result = json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}});
        if let (Some(result), Some(extra)) = (result.as_object_mut(), extra.as_object()) {
            result.extend(extra.clone());
        }
        self.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
            .await;
        request
    }

    async fn answer_session_new(&mut self, session_id: &str) {
        let request = self.recv().await;
        assert_eq!(request["method"], "session/new");
        self.send(json!({"jsonrpc":"2.0","id":request["id"],"result":{"sessionId":session_id}}))
            .await;
    }
}

/// Collects events in the background so the client never blocks on them.
struct Events {
    rx: mpsc::UnboundedReceiver<AcpEvent>,
    seen: Vec<AcpEvent>,
    _task: JoinHandle<()>,
}

impl Events {
    fn new(mut stream: EventStream) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Some(event) = stream.recv().await {
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        Self {
            rx,
            seen: Vec::new(),
            _task: task,
        }
    }

    /// Waits for the next event of kind `name` and returns it.
    async fn until(&mut self, name: &str) -> AcpEvent {
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no {name} event; seen {:#?}", self.seen))
                .expect("event stream ended");
            self.seen.push(event.clone());
            if event.kind.name() == name {
                return event;
            }
        }
    }

    fn drain(&mut self) -> &[AcpEvent] {
        while let Ok(event) = self.rx.try_recv() {
            self.seen.push(event);
        }
        &self.seen
    }
}

fn connect(options: ClientOptions) -> (AcpClient, Events, FakeAgent) {
    let (client_io, agent_io) = (tokio::io::duplex(64 * 1024), tokio::io::duplex(64 * 1024));
    // client_io: client writes → agent reads; agent_io: agent writes → client reads.
    let (agent_in, client_out) = client_io;
    let (client_in, agent_out) = agent_io;
    let (client, events) = AcpClient::connect(client_in, client_out, options);
    let agent = FakeAgent {
        input: BufReader::new(agent_in).lines(),
        output: agent_out,
    };
    (client, Events::new(events), agent)
}

/// Client options whose permission policy asks (answered through the
/// receiver), falling back to cancel after ten minutes.
fn ask_options() -> (ClientOptions, mpsc::Receiver<kandev_acp::PermissionAsk>) {
    let (policy, asks) = AskDecider::new(Duration::from_secs(600), PermissionDecision::Cancel, 8);
    let options = ClientOptions {
        permission: Arc::new(policy),
        ..ClientOptions::default()
    };
    (options, asks)
}

async fn v1_session(options: ClientOptions) -> (AcpClient, Events, FakeAgent) {
    let (client, events, mut agent) = connect(options);
    let init = tokio::spawn({
        let client = client.clone();
        async move {
            client.initialize().await.expect("initialize");
            client
                .new_session("/workspace", vec![])
                .await
                .expect("session")
        }
    });
    agent.answer_v1_initialize(json!({})).await;
    agent.answer_session_new("s1").await;
    init.await.expect("join");
    (client, events, agent)
}

/// A prompt of `text` sent in the background: its stop reason when joined.
fn prompt_in_background(
    client: &AcpClient,
    text: &str,
) -> JoinHandle<Result<StopReason, AcpError>> {
    let client = client.clone();
    let text = text.to_owned();
    tokio::spawn(async move { client.prompt(vec![text.into()]).await })
}

fn update(session: &str, update: Value) -> Value {
    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":session,"update":update}})
}

fn text_chunk(session: &str, text: &str) -> Value {
    update(
        session,
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":text}}),
    )
}

fn assert_contiguous(events: &[AcpEvent], first: u64) {
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.seq, first + i as u64, "gap at {i}: {events:#?}");
    }
}

#[tokio::test]
async fn v1_turn_keeps_early_and_late_updates_in_order() {
    let options = ClientOptions {
        start_seq: 100,
        ..ClientOptions::default()
    };
    let (client, mut events, mut agent) = connect(options);
    let flow = tokio::spawn({
        let client = client.clone();
        async move {
            let handshake = client.initialize().await.expect("initialize");
            assert_eq!(handshake.dialect, Dialect::V1);
            client
                .new_session("/workspace", vec![])
                .await
                .expect("session");
            client.prompt(vec!["hello".into()]).await
        }
    });
    let init = agent.answer_v1_initialize(json!({})).await;
    assert_eq!(init["params"]["protocolVersion"], 1);
    assert_eq!(init["params"]["clientInfo"]["name"], "kandev");
    // Nothing is advertised that is not handled.
    assert_eq!(init["params"]["clientCapabilities"]["terminal"], false);
    assert_eq!(
        init["params"]["clientCapabilities"]["fs"]["readTextFile"],
        false
    );

    let new = agent.recv().await;
    assert_eq!(new["params"]["cwd"], "/workspace");
    assert_eq!(new["params"]["mcpServers"], json!([]));
    // An update for the session before session/new returns.
    agent.send(text_chunk("s1", "early")).await;
    agent
        .send(json!({"jsonrpc":"2.0","id":new["id"],"result":{"sessionId":"s1"}}))
        .await;

    let prompt = agent.recv().await;
    assert_eq!(prompt["method"], "session/prompt");
    assert_eq!(prompt["params"]["prompt"][0]["text"], "hello");
    agent.send(text_chunk("s1", "working")).await;
    agent.end_turn(&prompt, "end_turn").await;
    // And one after the prompt response.
    agent.send(text_chunk("s1", "late")).await;

    assert_eq!(
        flow.await.expect("join").expect("prompt"),
        StopReason::EndTurn
    );
    let turn_end = events.until("turn_end").await;
    assert_eq!(turn_end.raw["result"]["stopReason"], "end_turn");
    let late = events.until("message_chunk").await;
    assert_eq!(late.raw["params"]["update"]["content"]["text"], "late");

    let seen = events.drain();
    assert_contiguous(seen, 100);
    let texts: Vec<_> = seen
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::MessageChunk(c) => c.text.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["early", "working", "late"]);
    let early = seen
        .iter()
        .find(
            |e| matches!(&e.kind, EventKind::MessageChunk(c) if c.text.as_deref() == Some("early")),
        )
        .expect("early event");
    assert_eq!(early.session_id.as_deref(), Some("s1"));
    assert_eq!(early.direction, Direction::FromAgent);
    // Every wire message kept its raw JSON.
    assert!(
        seen.iter()
            .filter(|e| e.direction != Direction::Local)
            .all(|e| e.raw.is_object())
    );
}

/// Without `parse_raw`, text chunks keep only their wire text; everything
/// else is parsed as usual, and every event serializes the same.
#[tokio::test]
async fn without_parse_raw_text_chunks_keep_their_wire_text() {
    let options = ClientOptions {
        parse_raw: false,
        ..ClientOptions::default()
    };
    let (_client, mut events, mut agent) = v1_session(options).await;
    let wire = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"é \"q\""},"messageId":"m"}}}"#;
    agent.send_raw(format!("{wire}\n").as_bytes()).await;
    agent
        .send(update("s1", json!({"sessionUpdate":"plan","entries":[]})))
        .await;
    let chunk = events.until("message_chunk").await;
    assert_eq!(chunk.session_id.as_deref(), Some("s1"));
    assert!(chunk.raw.is_null());
    assert_eq!(chunk.raw_json.as_ref().map(|r| r.get()), Some(wire));
    match &chunk.kind {
        EventKind::MessageChunk(c) => {
            assert_eq!(c.text.as_deref(), Some("é \"q\""));
            assert_eq!(c.message_id.as_deref(), Some("m"));
        }
        other => panic!("{other:?}"),
    }
    let json: Value = serde_json::to_value(&chunk).unwrap();
    assert_eq!(json["raw"], serde_json::from_str::<Value>(wire).unwrap());
    let plan = events.until("plan").await;
    assert_eq!(plan.raw["params"]["update"]["sessionUpdate"], "plan");
}

#[tokio::test]
async fn bad_lines_become_protocol_errors_and_the_client_keeps_going() {
    let options = ClientOptions {
        max_line_bytes: 1024,
        ..ClientOptions::default()
    };
    let (client, mut events, mut agent) = v1_session(options).await;
    let prompt = prompt_in_background(&client, "go");
    let request = agent.recv().await;
    // Oversized (5000 bytes, more than the 1024 limit).
    let mut huge = serde_json::to_vec(&text_chunk("s1", &"x".repeat(5000))).expect("json");
    huge.push(b'\n');
    agent.send_raw(&huge).await;
    agent.send_raw(b"this is not json\n").await;
    agent.send_raw(b"{\"jsonrpc\":\"2.0\",\xff\xfe}\n").await;
    agent
        .send(update(
            "s1",
            json!({"sessionUpdate":"future_variant","stuff":[1,2]}),
        ))
        .await;
    agent.end_turn(&request, "end_turn").await;
    assert_eq!(
        prompt.await.expect("join").expect("prompt"),
        StopReason::EndTurn
    );

    let oversized = events.until("protocol_error").await;
    assert!(matches!(&oversized.kind, EventKind::ProtocolError(e) if e.message.contains("5")));
    let invalid = events.until("protocol_error").await;
    assert!(
        matches!(&invalid.kind, EventKind::ProtocolError(e) if e.message.contains("not valid JSON"))
    );
    assert_eq!(invalid.raw, json!("this is not json"));
    let non_utf8 = events.until("protocol_error").await;
    assert!(matches!(&non_utf8.kind, EventKind::ProtocolError(e) if e.message.contains("UTF-8")));
    let unknown = events.until("other").await;
    assert!(
        matches!(&unknown.kind, EventKind::Other(o) if o.update.as_deref() == Some("future_variant"))
    );
    assert_eq!(unknown.raw["params"]["update"]["stuff"], json!([1, 2]));
    events.until("turn_end").await;
}

#[tokio::test]
async fn unknown_agent_method_gets_method_not_found() {
    let (_client, mut events, mut agent) = v1_session(ClientOptions::default()).await;
    agent
        .send(json!({"jsonrpc":"2.0","id":"x-1","method":"brand/new","params":{}}))
        .await;
    let answer = agent.recv().await;
    assert_eq!(answer["id"], "x-1");
    assert_eq!(answer["error"]["code"], -32601);
    // fs and terminal are not configured: also -32601.
    agent
        .send(json!({"jsonrpc":"2.0","id":2,"method":"fs/read_text_file",
            "params":{"sessionId":"s1","path":"/workspace/a"}}))
        .await;
    let answer = agent.recv().await;
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["error"]["code"], -32601);
    let request = loop {
        let event = events.until("other").await;
        if event.raw["method"] == "brand/new" {
            break event;
        }
    };
    assert_eq!(request.direction, Direction::FromAgent);
    let answer = events.until("other").await;
    assert_eq!(answer.direction, Direction::ToAgent);
    assert_eq!(answer.raw["error"]["code"], -32601);
}

#[tokio::test]
async fn agent_exit_fails_pending_requests_at_once() {
    let (client, mut events, mut agent) = v1_session(ClientOptions::default()).await;
    let prompt = prompt_in_background(&client, "go");
    agent.recv().await;
    drop(agent);
    let result = tokio::time::timeout(Duration::from_secs(2), prompt)
        .await
        .expect("pending prompt must fail fast")
        .expect("join");
    assert!(matches!(result, Err(AcpError::Closed { .. })), "{result:?}");
    loop {
        let event = events.until("lifecycle").await;
        if matches!(&event.kind, EventKind::Lifecycle(l) if l.phase == LifecyclePhase::Closed) {
            break;
        }
    }
    // New requests fail immediately too.
    let again = client.set_mode("x").await;
    assert!(matches!(again, Err(AcpError::Closed { .. })), "{again:?}");
    assert!(client.is_closed());
}

#[tokio::test]
async fn cancel_answers_open_permission_requests_with_cancelled() {
    let (options, mut asks) = ask_options();
    let (client, mut events, mut agent) = v1_session(options).await;
    let prompt = prompt_in_background(&client, "go");
    let request = agent.recv().await;
    let options = json!([
        {"optionId":"allow","name":"Allow","kind":"allow_once"},
        {"optionId":"reject","name":"Reject","kind":"reject_once"}
    ]);
    // Two permission requests open at once.
    for id in [10, 11] {
        agent
            .send(json!({"jsonrpc":"2.0","id":id,"method":"session/request_permission",
                "params":{"sessionId":"s1","toolCall":{"toolCallId":format!("call-{id}")},"options":options}}))
            .await;
    }
    let first = asks.recv().await.expect("first ask");
    let second = asks.recv().await.expect("second ask");
    assert_eq!(first.request_id, json!(10));
    assert_eq!(second.request.tool_call.tool_call_id.0.as_ref(), "call-11");
    let permission_event = events.until("permission_request").await;
    assert!(
        matches!(&permission_event.kind, EventKind::PermissionRequest(p) if p.options.len() == 2)
    );

    client.cancel().await.expect("cancel");
    let mut answers = Vec::new();
    let mut saw_cancel = false;
    while answers.len() < 2 {
        let message = agent.recv().await;
        if message["method"] == "session/cancel" {
            assert_eq!(message["params"]["sessionId"], "s1");
            saw_cancel = true;
        } else {
            answers.push(message);
        }
    }
    if !saw_cancel {
        assert_eq!(agent.recv().await["method"], "session/cancel");
    }
    answers.sort_by_key(|a| a["id"].as_u64());
    for (answer, id) in answers.iter().zip([10, 11]) {
        assert_eq!(answer["id"], id);
        assert_eq!(answer["result"]["outcome"]["outcome"], "cancelled");
    }
    // The decider's late answer is refused.
    assert!(!first.respond(PermissionDecision::Select("allow".into())));
    agent.end_turn(&request, "cancelled").await;
    assert_eq!(
        prompt.await.expect("join").expect("prompt"),
        StopReason::Cancelled
    );
    let response = events.until("permission_response").await;
    assert!(matches!(&response.kind, EventKind::PermissionResponse(p) if p.outcome == "cancelled"));
    drop(second);
}

#[tokio::test]
async fn ask_decider_answer_is_sent_to_the_agent() {
    let (options, mut asks) = ask_options();
    let (_client, _events, mut agent) = v1_session(options).await;
    agent
        .send(
            json!({"jsonrpc":"2.0","id":5,"method":"session/request_permission",
            "params":{"sessionId":"s1","toolCall":{"toolCallId":"c"},
            "options":[{"optionId":"yes","name":"Yes","kind":"allow_once"}]}}),
        )
        .await;
    let ask = asks.recv().await.expect("ask");
    assert!(ask.respond(PermissionDecision::Select("yes".into())));
    let answer = agent.recv().await;
    assert_eq!(
        answer["result"]["outcome"],
        json!({"outcome":"selected","optionId":"yes"})
    );
}

#[tokio::test]
async fn fs_requests_are_confined_to_the_workspace() {
    let root = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(root.path().join("inside.txt"), "one\ntwo\nthree\n").expect("write");
    std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.path().join("link"))
            .expect("symlink");
        std::os::unix::fs::symlink(outside.path(), root.path().join("outdir")).expect("symlink");
    }
    let options = ClientOptions {
        workspace: Some(Workspace::new(root.path(), "/workspace").expect("workspace")),
        ..ClientOptions::default()
    };
    let (_client, _events, mut agent) = v1_session(options).await;
    let outside_path = outside.path().join("secret.txt");
    let mut call = async |id: u64, method: &str, params: Value| {
        let mut params = params;
        params["sessionId"] = json!("s1");
        agent
            .send(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await;
        let answer = agent.recv().await;
        assert_eq!(answer["id"], id);
        answer
    };

    let ok = call(
        1,
        "fs/read_text_file",
        json!({"path":"/workspace/inside.txt","line":2,"limit":1}),
    )
    .await;
    assert_eq!(ok["result"]["content"], "two\n");
    let ok = call(
        2,
        "fs/write_text_file",
        json!({"path":"/workspace/new/dir/f.txt","content":"hi"}),
    )
    .await;
    assert_eq!(ok["result"], json!({}));
    assert_eq!(
        std::fs::read_to_string(root.path().join("new/dir/f.txt")).expect("read"),
        "hi"
    );

    let refused = [
        (
            3,
            "fs/read_text_file",
            json!({"path":"/workspace/../etc/passwd"}),
        ),
        (4, "fs/read_text_file", json!({"path": outside_path})),
        (
            5,
            "fs/write_text_file",
            json!({"path": outside_path, "content":"x"}),
        ),
        (6, "fs/read_text_file", json!({"path":"/workspace/link"})),
        (
            7,
            "fs/write_text_file",
            json!({"path":"/workspace/link","content":"pwned"}),
        ),
        (
            8,
            "fs/write_text_file",
            json!({"path":"/workspace/outdir/new.txt","content":"pwned"}),
        ),
        (9, "fs/read_text_file", json!({"path":"relative.txt"})),
    ];
    for (id, method, params) in refused {
        let answer = call(id, method, params.clone()).await;
        assert_eq!(
            answer["error"]["code"], -32602,
            "{method} {params}: {answer}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&outside_path).expect("read"),
        "secret"
    );
    assert!(!Path::new(&outside.path().join("new.txt")).exists());
    let missing = call(
        10,
        "fs/read_text_file",
        json!({"path":"/workspace/missing.txt"}),
    )
    .await;
    assert_eq!(missing["error"]["code"], -32002);
}

#[tokio::test(start_paused = true)]
async fn control_requests_time_out() {
    let options = ClientOptions {
        request_timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    };
    let (client, _events, mut agent) = v1_session(options).await;
    let started = tokio::time::Instant::now();
    let result = tokio::join!(client.set_mode("plan"), agent.recv()).0;
    assert!(
        matches!(&result, Err(AcpError::Timeout { method, .. }) if method == "session/set_mode"),
        "{result:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(5));
    // A late answer is reported, not fatal.
    agent
        .send(json!({"jsonrpc":"2.0","id":3,"result":{}}))
        .await;
}

#[tokio::test(start_paused = true)]
async fn initialize_times_out_when_the_agent_never_answers() {
    let options = ClientOptions {
        initialize_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let (client, _events, mut agent) = connect(options);
    let result = tokio::join!(client.initialize(), agent.recv()).0;
    assert!(
        matches!(&result, Err(AcpError::Timeout { method, .. }) if method == "initialize"),
        "{result:?}"
    );
}

/// The agent's methods in the auth tests: a terminal login, an API key
/// its name does not spell out.
fn login_or_api_key() -> Value {
    json!([
        {"type":"terminal","id":"login-tty","name":"Login"},
        {"id":"api-key","name":"API key"}
    ])
}

/// A scripted agent that advertises `methods` and refuses `session/new`
/// with -32000 until `authenticate` succeeded; `authenticate` succeeds for
/// the method ids in `accepts`. Returns the session (or the error) and the
/// messages the agent received after `initialize`.
async fn auth_flow(
    options: ClientOptions,
    methods: Value,
    accepts: &[&str],
) -> (Result<String, AcpError>, Vec<Value>) {
    let (client, _events, mut agent) = connect(options);
    let mut flow = tokio::spawn({
        let client = client.clone();
        async move {
            client.initialize().await?;
            Ok(client.new_session("/workspace", vec![]).await?.session_id)
        }
    });
    agent
        .answer_v1_initialize(json!({ "authMethods": methods }))
        .await;
    let mut seen = Vec::new();
    let mut authenticated = false;
    let result = loop {
        let message = tokio::select! {
            result = &mut flow => break result.expect("join"),
            message = agent.recv() => message,
        };
        seen.push(message.clone());
        let id = &message["id"];
        let reply = match message["method"].as_str() {
            Some("session/new") if !authenticated => json!({"jsonrpc":"2.0","id":id,
                "error":{"code":-32000,"message":"Please log in first"}}),
            Some("session/new") => json!({"jsonrpc":"2.0","id":id,"result":{"sessionId":"s-auth"}}),
            Some("authenticate") => {
                let method = message["params"]["methodId"].as_str().unwrap_or_default();
                authenticated = accepts.contains(&method);
                if authenticated {
                    json!({"jsonrpc":"2.0","id":id,"result":{}})
                } else {
                    json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"no key"}})
                }
            }
            _ => continue,
        };
        agent.send(reply).await;
    };
    (result, seen)
}

fn allowing(methods: &[&str]) -> ClientOptions {
    ClientOptions {
        allowed_auth_methods: methods.iter().map(|m| (*m).to_owned()).collect(),
        ..ClientOptions::default()
    }
}

fn authenticated_with(seen: &[Value]) -> Vec<&str> {
    seen.iter()
        .filter(|m| m["method"] == "authenticate")
        .filter_map(|m| m["params"]["methodId"].as_str())
        .collect()
}

#[tokio::test]
async fn auth_required_with_an_allowed_method_authenticates_and_retries() {
    let options = allowing(&["api-key", "login-tty"]);
    let (result, seen) = auth_flow(options, login_or_api_key(), &["api-key"]).await;
    assert_eq!(result.expect("session"), "s-auth");
    assert_eq!(authenticated_with(&seen), ["api-key"]);
    assert_eq!(
        seen.iter().filter(|m| m["method"] == "session/new").count(),
        2
    );
}

#[tokio::test]
async fn auth_required_without_an_allowed_method_is_surfaced() {
    // Terminal methods are never sent to authenticate, even when allowed.
    let (result, seen) = auth_flow(allowing(&["login-tty"]), login_or_api_key(), &[]).await;
    match result {
        Err(AcpError::AuthRequired {
            message,
            methods,
            env,
        }) => {
            assert_eq!(message, "Please log in first");
            assert_eq!(methods, ["login-tty", "api-key"]);
            // `api-key` is codex's id: its variables are known.
            assert_eq!(env, ["CODEX_API_KEY", "OPENAI_API_KEY"]);
        }
        other => panic!("expected AuthRequired, got {other:?}"),
    }
    assert!(authenticated_with(&seen).is_empty());
}

/// codex-acp 0.x's methods: a browser login, then two API keys (the newer
/// `env_var` shape, and the older one naming its variable in its name).
fn codex_methods() -> Value {
    json!([
        {"id":"chatgpt","name":"Login with ChatGPT",
         "description":"Use your ChatGPT login with Codex CLI (requires a paid ChatGPT subscription)"},
        {"type":"env_var","id":"codex-api-key","name":"Use CODEX_API_KEY",
         "vars":[{"name":"CODEX_API_KEY"}]},
        {"id":"openai-api-key","name":"Use OPENAI_API_KEY",
         "description":"Requires setting the `OPENAI_API_KEY` environment variable."}
    ])
}

fn with_env(vars: &[&str]) -> ClientOptions {
    ClientOptions {
        auth_env: vars.iter().map(|v| (*v).to_owned()).collect(),
        ..ClientOptions::default()
    }
}

#[tokio::test]
async fn auth_required_authenticates_with_the_method_whose_variable_is_set() {
    let options = with_env(&["PATH", "OPENAI_API_KEY"]);
    let (result, seen) = auth_flow(options, codex_methods(), &["openai-api-key"]).await;
    assert_eq!(result.expect("session"), "s-auth");
    assert_eq!(authenticated_with(&seen), ["openai-api-key"]);
}

#[tokio::test]
async fn auth_required_without_the_variable_names_it() {
    let options = with_env(&["ANTHROPIC_API_KEY"]);
    let (result, seen) = auth_flow(options, codex_methods(), &["openai-api-key"]).await;
    let error = result.expect_err("no credentials");
    assert!(
        error
            .to_string()
            .contains("set CODEX_API_KEY or OPENAI_API_KEY"),
        "{error}"
    );
    match error {
        AcpError::AuthRequired { env, .. } => assert_eq!(env, ["CODEX_API_KEY", "OPENAI_API_KEY"]),
        other => panic!("expected AuthRequired, got {other:?}"),
    }
    // Nothing is tried: not the browser login, not a key that is not set.
    assert!(authenticated_with(&seen).is_empty());
}

#[tokio::test]
async fn seed_dialect_is_detected_and_its_turn_completes() {
    let (client, mut events, mut agent) = connect(ClientOptions::default());
    // The seed agent answers initialize (id 1) before it is asked.
    agent
        .send(json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"1.0",
            "serverInfo":{"name":"seed","version":"1"},"capabilities":{"streaming":true,"sessionResumption":true}}}))
        .await;
    let flow = tokio::spawn({
        let client = client.clone();
        async move {
            let handshake = client.initialize().await.expect("initialize");
            assert_eq!(handshake.dialect, Dialect::Seed);
            client
                .new_session("/workspace", vec![])
                .await
                .expect("session");
            client.prompt(vec!["fix it".into()]).await
        }
    });
    assert_eq!(agent.recv().await["method"], "initialize");
    let new = agent.recv().await;
    assert_eq!(new["params"], json!({}));
    agent
        .send(json!({"jsonrpc":"2.0","id":new["id"],"result":{"sessionId":"seed-1"}}))
        .await;
    let prompt = agent.recv().await;
    assert_eq!(prompt["params"], json!({"message":"fix it"}));
    agent
        .send(json!({"jsonrpc":"2.0","id":prompt["id"],"result":{"accepted":true}}))
        .await;
    agent
        .send(json!({"jsonrpc":"2.0","method":"session/update","params":{"type":"content","data":{"text":"on it"}}}))
        .await;
    agent
        .send(
            json!({"jsonrpc":"2.0","method":"session/update","params":{"type":"toolCall",
            "data":{"toolName":"file_edit","status":"running","args":{"file":"a.go"}}}}),
        )
        .await;
    agent
        .send(
            json!({"jsonrpc":"2.0","method":"session/update","params":{"type":"complete",
            "data":{"sessionId":"seed-1","success":true,"summary":"done"}}}),
        )
        .await;
    assert_eq!(
        flow.await.expect("join").expect("prompt"),
        StopReason::EndTurn
    );
    let chunk = events.until("message_chunk").await;
    assert!(
        matches!(&chunk.kind, EventKind::MessageChunk(c) if c.text.as_deref() == Some("on it"))
    );
    assert_eq!(chunk.session_id.as_deref(), Some("seed-1"));
    let tool = events.until("tool_call").await;
    assert!(
        matches!(&tool.kind, EventKind::ToolCall(t) if t.title.as_deref() == Some("file_edit"))
    );
    let end = events.until("turn_end").await;
    assert!(matches!(&end.kind, EventKind::TurnEnd(t) if t.stop_reason == "end_turn"));

    // A failing turn: `{type: error}` fails the prompt.
    let flow = prompt_in_background(&client, "again");
    let prompt = agent.recv().await;
    agent
        .send(json!({"jsonrpc":"2.0","id":prompt["id"],"result":{"accepted":true}}))
        .await;
    agent
        .send(
            json!({"jsonrpc":"2.0","method":"session/update","params":{"type":"error",
            "data":{"message":"Failed to compile","details":"line 45"}}}),
        )
        .await;
    let result = flow.await.expect("join");
    assert!(
        matches!(&result, Err(AcpError::TurnFailed(m)) if m.contains("Failed to compile")),
        "{result:?}"
    );
    // v1-only calls are refused for the seed dialect.
    assert!(matches!(
        client.set_mode("x").await,
        Err(AcpError::Unsupported(_))
    ));
}

#[tokio::test]
async fn legacy_format_is_detected_from_non_json_rpc_lines() {
    let (client, mut events, mut agent) = connect(ClientOptions::default());
    let flow = tokio::spawn({
        let client = client.clone();
        async move {
            let handshake = client.initialize().await.expect("initialize");
            client
                .new_session("/workspace", vec![])
                .await
                .expect("session");
            (handshake.dialect, client.prompt(vec!["task".into()]).await)
        }
    });
    assert_eq!(agent.recv().await["method"], "initialize");
    for line in [
        json!({"type":"status","agent_id":"a","task_id":"t","timestamp":"2026-01-10T12:00:00Z","data":{"status":"started"}}),
        json!({"type":"progress","timestamp":"2026-01-10T12:00:01Z","agent_id":"a","task_id":"t","data":{"progress":10,"message":"reading"}}),
        json!({"type":"log","agent_id":"a","task_id":"t","data":{"level":"info","message":"hello"}}),
        json!({"type":"heartbeat","agent_id":"a","task_id":"t"}),
        json!({"type":"result","agent_id":"a","task_id":"t","data":{"status":"completed","summary":"ok"}}),
    ] {
        agent.send(line).await;
    }
    let (dialect, result) = flow.await.expect("join");
    assert_eq!(dialect, Dialect::Legacy);
    assert_eq!(result.expect("turn"), StopReason::EndTurn);
    let progress = events.until("progress").await;
    assert!(matches!(&progress.kind, EventKind::Progress(p) if p.percent == Some(10.0)));
    assert_eq!(progress.session_id.as_deref(), Some("t"));
    let log = events.until("log").await;
    assert!(matches!(&log.kind, EventKind::Log(l) if l.line == "hello"));
    events.until("turn_end").await;
}

#[tokio::test]
async fn stderr_lines_share_the_sequence_and_backpressure_never_drops() {
    let options = ClientOptions {
        event_capacity: 2,
        start_seq: 41,
        ..ClientOptions::default()
    };
    let (client, mut stream, mut agent) = {
        let (agent_in, client_out) = tokio::io::duplex(1 << 20);
        let (client_in, agent_out) = tokio::io::duplex(1 << 20);
        let (client, events) = AcpClient::connect(client_in, client_out, options);
        drop(agent_in);
        (client, events, agent_out)
    };
    // 200 lines while nobody reads events: the reader must wait, not drop.
    let mut burst = Vec::new();
    for i in 0..200 {
        burst.extend(serde_json::to_vec(&text_chunk("s", &i.to_string())).expect("json"));
        burst.push(b'\n');
    }
    agent.write_all(&burst).await.expect("write");
    let (stderr_w, stderr_r) = tokio::io::duplex(1024);
    let pump = tokio::spawn({
        let client = client.clone();
        async move { client.pump_stderr(stderr_r).await }
    });
    let mut stderr_w = stderr_w;
    stderr_w
        .write_all(b"warning: something\n")
        .await
        .expect("write");
    drop(stderr_w);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let mut all = Vec::new();
    while all.len() < 201 {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.recv())
            .await
            .expect("event")
            .expect("open");
        all.push(event);
    }
    pump.await.expect("pump");
    assert_contiguous(&all, 41);
    let texts: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::MessageChunk(c) => c.text.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(texts, (0..200).map(|i| i.to_string()).collect::<Vec<_>>());
    let log = all
        .iter()
        .find(|e| e.kind.name() == "log")
        .expect("stderr log");
    assert_eq!(log.raw, json!("warning: something"));

    // Feeding by hand continues the same numbering.
    client.log_line("by hand").await;
    let next = stream.recv().await.expect("event");
    assert_eq!(next.seq, 41 + 201);
}

#[test]
fn events_round_trip_through_json() {
    let event = AcpEvent {
        seq: 3,
        timestamp: chrono::Utc::now(),
        direction: Direction::FromAgent,
        session_id: Some("s".into()),
        kind: EventKind::TurnEnd(kandev_acp::event::TurnEndData {
            stop_reason: "end_turn".into(),
            message: None,
        }),
        raw: json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}),
        raw_json: None,
    };
    let text = serde_json::to_string(&event).expect("serialize");
    let value: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(value["kind"], "turn_end");
    assert_eq!(value["data"]["stop_reason"], "end_turn");
    assert_eq!(value["direction"], "from_agent");
    let back: AcpEvent = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, event);

    // The wire text, when kept, is written as it came and reads back the same.
    let wire = r#"{"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}"#;
    let with_text = AcpEvent {
        raw_json: Some(kandev_acp::RawJson::parse(wire).unwrap()),
        ..event.clone()
    };
    let text = serde_json::to_string(&with_text).expect("serialize");
    assert!(text.ends_with(&format!(r#""raw":{wire}}}"#)), "{text}");
    let back: AcpEvent = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, event);
}

#[tokio::test]
async fn load_session_replays_history_before_returning() {
    let (client, mut events, mut agent) = connect(ClientOptions::default());
    let flow = tokio::spawn({
        let client = client.clone();
        async move {
            client.initialize().await.expect("initialize");
            client.load_session("old", "/workspace", vec![]).await
        }
    });
    agent.answer_v1_initialize(json!({})).await;
    let load = agent.recv().await;
    assert_eq!(load["method"], "session/load");
    assert_eq!(load["params"]["sessionId"], "old");
    agent
        .send(update(
            "old",
            json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"before"}}),
        ))
        .await;
    agent
        .send(json!({"jsonrpc":"2.0","id":load["id"],"result":null}))
        .await;
    assert_eq!(flow.await.expect("join").expect("load").session_id, "old");
    let replay = events.until("message_chunk").await;
    assert!(matches!(&replay.kind, EventKind::MessageChunk(c)
        if c.role == kandev_acp::event::ChunkRole::User && c.text.as_deref() == Some("before")));
    assert_eq!(client.session_id().as_deref(), Some("old"));

    // Without the capability the call is refused locally.
    let (client, _events, mut agent) = connect(ClientOptions::default());
    let flow = tokio::spawn({
        let client = client.clone();
        async move {
            client.initialize().await.expect("initialize");
            client.load_session("old", "/workspace", vec![]).await
        }
    });
    let init = agent.recv().await;
    agent
        .send(json!({"jsonrpc":"2.0","id":init["id"],"result":{"protocolVersion":1}}))
        .await;
    let result = flow.await.expect("join");
    assert!(
        matches!(result, Err(AcpError::Unsupported(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn shutdown_ends_the_stream_and_a_successor_continues_the_numbering() {
    let (options, mut asks) = ask_options();
    let (client, mut events, mut agent) = v1_session(options).await;
    let prompt = prompt_in_background(&client, "go");
    agent.recv().await;
    agent.send(text_chunk("s1", "before")).await;
    // A permission request that nobody answers keeps a handler open.
    agent
        .send(
            json!({"jsonrpc":"2.0","id":7,"method":"session/request_permission",
            "params":{"sessionId":"s1","toolCall":{"toolCallId":"call-7"},
            "options":[{"optionId":"allow","name":"Allow","kind":"allow_once"}]}}),
        )
        .await;
    let ask = asks.recv().await.expect("the ask reaches the decider");
    events.until("permission_request").await;

    client.shutdown().await;
    let result = tokio::time::timeout(Duration::from_secs(2), prompt)
        .await
        .expect("the open prompt fails at once")
        .expect("join");
    assert!(matches!(result, Err(AcpError::Closed { .. })), "{result:?}");
    // The open permission request was answered before shutdown returned:
    // cancelled (the turn ended) or "client shut down", whichever came first.
    let answer = agent.recv().await;
    assert_eq!(answer["id"], 7);
    assert!(
        answer["result"]["outcome"]["outcome"] == "cancelled" || answer["error"]["code"] == -32800,
        "{answer}"
    );
    assert!(!ask.respond(PermissionDecision::Select("allow".into())));
    // Nothing is emitted any more, and the stream ends.
    client.log_line("too late").await;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), events.rx.recv())
        .await
        .expect("the event stream ends")
    {
        events.seen.push(event);
    }
    assert_contiguous(&events.seen, 1);
    assert!(
        !events
            .seen
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Log(l) if l.line == "too late")),
        "an event was emitted after shutdown"
    );
    let last = events.seen.last().expect("events").seq;

    // A successor on the same agent numbers on from there.
    let (successor, mut next, mut agent) = connect(ClientOptions {
        start_seq: last + 1,
        ..ClientOptions::default()
    });
    successor.log_line("after").await;
    agent.send(text_chunk("s1", "more")).await;
    let chunk = next.until("message_chunk").await;
    assert_eq!(chunk.seq, last + 2);
    assert_contiguous(next.drain(), last + 1);
}
