//! The ACP client: JSON-RPC correlation, agent-request handling, dialect
//! detection and the event stream.
//!
//! One reader task owns the agent's stdout. It parses each bounded line,
//! emits its event (in wire order), completes pending requests and spawns a
//! task for every request from the agent. Writes go through one lock, and
//! the event for an outgoing message is emitted just before it is written,
//! so sequence numbers follow the order of the wire.
//!
//! # Layout
//! - this module: the client's types and its handle, [`AcpClient`].
//! - `core`: shared state, pending requests, the emitter and the writer.
//! - `incoming`: the reader task and the handlers of what the agent sends.
//! - `fs_permission`: `fs/write_text_file` put to the permission policy,
//!   and the writes the agent already has permission for.
//! - `session`: the protocol calls (`initialize`, sessions, prompts,
//!   cancel, modes and config options).

mod core;
mod fs_permission;
mod incoming;
mod session;

use std::{
    collections::BTreeSet,
    pin::Pin,
    sync::{Arc, Mutex, atomic::AtomicU64},
    task::{Context, Poll},
    time::Duration,
};

use agent_client_protocol::v1::schema::{
    ContentBlock, EmbeddedResourceResource, InitializeResponse,
};
use futures::Stream;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio::{
    io::{AsyncBufRead, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::{Semaphore, mpsc, watch},
};
use tokio_util::{
    sync::{CancellationToken, DropGuard},
    task::TaskTracker,
};

use self::core::{Emitter, Inner, State};
use crate::{
    error::AcpError,
    event::{
        AcpEvent, Direction, EventKind, LifecycleData, LifecyclePhase, LogData, LogSource,
        OtherData, ProtocolErrorData,
    },
    framing::{DEFAULT_MAX_LINE_BYTES, Frame, LineReader},
    permission::{AutoApprove, PermissionPolicy},
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
pub(crate) const BAD_LINE_PREVIEW: usize = 4096;
/// How many responses that arrive before their request was sent are kept.
pub(crate) const EARLY_RESPONSES: usize = 16;

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
    /// Decides `session/request_permission`, and `fs/write_text_file` the
    /// agent has no permission for yet (default [`AutoApprove`]).
    pub permission: Arc<dyn PermissionPolicy>,
    /// Enables `fs/*` confined to this workspace (and advertises `fs`).
    pub workspace: Option<Workspace>,
    /// Enables `terminal/*` (and advertises `terminal`).
    pub terminal: Option<Arc<dyn TerminalExecutor>>,
    /// Auth method ids the client may pass to `authenticate` by itself when
    /// `session/new` answers `auth_required`.
    pub allowed_auth_methods: Vec<String>,
    /// Names of the environment variables set in the agent's environment.
    /// When `session/new` answers `auth_required`, a method that reads one
    /// of them (see [`crate::auth`]) is used to `authenticate` by itself.
    pub auth_env: BTreeSet<String>,
    /// Auth method id → a variable it reads, for methods that do not name
    /// their variable themselves (default [`crate::auth::KNOWN_AUTH_ENV`]).
    pub auth_method_env: Vec<(String, String)>,
    /// At most this many agent requests are handled at once (default 64);
    /// more make the reader wait.
    pub max_concurrent_agent_requests: usize,
    /// Whether every event's `raw` holds the parsed message (default true).
    /// Off, the agent's text chunks (what it sends most) are read without
    /// building a JSON tree: their `raw` is null and the message is in
    /// `raw_json`, which is what serializing the event writes anyway. For a
    /// consumer that forwards events rather than inspecting them.
    pub parse_raw: bool,
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
            .field("auth_env", &self.auth_env)
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
            auth_env: BTreeSet::new(),
            auth_method_env: crate::auth::known_auth_env(),
            max_concurrent_agent_requests: 64,
            parse_raw: true,
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn preview(bytes: &[u8]) -> Value {
    let cut = bytes.len().min(BAD_LINE_PREVIEW);
    Value::String(String::from_utf8_lossy(&bytes[..cut]).into_owned())
}

pub(crate) fn protocol_error(message: impl Into<String>, code: Option<i64>) -> EventKind {
    EventKind::ProtocolError(ProtocolErrorData {
        message: message.into(),
        code,
    })
}

pub(crate) fn other(method: Option<&str>, id: Option<&Value>) -> EventKind {
    EventKind::Other(OtherData {
        method: method.map(str::to_owned),
        update: None,
        id: id.cloned(),
    })
}

pub(crate) fn lifecycle(
    phase: LifecyclePhase,
    dialect: Option<Dialect>,
    detail: Option<String>,
) -> EventKind {
    EventKind::Lifecycle(LifecycleData {
        phase,
        dialect,
        detail,
    })
}

pub(crate) fn to_params<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

pub(crate) fn parse_result<T: DeserializeOwned>(method: &str, value: Value) -> Result<T, AcpError> {
    serde_json::from_value(value).map_err(|e| AcpError::InvalidResponse {
        method: method.to_owned(),
        message: e.to_string(),
    })
}

/// The plain text of a prompt, for dialects that take a string.
pub(crate) fn prompt_text(prompt: &[ContentBlock]) -> String {
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

impl AcpClient {
    /// Connects to an agent over its stdout (`reader`) and stdin (`writer`)
    /// and starts the reader task (on the current tokio runtime).
    pub fn connect<R, W>(reader: R, writer: W, options: ClientOptions) -> (Self, EventStream)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + 'static,
    {
        Self::connect_buffered(BufReader::new(reader), writer, options)
    }

    /// [`AcpClient::connect`] over a stdout that is already buffered (say
    /// a `StreamReader` of received chunks): lines are read from its
    /// buffer, without copying each byte through another one first.
    pub fn connect_buffered<R, W>(
        reader: R,
        writer: W,
        options: ClientOptions,
    ) -> (Self, EventStream)
    where
        R: AsyncBufRead + Send + Unpin + 'static,
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
        inner
            .tasks
            .spawn(incoming::read_loop(inner.clone(), reader));
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
