//! The JSON-RPC side (ACP and seed dialects): read stdin line by line,
//! dispatch requests, route responses, start prompt turns, exit on EOF.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{AuthMode, Dialect},
    ctx::{ClientCaps, Ctx},
    log::{debug, info, warning},
    play,
    scenario::{self, COMMANDS},
    session::{ActiveTurn, SessionRef, config_options_json, modes_json, persist},
    turn::{Turn, TurnEnd, chunk},
    wire::{
        AUTH_REQUIRED, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
        REQUEST_CANCELLED, RESOURCE_NOT_FOUND, RpcError, error_response, notification, response,
    },
};

const AGENT_METHOD: &str = "mock-login";
const TERMINAL_METHOD: &str = "mock-terminal-login";

/// Serves stdin until EOF, lets running turns finish, and returns the exit code.
pub(crate) async fn serve(ctx: Arc<Ctx>) -> i32 {
    let mut stdin = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) => handle_line(&ctx, &line).await,
            Err(e) => {
                warning!("reading stdin failed: {e}");
                break;
            }
        }
    }
    if ctx.cfg.quirks.ignore_eof {
        // Like the Node ACP adapters: end of input ends nothing.
        info!("stdin closed; quirk ignore-eof: running on");
        ctx.out.flush().await;
        std::future::pending::<()>().await;
    }
    info!("stdin closed; finishing running turns");
    ctx.rpc.close();
    ctx.shutdown.cancel();
    ctx.turns.close();
    ctx.turns.wait().await;
    ctx.out.flush().await;
    0
}

async fn handle_line(ctx: &Arc<Ctx>, line: &[u8]) {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return;
    }
    let msg: Value = match serde_json::from_slice(trimmed) {
        Ok(msg) => msg,
        Err(e) => {
            warning!(
                "unparseable line ({e}): {}",
                String::from_utf8_lossy(&trimmed[..trimmed.len().min(200)])
            );
            ctx.out
                .send(&error_response(
                    &Value::Null,
                    &RpcError::new(PARSE_ERROR, "Parse error"),
                ))
                .await;
            return;
        }
    };
    let method = msg.get("method").and_then(Value::as_str);
    let id = msg.get("id").cloned();
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    match (msg.is_object(), method, id) {
        (true, Some(method), Some(id)) => {
            debug!("request {id} {method}");
            handle_request(ctx, method, id, params).await;
        }
        (true, Some(method), None) => {
            debug!("notification {method}");
            handle_notification(ctx, method, &params);
        }
        (true, None, Some(_)) => ctx.rpc.on_response(&msg),
        _ => {
            warning!("not a JSON-RPC message: {msg}");
            ctx.out
                .send(&error_response(
                    &Value::Null,
                    &RpcError::new(INVALID_REQUEST, "Invalid Request"),
                ))
                .await;
        }
    }
}

async fn handle_request(ctx: &Arc<Ctx>, method: &str, id: Value, params: Value) {
    if method == "session/prompt" {
        let started = match ctx.cfg.dialect {
            Dialect::Seed => seed_prompt(ctx, &id, &params).await,
            _ => acp_prompt(ctx, &id, &params).await,
        };
        if let Err(e) = started {
            ctx.out.send(&error_response(&id, &e)).await;
        }
        return;
    }
    if method == "initialize" && ctx.cfg.quirks.silent_initialize {
        info!("quirk silent-initialize: leaving initialize unanswered");
        return;
    }
    let result = match (ctx.cfg.dialect, method) {
        (Dialect::Seed, "initialize") => Ok(json!({
            "protocolVersion": "1.0",
            "serverInfo": { "name": "kandev-mock-agent", "version": env!("CARGO_PKG_VERSION") },
            "capabilities": { "streaming": true, "sessionResumption": true },
        })),
        (Dialect::Seed, "session/new") => Ok(seed_new_session(ctx, &params)),
        (Dialect::Seed, "session/load") => seed_load_session(ctx, &params),
        (Dialect::Seed, _) => Err(RpcError::new(METHOD_NOT_FOUND, "Method not found")
            .with_data(json!({ "method": method }))),
        (_, "initialize") => Ok(initialize(ctx, &params)),
        (_, "authenticate") => authenticate(ctx, &params),
        (_, "session/new") => new_session(ctx, &params).await,
        (_, "session/load") => load_session(ctx, &params).await,
        (_, "session/set_mode") => set_mode(ctx, &params),
        (_, "session/set_config_option") => set_config_option(ctx, &params),
        _ => Err(RpcError::new(METHOD_NOT_FOUND, "Method not found")
            .with_data(json!({ "method": method }))),
    };
    let reply = match result {
        Ok(result) => response(&id, result),
        Err(e) => {
            debug!("request {id} {method} failed: {e}");
            error_response(&id, &e)
        }
    };
    ctx.out.send(&reply).await;
}

