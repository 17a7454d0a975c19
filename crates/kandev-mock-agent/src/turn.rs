//! One prompt turn as the scenarios see it: emit updates (translated to the
//! active dialect), ask the client things, read and write files, honour cancel.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{Config, Dialect},
    ctx::{ClientCaps, Ctx},
    log::debug,
    session::SessionRef,
    wire::{METHOD_NOT_FOUND, RpcError, notification},
};

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnEnd {
    /// Answer `{stopReason}`.
    Stop(String),
    /// Answer with a JSON-RPC error.
    Error(RpcError),
    /// Send nothing (the `hang` scenario after stdin closed).
    Silent,
}

impl TurnEnd {
    pub(crate) fn end_turn() -> Self {
        Self::Stop("end_turn".into())
    }

    pub(crate) fn cancelled() -> Self {
        Self::Stop("cancelled".into())
    }
}

/// What the seed and legacy translations remember about a tool call.
#[derive(Debug, Clone, Default)]
struct ToolInfo {
    title: String,
    kind: String,
    raw_input: Value,
    path: Option<String>,
}

pub(crate) struct Turn {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) dialect: Dialect,
    pub(crate) session: SessionRef,
    pub(crate) session_id: String,
    pub(crate) cwd: PathBuf,
    pub(crate) caps: ClientCaps,
    /// 1-based number of this turn within its session.
    pub(crate) number: u64,
    pub(crate) prompt_text: String,
    pub(crate) cancel: CancellationToken,
    message_seq: AtomicU64,
    tools: Mutex<HashMap<String, ToolInfo>>,
    /// `(messageId, text)` of the last agent message, for seed/legacy summaries.
    last_message: Mutex<(String, String)>,
}

