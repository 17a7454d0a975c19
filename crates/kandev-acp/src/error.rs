//! Error types of the client library.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// JSON-RPC error codes used by ACP.
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// ACP: authentication is required before this operation.
    pub const AUTH_REQUIRED: i64 = -32000;
    /// ACP: a resource (file, terminal) was not found.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// ACP: the request was cancelled.
    pub const REQUEST_CANCELLED: i64 = -32800;
    /// Kandev: the permission policy (or the person it asked) refused the
    /// operation, e.g. an `fs/write_text_file`. Outside the ranges JSON-RPC
    /// and ACP reserve, as ACP asks of implementation-specific codes.
    pub const PERMISSION_DENIED: i64 = -31000;
}

/// A JSON-RPC error object, as received from or sent to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("json-rpc error {code}: {message}")]
pub struct RpcError {
    /// The error code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Optional extra data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// The error in plain words for a person: the agent's own explanation
    /// first (`data.details`, `data.message`, or `data` as text), then the
    /// code and message (`Internal error` alone says little).
    pub fn explain(&self) -> String {
        let own = match &self.data {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(map)) => ["details", "message", "reason", "error"]
                .iter()
                .find_map(|k| map.get(*k).and_then(Value::as_str))
                .map(str::to_owned),
            _ => None,
        };
        match own.filter(|s| !s.trim().is_empty()) {
            Some(own) => format!("{own} ({} {})", self.message, self.code),
            None => format!("{} ({})", self.message, self.code),
        }
    }

    /// Builds an error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// Errors returned by [`crate::AcpClient`].
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    /// The agent answered a request with a JSON-RPC error.
    #[error("agent returned an error for {method}: {source}")]
    Rpc {
        /// The request method.
        method: String,
        /// The error object.
        #[source]
        source: Box<RpcError>,
    },
    /// The agent needs authentication and the client may not (or cannot)
    /// authenticate by itself.
    #[error("authentication required: {message}{}", set_one_of(env))]
    AuthRequired {
        /// The agent's message.
        message: String,
        /// The methods the agent advertised.
        methods: Vec<String>,
        /// Environment variables the agent's methods read, any one of
        /// which would have let the client authenticate by itself; empty
        /// when no method names one (or one was set and still refused).
        env: Vec<String>,
    },
    /// No answer in time.
    #[error("{method} timed out after {timeout:?}")]
    Timeout {
        /// The request method.
        method: String,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The agent's stdout closed (exit or crash) before the answer came.
    #[error("connection to the agent closed{}", .reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Closed {
        /// Why, when known.
        reason: Option<String>,
    },
    /// Writing to the agent failed.
    #[error("writing to the agent failed: {0}")]
    Io(#[from] std::io::Error),
    /// The agent's answer did not have the expected shape.
    #[error("invalid {method} response: {message}")]
    InvalidResponse {
        /// The request method.
        method: String,
        /// What was wrong.
        message: String,
    },
    /// The agent picked a protocol version this client does not speak.
    #[error("unsupported protocol version {0}")]
    UnsupportedVersion(String),
    /// The operation is not available for this agent (capability or dialect).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The client is not in the right state (no session yet, not initialized).
    #[error("invalid state: {0}")]
    State(String),
    /// The agent reported that the turn failed.
    #[error("the agent reported a failed turn: {0}")]
    TurnFailed(String),
}

fn set_one_of(env: &[String]) -> String {
    if env.is_empty() {
        String::new()
    } else {
        format!(" (set {})", env.join(" or "))
    }
}

impl AcpError {
    /// The JSON-RPC error code when the agent answered with an error.
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            Self::Rpc { source, .. } => Some(source.code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_puts_the_agents_own_words_first() {
        let e = RpcError {
            data: Some(serde_json::json!({"details": "Could not resolve dependency foo@2"})),
            ..RpcError::new(-32603, "Internal error")
        };
        assert_eq!(
            e.explain(),
            "Could not resolve dependency foo@2 (Internal error -32603)"
        );
        let plain = RpcError::new(-32602, "Invalid params");
        assert_eq!(plain.explain(), "Invalid params (-32602)");
        let text = RpcError {
            data: Some(Value::String("log in first".into())),
            ..RpcError::new(-32000, "Auth")
        };
        assert_eq!(text.explain(), "log in first (Auth -32000)");
    }
}