fn handle_notification(ctx: &Arc<Ctx>, method: &str, params: &Value) {
    match method {
        "session/cancel" => {
            let targets: Vec<SessionRef> = match params["sessionId"].as_str() {
                Some(id) => ctx.sessions().get(id).into_iter().collect(),
                // The seed's cancel names no session: cancel everything.
                None => ctx.sessions().all(),
            };
            for session in targets {
                if let Some(active) = &session.lock().expect("session lock").active {
                    active.cancel.cancel();
                }
            }
        }
        "$/cancel_request" => {
            let request_id = &params["requestId"];
            for session in ctx.sessions().all() {
                if let Some(active) = &session.lock().expect("session lock").active
                    && active.request_id == *request_id
                {
                    active.request_cancelled.store(true, Ordering::Release);
                    active.cancel.cancel();
                }
            }
        }
        other => debug!("ignoring notification {other}"),
    }
}

fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    params[name]
        .as_str()
        .ok_or_else(|| RpcError::invalid_params(format!("missing or invalid `{name}`")))
}

fn cwd_param(params: &Value) -> Result<PathBuf, RpcError> {
    let cwd = PathBuf::from(str_param(params, "cwd")?);
    if cwd.is_absolute() {
        Ok(cwd)
    } else {
        Err(RpcError::invalid_params("`cwd` must be an absolute path"))
    }
}

fn require_mcp_servers(params: &Value) -> Result<(), RpcError> {
    if params["mcpServers"].is_array() {
        Ok(())
    } else {
        Err(RpcError::invalid_params(
            "missing `mcpServers` (required; may be [])",
        ))
    }
}

/// Keeps the session's `mcpServers` (the agent runs none: `session-info`
/// reports them).
fn keep_mcp_servers(session: &SessionRef, params: &Value) {
    let servers = params["mcpServers"].as_array().cloned().unwrap_or_default();
    session.lock().expect("session lock").record.mcp_servers = servers;
}

fn require_auth(ctx: &Ctx) -> Result<(), RpcError> {
    if ctx.is_authenticated() {
        return Ok(());
    }
    if ctx.cfg.auth == AuthMode::Terminal && ctx.cfg.credentials.exists() {
        ctx.authenticated.store(true, Ordering::Release);
        return Ok(());
    }
    Err(RpcError::new(AUTH_REQUIRED, "Authentication required")
        .with_data(json!({ "authMethods": auth_methods(ctx, ctx.caps()) })))
}

fn auth_methods(ctx: &Ctx, caps: ClientCaps) -> Value {
    match ctx.cfg.auth {
        AuthMode::None => json!([]),
        AuthMode::Agent => json!([{
            "id": AGENT_METHOD,
            "name": "Mock login",
            "description": "Call authenticate with this method id; no credentials are needed",
        }]),
        // Terminal methods are offered only to clients that can run them.
        AuthMode::Terminal if caps.auth_terminal => json!([{
            "type": "terminal",
            "id": TERMINAL_METHOD,
            "name": "Log in from a terminal",
            "description": "Runs kandev-mock-agent --login, which creates the credentials file",
            "args": ["--login"],
        }]),
        AuthMode::Terminal => json!([]),
    }
}

