//! Maps wire messages of every dialect to [`EventKind`]s.

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, EmbeddedResourceResource, SessionNotification, SessionUpdate,
    StopReason, ToolCallUpdate,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{
    ChunkData, ChunkRole, ConfigChangeData, EventKind, LifecycleData, LifecyclePhase, LogData,
    LogSource, ModeChangeData, OtherData, PermissionOptionData, PermissionRequestData, PlanData,
    PlanEntryData, ProgressData, ProtocolErrorData, ToolCallData, TurnEndData, UsageData,
};

/// How a turn ended, as seen in a notification (seed and legacy dialects).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnSignal {
    Stopped(StopReason),
    Failed(String),
}

/// The result of normalizing one incoming notification or legacy line.
#[derive(Debug)]
pub(crate) struct Normalized {
    pub kind: EventKind,
    pub session_id: Option<String>,
    pub turn: Option<TurnSignal>,
}

impl Normalized {
    fn new(kind: EventKind, session_id: Option<String>) -> Self {
        Self {
            kind,
            session_id,
            turn: None,
        }
    }
}

/// The snake_case wire name of a serde enum value.
pub(crate) fn wire_name<T: Serialize>(value: &T) -> Option<String> {
    match serde_json::to_value(value).ok()? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn chunk(role: ChunkRole, c: &ContentChunk, raw_content: Option<&Value>) -> ChunkData {
    let text = match &c.content {
        ContentBlock::Text(t) => Some(t.text.clone()),
        ContentBlock::Resource(r) => match &r.resource {
            EmbeddedResourceResource::TextResourceContents(t) => Some(t.text.clone()),
            _ => None,
        },
        _ => None,
    };
    ChunkData {
        role,
        text,
        content_type: raw_content
            .and_then(|c| str_field(c, "type"))
            .unwrap_or_else(|| "unknown".to_owned()),
        message_id: c.message_id.as_ref().map(|m| m.0.to_string()),
    }
}

fn tool_call_update(u: &ToolCallUpdate) -> ToolCallData {
    ToolCallData {
        tool_call_id: u.tool_call_id.0.to_string(),
        title: u.fields.title.clone(),
        tool_kind: u.fields.kind.as_ref().and_then(wire_name),
        status: u.fields.status.as_ref().and_then(wire_name),
    }
}

fn other_update(name: Option<String>) -> EventKind {
    EventKind::Other(OtherData {
        method: Some("session/update".to_owned()),
        update: name,
        id: None,
    })
}

/// Normalizes the params of a `session/update` notification, v1 or seed.
pub(crate) fn session_update(params: &Value) -> Normalized {
    if params.get("update").is_some() {
        v1_session_update(params)
    } else if params.get("type").is_some() {
        seed_session_update(params)
    } else {
        Normalized::new(
            EventKind::ProtocolError(ProtocolErrorData {
                message: "session/update without `update` or `type`".to_owned(),
                code: None,
            }),
            str_field(params, "sessionId"),
        )
    }
}

/// The text chunk updates, read straight from the JSON: what an agent
/// sends most, by far, and what the typed schema would buffer and copy
/// several times. Anything unusual goes the typed way.
fn text_chunk(variant: &str, update: &Value) -> Option<EventKind> {
    let (role, thought) = match variant {
        "agent_message_chunk" => (ChunkRole::Agent, false),
        "user_message_chunk" => (ChunkRole::User, false),
        "agent_thought_chunk" => (ChunkRole::Agent, true),
        _ => return None,
    };
    let content = update.get("content")?;
    if content.get("type")?.as_str()? != "text" {
        return None;
    }
    let text = content.get("text")?.as_str()?;
    let message_id = match update.get("messageId") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => return None,
    };
    let data = ChunkData {
        role,
        text: Some(text.to_owned()),
        content_type: "text".to_owned(),
        message_id,
    };
    Some(if thought {
        EventKind::ThoughtChunk(data)
    } else {
        EventKind::MessageChunk(data)
    })
}

