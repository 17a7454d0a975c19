//! The ACP client: JSON-RPC correlation, agent-request handling, dialect
//! detection and the event stream.
//!
//! One reader task owns the agent's stdout. It parses each bounded line,
//! emits its event (in wire order), completes pending requests and spawns a
//! task for every request from the agent. Writes go through one lock, and
//! the event for an outgoing message is emitted just before it is written,
//! so sequence numbers follow the order of the wire.

use std::{
    collections::HashMap,
    panic::AssertUnwindSafe,
    path::PathBuf,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use agent_client_protocol::{
    schema::ProtocolVersion,
    v1::schema::{
        AuthMethod, AuthenticateRequest, CancelNotification, ClientCapabilities, ContentBlock,
        CreateTerminalRequest, CreateTerminalResponse, EmbeddedResourceResource,
        FileSystemCapabilities, Implementation, InitializeRequest, InitializeResponse,
        KillTerminalRequest, LoadSessionRequest, McpServer, NewSessionRequest, PromptRequest,
        PromptResponse, ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest,
        RequestPermissionRequest, RequestPermissionResponse, SessionConfigOptionValue,
        SetSessionConfigOptionRequest, SetSessionConfigOptionResponse, SetSessionModeRequest,
        StopReason, TerminalOutputRequest, WaitForTerminalExitRequest, WaitForTerminalExitResponse,
        WriteTextFileRequest,
    },
};
use chrono::Utc;
use futures::{FutureExt, Stream};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::{Semaphore, mpsc, oneshot, watch},
};
use tokio_util::{
    sync::{CancellationToken, DropGuard},
    task::TaskTracker,
};

use crate::{
    error::{AcpError, RpcError, codes},
    event::{
        AcpEvent, ConfigChangeData, Direction, EventKind, LifecycleData, LifecyclePhase, LogData,
        LogSource, ModeChangeData, OtherData, PermissionResponseData, ProtocolErrorData,
        TurnEndData,
    },
    framing::{DEFAULT_MAX_LINE_BYTES, Frame, LineReader},
    normalize::{self, TurnSignal},
    permission::{AutoApprove, PermissionDecision, PermissionPolicy},
    terminal::TerminalExecutor,
    workspace::Workspace,
};

/// The protocol dialect spoken by the agent, detected from its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// ACP protocol v1 (integer `protocolVersion: 1`).
    V1,
    /// The seed's AGENTS.md dialect (string `protocolVersion`, e.g. `"1.0"`).
    Seed,
    /// The legacy `{type: progress|log|result|...}` lines (not JSON-RPC).
    Legacy,
}

/// How much of an unparsable line is kept in its event's `raw`.
const BAD_LINE_PREVIEW: usize = 4096;
/// How many responses that arrive before their request was sent are kept.
const EARLY_RESPONSES: usize = 16;

/// Client configuration. `Default` gives the documented defaults.
#[derive(Clone)]
pub struct ClientOptions {
    /// `clientInfo.name` sent in `initialize`.
    pub client_name: String,
    /// `clientInfo.version`.
    pub client_version: String,
    /// The largest accepted line from the agent (default 8 MiB).
    pub max_line_bytes: usize,
    /// Timeout of `initialize` (default 30 s).
    pub initialize_timeout: Duration,
    /// Timeout of other control requests: `session/new`, `authenticate`,
    /// `session/load`, `session/set_*` (default 60 s).
    pub request_timeout: Duration,
    /// Timeout of a whole prompt turn (default none).
    pub prompt_timeout: Option<Duration>,
    /// Capacity of the event channel (default 1024). When it is full the
    /// reader stops reading: backpressure, never drops.
    pub event_capacity: usize,
    /// The first sequence number (default 1), to resume numbering after a
    /// restart.
    pub start_seq: u64,
    /// Decides `session/request_permission` (default [`AutoApprove`]).
    pub permission: Arc<dyn PermissionPolicy>,
    /// Enables `fs/*` confined to this workspace (and advertises `fs`).
    pub workspace: Option<Workspace>,
    /// Enables `terminal/*` (and advertises `terminal`).
    pub terminal: Option<Arc<dyn TerminalExecutor>>,
    /// Auth method ids the client may pass to `authenticate` by itself when
    /// `session/new` answers `auth_required`.
    pub allowed_auth_methods: Vec<String>,
    /// At most this many agent requests are handled at once (default 64);
    /// more make the reader wait.
    pub max_concurrent_agent_requests: usize,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("client_name", &self.client_name)
            .field("max_line_bytes", &self.max_line_bytes)
            .field("initialize_timeout", &self.initialize_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("prompt_timeout", &self.prompt_timeout)
            .field("event_capacity", &self.event_capacity)
            .field("start_seq", &self.start_seq)
            .field("workspace", &self.workspace)
            .field("terminal", &self.terminal.is_some())
            .field("allowed_auth_methods", &self.allowed_auth_methods)
            .finish_non_exhaustive()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            client_name: "kandev".to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            initialize_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            prompt_timeout: None,
            event_capacity: 1024,
            start_seq: 1,
            permission: Arc::new(AutoApprove),
            workspace: None,
            terminal: None,
            allowed_auth_methods: Vec::new(),
            max_concurrent_agent_requests: 64,
        }
    }
}

/// What `initialize` learned about the agent.
#[derive(Debug, Clone)]
pub struct Handshake {
    /// The detected dialect.
    pub dialect: Dialect,
    /// The parsed v1 answer (v1 only).
    pub response: Option<InitializeResponse>,
    /// The raw `result` (`null` for legacy agents, which do not answer).
    pub raw: Value,
}

/// A created or loaded session.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The session id.
    pub session_id: String,
    /// The raw `result` of `session/new` / `session/load` (modes, config
    /// options, ...).
    pub raw: Value,
}