fn initialize(ctx: &Ctx, params: &Value) -> Value {
    let caps = ClientCaps::from_initialize(params);
    *ctx.caps.lock().expect("caps lock") = caps;
    debug!("client capabilities: {caps:?}");
    json!({
        // We speak v1 only; a client asking for anything else gets our latest.
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": { "image": false, "audio": false, "embeddedContext": true },
            "mcpCapabilities": { "http": true, "sse": false },
            "sessionCapabilities": {},
        },
        "authMethods": auth_methods(ctx, caps),
        "agentInfo": { "name": "kandev-mock-agent", "title": "Kandev mock agent", "version": env!("CARGO_PKG_VERSION") },
    })
}

fn authenticate(ctx: &Ctx, params: &Value) -> Result<Value, RpcError> {
    let method = str_param(params, "methodId")?;
    match (ctx.cfg.auth, method) {
        (AuthMode::Agent, AGENT_METHOD) => {
            ctx.authenticated.store(true, Ordering::Release);
            info!("authenticated with {method}");
            Ok(json!({}))
        }
        (AuthMode::Terminal, TERMINAL_METHOD) => Err(RpcError::invalid_params(
            "terminal auth methods are run by the client in a terminal, never sent to authenticate",
        )),
        _ => Err(RpcError::invalid_params(format!(
            "unknown auth method `{method}`"
        ))),
    }
}

fn session_state(ctx: &Ctx, session: &SessionRef) -> (Value, Value) {
    let record = session.lock().expect("session lock").record.clone();
    (
        modes_json(&record.mode_id),
        config_options_json(&record, ctx.caps().boolean_config),
    )
}

fn save(ctx: &Ctx, session: &SessionRef) {
    let record = session.lock().expect("session lock").record.clone();
    persist(&ctx.cfg.state_dir, &record);
}

fn available_commands(session_id: &str) -> Value {
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|(name, description, _)| json!({ "name": name, "description": description }))
        .collect();
    notification(
        "session/update",
        json!({
            "sessionId": session_id,
            "update": { "sessionUpdate": "available_commands_update", "availableCommands": commands },
        }),
    )
}

async fn new_session(ctx: &Arc<Ctx>, params: &Value) -> Result<Value, RpcError> {
    let cwd = cwd_param(params)?;
    require_mcp_servers(params)?;
    require_auth(ctx)?;
    let (id, session) = ctx.sessions().create(&cwd);
    keep_mcp_servers(&session, params);
    save(ctx, &session);
    info!("new session {id} in {}", cwd.display());
    if ctx.cfg.quirks.early_updates {
        ctx.out.send(&available_commands(&id)).await;
    }
    let (modes, config_options) = session_state(ctx, &session);
    Ok(json!({ "sessionId": id, "modes": modes, "configOptions": config_options }))
}

async fn load_session(ctx: &Arc<Ctx>, params: &Value) -> Result<Value, RpcError> {
    let id = str_param(params, "sessionId")?;
    let cwd = cwd_param(params)?;
    require_mcp_servers(params)?;
    require_auth(ctx)?;
    if ctx.cfg.quirks.lose_sessions {
        info!("quirk lose-sessions: session {id} is not found");
        return Err(RpcError::new(INTERNAL_ERROR, "Session not found")
            .with_data(json!({ "sessionId": id })));
    }
    let session = ctx.sessions().load(id, &cwd).ok_or_else(|| {
        RpcError::new(RESOURCE_NOT_FOUND, "Resource not found")
            .with_data(json!({ "sessionId": id }))
    })?;
    keep_mcp_servers(&session, params);
    let history = {
        let mut session = session.lock().expect("session lock");
        session.record.cwd = cwd;
        session.record.history.clone()
    };
    info!("loading session {id}: replaying {} updates", history.len());
    // The whole history goes out before the response.
    for update in history {
        ctx.out
            .send(&notification(
                "session/update",
                json!({ "sessionId": id, "update": update }),
            ))
            .await;
    }
    let (modes, config_options) = session_state(ctx, &session);
    Ok(json!({ "modes": modes, "configOptions": config_options }))
}

fn known_session(ctx: &Ctx, params: &Value) -> Result<(String, SessionRef), RpcError> {
    let id = str_param(params, "sessionId")?;
    let session = ctx.sessions().get(id).ok_or_else(|| {
        RpcError::new(RESOURCE_NOT_FOUND, "Resource not found")
            .with_data(json!({ "sessionId": id }))
    })?;
    Ok((id.to_owned(), session))
}