/// A v1 `session/update` text chunk, read from the line's text without
/// building a JSON tree: its session and event, or `None` for anything
/// else (which then goes the general way).
pub(crate) fn fast_text_chunk(line: &str) -> Option<(String, EventKind)> {
    use std::borrow::Cow;

    #[derive(Deserialize)]
    struct Line<'a> {
        #[serde(borrow)]
        method: Cow<'a, str>,
        #[serde(default, borrow)]
        id: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "sessionId", borrow)]
        session_id: Cow<'a, str>,
        #[serde(borrow)]
        update: Update<'a>,
    }
    #[derive(Deserialize)]
    struct Update<'a> {
        #[serde(rename = "sessionUpdate", borrow)]
        variant: Cow<'a, str>,
        #[serde(borrow)]
        content: Content<'a>,
        #[serde(rename = "messageId", default, borrow)]
        message_id: Option<Cow<'a, str>>,
    }
    #[derive(Deserialize)]
    struct Content<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
        #[serde(borrow)]
        text: Cow<'a, str>,
    }

    let line: Line<'_> = serde_json::from_str(line).ok()?;
    if line.method != "session/update" || line.id.is_some_and(|id| id.get() != "null") {
        return None;
    }
    let update = line.params.update;
    if update.content.kind != "text" {
        return None;
    }
    let (role, thought) = match update.variant.as_ref() {
        "agent_message_chunk" => (ChunkRole::Agent, false),
        "user_message_chunk" => (ChunkRole::User, false),
        "agent_thought_chunk" => (ChunkRole::Agent, true),
        _ => return None,
    };
    let data = ChunkData {
        role,
        text: Some(update.content.text.into_owned()),
        content_type: "text".to_owned(),
        message_id: update.message_id.map(Cow::into_owned),
    };
    let kind = if thought {
        EventKind::ThoughtChunk(data)
    } else {
        EventKind::MessageChunk(data)
    };
    Some((line.params.session_id.into_owned(), kind))
}

fn v1_session_update(params: &Value) -> Normalized {
    let session_id = str_field(params, "sessionId");
    let raw_update = params.get("update").unwrap_or(&Value::Null);
    let variant = str_field(raw_update, "sessionUpdate");
    if session_id.is_some()
        && let Some(kind) = variant.as_deref().and_then(|v| text_chunk(v, raw_update))
    {
        return Normalized::new(kind, session_id);
    }
    let notification = match SessionNotification::deserialize(params) {
        Ok(n) => n,
        Err(e) => {
            // Unknown variants are kept raw; a known variant with a bad shape
            // is reported, but neither is fatal.
            let kind = match variant.as_deref() {
                Some(name) if !KNOWN_UPDATES.contains(&name) => other_update(Some(name.to_owned())),
                _ => EventKind::ProtocolError(ProtocolErrorData {
                    message: format!("invalid session/update: {e}"),
                    code: None,
                }),
            };
            return Normalized::new(kind, session_id);
        }
    };
    if let Some(kind) = chunk_event(&notification.update, raw_update.get("content")) {
        return Normalized::new(kind, session_id);
    }
    let kind = match &notification.update {
        SessionUpdate::ToolCall(tc) => EventKind::ToolCall(ToolCallData {
            tool_call_id: tc.tool_call_id.0.to_string(),
            title: Some(tc.title.clone()),
            tool_kind: wire_name(&tc.kind),
            status: wire_name(&tc.status),
        }),
        SessionUpdate::ToolCallUpdate(u) => EventKind::ToolCallUpdate(tool_call_update(u)),
        SessionUpdate::Plan(plan) => EventKind::Plan(PlanData {
            entries: plan
                .entries
                .iter()
                .map(|e| PlanEntryData {
                    content: e.content.clone(),
                    priority: wire_name(&e.priority).unwrap_or_default(),
                    status: wire_name(&e.status).unwrap_or_default(),
                })
                .collect(),
        }),
        SessionUpdate::CurrentModeUpdate(m) => EventKind::ModeChange(ModeChangeData {
            mode_id: m.current_mode_id.0.to_string(),
        }),
        SessionUpdate::ConfigOptionUpdate(_) => EventKind::ConfigChange(ConfigChangeData {
            config_id: None,
            value: None,
            config_options: raw_update.get("configOptions").cloned(),
        }),
        SessionUpdate::UsageUpdate(u) => EventKind::Usage(UsageData {
            used: u.used,
            size: u.size,
            cost_amount: u.cost.as_ref().map(|c| c.amount),
            cost_currency: u.cost.as_ref().map(|c| c.currency.clone()),
        }),
        // available_commands_update, session_info_update, notice,
        // compaction_*: kept raw.
        _ => other_update(variant),
    };
    Normalized::new(kind, session_id)
}

