//! The normalized event model.
//!
//! Every message exchanged with an agent, whatever its dialect, becomes one
//! [`AcpEvent`]. The JSON shape is stable: it is what flows over NATS
//! (`acp.message.<task_id>`) and to browsers. See `docs/AGENTS.md`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, value::RawValue};

/// One normalized event.
///
/// JSON shape (fields in this order):
///
/// ```json
/// {"seq":7,"timestamp":"2026-01-10T12:00:00.123Z","direction":"from_agent",
///  "session_id":"sess_1","kind":"message_chunk","data":{"role":"agent","text":"hi"},
///  "raw":{"jsonrpc":"2.0","method":"session/update","params":{...}}}
/// ```
#[derive(Debug, Clone, Deserialize)]
pub struct AcpEvent {
    /// Per-client sequence number: starts at the configured value and grows by
    /// exactly one per event, across stdout, stdin and stderr traffic.
    pub seq: u64,
    /// When the client observed (or sent) the message.
    pub timestamp: DateTime<Utc>,
    /// Who sent the message.
    pub direction: Direction,
    /// The ACP session the message belongs to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The normalized meaning of the message.
    #[serde(flatten)]
    pub kind: EventKind,
    /// The message exactly as it was on the wire (a JSON object for JSON-RPC
    /// and legacy lines, a string for stderr and unparsable lines, `null` for
    /// events that have no wire message such as lifecycle events).
    #[serde(default)]
    pub raw: Value,
    /// The text of `raw` as it was read, when the client kept it: the event
    /// serializes it as it is instead of printing `raw` again (the same
    /// JSON, without escaping every string a second time).
    #[serde(skip)]
    pub raw_json: Option<RawJson>,
}

/// The text of one JSON value, known to be valid: a message as it was read,
/// which an event writes as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJson(Box<str>);

impl RawJson {
    /// `text` when it holds one JSON value (surrounding whitespace dropped).
    pub fn parse(text: &str) -> serde_json::Result<Self> {
        let value: &RawValue = serde_json::from_str(text)?;
        Ok(RawJson(value.get().into()))
    }

    /// `text`, which a typed `serde_json::from_str` of the whole of it has
    /// just accepted (such a parse checks every byte, the values it skips
    /// included): kept without reading it a second time.
    pub(crate) fn parsed(text: &str) -> Self {
        RawJson(text.trim_matches([' ', '\t', '\n', '\r']).into())
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        &self.0
    }
}

impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Valid by construction; borrowed, so nothing is copied.
        let raw: &RawValue = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl PartialEq for AcpEvent {
    /// `raw_json` is a cached form of `raw` and is not compared.
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.timestamp == other.timestamp
            && self.direction == other.direction
            && self.session_id == other.session_id
            && self.kind == other.kind
            && self.raw == other.raw
    }
}

impl Serialize for AcpEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Raw<'a> {
            Text(&'a RawJson),
            Value(&'a Value),
        }
        #[derive(Serialize)]
        struct Wire<'a> {
            seq: u64,
            timestamp: &'a DateTime<Utc>,
            direction: Direction,
            #[serde(skip_serializing_if = "Option::is_none")]
            session_id: Option<&'a str>,
            #[serde(flatten)]
            kind: &'a EventKind,
            raw: Raw<'a>,
        }
        Wire {
            seq: self.seq,
            timestamp: &self.timestamp,
            direction: self.direction,
            session_id: self.session_id.as_deref(),
            kind: &self.kind,
            raw: match &self.raw_json {
                Some(text) => Raw::Text(text),
                None => Raw::Value(&self.raw),
            },
        }
        .serialize(serializer)
    }
}

