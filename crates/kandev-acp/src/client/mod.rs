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
//! - `options`: [`ClientOptions`] and [`Dialect`]; `wire`: the helpers
//!   the parts build messages and events from.
//! - `fs_permission`: `fs/write_text_file` put to the permission policy;
//!   `grants`: the writes the agent already has permission for.
//! - `session`: the protocol calls (`initialize`, sessions, prompts,
//!   cancel, modes and config options).

mod core;
mod fs_permission;
mod grants;
mod incoming;
mod options;
mod session;
mod wire;

pub use options::{ClientOptions, Dialect};

use std::{
    pin::Pin,
    sync::{Arc, Mutex, atomic::AtomicU64},
    task::{Context, Poll},
};

use agent_client_protocol::v1::schema::InitializeResponse;
use futures::Stream;
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
    event::{AcpEvent, Direction, EventKind, LogData, LogSource},
    framing::{Frame, LineReader},
    sync::lock,
};

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