/// A message or thought chunk as its event; `None` for another update.
fn chunk_event(update: &SessionUpdate, raw_content: Option<&Value>) -> Option<EventKind> {
    Some(match update {
        SessionUpdate::AgentMessageChunk(c) => {
            EventKind::MessageChunk(chunk(ChunkRole::Agent, c, raw_content))
        }
        SessionUpdate::UserMessageChunk(c) => {
            EventKind::MessageChunk(chunk(ChunkRole::User, c, raw_content))
        }
        SessionUpdate::AgentThoughtChunk(c) => {
            EventKind::ThoughtChunk(chunk(ChunkRole::Agent, c, raw_content))
        }
        _ => return None,
    })
}

/// Every stable v1 `sessionUpdate` name (schema 1.17.0): the updates
/// Kandev normalizes (any other is kept as an unknown update).
pub const KNOWN_UPDATES: &[&str] = &[
    "user_message_chunk",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "usage_update",
    "notice",
    "compaction_update",
    "compaction_summary_chunk",
];

fn seed_session_update(params: &Value) -> Normalized {
    let data = params.get("data").unwrap_or(&Value::Null);
    let session_id = str_field(params, "sessionId").or_else(|| str_field(data, "sessionId"));
    let kind_name = str_field(params, "type").unwrap_or_default();
    let mut turn = None;
    let kind = match kind_name.as_str() {
        "content" => EventKind::MessageChunk(ChunkData {
            role: ChunkRole::Agent,
            text: str_field(data, "text"),
            content_type: "text".to_owned(),
            message_id: None,
        }),
        "toolCall" => EventKind::ToolCall(ToolCallData {
            tool_call_id: str_field(data, "toolCallId")
                .or_else(|| str_field(data, "id"))
                .or_else(|| str_field(data, "toolName"))
                .unwrap_or_default(),
            title: str_field(data, "toolName").or_else(|| str_field(data, "title")),
            tool_kind: None,
            status: str_field(data, "status"),
        }),
        "complete" => {
            let success = data.get("success").and_then(Value::as_bool).unwrap_or(true);
            let message = str_field(data, "summary").or_else(|| str_field(data, "message"));
            if success {
                turn = Some(TurnSignal::Stopped(StopReason::EndTurn));
                EventKind::TurnEnd(TurnEndData {
                    stop_reason: "end_turn".to_owned(),
                    message,
                })
            } else {
                let message = message.unwrap_or_else(|| "agent reported failure".to_owned());
                turn = Some(TurnSignal::Failed(message.clone()));
                EventKind::TurnEnd(TurnEndData {
                    stop_reason: "error".to_owned(),
                    message: Some(message),
                })
            }
        }
        "error" => {
            let mut message = str_field(data, "message").unwrap_or_else(|| "agent error".into());
            if let Some(details) = str_field(data, "details") {
                message = format!("{message}: {details}");
            }
            turn = Some(TurnSignal::Failed(message.clone()));
            EventKind::TurnEnd(TurnEndData {
                stop_reason: "error".to_owned(),
                message: Some(message),
            })
        }
        _ => other_update(Some(kind_name.clone())),
    };
    Normalized {
        kind,
        session_id,
        turn,
    }
}

/// Whether a JSON object looks like a legacy (non-JSON-RPC) line.
pub(crate) fn is_legacy_line(v: &Value) -> bool {
    v.get("jsonrpc").is_none()
        && v.get("method").is_none()
        && v.get("id").is_none()
        && v.get("type").is_some_and(Value::is_string)
}