impl AcpEvent {
    /// Appends the event's JSON to `buf`: the same bytes as
    /// `serde_json::to_writer`, written directly for message and thought
    /// chunks read from the wire (the bulk of a stream), whose strings rarely
    /// need escaping; serde's escaping walks every byte through a table and
    /// its timestamp goes through `fmt` one char at a time.
    pub fn write_json(&self, buf: &mut Vec<u8>) -> serde_json::Result<()> {
        let (EventKind::MessageChunk(chunk) | EventKind::ThoughtChunk(chunk), Some(raw)) =
            (&self.kind, &self.raw_json)
        else {
            return serde_json::to_writer(&mut *buf, self);
        };
        buf.extend_from_slice(br#"{"seq":"#);
        serde_json::to_writer(&mut *buf, &self.seq)?;
        buf.extend_from_slice(br#","timestamp":""#);
        buf.extend_from_slice(
            self.timestamp
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
                .as_bytes(),
        );
        buf.extend_from_slice(br#"","direction":""#);
        buf.extend_from_slice(match self.direction {
            Direction::ToAgent => b"to_agent",
            Direction::FromAgent => b"from_agent",
            Direction::Local => b"local",
        });
        buf.push(b'"');
        write_opt(buf, br#","session_id":"#, self.session_id.as_deref())?;
        buf.extend_from_slice(br#","kind":""#);
        buf.extend_from_slice(self.kind.name().as_bytes());
        buf.extend_from_slice(br#"","data":{"role":""#);
        buf.extend_from_slice(match chunk.role {
            ChunkRole::Agent => b"agent",
            ChunkRole::User => b"user",
        });
        buf.push(b'"');
        write_opt(buf, br#","text":"#, chunk.text.as_deref())?;
        buf.extend_from_slice(br#","content_type":"#);
        write_str(buf, &chunk.content_type)?;
        write_opt(buf, br#","message_id":"#, chunk.message_id.as_deref())?;
        buf.extend_from_slice(br#"},"raw":"#);
        buf.extend_from_slice(raw.get().as_bytes());
        buf.push(b'}');
        Ok(())
    }
}

/// Writes `key` (`,"name":`) and `value` when there is one, as serde's
/// `skip_serializing_if = "Option::is_none"` does.
fn write_opt(buf: &mut Vec<u8>, key: &[u8], value: Option<&str>) -> serde_json::Result<()> {
    if let Some(value) = value {
        buf.extend_from_slice(key);
        write_str(buf, value)?;
    }
    Ok(())
}

/// Writes `s` as a JSON string, as serde_json does: only `"`, `\` and
/// control characters are escaped, so a string without them is copied as
/// it is (checked without branching per byte, which vectorizes).
fn write_str(buf: &mut Vec<u8>, s: &str) -> serde_json::Result<()> {
    let needs_escape = s.bytes().fold(false, |acc, b| {
        acc | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if needs_escape {
        return serde_json::to_writer(&mut *buf, s);
    }
    buf.reserve(s.len() + 2);
    buf.push(b'"');
    buf.extend_from_slice(s.as_bytes());
    buf.push(b'"');
    Ok(())
}

/// Who sent the message an event describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Written by the client to the agent's stdin.
    ToAgent,
    /// Read from the agent (stdout or stderr).
    FromAgent,
    /// Produced by the client itself (lifecycle, local errors).
    Local,
}

/// The normalized kind of an event, serialized adjacently as
/// `"kind": "<name>", "data": {...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum EventKind {
    /// A chunk of a user or agent message (`agent_message_chunk`,
    /// `user_message_chunk`, seed `content`).
    MessageChunk(ChunkData),
    /// A chunk of the agent's reasoning (`agent_thought_chunk`).
    ThoughtChunk(ChunkData),
    /// A new tool call (`tool_call`, seed `toolCall`).
    ToolCall(ToolCallData),
    /// A patch to an existing tool call (`tool_call_update`).
    ToolCallUpdate(ToolCallData),
    /// The agent's plan; each one replaces the previous plan.
    Plan(PlanData),
    /// The agent asks for permission (`session/request_permission`).
    PermissionRequest(PermissionRequestData),
    /// The client's answer to a permission request.
    PermissionResponse(PermissionResponseData),
    /// The current mode changed (`current_mode_update`, or `session/set_mode`).
    ModeChange(ModeChangeData),
    /// Session config options changed (`config_option_update`,
    /// `session/set_config_option`).
    ConfigChange(ConfigChangeData),
    /// Context window / cost usage (`usage_update`).
    Usage(UsageData),
    /// Progress of a legacy agent (`{type: progress}`).
    Progress(ProgressData),
    /// The end of a prompt turn.
    TurnEnd(TurnEndData),
    /// Something the client could not accept: an oversized, non-UTF-8 or
    /// non-JSON line, an unexpected response, an error response.
    ProtocolError(ProtocolErrorData),
    /// A log line: agent stderr, or a legacy `log` / `error` line.
    Log(LogData),
    /// Connection lifecycle: dialect detected, initialized, session created,
    /// closed, and so on.
    Lifecycle(LifecycleData),
    /// Any other JSON-RPC traffic (initialize, fs/*, terminal/*, responses,
    /// other `session/update` variants, unknown variants). The meaning is in
    /// `raw`; `data` names the method and update variant when known.
    Other(OtherData),
}

impl EventKind {
    /// The snake_case name used for `kind` on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Self::MessageChunk(_) => "message_chunk",
            Self::ThoughtChunk(_) => "thought_chunk",
            Self::ToolCall(_) => "tool_call",
            Self::ToolCallUpdate(_) => "tool_call_update",
            Self::Plan(_) => "plan",
            Self::PermissionRequest(_) => "permission_request",
            Self::PermissionResponse(_) => "permission_response",
            Self::ModeChange(_) => "mode_change",
            Self::ConfigChange(_) => "config_change",
            Self::Usage(_) => "usage",
            Self::Progress(_) => "progress",
            Self::TurnEnd(_) => "turn_end",
            Self::ProtocolError(_) => "protocol_error",
            Self::Log(_) => "log",
            Self::Lifecycle(_) => "lifecycle",
            Self::Other(_) => "other",
        }
    }
}

/// Who authored a message chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkRole {
    /// The agent.
    Agent,
    /// The user (history replay during `session/load`).
    User,
}

/// A message or thought chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkData {
    /// Author of the chunk.
    pub role: ChunkRole,
    /// The text, when the content block is text (or a resource's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The content block type (`text`, `image`, `resource_link`, ...).
    pub content_type: String,
    /// Chunks with the same id belong to one message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// A tool call or a patch to it; absent fields are unchanged.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolCallData {
    /// The tool call id (seed dialect calls have none; the client makes one up).
    pub tool_call_id: String,
    /// Human-readable title (seed: `toolName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `read`, `edit`, `execute`, ... (v1 `ToolKind`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_kind: Option<String>,
    /// `pending`, `in_progress`, `completed`, `failed` (seed: free text such
    /// as `running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// One plan entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanEntryData {
    /// What the step does.
    pub content: String,
    /// `high`, `medium` or `low`.
    pub priority: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanData {
    /// Entries in order.
    pub entries: Vec<PlanEntryData>,
}

/// One option offered in a permission request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionOptionData {
    /// The id to answer with.
    pub option_id: String,
    /// Label.
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub option_kind: String,
}

/// A permission request from the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionRequestData {
    /// The JSON-RPC id of the request (number or string), to pair it with
    /// its response.
    pub request_id: Value,
    /// The tool call the permission is for.
    pub tool_call_id: String,
    /// The tool call's title, if the agent sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The offered options.
    pub options: Vec<PermissionOptionData>,
}

/// The client's answer to a permission request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionResponseData {
    /// The JSON-RPC id of the request being answered.
    pub request_id: Value,
    /// `selected` or `cancelled`.
    pub outcome: String,
    /// The selected option when `outcome` is `selected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option_id: Option<String>,
    /// Who answered, when a person did and the decider named them (see
    /// [`crate::PermissionAsk::respond_by`]): their username. Absent for
    /// an answer of the policy itself (auto-approve, deny, an unanswered
    /// question's fallback) and for a turn cancelled first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
}

/// A mode change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeChangeData {
    /// The new (or requested) mode id.
    pub mode_id: String,
}

/// A config option change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigChangeData {
    /// The changed option when a single option was set by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_id: Option<String>,
    /// The value set by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The full option list reported by the agent, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_options: Option<Value>,
}

/// Context usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageData {
    /// Tokens used.
    pub used: u64,
    /// Context window size in tokens.
    pub size: u64,
    /// Cost so far, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_amount: Option<f64>,
    /// Currency of `cost_amount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_currency: Option<String>,
}

/// Legacy progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressData {
    /// Percent done, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// What the agent is doing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The end of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEndData {
    /// A v1 stop reason (`end_turn`, `max_tokens`, `max_turn_requests`,
    /// `refusal`, `cancelled`) or `error` when the agent reported a failure
    /// (seed `{type: error}` / `complete` with `success: false`, legacy
    /// `result` with `failed`, or a JSON-RPC error answer to the prompt).
    pub stop_reason: String,
    /// The error or summary text, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why a message was rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProtocolErrorData {
    /// What went wrong.
    pub message: String,
    /// JSON-RPC error code, when the problem is an error response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i64>,
}

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogSource {
    /// The agent process's stderr.
    Stderr,
    /// A legacy `log` / `error` line on stdout.
    Agent,
}