/// The receiving end of the events of one client.
///
/// Drain it concurrently with the calls on [`AcpClient`]: when it is full the
/// client stops reading from the agent, so responses wait too.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::Receiver<AcpEvent>,
}

impl EventStream {
    /// The next event; `None` once the client and its reader are gone.
    pub async fn recv(&mut self) -> Option<AcpEvent> {
        self.rx.recv().await
    }
}

impl Stream for EventStream {
    type Item = AcpEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AcpEvent>> {
        self.rx.poll_recv(cx)
    }
}

/// Why a pending request did not get a result.
#[derive(Debug)]
enum Failure {
    Rpc(RpcError),
    Closed(String),
}

type Reply = Result<Value, Failure>;

#[derive(Debug)]
enum TurnResult {
    Signal(TurnSignal),
    Closed(String),
}

struct Pending {
    method: String,
    tx: oneshot::Sender<Reply>,
}

#[derive(Default)]
struct State {
    pending: HashMap<u64, Pending>,
    early: HashMap<u64, Reply>,
    closed: Option<String>,
    dialect: Option<Dialect>,
    init: Option<InitializeResponse>,
    seed_init: Value,
    session_id: Option<String>,
    turn_waiter: Option<oneshot::Sender<TurnResult>>,
    stashed_turn: Option<TurnSignal>,
    cancel_requested: bool,
}

struct Emitter {
    next_seq: u64,
    tx: mpsc::Sender<AcpEvent>,
}

type BoxWriter = Pin<Box<dyn AsyncWrite + Send>>;

struct Inner {
    options: ClientOptions,
    emitter: tokio::sync::Mutex<Emitter>,
    /// `None` once stdin was closed.
    writer: tokio::sync::Mutex<Option<BoxWriter>>,
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Cancelled by `cancel()`; replaced at the start of each prompt.
    turn_cancel: Mutex<CancellationToken>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    handler_slots: Arc<Semaphore>,
    dialect_tx: watch::Sender<Option<Dialect>>,
    closed_tx: watch::Sender<bool>,
}

/// A client connected to one agent instance. Cheap to clone; when the last
/// clone is dropped the reader stops and the event stream ends.
#[derive(Clone)]
pub struct AcpClient {
    inner: Arc<Inner>,
    _guard: Arc<DropGuard>,
}

impl std::fmt::Debug for AcpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpClient")
            .field("dialect", &self.dialect())
            .field("session_id", &self.session_id())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn preview(bytes: &[u8]) -> Value {
    let cut = bytes.len().min(BAD_LINE_PREVIEW);
    Value::String(String::from_utf8_lossy(&bytes[..cut]).into_owned())
}

fn protocol_error(message: impl Into<String>, code: Option<i64>) -> EventKind {
    EventKind::ProtocolError(ProtocolErrorData {
        message: message.into(),
        code,
    })
}

fn other(method: Option<&str>, id: Option<&Value>) -> EventKind {
    EventKind::Other(OtherData {
        method: method.map(str::to_owned),
        update: None,
        id: id.cloned(),
    })
}

fn lifecycle(phase: LifecyclePhase, dialect: Option<Dialect>, detail: Option<String>) -> EventKind {
    EventKind::Lifecycle(LifecycleData {
        phase,
        dialect,
        detail,
    })
}

fn to_params<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn parse_result<T: DeserializeOwned>(method: &str, value: Value) -> Result<T, AcpError> {
    serde_json::from_value(value).map_err(|e| AcpError::InvalidResponse {
        method: method.to_owned(),
        message: e.to_string(),
    })
}

/// The plain text of a prompt, for dialects that take a string.
fn prompt_text(prompt: &[ContentBlock]) -> String {
    prompt
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.clone()),
            ContentBlock::ResourceLink(l) => Some(l.uri.clone()),
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => Some(t.text.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Removes a pending request when its future is dropped (timeout, caller
/// gave up, or it completed).
struct PendingGuard<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.inner.state).pending.remove(&self.id);
    }
}

impl Inner {
    fn current_session(&self) -> Option<String> {
        lock(&self.state).session_id.clone()
    }

    async fn emit(
        &self,
        direction: Direction,
        session_id: Option<String>,
        kind: EventKind,
        raw: Value,
    ) {
        let mut emitter = self.emitter.lock().await;
        let event = AcpEvent {
            seq: emitter.next_seq,
            timestamp: Utc::now(),
            direction,
            session_id,
            kind,
            raw,
        };
        // A dropped consumer loses events; numbering stays contiguous for
        // whoever still listens.
        if emitter.tx.send(event).await.is_ok() {
            emitter.next_seq += 1;
        }
    }

    /// Emits the event for `message`, then writes it.
    async fn write_message(&self, message: Value, kind: EventKind) -> Result<(), AcpError> {
        let mut line = serde_json::to_vec(&message).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut guard = self.writer.lock().await;
        let Some(writer) = guard.as_mut() else {
            return Err(AcpError::Closed {
                reason: Some("stdin was closed by the client".to_owned()),
            });
        };
        self.emit(Direction::ToAgent, self.current_session(), kind, message)
            .await;
        let written = async {
            writer.write_all(&line).await?;
            writer.flush().await
        };
        match written.await {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(AcpError::Closed {
                reason: Some("the agent's stdin is closed (did it exit?)".to_owned()),
            }),
            other => Ok(other?),
        }
    }