impl Turn {
    pub(crate) fn new(
        ctx: Arc<Ctx>,
        session: SessionRef,
        session_id: String,
        cwd: PathBuf,
        number: u64,
        prompt_text: String,
        cancel: CancellationToken,
    ) -> Self {
        let dialect = ctx.cfg.dialect;
        let caps = if dialect == Dialect::Acp {
            ctx.caps()
        } else {
            ClientCaps::default()
        };
        Self {
            ctx,
            dialect,
            session,
            session_id,
            cwd,
            caps,
            number,
            prompt_text,
            cancel,
            message_seq: AtomicU64::new(0),
            tools: Mutex::new(HashMap::new()),
            last_message: Mutex::new((String::new(), String::new())),
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Sleeps unless cancelled first; returns false when cancelled.
    pub(crate) async fn sleep(&self, duration: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(duration) => true,
            () = self.cancel.cancelled() => false,
        }
    }

    /// A fresh `messageId` for a new agent message.
    pub(crate) fn new_message_id(&self) -> String {
        let seq = self.message_seq.fetch_add(1, Ordering::Relaxed) + 1;
        format!("msg_{}_{}_{seq}", self.session_id, self.number)
    }

    /// The text of the last agent message (the seed/legacy "summary").
    pub(crate) fn last_message(&self) -> String {
        self.last_message
            .lock()
            .expect("last message lock")
            .1
            .clone()
    }

    /// Sends one `session/update`, translated for the dialect.
    pub(crate) async fn update(&self, update: Value) {
        let out = &self.ctx.out;
        match self.dialect {
            Dialect::Acp => {
                let params = json!({ "sessionId": self.session_id, "update": update });
                out.send(&notification("session/update", params)).await;
            }
            Dialect::Seed => {
                if let Some(params) = self.seed_update(&update) {
                    out.send(&notification("session/update", params)).await;
                }
            }
            Dialect::Legacy => {
                if let Some((kind, data)) = self.legacy_update(&update) {
                    out.send(&legacy_line(&self.ctx.cfg, kind, data)).await;
                }
            }
        }
    }

    /// Sends an update and appends it to the session history (replayed by `session/load`).
    pub(crate) async fn update_recorded(&self, update: Value) {
        self.session
            .lock()
            .expect("session lock")
            .record
            .history
            .push(update.clone());
        self.update(update).await;
    }

    /// One complete agent message.
    pub(crate) async fn say(&self, text: &str) {
        let id = self.new_message_id();
        self.say_chunk(&id, text).await;
    }

    /// One chunk of the agent message `message_id`.
    pub(crate) async fn say_chunk(&self, message_id: &str, text: &str) {
        {
            let mut last = self.last_message.lock().expect("last message lock");
            if last.0 != message_id {
                *last = (message_id.to_owned(), String::new());
            }
            last.1.push_str(text);
        }
        self.update_recorded(chunk("agent_message_chunk", text, Some(message_id)))
            .await;
    }

    pub(crate) async fn think(&self, text: &str) {
        self.update(chunk("agent_thought_chunk", text, None)).await;
    }

    /// An agent → client request (ACP only; the other dialects have none).
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        if self.dialect != Dialect::Acp {
            return Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("the {:?} dialect has no client requests", self.dialect),
            ));
        }
        self.ctx.rpc.request(method, params).await
    }

    pub(crate) fn resolve(&self, file: &str) -> PathBuf {
        self.cwd.join(file)
    }

    /// Reads a file through `fs/read_text_file` when the client offers it,
    /// from disk otherwise. `Ok(None)` means the file does not exist.
    pub(crate) async fn read_text(&self, path: &Path) -> Result<Option<String>, String> {
        if self.caps.read_text_file {
            let params = json!({ "sessionId": self.session_id, "path": path });
            return match self.request("fs/read_text_file", params).await {
                Ok(result) => match result.get("content").and_then(Value::as_str) {
                    Some(content) => Ok(Some(content.to_owned())),
                    None => Err(format!("fs/read_text_file result has no content: {result}")),
                },
                Err(e) => {
                    // Clients answer an error for a missing file; treat it as absent.
                    debug!("fs/read_text_file {} failed: {e}", path.display());
                    Ok(None)
                }
            };
        }
        match tokio::fs::read_to_string(path).await {
            Ok(content) => Ok(Some(content)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    /// Writes a file through `fs/write_text_file` when the client offers it,
    /// to disk otherwise (creating parent directories).
    pub(crate) async fn write_text(&self, path: &Path, content: &str) -> Result<(), String> {
        if self.caps.write_text_file {
            let params = json!({ "sessionId": self.session_id, "path": path, "content": content });
            return self
                .request("fs/write_text_file", params)
                .await
                .map(drop)
                .map_err(|e| format!("fs/write_text_file: {e}"));
        }
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        tokio::fs::write(path, content)
            .await
            .map_err(|e| format!("writing {}: {e}", path.display()))
    }

    fn remember_tool(&self, update: &Value) -> ToolInfo {
        let id = update["toolCallId"].as_str().unwrap_or("").to_owned();
        let mut tools = self.tools.lock().expect("tools lock");
        let info = tools.entry(id).or_default();
        if let Some(title) = update["title"].as_str() {
            title.clone_into(&mut info.title);
        }
        if let Some(kind) = update["kind"].as_str() {
            kind.clone_into(&mut info.kind);
        }
        if !update["rawInput"].is_null() {
            info.raw_input = update["rawInput"].clone();
        }
        if let Some(path) = update["locations"][0]["path"].as_str() {
            info.path = Some(path.to_owned());
        }
        info.clone()
    }

    /// The seed dialect knows `content` and `toolCall` updates only.
    fn seed_update(&self, update: &Value) -> Option<Value> {
        match update["sessionUpdate"].as_str()? {
            "agent_message_chunk" => {
                let mut data = json!({ "text": update["content"]["text"] });
                if let Some(meta) = update.get("_meta") {
                    data["_meta"] = meta.clone();
                }
                Some(json!({ "type": "content", "data": data }))
            }
            "agent_thought_chunk" => Some(json!({
                "type": "content",
                "data": { "text": update["content"]["text"], "thought": true },
            })),
            "tool_call" | "tool_call_update" => {
                let info = self.remember_tool(update);
                let status = seed_status(update["status"].as_str().unwrap_or("pending"));
                let tool_name = if info.kind.is_empty() {
                    info.title.clone()
                } else {
                    info.kind.clone()
                };
                Some(json!({
                    "type": "toolCall",
                    "data": {
                        "toolCallId": update["toolCallId"],
                        "toolName": tool_name,
                        "title": info.title,
                        "status": status,
                        "args": if info.raw_input.is_null() { json!({}) } else { info.raw_input },
                    },
                }))
            }
            _ => None,
        }
    }

    /// The legacy format has progress, log, result, error, status, heartbeat.
    fn legacy_update(&self, update: &Value) -> Option<(&'static str, Value)> {
        match update["sessionUpdate"].as_str()? {
            "agent_message_chunk" => {
                let mut data = json!({ "message": update["content"]["text"] });
                if let Some(meta) = update.get("_meta") {
                    data["_meta"] = meta.clone();
                }
                Some(("progress", data))
            }
            "agent_thought_chunk" => Some((
                "log",
                json!({ "level": "debug", "message": update["content"]["text"] }),
            )),
            "tool_call" | "tool_call_update" => {
                let info = self.remember_tool(update);
                let status = update["status"].as_str().unwrap_or("pending");
                let mut data = json!({
                    "level": "info",
                    "message": format!("{}: {status}", info.title),
                    "tool_call_id": update["toolCallId"],
                });
                if let Some(path) = info.path {
                    data["current_file"] = json!(path);
                }
                Some(("log", data))
            }
            "plan" => {
                let entries = update["entries"].as_array()?;
                let done = entries
                    .iter()
                    .filter(|e| e["status"] == "completed")
                    .count();
                let current = entries.iter().find(|e| e["status"] == "in_progress");
                let percentage = if entries.is_empty() {
                    100
                } else {
                    done * 100 / entries.len()
                };
                let mut data = json!({ "percentage": percentage });
                if let Some(current) = current {
                    data["message"] = current["content"].clone();
                }
                Some(("progress", data))
            }
            _ => None,
        }
    }
}

fn seed_status(acp_status: &str) -> &'static str {
    match acp_status {
        "completed" => "completed",
        "failed" => "failed",
        _ => "running",
    }
}

/// `{type, timestamp, agent_id, task_id, data}`.
pub(crate) fn legacy_line(cfg: &Config, kind: &str, data: Value) -> Value {
    json!({
        "type": kind,
        "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "agent_id": cfg.agent_id,
        "task_id": cfg.task_id,
        "data": data,
    })
}

/// A `*_chunk` update carrying text.
pub(crate) fn chunk(kind: &str, text: &str, message_id: Option<&str>) -> Value {
    let mut update = json!({ "sessionUpdate": kind, "content": { "type": "text", "text": text } });
    if let Some(id) = message_id {
        update["messageId"] = json!(id);
    }
    update
}

/// Unix time in nanoseconds.
pub(crate) fn unix_nanos() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}