/// A log line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogData {
    /// Where the line came from.
    pub source: LogSource,
    /// `debug`, `info`, `warn` or `error` when the agent said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// The text.
    pub line: String,
}

/// Lifecycle phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecyclePhase {
    /// The dialect spoken by the agent was detected.
    DialectDetected,
    /// `initialize` completed.
    Initialized,
    /// `authenticate` completed.
    Authenticated,
    /// A session was created (`session/new`).
    SessionCreated,
    /// A session was loaded (`session/load`).
    SessionLoaded,
    /// A prompt turn started.
    TurnStarted,
    /// The client sent a cancel.
    CancelRequested,
    /// A follow-up prompt was queued behind the running turn (by the
    /// client's owner); `detail` is its text. It is sent when the turn ends.
    PromptQueued,
    /// The turn ended before its queued prompts were sent (cancelled,
    /// stopped or failed); `detail` says how many were dropped.
    QueueDropped,
    /// The agent's stdout closed.
    Closed,
    /// A legacy `status` line (`started`, `running`, ...).
    Status,
    /// A legacy `heartbeat` line.
    Heartbeat,
}

/// A lifecycle event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleData {
    /// Which phase.
    pub phase: LifecyclePhase,
    /// The dialect (`v1`, `seed`, `legacy`) once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<crate::Dialect>,
    /// Free text: a status name, a session id, a close reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Any other traffic.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct OtherData {
    /// The JSON-RPC method (for responses, the method of the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The `sessionUpdate` variant for `session/update` notifications that
    /// have no dedicated kind (including unknown variants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<String>,
    /// The JSON-RPC id for requests and responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;

    fn chunk_event(
        kind: fn(ChunkData) -> EventKind,
        text: Option<&str>,
        message_id: Option<&str>,
        session_id: Option<&str>,
        nanos: u32,
    ) -> AcpEvent {
        let raw = serde_json::json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "s", "update": {"text": text}}});
        let raw_text = serde_json::to_string(&raw).unwrap();
        AcpEvent {
            seq: 42,
            timestamp: Utc.timestamp_opt(1_764_911_400, nanos).single().unwrap(),
            direction: Direction::FromAgent,
            session_id: session_id.map(str::to_owned),
            kind: kind(ChunkData {
                role: ChunkRole::Agent,
                text: text.map(str::to_owned),
                content_type: "text".into(),
                message_id: message_id.map(str::to_owned),
            }),
            raw,
            raw_json: Some(RawJson::parse(&raw_text).unwrap()),
        }
    }

    #[test]
    fn write_json_writes_what_serde_writes() {
        let texts = [
            None,
            Some(""),
            Some("plain words, and more words"),
            Some("quotes \" and \\ backslashes"),
            Some("a tab\t, a newline\n, a bell \u{7}"),
            Some("non-ASCII: é, 漢字, 🦀, and DEL \u{7f}"),
        ];
        let mut cases = Vec::new();
        for text in texts {
            for message_id in [None, Some("msg_1"), Some("id \"quoted\"")] {
                for session_id in [None, Some("sess_1")] {
                    // No fraction, milliseconds, microseconds, nanoseconds.
                    for nanos in [0, 123_000_000, 123_456_000, 123_456_789] {
                        cases.push(chunk_event(
                            EventKind::MessageChunk,
                            text,
                            message_id,
                            session_id,
                            nanos,
                        ));
                        cases.push(chunk_event(
                            EventKind::ThoughtChunk,
                            text,
                            message_id,
                            session_id,
                            nanos,
                        ));
                    }
                }
            }
        }
        let mut user = chunk_event(EventKind::MessageChunk, Some("hi"), None, None, 5);
        if let EventKind::MessageChunk(c) = &mut user.kind {
            c.role = ChunkRole::User;
        }
        user.direction = Direction::ToAgent;
        cases.push(user);
        // Not a chunk, or no wire text: serde's way.
        let mut plan = chunk_event(EventKind::MessageChunk, Some("x"), None, None, 0);
        plan.kind = EventKind::Plan(PlanData { entries: vec![] });
        cases.push(plan);
        let mut no_raw = chunk_event(EventKind::MessageChunk, Some("x"), None, None, 0);
        no_raw.raw_json = None;
        cases.push(no_raw);
        for event in cases {
            let mut fast = b"prefix".to_vec();
            event.write_json(&mut fast).unwrap();
            let serde = [b"prefix".as_slice(), &serde_json::to_vec(&event).unwrap()].concat();
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                String::from_utf8(serde).unwrap()
            );
        }
    }
}
