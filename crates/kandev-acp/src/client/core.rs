//! The client's shared state and its side of the wire: pending requests,
//! the event emitter (one sequence for every message, in wire order) and
//! the writer to the agent's stdin.

use std::{
    collections::HashMap,
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use agent_client_protocol::v1::schema::InitializeResponse;
use chrono::Utc;
use futures::FutureExt as _;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncWrite, AsyncWriteExt},
    sync::{Semaphore, mpsc, oneshot, watch},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::{
    grants::WriteGrants,
    options::{ClientOptions, Dialect},
    wire::{Handled, lifecycle, other},
};
use crate::{
    error::{AcpError, RpcError, codes},
    event::{AcpEvent, Direction, EventKind, LifecyclePhase, PermissionResponseData, RawJson},
    normalize::TurnSignal,
    sync::lock,
};

/// Why a pending request did not get a result.
#[derive(Debug)]
pub(super) enum Failure {
    Rpc(RpcError),
    Closed(String),
}

pub(super) type Reply = Result<Value, Failure>;

#[derive(Debug)]
pub(super) enum TurnResult {
    Signal(TurnSignal),
    Closed(String),
}

pub(super) struct Pending {
    pub(super) method: String,
    pub(super) tx: oneshot::Sender<Reply>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) pending: HashMap<u64, Pending>,
    pub(super) early: HashMap<u64, Reply>,
    pub(super) closed: Option<String>,
    pub(super) dialect: Option<Dialect>,
    pub(super) init: Option<InitializeResponse>,
    /// The advertised auth methods, with the variables each reads.
    pub(super) auth_methods: Vec<crate::auth::AuthMethodInfo>,
    pub(super) seed_init: Value,
    pub(super) session_id: Option<String>,
    pub(super) turn_waiter: Option<oneshot::Sender<TurnResult>>,
    pub(super) stashed_turn: Option<TurnSignal>,
    pub(super) cancel_requested: bool,
    pub(super) write_grants: WriteGrants,
    /// Who answered a permission request the client is about to answer
    /// (its id as JSON text), when the policy named a person: the answer's
    /// `permission_response` event carries it.
    pub(super) answerers: HashMap<String, String>,
}

pub(super) struct Emitter {
    pub(super) next_seq: u64,
    pub(super) tx: mpsc::Sender<AcpEvent>,
}

pub(super) type BoxWriter = Pin<Box<dyn AsyncWrite + Send>>;

pub(super) struct Inner {
    pub(super) options: ClientOptions,
    pub(super) emitter: tokio::sync::Mutex<Emitter>,
    /// `None` once stdin was closed.
    pub(super) writer: tokio::sync::Mutex<Option<BoxWriter>>,
    pub(super) state: Mutex<State>,
    pub(super) next_id: AtomicU64,
    /// Cancelled by `cancel()`; replaced at the start of each prompt.
    pub(super) turn_cancel: Mutex<CancellationToken>,
    pub(super) shutdown: CancellationToken,
    pub(super) tasks: TaskTracker,
    pub(super) handler_slots: Arc<Semaphore>,
    pub(super) dialect_tx: watch::Sender<Option<Dialect>>,
    pub(super) closed_tx: watch::Sender<bool>,
}

/// Removes a pending request when its future is dropped (timeout, caller
/// gave up, or it completed).
pub(super) struct PendingGuard<'a> {
    pub(super) inner: &'a Inner,
    pub(super) id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.inner.state).pending.remove(&self.id);
    }
}

impl Inner {
    pub(super) fn current_session(&self) -> Option<String> {
        lock(&self.state).session_id.clone()
    }

    pub(super) async fn emit(
        &self,
        direction: Direction,
        session_id: Option<String>,
        kind: EventKind,
        raw: Value,
    ) {
        self.emit_wire(direction, session_id, kind, raw, None).await;
    }

    /// [`Self::emit`] for a message read from the wire: `raw_json` is its
    /// text, which the event serializes as it came instead of printing
    /// `raw` again.
    pub(super) async fn emit_wire(
        &self,
        direction: Direction,
        session_id: Option<String>,
        kind: EventKind,
        raw: Value,
        raw_json: Option<RawJson>,
    ) {
        let mut emitter = self.emitter.lock().await;
        let event = AcpEvent {
            seq: emitter.next_seq,
            timestamp: Utc::now(),
            direction,
            session_id,
            kind,
            raw,
            raw_json,
        };
        // A dropped consumer loses events; numbering stays contiguous for
        // whoever still listens.
        if emitter.tx.send(event).await.is_ok() {
            emitter.next_seq += 1;
        }
    }

    /// Emits the event for `message`, then writes it.
    pub(super) async fn write_message(
        &self,
        message: Value,
        kind: EventKind,
    ) -> Result<(), AcpError> {
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

    pub(super) fn set_dialect(&self, dialect: Dialect) -> bool {
        let mut state = lock(&self.state);
        if state.dialect.is_some() {
            return false;
        }
        state.dialect = Some(dialect);
        drop(state);
        self.dialect_tx.send_replace(Some(dialect));
        true
    }

    pub(super) async fn request(
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

    pub(super) async fn notify(&self, method: &str, params: Value) -> Result<(), AcpError> {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.write_message(message, other(Some(method), None)).await
    }

    /// Answers a request from the agent (exactly once per request).
    pub(super) async fn respond(&self, id: Value, method: &str, result: Result<Value, RpcError>) {
        let kind = match (&result, method) {
            (Ok(value), "session/request_permission") => {
                let outcome = value.pointer("/outcome/outcome").and_then(Value::as_str);
                let option_id = value.pointer("/outcome/optionId").and_then(Value::as_str);
                let answered_by = lock(&self.state).answerers.remove(&id.to_string());
                EventKind::PermissionResponse(PermissionResponseData {
                    request_id: id.clone(),
                    outcome: outcome.unwrap_or("cancelled").to_owned(),
                    option_id: option_id.map(str::to_owned),
                    answered_by,
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

    pub(super) async fn close(&self, reason: String) {
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

    pub(super) fn signal_turn(&self, signal: TurnSignal) {
        let mut state = lock(&self.state);
        match state.turn_waiter.take() {
            Some(waiter) => {
                let _ = waiter.send(TurnResult::Signal(signal));
            }
            None => state.stashed_turn = Some(signal),
        }
    }
}

/// Runs a handler in a tracked task and answers exactly once: with its
/// result, with -32603 if it panics, or -32800 when the client shuts down.
pub(super) async fn spawn_handler(
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
