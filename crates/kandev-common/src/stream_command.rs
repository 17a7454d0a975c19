//! A task stream's client commands (`prompt`, `cancel`, `permission`), as
//! the gateway's WebSocket and the orchestrator's read them, and the `ack`
//! or `error` frame each is answered with. An optional `id` is echoed back
//! with the command's `type`.

use serde::Deserialize;
use serde_json::{Value, json};

/// What a client may ask on a task's stream.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    /// A follow-up prompt.
    Prompt { text: String },
    /// Cancel the running turn.
    Cancel,
    /// Answer a permission request.
    Permission {
        request_id: Value,
        #[serde(default)]
        option_id: String,
        #[serde(default)]
        cancelled: bool,
    },
}

/// Why a client's message is no command.
#[derive(Debug, Clone, PartialEq)]
pub enum Unreadable {
    /// It is not JSON.
    Json(String),
    /// It is JSON, but no command.
    Command(String),
}

impl Unreadable {
    /// In words, for the `error` frame.
    pub fn message(&self) -> String {
        match self {
            Unreadable::Json(e) => format!("invalid JSON: {e}"),
            Unreadable::Command(e) => format!("invalid command: {e}"),
        }
    }
}

/// Reads a client's text message: its command, or why it is none, and
/// the [`Reply`] that answers it.
pub fn read(text: &str) -> (Reply, Result<Command, Unreadable>) {
    let raw: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let reply = Reply {
                id: None,
                name: None,
            };
            return (reply, Err(Unreadable::Json(e.to_string())));
        }
    };
    let reply = Reply {
        id: raw.get("id").cloned(),
        name: raw.get("type").and_then(Value::as_str).map(str::to_string),
    };
    let command = serde_json::from_value(raw).map_err(|e| Unreadable::Command(e.to_string()));
    (reply, command)
}

/// How a message is answered: with its `id` (when it had one) and its
/// `type` as `command` (none when it was not JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub id: Option<Value>,
    pub name: Option<String>,
}

impl Reply {
    /// The answer that the command was done.
    pub fn ack(self) -> Value {
        self.answer("ack", Value::Null)
    }

    /// The answer that it failed: `body` is the error's fields (an object).
    pub fn error(self, body: Value) -> Value {
        self.answer("error", body)
    }

    fn answer(self, kind: &str, fields: Value) -> Value {
        let mut frame = json!({"type": kind, "command": self.name});
        if let (Value::Object(frame), Value::Object(fields)) = (&mut frame, fields) {
            frame.extend(fields);
        }
        if let Some(id) = self.id {
            frame["id"] = id;
        }
        frame
    }
}

/// A permission's `request_id` as the services key it: a string as it is,
/// anything else as its JSON text.
pub fn request_id_text(id: Value) -> String {
    match id {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_as_a_command_or_says_why_not() {
        let (reply, command) = read(r#"{"type":"prompt","text":"go","id":3}"#);
        assert_eq!(command, Ok(Command::Prompt { text: "go".into() }));
        assert_eq!(
            reply.ack(),
            json!({"type": "ack", "command": "prompt", "id": 3})
        );
        let (reply, command) = read("{");
        assert!(matches!(command, Err(Unreadable::Json(_))));
        assert_eq!((reply.id, reply.name), (None, None));
        let (reply, command) = read(r#"{"type":"dance","id":"x"}"#);
        assert!(matches!(command, Err(Unreadable::Command(_))));
        assert_eq!(
            reply.error(json!({"error": "bad_request"})),
            json!({"type": "error", "command": "dance", "error": "bad_request", "id": "x"})
        );
        assert_eq!(request_id_text(json!(7)), "7");
        assert_eq!(request_id_text(json!("r-1")), "r-1");
    }
}