    fn set_dialect(&self, dialect: Dialect) -> bool {
        let mut state = lock(&self.state);
        if state.dialect.is_some() {
            return false;
        }
        state.dialect = Some(dialect);
        drop(state);
        self.dialect_tx.send_replace(Some(dialect));
        true
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
        kind: Option<EventKind>,
    ) -> Result<Value, AcpError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        {
            let mut state = lock(&self.state);
            if let Some(reason) = &state.closed {
                return Err(AcpError::Closed {
                    reason: Some(reason.clone()),
                });
            }
            match state.early.remove(&id) {
                // The agent answered before we asked (the seed script
                // answers `initialize` as soon as it starts).
                Some(reply) => {
                    let _ = tx.send(reply);
                }
                None => {
                    state.pending.insert(
                        id,
                        Pending {
                            method: method.to_owned(),
                            tx,
                        },
                    );
                }
            }
        }
        let _guard = PendingGuard { inner: self, id };
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let kind = kind.unwrap_or_else(|| other(Some(method), Some(&Value::from(id))));
        self.write_message(message, kind).await?;
        let reply = match timeout {
            Some(limit) => {
                tokio::time::timeout(limit, rx)
                    .await
                    .map_err(|_| AcpError::Timeout {
                        method: method.to_owned(),
                        timeout: limit,
                    })?
            }
            None => rx.await,
        };
        match reply {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Failure::Rpc(source))) => Err(AcpError::Rpc {
                method: method.to_owned(),
                source: Box::new(source),
            }),
            Ok(Err(Failure::Closed(reason))) => Err(AcpError::Closed {
                reason: Some(reason),
            }),
            Err(_) => Err(AcpError::Closed { reason: None }),
        }
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), AcpError> {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.write_message(message, other(Some(method), None)).await
    }

    /// Answers a request from the agent (exactly once per request).
    async fn respond(&self, id: Value, method: &str, result: Result<Value, RpcError>) {
        let kind = match (&result, method) {
            (Ok(value), "session/request_permission") => {
                let outcome = value.pointer("/outcome/outcome").and_then(Value::as_str);
                let option_id = value.pointer("/outcome/optionId").and_then(Value::as_str);
                EventKind::PermissionResponse(PermissionResponseData {
                    request_id: id.clone(),
                    outcome: outcome.unwrap_or("cancelled").to_owned(),
                    option_id: option_id.map(str::to_owned),
                })
            }
            _ => other(Some(method), Some(&id)),
        };
        let message = match result {
            Ok(value) => json!({"jsonrpc": "2.0", "id": id, "result": value}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        if let Err(e) = self.write_message(message, kind).await {
            tracing::debug!(method, error = %e, "could not answer agent request");
        }
    }

    async fn close(&self, reason: String) {
        let (pending, waiter) = {
            let mut state = lock(&self.state);
            state.closed = Some(reason.clone());
            (std::mem::take(&mut state.pending), state.turn_waiter.take())
        };
        // Every open request fails at once.
        for (_, p) in pending {
            let _ = p.tx.send(Err(Failure::Closed(reason.clone())));
        }
        if let Some(waiter) = waiter {
            let _ = waiter.send(TurnResult::Closed(reason.clone()));
        }
        lock(&self.turn_cancel).cancel();
        self.closed_tx.send_replace(true);
        let dialect = lock(&self.state).dialect;
        self.emit(
            Direction::Local,
            self.current_session(),
            lifecycle(LifecyclePhase::Closed, dialect, Some(reason)),
            Value::Null,
        )
        .await;
    }

    fn signal_turn(&self, signal: TurnSignal) {
        let mut state = lock(&self.state);
        match state.turn_waiter.take() {
            Some(waiter) => {
                let _ = waiter.send(TurnResult::Signal(signal));
            }
            None => state.stashed_turn = Some(signal),
        }
    }
}

async fn read_loop(inner: Arc<Inner>, reader: impl AsyncRead + Send + Unpin) {
    let max = inner.options.max_line_bytes;
    let mut lines = LineReader::new(BufReader::new(reader), max);
    let reason = loop {
        let frame = tokio::select! {
            biased;
            () = inner.shutdown.cancelled() => break "client shut down".to_owned(),
            frame = lines.next_frame() => frame,
        };
        match frame {
            Ok(None) => break "agent closed its output".to_owned(),
            Err(e) => break format!("reading from the agent failed: {e}"),
            Ok(Some(Frame::TooLong { len })) => {
                let kind = protocol_error(
                    format!("line of {len} bytes exceeds the {max}-byte limit; skipped"),
                    None,
                );
                inner
                    .emit(
                        Direction::FromAgent,
                        inner.current_session(),
                        kind,
                        Value::Null,
                    )
                    .await;
            }
            Ok(Some(Frame::Line(bytes))) => handle_line(&inner, bytes).await,
        }
    };
    inner.close(reason).await;
}

async fn handle_line(inner: &Arc<Inner>, bytes: Vec<u8>) {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let bad = |message: String, bytes: &[u8]| {
        let raw = preview(bytes);
        async move {
            inner
                .emit(
                    Direction::FromAgent,
                    inner.current_session(),
                    protocol_error(message, Some(codes::PARSE_ERROR)),
                    raw,
                )
                .await;
        }
    };
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text,
        Err(e) => return bad(format!("line is not valid UTF-8: {e}"), &bytes).await,
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(_) => return bad("line is not a JSON object".to_owned(), &bytes).await,
        Err(e) => return bad(format!("line is not valid JSON: {e}"), &bytes).await,
    };
    let method = value
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let id = value.get("id").filter(|id| !id.is_null()).cloned();
    match (method, id) {
        (Some(method), Some(id)) => handle_agent_request(inner, id, method, value).await,
        (Some(method), None) => handle_notification(inner, &method, value).await,
        (None, Some(id)) if value.get("result").is_some() || value.get("error").is_some() => {
            handle_response(inner, id, value).await;
        }
        _ if normalize::is_legacy_line(&value) => handle_legacy(inner, value).await,
        _ => {
            let kind = protocol_error("not a JSON-RPC message", Some(codes::INVALID_REQUEST));
            inner
                .emit(Direction::FromAgent, inner.current_session(), kind, value)
                .await;
        }
    }
}