fn set_mode(ctx: &Ctx, params: &Value) -> Result<Value, RpcError> {
    let (_, session) = known_session(ctx, params)?;
    let mode = str_param(params, "modeId")?;
    if !crate::session::MODES.iter().any(|(id, _, _)| *id == mode) {
        return Err(RpcError::invalid_params(format!("unknown mode `{mode}`")));
    }
    mode.clone_into(&mut session.lock().expect("session lock").record.mode_id);
    save(ctx, &session);
    Ok(json!({}))
}

fn set_config_option(ctx: &Ctx, params: &Value) -> Result<Value, RpcError> {
    let (_, session) = known_session(ctx, params)?;
    let config_id = str_param(params, "configId")?;
    let boolean_config = ctx.caps().boolean_config;
    {
        let mut session = session.lock().expect("session lock");
        match (config_id, &params["value"]) {
            ("model", Value::String(value))
                if crate::session::MODELS.iter().any(|(v, _)| v == value) =>
            {
                value.clone_into(&mut session.record.model);
            }
            ("thinking", Value::Bool(value)) if boolean_config => session.record.thinking = *value,
            (id, value) => {
                return Err(RpcError::invalid_params(format!(
                    "invalid value {value} for config option `{id}`"
                )));
            }
        }
    }
    save(ctx, &session);
    let record = session.lock().expect("session lock").record.clone();
    Ok(json!({ "configOptions": config_options_json(&record, boolean_config) }))
}