/// Normalizes a legacy `{type, data, ...}` line.
pub(crate) fn legacy_line(v: &Value) -> Normalized {
    let data = v.get("data").unwrap_or(&Value::Null);
    let session_id = str_field(v, "task_id");
    let message = || {
        str_field(data, "message")
            .or_else(|| str_field(v, "message"))
            .or_else(|| data.as_str().map(str::to_owned))
    };
    let mut turn = None;
    let kind = match str_field(v, "type").unwrap_or_default().as_str() {
        "progress" => EventKind::Progress(ProgressData {
            percent: data.get("progress").and_then(Value::as_f64),
            message: message().or_else(|| str_field(data, "current_file")),
        }),
        "log" => EventKind::Log(LogData {
            source: LogSource::Agent,
            level: str_field(data, "level"),
            line: message().unwrap_or_default(),
        }),
        "error" => EventKind::Log(LogData {
            source: LogSource::Agent,
            level: Some("error".to_owned()),
            line: message().unwrap_or_default(),
        }),
        "result" => {
            let status = str_field(data, "status")
                .or_else(|| str_field(data, "result"))
                .unwrap_or_else(|| "completed".to_owned());
            let (stop, signal) = match status.as_str() {
                "completed" | "success" | "succeeded" => {
                    ("end_turn", TurnSignal::Stopped(StopReason::EndTurn))
                }
                "cancelled" | "canceled" => {
                    ("cancelled", TurnSignal::Stopped(StopReason::Cancelled))
                }
                _ => (
                    "error",
                    TurnSignal::Failed(message().unwrap_or_else(|| status.clone())),
                ),
            };
            turn = Some(signal);
            EventKind::TurnEnd(TurnEndData {
                stop_reason: stop.to_owned(),
                message: message().or_else(|| str_field(data, "summary")),
            })
        }
        "status" => EventKind::Lifecycle(LifecycleData {
            phase: LifecyclePhase::Status,
            dialect: Some(crate::Dialect::Legacy),
            detail: str_field(data, "status").or_else(message),
        }),
        "heartbeat" => EventKind::Lifecycle(LifecycleData {
            phase: LifecyclePhase::Heartbeat,
            dialect: Some(crate::Dialect::Legacy),
            detail: None,
        }),
        other => EventKind::Other(OtherData {
            method: None,
            update: Some(other.to_owned()),
            id: None,
        }),
    };
    Normalized {
        kind,
        session_id,
        turn,
    }
}

