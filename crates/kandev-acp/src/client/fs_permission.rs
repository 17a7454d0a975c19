//! `fs/write_text_file` under the permission policy.
//!
//! Before a write is carried out, the turn's [`PermissionPolicy`] is asked
//! with a `session/request_permission` the client makes up: a tool call
//! `Write <path>` of kind `edit` with the path in its locations, the options
//! [`WRITE_ALLOW`] (`allow_once`) and [`WRITE_REJECT`] (`reject_once`), keyed
//! by the write's own JSON-RPC id, and cancelled with the turn like a real
//! permission request. Allowed, the file is written; rejected, unanswered or
//! cancelled, the agent gets an error and the file is untouched.
//!
//! A policy a person answers ([`PermissionPolicy::is_interactive`]) gets
//! the question shown as `permission_request` / `permission_response`
//! events of direction `local`: the client asks, not the agent, and no
//! agent output line belongs to them.
//!
//! One question per action: a write the agent already asked about is not
//! asked again. An `allow_once` answer to the agent's own permission
//! request for a tool call of kind `edit`, `delete` or `move` covers the
//! files of that tool call until it completes or fails (or the turn ends);
//! `allow_always` covers them for the client's life. The tool call's kind
//! and files are taken from the request and from the agent's `tool_call` /
//! `tool_call_update` notifications of the same `toolCallId`, before or
//! after the answer (claude-code-acp sends them only in the notification):
//! its `locations`, the paths of its `diff` content and the path fields of
//! its `rawInput`. ACP v1's `fs/write_text_file` names no tool call, so a
//! write is matched by its path alone: a file no allowed tool call names
//! is asked about.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionRequest, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, WriteTextFileRequest,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use super::{
    core::{Inner, spawn_handler},
    grants::Allowed,
    wire::{invalid_params, method_not_found, to_params},
};
use crate::{
    error::{RpcError, codes},
    event::{Direction, EventKind, PermissionResponseData},
    normalize,
    permission::{PermissionDecision, SYNTHESIZED_META, WRITE_ALLOW, WRITE_REJECT},
    sync::lock,
    workspace::Workspace,
};

const METHOD: &str = "fs/write_text_file";

/// Notes a `tool_call` / `tool_call_update` notification (the `params` of
/// a `session/update`): its tool call's kind and files, for the write that
/// may follow an answer to its permission request.
pub(super) fn note_update(inner: &Inner, params: &Value) {
    let Some(workspace) = &inner.options.workspace else {
        return;
    };
    let Some(update) = params.get("update") else {
        return;
    };
    let tool_call = matches!(
        update.get("sessionUpdate").and_then(Value::as_str),
        Some("tool_call" | "tool_call_update")
    );
    if !tool_call {
        return;
    }
    if let Ok(update) = serde_json::from_value::<ToolCallUpdate>(update.clone()) {
        lock(&inner.state).write_grants.note(workspace, &update);
    }
}

/// Remembers the files an answer to the agent's own permission request
/// allows it to write: those of its tool call, as the request and the
/// agent's notifications of the same id describe it.
pub(super) fn record_grant(
    inner: &Inner,
    request: &RequestPermissionRequest,
    decision: &PermissionDecision,
) {
    let Some(workspace) = &inner.options.workspace else {
        return;
    };
    let PermissionDecision::Select(chosen) = decision else {
        return;
    };
    let Some(option) = request
        .options
        .iter()
        .find(|o| o.option_id.0.as_ref() == chosen)
    else {
        return;
    };
    let allowed = match option.kind {
        PermissionOptionKind::AllowOnce => Allowed::Once,
        PermissionOptionKind::AllowAlways => Allowed::Always,
        _ => return,
    };
    let mut state = lock(&inner.state);
    let grants = &mut state.write_grants;
    grants.note(workspace, &request.tool_call);
    grants.allow(request.tool_call.tool_call_id.0.as_ref(), allowed);
}

/// The question put to the policy for a write the agent did not ask about.
pub(super) fn question(id: &Value, request: &WriteTextFileRequest) -> RequestPermissionRequest {
    let path = request.path.display().to_string();
    let fields = ToolCallUpdateFields::new()
        .title(format!("Write {path}"))
        .kind(ToolKind::Edit)
        .status(ToolCallStatus::Pending)
        .locations(vec![ToolCallLocation::new(request.path.clone())])
        .raw_input(json!({"path": path, "bytes": request.content.len()}));
    let mut meta = serde_json::Map::new();
    meta.insert(SYNTHESIZED_META.to_owned(), Value::from(METHOD));
    RequestPermissionRequest::new(
        request.session_id.clone(),
        ToolCallUpdate::new(format!("{METHOD}:{id}"), fields),
        vec![
            PermissionOption::new(WRITE_ALLOW, "Allow write", PermissionOptionKind::AllowOnce),
            PermissionOption::new(WRITE_REJECT, "Reject", PermissionOptionKind::RejectOnce),
        ],
    )
    .meta(meta)
}

/// Handles an `fs/write_text_file` request (its event already emitted):
/// refuses a malformed or out-of-workspace one at once, writes one the
/// agent has permission for, and asks the policy about the others.
pub(super) async fn handle_write(
    inner: &Arc<Inner>,
    id: Value,
    params: &Value,
    session: Option<String>,
) {
    let (workspace, request, host) = match checked(inner, params) {
        Ok(checked) => checked,
        Err(error) => return inner.respond(id, METHOD, Err(error)).await,
    };
    if lock(&inner.state).write_grants.covers(&host) {
        spawn_handler(inner, id, METHOD.to_owned(), write(workspace, request)).await;
        return;
    }
    let question = question(&id, &request);
    let shown = inner.options.permission.is_interactive();
    if shown {
        let kind = normalize::permission_request(&id, &question);
        inner
            .emit(
                Direction::Local,
                session.clone(),
                kind,
                to_params(&question),
            )
            .await;
    }
    let asked = AskedWrite {
        inner: inner.clone(),
        id: id.clone(),
        question,
        shown,
        session,
        // Take the turn's cancel token now, in wire order.
        cancel: lock(&inner.turn_cancel).clone(),
        workspace,
        request,
    };
    spawn_handler(inner, id, METHOD.to_owned(), asked.run()).await;
}