/// Joins the prompt's text blocks (and names resource links) into the scenario text.
fn prompt_text(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b["type"].as_str() {
            Some("text") => b["text"].as_str().map(str::to_owned),
            Some("resource_link") => b["uri"].as_str().map(|u| format!("[{u}]")),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Registers the turn in its session (one at a time) and returns its number.
fn begin_turn(
    session: &SessionRef,
    request_id: &Value,
    user: Vec<Value>,
) -> Result<(u64, CancellationToken, Arc<AtomicBool>), RpcError> {
    let mut session = session.lock().expect("session lock");
    if session.active.is_some() {
        return Err(RpcError::new(
            INVALID_REQUEST,
            "a prompt turn is already running in this session",
        ));
    }
    let cancel = CancellationToken::new();
    let request_cancelled = Arc::new(AtomicBool::new(false));
    session.active = Some(ActiveTurn {
        request_id: request_id.clone(),
        cancel: cancel.clone(),
        request_cancelled: request_cancelled.clone(),
    });
    session.record.turns += 1;
    session.record.history.extend(user);
    Ok((session.record.turns, cancel, request_cancelled))
}

fn end_turn_state(ctx: &Ctx, session: &SessionRef) {
    session.lock().expect("session lock").active = None;
    save(ctx, session);
}

async fn acp_prompt(ctx: &Arc<Ctx>, id: &Value, params: &Value) -> Result<(), RpcError> {
    let (session_id, session) = known_session(ctx, params)?;
    let blocks = params["prompt"]
        .as_array()
        .ok_or_else(|| RpcError::invalid_params("missing `prompt` (an array of content blocks)"))?;
    let text = prompt_text(blocks);
    let scenario = scenario::parse(&text, &ctx.cfg.default_scenario)
        .map_err(|e| RpcError::invalid_params(e.0))?;
    info!("session {session_id}: prompt {id} runs {scenario:?}");
    let user = blocks
        .iter()
        .map(|b| json!({ "sessionUpdate": "user_message_chunk", "content": b }))
        .collect();
    let (number, cancel, request_cancelled) = begin_turn(&session, id, user)?;
    let cwd = session.lock().expect("session lock").record.cwd.clone();
    let turn = Turn::new(
        ctx.clone(),
        session.clone(),
        session_id,
        cwd,
        number,
        text,
        cancel,
    );
    let ctx = ctx.clone();
    let id = id.clone();
    ctx.turns.clone().spawn(async move {
        let end = play::run(&turn, scenario).await;
        end_turn_state(&ctx, &session);
        let reply = match end {
            _ if request_cancelled.load(Ordering::Acquire) => Some(error_response(
                &id,
                &RpcError::new(REQUEST_CANCELLED, "Request cancelled"),
            )),
            TurnEnd::Stop(reason) if reason == "cancelled" && ctx.cfg.quirks.cancel_end_turn => {
                Some(response(&id, json!({ "stopReason": "end_turn" })))
            }
            TurnEnd::Stop(reason) => Some(response(&id, json!({ "stopReason": reason }))),
            TurnEnd::Error(e) => Some(error_response(&id, &e)),
            TurnEnd::Silent => None,
        };
        if let Some(reply) = reply {
            ctx.out.send(&reply).await;
            if ctx.cfg.quirks.late_updates {
                turn.update(chunk(
                    "agent_message_chunk",
                    "(a late update, sent after the prompt response)",
                    None,
                ))
                .await;
            }
        }
    });
    Ok(())
}

fn process_cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

fn seed_new_session(ctx: &Ctx, params: &Value) -> Value {
    let cwd = params["cwd"]
        .as_str()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(process_cwd);
    let (id, session) = ctx.sessions().create(&cwd);
    save(ctx, &session);
    info!("new seed session {id} in {}", cwd.display());
    json!({ "sessionId": id })
}

fn seed_load_session(ctx: &Ctx, params: &Value) -> Result<Value, RpcError> {
    let id = str_param(params, "sessionId")?;
    let cwd = params["cwd"]
        .as_str()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(process_cwd);
    let loaded = ctx.sessions().load(id, &cwd).is_some();
    Ok(json!({ "sessionId": id, "loaded": loaded }))
}

/// Seed: `{message}` is answered `{accepted: true}` at once; the turn reports
/// through `session/update {type, data}` and ends with `complete` or `error`.
async fn seed_prompt(ctx: &Arc<Ctx>, id: &Value, params: &Value) -> Result<(), RpcError> {
    let text = str_param(params, "message")?.to_owned();
    let scenario = scenario::parse(&text, &ctx.cfg.default_scenario)
        .map_err(|e| RpcError::invalid_params(e.0))?;
    let existing = match params["sessionId"].as_str() {
        Some(sid) => Some((sid.to_owned(), known_session(ctx, params)?.1)),
        None => ctx.sessions().last(),
    };
    let (session_id, session) = match existing {
        Some(found) => found,
        None => ctx.sessions().create(&process_cwd()),
    };
    info!("seed session {session_id}: prompt {id} runs {scenario:?}");
    let user = vec![chunk("user_message_chunk", &text, None)];
    let (number, cancel, _) = begin_turn(&session, id, user)?;
    ctx.out
        .send(&response(id, json!({ "accepted": true })))
        .await;
    let cwd = session.lock().expect("session lock").record.cwd.clone();
    let turn = Turn::new(
        ctx.clone(),
        session.clone(),
        session_id.clone(),
        cwd,
        number,
        text,
        cancel,
    );
    let ctx = ctx.clone();
    ctx.turns.clone().spawn(async move {
        let end = play::run(&turn, scenario).await;
        end_turn_state(&ctx, &session);
        let params = match end {
            TurnEnd::Stop(reason) if reason == "end_turn" => json!({
                "type": "complete",
                "data": { "sessionId": session_id, "success": true, "summary": turn.last_message() },
            }),
            TurnEnd::Stop(reason) => json!({
                "type": "complete",
                "data": {
                    "sessionId": session_id,
                    "success": false,
                    "cancelled": reason == "cancelled",
                    "stopReason": reason,
                    "summary": turn.last_message(),
                },
            }),
            TurnEnd::Error(e) => json!({
                "type": "error",
                "data": { "message": e.message, "details": e.data.unwrap_or(Value::Null)["details"] },
            }),
            TurnEnd::Silent => return,
        };
        ctx.out.send(&notification("session/update", params)).await;
    });
    Ok(())
}

/// `--login`: the terminal auth method. Creates the credentials file.
pub(crate) fn login(credentials: &Path) -> std::io::Result<()> {
    if let Some(dir) = credentials.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(credentials, "kandev-mock-agent credentials\n")
}