async fn handle_response(inner: &Arc<Inner>, id: Value, value: Value) {
    let reply: Reply = match value.get("error") {
        Some(error) => Err(Failure::Rpc(
            serde_json::from_value(error.clone())
                .unwrap_or_else(|_| RpcError::new(codes::INTERNAL_ERROR, error.to_string())),
        )),
        None => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
    };
    let key = id.as_u64();
    let pending = key.and_then(|k| lock(&inner.state).pending.remove(&k));
    let session = inner.current_session();
    let Some(pending) = pending else {
        let stashed = key.is_some_and(|k| {
            let mut state = lock(&inner.state);
            let unissued = k >= inner.next_id.load(Ordering::SeqCst);
            if unissued && state.early.len() < EARLY_RESPONSES {
                state.early.insert(k, reply);
                true
            } else {
                false
            }
        });
        let kind = if stashed {
            other(None, Some(&id))
        } else {
            protocol_error(format!("response to unknown request id {id}"), None)
        };
        inner.emit(Direction::FromAgent, session, kind, value).await;
        return;
    };
    let method = pending.method.as_str();
    let kind = match (&reply, method) {
        (Err(Failure::Rpc(e)), "session/prompt") => EventKind::TurnEnd(TurnEndData {
            stop_reason: "error".to_owned(),
            message: Some(e.message.clone()),
        }),
        (Err(Failure::Rpc(e)), _) => {
            protocol_error(format!("{method} failed: {}", e.message), Some(e.code))
        }
        (Ok(result), "session/prompt") => match result.get("stopReason").and_then(Value::as_str) {
            Some(reason) => EventKind::TurnEnd(TurnEndData {
                stop_reason: reason.to_owned(),
                message: None,
            }),
            None => other(Some(method), Some(&id)),
        },
        (Ok(result), "session/set_config_option") => EventKind::ConfigChange(ConfigChangeData {
            config_id: None,
            value: None,
            config_options: result.get("configOptions").cloned(),
        }),
        _ => other(Some(method), Some(&id)),
    };
    inner.emit(Direction::FromAgent, session, kind, value).await;
    let _ = pending.tx.send(reply);
}

async fn handle_notification(inner: &Arc<Inner>, method: &str, value: Value) {
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    if method != "session/update" {
        let session = params
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| inner.current_session());
        inner
            .emit(
                Direction::FromAgent,
                session,
                other(Some(method), None),
                value,
            )
            .await;
        return;
    }
    let normalized = normalize::session_update(&params);
    let session = normalized.session_id.or_else(|| inner.current_session());
    inner
        .emit(Direction::FromAgent, session, normalized.kind, value)
        .await;
    if let Some(signal) = normalized.turn {
        inner.signal_turn(signal);
    }
}

async fn handle_legacy(inner: &Arc<Inner>, value: Value) {
    if inner.set_dialect(Dialect::Legacy) {
        inner
            .emit(
                Direction::Local,
                None,
                lifecycle(LifecyclePhase::DialectDetected, Some(Dialect::Legacy), None),
                Value::Null,
            )
            .await;
    }
    let normalized = normalize::legacy_line(&value);
    let session = normalized.session_id.or_else(|| inner.current_session());
    inner
        .emit(Direction::FromAgent, session, normalized.kind, value)
        .await;
    if let Some(signal) = normalized.turn {
        inner.signal_turn(signal);
    }
}

type Handled = Result<Value, RpcError>;

fn invalid_params(e: serde_json::Error) -> RpcError {
    RpcError::new(codes::INVALID_PARAMS, format!("invalid params: {e}"))
}

fn parse_params<T: DeserializeOwned>(params: &Value) -> Result<T, RpcError> {
    serde_json::from_value(params.clone()).map_err(invalid_params)
}

async fn handle_agent_request(inner: &Arc<Inner>, id: Value, method: String, value: Value) {
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    let session = params
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| inner.current_session());
    let has_fs = inner.options.workspace.is_some();
    let has_terminal = inner.options.terminal.is_some();
    let supported = match method.as_str() {
        "session/request_permission" => true,
        "fs/read_text_file" | "fs/write_text_file" => has_fs,
        "terminal/create"
        | "terminal/output"
        | "terminal/wait_for_exit"
        | "terminal/kill"
        | "terminal/release" => has_terminal,
        _ => false,
    };
    if method == "session/request_permission" {
        match serde_json::from_value::<RequestPermissionRequest>(params.clone()) {
            Ok(request) => {
                let kind = normalize::permission_request(&id, &request);
                inner.emit(Direction::FromAgent, session, kind, value).await;
                // Take the turn's cancel token now, in wire order.
                let cancel = lock(&inner.turn_cancel).clone();
                let policy = inner.options.permission.clone();
                let request_id = id.clone();
                spawn_handler(inner, id, method, async move {
                    let decision = tokio::select! {
                        biased;
                        () = cancel.cancelled() => PermissionDecision::Cancel,
                        decision = policy.decide(&request_id, &request) => decision,
                    };
                    Ok(to_params(&RequestPermissionResponse::new(
                        decision.into_outcome(),
                    )))
                })
                .await;
            }
            Err(e) => {
                inner
                    .emit(
                        Direction::FromAgent,
                        session,
                        other(Some(&method), Some(&id)),
                        value,
                    )
                    .await;
                inner.respond(id, &method, Err(invalid_params(e))).await;
            }
        }
        return;
    }
    inner
        .emit(
            Direction::FromAgent,
            session,
            other(Some(&method), Some(&id)),
            value,
        )
        .await;
    if !supported {
        let error = RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        );
        inner.respond(id, &method, Err(error)).await;
        return;
    }
    let workspace = inner.options.workspace.clone();
    let terminal = inner.options.terminal.clone();
    let name = method.clone();
    spawn_handler(inner, id, method, async move {
        handle_capability(&name, &params, workspace, terminal).await
    })
    .await;
}