/// The workspace, the write request and the file on the host: an error
/// for a write that would be refused anyway, so nobody is asked about it.
fn checked(
    inner: &Inner,
    params: &Value,
) -> Result<(Workspace, WriteTextFileRequest, PathBuf), RpcError> {
    let workspace = inner
        .options
        .workspace
        .clone()
        .ok_or_else(|| method_not_found(METHOD))?;
    let request: WriteTextFileRequest =
        serde_json::from_value(params.clone()).map_err(invalid_params)?;
    let host = workspace.to_host(&request.path).map_err(|e| e.to_rpc())?;
    Ok((workspace, request, host))
}

/// A write the policy is asked about, then carried out or refused as it
/// answers.
struct AskedWrite {
    inner: Arc<Inner>,
    /// The write's JSON-RPC id, the question's key.
    id: Value,
    question: RequestPermissionRequest,
    /// The question is shown as `local` events.
    shown: bool,
    session: Option<String>,
    /// The turn's: cancelled with it, the question goes unanswered.
    cancel: CancellationToken,
    workspace: Workspace,
    request: WriteTextFileRequest,
}

impl AskedWrite {
    #[instrument(name = "write_permission", skip_all, fields(id = %self.id))]
    async fn run(self) -> Result<Value, RpcError> {
        let policy = self.inner.options.permission.clone();
        let decision = tokio::select! {
            biased;
            () = self.cancel.cancelled() => None,
            decision = policy.decide(&self.id, &self.question) => Some(decision),
        };
        let by = decision.as_ref().and(policy.answered_by(&self.id));
        if self.shown {
            let kind = answer_event(&self.id, decision.as_ref(), by);
            self.inner
                .emit(Direction::Local, self.session, kind, Value::Null)
                .await;
        }
        match decision {
            Some(PermissionDecision::Select(option)) if option == WRITE_ALLOW => {
                write(self.workspace, self.request).await
            }
            decision => Err(refusal(decision, &self.request.path)),
        }
    }
}

/// The error a write of `path` gets when `decision` did not allow it
/// (`None`: the turn was cancelled first).
fn refusal(decision: Option<PermissionDecision>, path: &Path) -> RpcError {
    let path = path.display();
    match decision {
        Some(PermissionDecision::Select(option)) if option == WRITE_REJECT => RpcError::new(
            codes::PERMISSION_DENIED,
            format!("permission denied: writing {path} was rejected"),
        ),
        Some(PermissionDecision::Cancel) => RpcError::new(
            codes::PERMISSION_DENIED,
            format!("permission denied: writing {path} was not allowed (no answer)"),
        ),
        Some(PermissionDecision::Select(option)) => RpcError::new(
            codes::PERMISSION_DENIED,
            format!("permission denied: writing {path} was not allowed (answer {option})"),
        ),
        None => RpcError::new(
            codes::REQUEST_CANCELLED,
            format!("permission denied: the turn was cancelled before writing {path} was allowed"),
        ),
    }
}

/// The `permission_response` event of a question the client asked; `None`
/// when the turn was cancelled first. `by`: the person who answered.
fn answer_event(
    id: &Value,
    decision: Option<&PermissionDecision>,
    by: Option<String>,
) -> EventKind {
    let option_id = match decision {
        Some(PermissionDecision::Select(option)) => Some(option.clone()),
        _ => None,
    };
    EventKind::PermissionResponse(PermissionResponseData {
        request_id: id.clone(),
        outcome: if option_id.is_some() {
            "selected"
        } else {
            "cancelled"
        }
        .to_owned(),
        option_id,
        answered_by: by,
    })
}

async fn write(workspace: Workspace, request: WriteTextFileRequest) -> Result<Value, RpcError> {
    workspace
        .write_text_file(&request)
        .await
        .map_err(|e| e.to_rpc())?;
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_request(path: &str) -> WriteTextFileRequest {
        WriteTextFileRequest::new("s1", path, "hello")
    }

    #[test]
    fn the_question_describes_the_write() {
        let q = question(&Value::from(7), &write_request("/workspace/a.txt"));
        let fields = &q.tool_call.fields;
        assert_eq!(fields.title.as_deref(), Some("Write /workspace/a.txt"));
        assert_eq!(fields.kind, Some(ToolKind::Edit));
        let locations = fields.locations.as_ref().expect("locations");
        assert_eq!(locations[0].path, Path::new("/workspace/a.txt"));
        assert_eq!(q.tool_call.tool_call_id.0.as_ref(), "fs/write_text_file:7");
        let options: Vec<_> = q
            .options
            .iter()
            .map(|o| (o.option_id.0.as_ref(), o.kind))
            .collect();
        assert_eq!(
            options,
            [
                (WRITE_ALLOW, PermissionOptionKind::AllowOnce),
                (WRITE_REJECT, PermissionOptionKind::RejectOnce)
            ]
        );
        assert_eq!(
            q.meta.as_ref().and_then(|m| m.get(SYNTHESIZED_META)),
            Some(&Value::from(METHOD))
        );
    }
}
