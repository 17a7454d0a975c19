//! What the agent sends: the reader task parses each bounded line, emits
//! its event (in wire order), completes pending requests, and runs a
//! handler task for every request from the agent.

use std::sync::{Arc, atomic::Ordering};

use agent_client_protocol::v1::schema::{
    CreateTerminalRequest, CreateTerminalResponse, KillTerminalRequest, ReadTextFileRequest,
    ReadTextFileResponse, ReleaseTerminalRequest, RequestPermissionRequest,
    RequestPermissionResponse, TerminalOutputRequest, WaitForTerminalExitRequest,
    WaitForTerminalExitResponse,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::AsyncBufRead;
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use super::{
    core::{Failure, Inner, Reply, spawn_handler},
    fs_permission,
    options::{Dialect, EARLY_RESPONSES},
    wire::{
        Handled, invalid_params, lifecycle, method_not_found, other, preview, protocol_error,
        to_params,
    },
};
use crate::{
    error::{RpcError, codes},
    event::{ConfigChangeData, Direction, EventKind, LifecyclePhase, RawJson, TurnEndData},
    framing::{Frame, LineReader},
    normalize,
    permission::PermissionDecision,
    sync::lock,
    terminal::TerminalExecutor,
    workspace::Workspace,
};

/// The wire text of a message, kept for its event.
type RawText = Option<RawJson>;

pub(super) async fn read_loop(inner: Arc<Inner>, reader: impl AsyncBufRead + Send + Unpin) {
    let max = inner.options.max_line_bytes;
    let mut lines = LineReader::new(reader, max);
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
    // A text chunk (what an agent sends most) is read once: that typed
    // parse checks the whole line, which is then the event's `raw` as it is.
    if !inner.options.parse_raw
        && let Some((session_id, kind)) = normalize::fast_text_chunk(text)
    {
        inner
            .emit_wire(
                Direction::FromAgent,
                Some(session_id),
                kind,
                Value::Null,
                Some(RawJson::parsed(text)),
            )
            .await;
        return;
    }
    // The text as it came, for the event's `raw`: printed again, the value
    // would cost a second escaping of every string.
    let Ok(wire) = RawJson::parse(text) else {
        let e = serde_json::from_str::<Value>(text).err();
        let why = e.map_or_else(|| "not JSON".to_owned(), |e| e.to_string());
        return bad(format!("line is not valid JSON: {why}"), &bytes).await;
    };
    let value: Value = match serde_json::from_str(wire.get()) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(_) => return bad("line is not a JSON object".to_owned(), &bytes).await,
        Err(e) => return bad(format!("line is not valid JSON: {e}"), &bytes).await,
    };
    let raw_json = Some(wire);
    let method = value
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let id = value.get("id").filter(|id| !id.is_null()).cloned();
    match (method, id) {
        (Some(method), Some(id)) => {
            handle_agent_request(inner, id, method, value, raw_json).await;
        }
        (Some(method), None) => handle_notification(inner, &method, value, raw_json).await,
        (None, Some(id)) if value.get("result").is_some() || value.get("error").is_some() => {
            handle_response(inner, id, value, raw_json).await;
        }
        _ if normalize::is_legacy_line(&value) => handle_legacy(inner, value, raw_json).await,
        _ => {
            let kind = protocol_error("not a JSON-RPC message", Some(codes::INVALID_REQUEST));
            inner
                .emit_wire(
                    Direction::FromAgent,
                    inner.current_session(),
                    kind,
                    value,
                    raw_json,
                )
                .await;
        }
    }
}

async fn handle_response(inner: &Arc<Inner>, id: Value, value: Value, raw_json: RawText) {
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
        inner
            .emit_wire(Direction::FromAgent, session, kind, value, raw_json)
            .await;
        return;
    };
    let method = pending.method.as_str();
    let kind = match (&reply, method) {
        (Err(Failure::Rpc(e)), "session/prompt") => EventKind::TurnEnd(TurnEndData {
            stop_reason: "error".to_owned(),
            message: Some(e.message.clone()),
        }),
        // "Authenticate first": the client authenticates and asks again
        // (codex-acp answers every first `session/new` so); not an error to
        // show. A second refusal fails the run with a plain message.
        (Err(Failure::Rpc(e)), "session/new") if e.code == codes::AUTH_REQUIRED => {
            other(Some(method), Some(&id))
        }
        // A session the agent no longer has: the caller starts a new one
        // (Kandev's runner, with the conversation summarised in the prompt,
        // which says why); the refusal itself is not an error to show.
        (Err(Failure::Rpc(_)), "session/load") => other(Some(method), Some(&id)),
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
    inner
        .emit_wire(Direction::FromAgent, session, kind, value, raw_json)
        .await;
    let _ = pending.tx.send(reply);
}

async fn handle_notification(inner: &Arc<Inner>, method: &str, value: Value, raw_json: RawText) {
    let params = value.get("params").unwrap_or(&Value::Null);
    if method != "session/update" {
        let session = params
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| inner.current_session());
        inner
            .emit_wire(
                Direction::FromAgent,
                session,
                other(Some(method), None),
                value,
                raw_json,
            )
            .await;
        return;
    }
    // Noted in wire order: before the permission request that may follow.
    fs_permission::note_update(inner, params);
    let normalized = normalize::session_update(params);
    emit_from_agent(inner, normalized, value, raw_json).await;
}