async fn handle_capability(
    method: &str,
    params: &Value,
    workspace: Option<Workspace>,
    terminal: Option<Arc<dyn TerminalExecutor>>,
) -> Handled {
    let no_capability = || {
        RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )
    };
    match method {
        "fs/read_text_file" => {
            let ws = workspace.ok_or_else(no_capability)?;
            let request: ReadTextFileRequest = parse_params(params)?;
            let content = ws.read_text_file(&request).await.map_err(|e| e.to_rpc())?;
            Ok(to_params(&ReadTextFileResponse::new(content)))
        }
        "fs/write_text_file" => {
            let ws = workspace.ok_or_else(no_capability)?;
            let request: WriteTextFileRequest = parse_params(params)?;
            ws.write_text_file(&request).await.map_err(|e| e.to_rpc())?;
            Ok(json!({}))
        }
        "terminal/create" => {
            let exec = terminal.ok_or_else(no_capability)?;
            let request: CreateTerminalRequest = parse_params(params)?;
            let id = exec.create(request).await?;
            Ok(to_params(&CreateTerminalResponse::new(id)))
        }
        "terminal/output" => {
            let exec = terminal.ok_or_else(no_capability)?;
            let request: TerminalOutputRequest = parse_params(params)?;
            Ok(to_params(&exec.output(&request.terminal_id).await?))
        }
        "terminal/wait_for_exit" => {
            let exec = terminal.ok_or_else(no_capability)?;
            let request: WaitForTerminalExitRequest = parse_params(params)?;
            let status = exec.wait_for_exit(&request.terminal_id).await?;
            Ok(to_params(&WaitForTerminalExitResponse::new(status)))
        }
        "terminal/kill" => {
            let exec = terminal.ok_or_else(no_capability)?;
            let request: KillTerminalRequest = parse_params(params)?;
            exec.kill(&request.terminal_id).await?;
            Ok(json!({}))
        }
        "terminal/release" => {
            let exec = terminal.ok_or_else(no_capability)?;
            let request: ReleaseTerminalRequest = parse_params(params)?;
            exec.release(&request.terminal_id).await?;
            Ok(json!({}))
        }
        _ => Err(no_capability()),
    }
}

/// Runs a handler in a tracked task and answers exactly once: with its
/// result, with -32603 if it panics, or -32800 when the client shuts down.
async fn spawn_handler(
    inner: &Arc<Inner>,
    id: Value,
    method: String,
    handler: impl Future<Output = Handled> + Send + 'static,
) {
    // Waiting for a slot applies backpressure to the reader.
    let Ok(permit) = inner.handler_slots.clone().acquire_owned().await else {
        return;
    };
    let task_inner = inner.clone();
    inner.tasks.spawn(async move {
        let _permit = permit;
        let shutdown = task_inner.shutdown.clone();
        let result = tokio::select! {
            result = AssertUnwindSafe(handler).catch_unwind() => result.unwrap_or_else(|_| {
                Err(RpcError::new(codes::INTERNAL_ERROR, "handler panicked"))
            }),
            () = shutdown.cancelled() => {
                Err(RpcError::new(codes::REQUEST_CANCELLED, "client shut down"))
            }
        };
        task_inner.respond(id, &method, result).await;
    });
}