/// The event kind of a `session/request_permission` request.
pub(crate) fn permission_request(
    id: &Value,
    req: &agent_client_protocol::v1::schema::RequestPermissionRequest,
) -> EventKind {
    EventKind::PermissionRequest(PermissionRequestData {
        request_id: id.clone(),
        tool_call_id: req.tool_call.tool_call_id.0.to_string(),
        title: req.tool_call.fields.title.clone(),
        options: req
            .options
            .iter()
            .map(|o| PermissionOptionData {
                option_id: o.option_id.0.to_string(),
                name: o.name.clone(),
                option_kind: wire_name(&o.kind).unwrap_or_default(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn v1_updates_are_normalized() {
        let n = session_update(&json!({"sessionId":"s","update":{
            "sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}));
        assert_eq!(n.session_id.as_deref(), Some("s"));
        assert!(
            matches!(n.kind, EventKind::MessageChunk(ChunkData { ref text, .. }) if text.as_deref() == Some("hi"))
        );

        let n = session_update(&json!({"sessionId":"s","update":{
            "sessionUpdate":"tool_call","toolCallId":"c1","title":"Read","kind":"read","status":"pending"}}));
        assert_eq!(
            n.kind,
            EventKind::ToolCall(ToolCallData {
                tool_call_id: "c1".into(),
                title: Some("Read".into()),
                tool_kind: Some("read".into()),
                status: Some("pending".into()),
            })
        );

        let n = session_update(&json!({"sessionId":"s","update":{
            "sessionUpdate":"usage_update","used":10,"size":100,"cost":{"amount":0.5,"currency":"USD"}}}));
        assert!(matches!(
            n.kind,
            EventKind::Usage(UsageData {
                used: 10,
                size: 100,
                ..
            })
        ));

        let n = session_update(&json!({"sessionId":"s","update":{
            "sessionUpdate":"plan","entries":[{"content":"a","priority":"high","status":"pending"}]}}));
        assert!(matches!(n.kind, EventKind::Plan(ref p) if p.entries[0].priority == "high"));

        let n = session_update(&json!({"sessionId":"s","update":{
            "sessionUpdate":"current_mode_update","currentModeId":"code"}}));
        assert_eq!(
            n.kind,
            EventKind::ModeChange(ModeChangeData {
                mode_id: "code".into()
            })
        );

        let n = session_update(&json!({"sessionId":"s","update":{
            "sessionUpdate":"available_commands_update","availableCommands":[]}}));
        assert!(
            matches!(n.kind, EventKind::Other(ref o) if o.update.as_deref() == Some("available_commands_update"))
        );
    }

    #[test]
    fn a_line_read_as_a_chunk_is_valid_json() {
        // The client keeps a chunk's line as its `raw` on this parse alone,
        // without reading it as JSON again: any damage, in a field the
        // chunk skips as much as in one it reads, must make it refuse.
        let good = r#"{"jsonrpc":"2.0","method":"session/update","x":[1,{"y":"z"}],"params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}"#;
        assert!(fast_text_chunk(good).is_some());
        assert!(fast_text_chunk(&format!(" {good}\r")).is_some());
        for (damage, line) in [
            ("trailing text", format!("{good} x")),
            ("two values", format!("{good}{good}")),
            (
                "a bad escape in a skipped field",
                good.replace(r#""y":"z""#, r#""y":"\q""#),
            ),
            (
                "a control character in a skipped field",
                good.replace(r#""y":"z""#, "\"y\":\"a\u{1}b\""),
            ),
            (
                "a bad number in a skipped field",
                good.replace("[1,", "[01,"),
            ),
            (
                "an unclosed array in a skipped field",
                good.replace(r#"[1,{"y":"z"}]"#, r#"[1,{"y":"z"}"#),
            ),
            ("cut short", good[..good.len() - 1].to_owned()),
        ] {
            assert!(crate::RawJson::parse(&line).is_err(), "{damage}: not JSON");
            assert!(
                fast_text_chunk(&line).is_none(),
                "{damage}: read as a chunk"
            );
        }
    }

    /// The direct reading of text chunks gives what the typed schema gives.
    #[test]
    fn text_chunks_read_directly_match_the_schema() {
        for update in [
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a \"q\" é"},"messageId":"m1"}),
            json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"u"}}),
            json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"t","annotations":null},"_meta":{"k":1}}),
        ] {
            let params = json!({"sessionId":"s","update":update});
            let variant = update["sessionUpdate"].as_str().unwrap();
            let direct = text_chunk(variant, &update).expect("read directly");
            let typed: SessionNotification = serde_json::from_value(params.clone()).unwrap();
            let expected = chunk_event(&typed.update, update.get("content"))
                .unwrap_or_else(|| panic!("{:?}", typed.update));
            assert_eq!(direct, expected);
            assert_eq!(session_update(&params).kind, expected);
            let line =
                json!({"jsonrpc":"2.0","method":"session/update","params":params}).to_string();
            assert_eq!(fast_text_chunk(&line), Some(("s".to_owned(), expected)));
        }
        // A request, or another method, is not a chunk.
        let request = json!({"jsonrpc":"2.0","id":4,"method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}});
        assert!(fast_text_chunk(&request.to_string()).is_none());
        // Not text: the typed way.
        let image = json!({"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"x","mimeType":"image/png"}});
        assert!(text_chunk("agent_message_chunk", &image).is_none());
        assert!(matches!(
            session_update(&json!({"sessionId":"s","update":image})).kind,
            EventKind::MessageChunk(ChunkData { ref content_type, text: None, .. }) if content_type == "image"
        ));
    }

    #[test]
    fn unknown_variant_is_kept_as_other_and_bad_known_variant_is_an_error() {
        let n =
            session_update(&json!({"sessionId":"s","update":{"sessionUpdate":"brand_new","x":1}}));
        assert!(
            matches!(n.kind, EventKind::Other(ref o) if o.update.as_deref() == Some("brand_new"))
        );
        let n = session_update(&json!({"sessionId":"s","update":{"sessionUpdate":"tool_call"}}));
        assert!(matches!(n.kind, EventKind::ProtocolError(_)));
    }

    #[test]
    fn seed_and_legacy_turn_signals() {
        let n = session_update(&json!({"type":"complete","data":{"sessionId":"a","success":true}}));
        assert_eq!(n.turn, Some(TurnSignal::Stopped(StopReason::EndTurn)));
        assert_eq!(n.session_id.as_deref(), Some("a"));
        let n = session_update(&json!({"type":"error","data":{"message":"boom","details":"x"}}));
        assert_eq!(n.turn, Some(TurnSignal::Failed("boom: x".into())));
        let line = json!({"type":"result","data":{"status":"failed","message":"nope"}});
        assert!(is_legacy_line(&line));
        assert_eq!(
            legacy_line(&line).turn,
            Some(TurnSignal::Failed("nope".into()))
        );
        let progress = json!({"type":"progress","timestamp":"t","agent_id":"a","task_id":"t1",
            "data":{"progress":10,"message":"working"}});
        let n = legacy_line(&progress);
        assert_eq!(n.session_id.as_deref(), Some("t1"));
        assert_eq!(
            n.kind,
            EventKind::Progress(ProgressData {
                percent: Some(10.0),
                message: Some("working".into())
            })
        );
        assert!(!is_legacy_line(&json!({"jsonrpc":"2.0","method":"x"})));
    }
}