async fn handle_legacy(inner: &Arc<Inner>, value: Value, raw_json: RawText) {
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
    emit_from_agent(inner, normalized, value, raw_json).await;
}

/// Emits a normalized message of the agent (in its session, else the
/// current one) and signals the turn end it may carry.
async fn emit_from_agent(
    inner: &Arc<Inner>,
    normalized: normalize::Normalized,
    value: Value,
    raw_json: RawText,
) {
    let session = normalized.session_id.or_else(|| inner.current_session());
    inner
        .emit_wire(
            Direction::FromAgent,
            session,
            normalized.kind,
            value,
            raw_json,
        )
        .await;
    if let Some(signal) = normalized.turn {
        inner.signal_turn(signal);
    }
}

fn parse_params<T: DeserializeOwned>(params: &Value) -> Result<T, RpcError> {
    serde_json::from_value(params.clone()).map_err(invalid_params)
}

/// How a request from the agent is handled.
enum Route {
    /// A `session/request_permission`: the policy answers.
    Permission(Box<RequestPermissionRequest>),
    /// `fs/write_text_file`: under the permission policy.
    Write,
    /// Another capability the client offers.
    Capability,
    /// Answered at once with this error.
    Refused(RpcError),
}

impl Route {
    fn of(inner: &Inner, method: &str, params: &Value) -> Route {
        let has_fs = inner.options.workspace.is_some();
        let has_terminal = inner.options.terminal.is_some();
        match method {
            "session/request_permission" => match parse_params(params) {
                Ok(request) => Route::Permission(Box::new(request)),
                Err(e) => Route::Refused(e),
            },
            "fs/write_text_file" if has_fs => Route::Write,
            "fs/read_text_file" if has_fs => Route::Capability,
            "terminal/create"
            | "terminal/output"
            | "terminal/wait_for_exit"
            | "terminal/kill"
            | "terminal/release"
                if has_terminal =>
            {
                Route::Capability
            }
            _ => Route::Refused(method_not_found(method)),
        }
    }
}

/// Emits the request's event, then answers it: a handler task for a
/// permission or a capability, the write under the permission policy, or
/// an error at once.
async fn handle_agent_request(
    inner: &Arc<Inner>,
    id: Value,
    method: String,
    value: Value,
    raw_json: RawText,
) {
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    let session = params
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| inner.current_session());
    let route = Route::of(inner, &method, &params);
    let kind = match &route {
        Route::Permission(request) => normalize::permission_request(&id, request),
        _ => other(Some(&method), Some(&id)),
    };
    inner
        .emit_wire(Direction::FromAgent, session.clone(), kind, value, raw_json)
        .await;
    match route {
        Route::Permission(request) => {
            let asked = AskedPermission {
                inner: inner.clone(),
                id: id.clone(),
                request,
                // Take the turn's cancel token now, in wire order.
                cancel: lock(&inner.turn_cancel).clone(),
            };
            spawn_handler(inner, id, method, asked.run()).await;
        }
        Route::Write => fs_permission::handle_write(inner, id, &params, session).await,
        Route::Capability => {
            let workspace = inner.options.workspace.clone();
            let terminal = inner.options.terminal.clone();
            let name = method.clone();
            spawn_handler(inner, id, method, async move {
                handle_capability(&name, &params, workspace, terminal).await
            })
            .await;
        }
        Route::Refused(error) => inner.respond(id, &method, Err(error)).await,
    }
}

/// The agent's `session/request_permission`, put to the policy.
struct AskedPermission {
    inner: Arc<Inner>,
    id: Value,
    request: Box<RequestPermissionRequest>,
    /// The turn's: cancelled with it, the request is answered `cancelled`.
    cancel: CancellationToken,
}

impl AskedPermission {
    #[instrument(name = "request_permission", skip_all, fields(id = %self.id))]
    async fn run(self) -> Handled {
        let policy = self.inner.options.permission.clone();
        let decision = tokio::select! {
            biased;
            () = self.cancel.cancelled() => PermissionDecision::Cancel,
            decision = policy.decide(&self.id, &self.request) => {
                if let Some(by) = policy.answered_by(&self.id) {
                    lock(&self.inner.state).answerers.insert(self.id.to_string(), by);
                }
                decision
            }
        };
        // Before the answer goes out: the agent's write that follows it
        // is not asked again.
        fs_permission::record_grant(&self.inner, &self.request, &decision);
        Ok(to_params(&RequestPermissionResponse::new(
            decision.into_outcome(),
        )))
    }
}

#[instrument(skip(params, workspace, terminal))]
async fn handle_capability(
    method: &str,
    params: &Value,
    workspace: Option<Workspace>,
    terminal: Option<Arc<dyn TerminalExecutor>>,
) -> Handled {
    let no_capability = || method_not_found(method);
    match method {
        "fs/read_text_file" => {
            let ws = workspace.ok_or_else(no_capability)?;
            let request: ReadTextFileRequest = parse_params(params)?;
            let content = ws.read_text_file(&request).await.map_err(|e| e.to_rpc())?;
            Ok(to_params(&ReadTextFileResponse::new(content)))
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