impl AcpClient {
    /// Connects to an agent over its stdout (`reader`) and stdin (`writer`)
    /// and starts the reader task (on the current tokio runtime).
    pub fn connect<R, W>(reader: R, writer: W, options: ClientOptions) -> (Self, EventStream)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(options.event_capacity.max(1));
        let shutdown = CancellationToken::new();
        let inner = Arc::new(Inner {
            emitter: tokio::sync::Mutex::new(Emitter {
                next_seq: options.start_seq,
                tx,
            }),
            writer: tokio::sync::Mutex::new(Some(Box::pin(writer))),
            state: Mutex::new(State::default()),
            next_id: AtomicU64::new(1),
            turn_cancel: Mutex::new(CancellationToken::new()),
            shutdown: shutdown.clone(),
            tasks: TaskTracker::new(),
            handler_slots: Arc::new(Semaphore::new(options.max_concurrent_agent_requests.max(1))),
            dialect_tx: watch::channel(None).0,
            closed_tx: watch::channel(false).0,
            options,
        });
        inner.tasks.spawn(read_loop(inner.clone(), reader));
        let client = Self {
            inner,
            _guard: Arc::new(shutdown.drop_guard()),
        };
        (client, EventStream { rx })
    }

    /// The detected dialect, once known.
    pub fn dialect(&self) -> Option<Dialect> {
        lock(&self.inner.state).dialect
    }

    /// The current session id, once created or loaded.
    pub fn session_id(&self) -> Option<String> {
        self.inner.current_session()
    }

    /// Whether the agent's output has closed.
    pub fn is_closed(&self) -> bool {
        *self.inner.closed_tx.borrow()
    }

    /// Waits until the agent's output closes.
    pub async fn closed(&self) {
        let mut rx = self.inner.closed_tx.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    /// Sends `initialize` (protocol version 1, client info, and only the
    /// capabilities that are handled) and detects the dialect from the
    /// answer: an integer `protocolVersion` 1 is v1, a string is the seed
    /// dialect, and legacy lines before any answer mean the legacy format.
    /// Times out after [`ClientOptions::initialize_timeout`].
    pub async fn initialize(&self) -> Result<Handshake, AcpError> {
        let options = &self.inner.options;
        let capabilities = ClientCapabilities::new()
            .fs(FileSystemCapabilities::new()
                .read_text_file(options.workspace.is_some())
                .write_text_file(options.workspace.is_some()))
            .terminal(options.terminal.is_some());
        let request = InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(capabilities)
            .client_info(Implementation::new(
                options.client_name.clone(),
                options.client_version.clone(),
            ));
        let mut dialect_rx = self.inner.dialect_tx.subscribe();
        let legacy = async move {
            let detected = dialect_rx
                .wait_for(|d| *d == Some(Dialect::Legacy))
                .await
                .is_ok();
            if !detected {
                std::future::pending::<()>().await;
            }
        };
        let raw = tokio::select! {
            result = self.inner.request(
                "initialize",
                to_params(&request),
                Some(options.initialize_timeout),
                None,
            ) => result?,
            () = legacy => {
                self.lifecycle(LifecyclePhase::Initialized, None).await;
                return Ok(Handshake { dialect: Dialect::Legacy, response: None, raw: Value::Null });
            }
        };
        let (dialect, response) = match raw.get("protocolVersion") {
            Some(Value::String(_)) => (Dialect::Seed, None),
            Some(Value::Number(n)) if n.as_u64() == Some(1) => {
                let response: InitializeResponse = parse_result("initialize", raw.clone())?;
                (Dialect::V1, Some(response))
            }
            Some(other) => return Err(AcpError::UnsupportedVersion(other.to_string())),
            None => {
                return Err(AcpError::InvalidResponse {
                    method: "initialize".to_owned(),
                    message: "missing protocolVersion".to_owned(),
                });
            }
        };
        {
            let mut state = lock(&self.inner.state);
            state.init = response.clone();
            state.seed_init = raw.clone();
        }
        if self.inner.set_dialect(dialect) {
            self.lifecycle(LifecyclePhase::DialectDetected, None).await;
        }
        self.lifecycle(LifecyclePhase::Initialized, None).await;
        Ok(Handshake {
            dialect,
            response,
            raw,
        })
    }

    async fn lifecycle(&self, phase: LifecyclePhase, detail: Option<String>) {
        self.inner
            .emit(
                Direction::Local,
                self.session_id(),
                lifecycle(phase, self.dialect(), detail),
                Value::Null,
            )
            .await;
    }

    fn require_dialect(&self) -> Result<Dialect, AcpError> {
        self.dialect()
            .ok_or_else(|| AcpError::State("call initialize first".to_owned()))
    }

    fn require_session(&self) -> Result<String, AcpError> {
        self.session_id()
            .ok_or_else(|| AcpError::State("no session: call new_session or load_session".into()))
    }

    fn set_session(&self, session_id: &str) {
        lock(&self.inner.state).session_id = Some(session_id.to_owned());
    }

    /// Creates a session (`session/new {cwd, mcpServers}`; the seed dialect
    /// sends empty params). When the agent answers `auth_required` and
    /// advertises a non-terminal auth method listed in
    /// [`ClientOptions::allowed_auth_methods`], the client authenticates and
    /// retries once; otherwise it returns [`AcpError::AuthRequired`] with the
    /// agent's message.
    pub async fn new_session(
        &self,
        cwd: impl Into<PathBuf>,
        mcp_servers: Vec<McpServer>,
    ) -> Result<SessionInfo, AcpError> {
        let timeout = Some(self.inner.options.request_timeout);
        let raw = match self.require_dialect()? {
            Dialect::Legacy => {
                // Legacy agents have no sessions; make an id for the events.
                let session_id = format!("legacy-{}", uuid::Uuid::new_v4());
                self.set_session(&session_id);
                self.lifecycle(LifecyclePhase::SessionCreated, Some(session_id.clone()))
                    .await;
                return Ok(SessionInfo {
                    session_id,
                    raw: Value::Null,
                });
            }
            Dialect::Seed => {
                self.inner
                    .request("session/new", json!({}), timeout, None)
                    .await?
            }
            Dialect::V1 => {
                let params = to_params(&NewSessionRequest::new(cwd).mcp_servers(mcp_servers));
                match self
                    .inner
                    .request("session/new", params.clone(), timeout, None)
                    .await
                {
                    Err(AcpError::Rpc { source, .. }) if source.code == codes::AUTH_REQUIRED => {
                        self.authenticate_for(*source).await?;
                        match self
                            .inner
                            .request("session/new", params, timeout, None)
                            .await
                        {
                            Err(AcpError::Rpc { source, .. })
                                if source.code == codes::AUTH_REQUIRED =>
                            {
                                return Err(AcpError::AuthRequired {
                                    message: source.message,
                                    methods: self.auth_method_ids(),
                                });
                            }
                            other => other?,
                        }
                    }
                    other => other?,
                }
            }
        };
        let session_id = raw
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| AcpError::InvalidResponse {
                method: "session/new".to_owned(),
                message: "missing sessionId".to_owned(),
            })?
            .to_owned();
        self.set_session(&session_id);
        self.lifecycle(LifecyclePhase::SessionCreated, Some(session_id.clone()))
            .await;
        Ok(SessionInfo { session_id, raw })
    }

    fn auth_method_ids(&self) -> Vec<String> {
        lock(&self.inner.state)
            .init
            .as_ref()
            .map(|init| {
                init.auth_methods
                    .iter()
                    .map(|m| m.id().0.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Picks an allowed non-terminal method and sends `authenticate`.
    async fn authenticate_for(&self, source: RpcError) -> Result<(), AcpError> {
        let allowed = &self.inner.options.allowed_auth_methods;
        let method = lock(&self.inner.state).init.as_ref().and_then(|init| {
            init.auth_methods
                .iter()
                .find(|m| {
                    !matches!(m, AuthMethod::Terminal(_))
                        && allowed.iter().any(|a| **a == *m.id().0)
                })
                .map(|m| m.id().clone())
        });
        let Some(method) = method else {
            return Err(AcpError::AuthRequired {
                message: source.message,
                methods: self.auth_method_ids(),
            });
        };
        let detail = method.0.to_string();
        self.inner
            .request(
                "authenticate",
                to_params(&AuthenticateRequest::new(method)),
                Some(self.inner.options.request_timeout),
                None,
            )
            .await?;
        self.lifecycle(LifecyclePhase::Authenticated, Some(detail))
            .await;
        Ok(())
    }

    /// Resumes a stored session with `session/load` (v1 agents that
    /// advertise `loadSession`; seed agents that advertise
    /// `sessionResumption`). The history replay arrives as events before
    /// this returns.
    pub async fn load_session(
        &self,
        session_id: &str,
        cwd: impl Into<PathBuf>,
        mcp_servers: Vec<McpServer>,
    ) -> Result<SessionInfo, AcpError> {
        let timeout = Some(self.inner.options.request_timeout);
        let params = match self.require_dialect()? {
            Dialect::V1 => {
                let supported = lock(&self.inner.state)
                    .init
                    .as_ref()
                    .is_some_and(|i| i.agent_capabilities.load_session);
                if !supported {
                    return Err(AcpError::Unsupported(
                        "the agent does not advertise loadSession".into(),
                    ));
                }
                to_params(
                    &LoadSessionRequest::new(session_id.to_owned(), cwd).mcp_servers(mcp_servers),
                )
            }
            Dialect::Seed => {
                let supported = lock(&self.inner.state)
                    .seed_init
                    .pointer("/capabilities/sessionResumption")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if !supported {
                    return Err(AcpError::Unsupported(
                        "the agent does not advertise sessionResumption".into(),
                    ));
                }
                json!({"sessionId": session_id})
            }
            Dialect::Legacy => {
                return Err(AcpError::Unsupported(
                    "legacy agents have no sessions".into(),
                ));
            }
        };
        // Set first so the replayed updates carry the id.
        self.set_session(session_id);
        let raw = self
            .inner
            .request("session/load", params, timeout, None)
            .await?;
        self.lifecycle(LifecyclePhase::SessionLoaded, Some(session_id.to_owned()))
            .await;
        Ok(SessionInfo {
            session_id: session_id.to_owned(),
            raw,
        })
    }

    fn begin_turn(&self) {
        let mut token = lock(&self.inner.turn_cancel);
        if token.is_cancelled() && !self.is_closed() {
            *token = CancellationToken::new();
        }
        lock(&self.inner.state).cancel_requested = false;
    }

    /// Registers the turn waiter; a turn end that already arrived (legacy
    /// agents start working on their own) completes it at once.
    fn turn_waiter(&self, keep_stashed: bool) -> oneshot::Receiver<TurnResult> {
        let (tx, rx) = oneshot::channel();
        let mut state = lock(&self.inner.state);
        let stashed = state.stashed_turn.take().filter(|_| keep_stashed);
        if let Some(signal) = stashed {
            let _ = tx.send(TurnResult::Signal(signal));
        } else if let Some(reason) = &state.closed {
            let _ = tx.send(TurnResult::Closed(reason.clone()));
        } else {
            state.turn_waiter = Some(tx);
        }
        rx
    }

    async fn wait_turn(&self, rx: oneshot::Receiver<TurnResult>) -> Result<StopReason, AcpError> {
        let result = match self.inner.options.prompt_timeout {
            Some(limit) => {
                tokio::time::timeout(limit, rx)
                    .await
                    .map_err(|_| AcpError::Timeout {
                        method: "session/prompt".to_owned(),
                        timeout: limit,
                    })?
            }
            None => rx.await,
        };
        let cancelled = lock(&self.inner.state).cancel_requested;
        match result {
            Ok(TurnResult::Signal(TurnSignal::Stopped(reason))) => Ok(reason),
            Ok(TurnResult::Signal(TurnSignal::Failed(message))) => {
                Err(AcpError::TurnFailed(message))
            }
            // Seed agents exit on cancel.
            Ok(TurnResult::Closed(_)) | Err(_) if cancelled => Ok(StopReason::Cancelled),
            Ok(TurnResult::Closed(reason)) => Err(AcpError::Closed {
                reason: Some(reason),
            }),
            Err(_) => Err(AcpError::Closed { reason: None }),
        }
    }

    /// Sends a prompt and waits for the end of the turn, returning the stop
    /// reason. v1: `session/prompt {sessionId, prompt}` and its
    /// `stopReason`. Seed: `session/prompt {message}` answered
    /// `{accepted: true}`, then a `complete` / `error` update ends the turn.
    /// Legacy: nothing is sent (legacy agents get their task from the
    /// environment); the turn ends with a `result` line.
    pub async fn prompt(&self, prompt: Vec<ContentBlock>) -> Result<StopReason, AcpError> {
        let dialect = self.require_dialect()?;
        self.begin_turn();
        match dialect {
            Dialect::V1 => {
                let session_id = self.require_session()?;
                let params = to_params(&PromptRequest::new(session_id, prompt));
                let timeout = self.inner.options.prompt_timeout;
                let raw = self
                    .inner
                    .request("session/prompt", params, timeout, None)
                    .await?;
                let response: PromptResponse = parse_result("session/prompt", raw)?;
                Ok(response.stop_reason)
            }
            Dialect::Seed => {
                let rx = self.turn_waiter(false);
                let params = json!({"message": prompt_text(&prompt)});
                let timeout = Some(self.inner.options.request_timeout);
                let raw = self
                    .inner
                    .request("session/prompt", params, timeout, None)
                    .await;
                let raw = match raw {
                    Ok(raw) => raw,
                    Err(e) => {
                        lock(&self.inner.state).turn_waiter = None;
                        return Err(e);
                    }
                };
                if raw.get("accepted").and_then(Value::as_bool) == Some(false) {
                    lock(&self.inner.state).turn_waiter = None;
                    return Err(AcpError::TurnFailed(
                        "the agent did not accept the prompt".into(),
                    ));
                }
                self.wait_turn(rx).await
            }
            Dialect::Legacy => {
                let rx = self.turn_waiter(true);
                self.wait_turn(rx).await
            }
        }
    }

    /// Cancels the current turn: every open permission request is answered
    /// `cancelled`, and `session/cancel` is sent (v1: `{sessionId}`; seed:
    /// `{reason}`; legacy agents get nothing). The prompt call then returns
    /// the agent's stop reason (normally `cancelled`).
    pub async fn cancel(&self) -> Result<(), AcpError> {
        lock(&self.inner.state).cancel_requested = true;
        lock(&self.inner.turn_cancel).cancel();
        match self.dialect() {
            Some(Dialect::V1) => {
                let session_id = self.require_session()?;
                self.inner
                    .notify(
                        "session/cancel",
                        to_params(&CancelNotification::new(session_id)),
                    )
                    .await
            }
            Some(Dialect::Seed) => {
                self.inner
                    .notify("session/cancel", json!({"reason": "cancelled by the user"}))
                    .await
            }
            Some(Dialect::Legacy) | None => {
                self.lifecycle(LifecyclePhase::CancelRequested, None).await;
                Ok(())
            }
        }
    }

    fn require_v1(&self, what: &str) -> Result<String, AcpError> {
        if self.require_dialect()? != Dialect::V1 {
            return Err(AcpError::Unsupported(format!("{what} needs ACP v1")));
        }
        self.require_session()
    }

    /// `session/set_mode`.
    pub async fn set_mode(&self, mode_id: &str) -> Result<(), AcpError> {
        let session_id = self.require_v1("session/set_mode")?;
        let kind = EventKind::ModeChange(ModeChangeData {
            mode_id: mode_id.to_owned(),
        });
        self.inner
            .request(
                "session/set_mode",
                to_params(&SetSessionModeRequest::new(session_id, mode_id.to_owned())),
                Some(self.inner.options.request_timeout),
                Some(kind),
            )
            .await?;
        Ok(())
    }

    /// `session/set_config_option`; returns the agent's full option list.
    pub async fn set_config_option(
        &self,
        config_id: &str,
        value: SessionConfigOptionValue,
    ) -> Result<SetSessionConfigOptionResponse, AcpError> {
        let session_id = self.require_v1("session/set_config_option")?;
        let request =
            SetSessionConfigOptionRequest::new(session_id, config_id.to_owned(), value.clone());
        let kind = EventKind::ConfigChange(ConfigChangeData {
            config_id: Some(config_id.to_owned()),
            value: Some(to_params(&value)),
            config_options: None,
        });
        let raw = self
            .inner
            .request(
                "session/set_config_option",
                to_params(&request),
                Some(self.inner.options.request_timeout),
                Some(kind),
            )
            .await?;
        parse_result("session/set_config_option", raw)
    }

    /// Sends any request with the control-request timeout; the escape hatch
    /// for methods this client has no typed call for.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, AcpError> {
        self.inner
            .request(
                method,
                params,
                Some(self.inner.options.request_timeout),
                None,
            )
            .await
    }

    /// Sends any notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), AcpError> {
        self.inner.notify(method, params).await
    }

    /// Feeds one line of the agent's stderr (read separately, e.g. from
    /// `docker logs`) into the event stream as a `log` event, numbered in
    /// the same sequence as stdout and stdin.
    pub async fn log_line(&self, line: impl Into<String>) {
        let line = line.into();
        let kind = EventKind::Log(LogData {
            source: LogSource::Stderr,
            level: None,
            line: line.clone(),
        });
        self.inner
            .emit(
                Direction::FromAgent,
                self.session_id(),
                kind,
                Value::String(line),
            )
            .await;
    }

    /// Reads `stderr` to its end, feeding each line to [`Self::log_line`]
    /// (with the same line-size bound as stdout).
    pub async fn pump_stderr(&self, stderr: impl AsyncRead + Unpin) {
        let max = self.inner.options.max_line_bytes;
        let mut lines = LineReader::new(BufReader::new(stderr), max);
        while let Ok(Some(frame)) = lines.next_frame().await {
            match frame {
                Frame::Line(bytes) => self.log_line(String::from_utf8_lossy(&bytes)).await,
                Frame::TooLong { len } => {
                    self.log_line(format!("[stderr line of {len} bytes skipped]"))
                        .await;
                }
            }
        }
    }

    /// Stops the client for good: the reader and every agent-request
    /// handler stop (open requests fail as closed, handlers answer
    /// "client shut down"), and the event stream ends once its buffered
    /// events are read. Nothing is emitted after this returns, so a
    /// successor client attached to the same agent can continue the
    /// numbering (`ClientOptions::start_seq`) from the last event read.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        // Swapping in a sender whose receiver is gone drops the stream's
        // only sender; later emits are discarded unnumbered.
        self.inner.emitter.lock().await.tx = mpsc::channel(1).0;
    }

    /// Closes the agent's stdin (most agents exit on EOF). Events keep
    /// flowing until the agent's stdout closes.
    pub async fn close_stdin(&self) -> Result<(), AcpError> {
        // Dropping the writer closes the pipe (a child's stdin is only
        // closed on drop).
        if let Some(mut writer) = self.inner.writer.lock().await.take() {
            writer.shutdown().await?;
        }
        Ok(())
    }
}
