//! The small pieces the client's parts build messages and events from.

use agent_client_protocol::v1::schema::{ContentBlock, EmbeddedResourceResource};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::options::{BAD_LINE_PREVIEW, Dialect};
use crate::{
    error::{AcpError, RpcError, codes},
    event::{EventKind, LifecycleData, LifecyclePhase, OtherData, ProtocolErrorData},
};

/// What a handler of an agent's request answers.
pub(super) type Handled = Result<Value, RpcError>;

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

pub(super) fn invalid_params(e: serde_json::Error) -> RpcError {
    RpcError::new(codes::INVALID_PARAMS, format!("invalid params: {e}"))
}

pub(super) fn method_not_found(method: &str) -> RpcError {
    RpcError::new(
        codes::METHOD_NOT_FOUND,
        format!("method not found: {method}"),
    )
}
