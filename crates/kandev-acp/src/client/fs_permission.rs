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
//! A write the agent already has permission for is not asked again: an
//! `allow_once` answer to the agent's own permission request for a tool
//! call of kind `edit`, `delete` or `move` covers the files in its
//! `locations` for the rest of the turn, `allow_always` for the client's
//! life.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::Arc,
};

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionRequest, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, WriteTextFileRequest,
};
use serde_json::{Value, json};

use super::{core::Inner, incoming::spawn_handler, lock, to_params};
use crate::{
    error::{RpcError, codes},
    event::{Direction, EventKind, PermissionResponseData},
    normalize,
    permission::{PermissionDecision, SYNTHESIZED_META, WRITE_ALLOW, WRITE_REJECT},
    workspace::Workspace,
};

const METHOD: &str = "fs/write_text_file";

/// At most this many files are remembered as granted; past it, writes to
/// further files are asked again.
const MAX_GRANTS: usize = 1024;

/// Files the agent got permission to write (host paths, lexically mapped).
#[derive(Debug, Default)]
pub(super) struct WriteGrants {
    /// Until the turn ends (`allow_once`).
    turn: HashSet<PathBuf>,
    /// For the client's life (`allow_always`).
    always: HashSet<PathBuf>,
}

impl WriteGrants {
    /// Forgets the grants of the turn that ended.
    pub(super) fn end_turn(&mut self) {
        self.turn.clear();
    }

    fn covers(&self, path: &Path) -> bool {
        self.turn.contains(path) || self.always.contains(path)
    }
}

/// Remembers the files an answer to the agent's own permission request
/// allows it to write.
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
    let always = match option.kind {
        PermissionOptionKind::AllowOnce => false,
        PermissionOptionKind::AllowAlways => true,
        _ => return,
    };
    let fields = &request.tool_call.fields;
    if !matches!(
        fields.kind,
        Some(ToolKind::Edit | ToolKind::Delete | ToolKind::Move)
    ) {
        return;
    }
    let paths = fields
        .locations
        .iter()
        .flatten()
        .filter_map(|l| workspace.to_host(&l.path).ok());
    let mut state = lock(&inner.state);
    let grants = &mut state.write_grants;
    for path in paths {
        if grants.turn.len() + grants.always.len() >= MAX_GRANTS {
            break;
        }
        if always {
            grants.always.insert(path);
        } else {
            grants.turn.insert(path);
        }
    }
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
    let Some(workspace) = inner.options.workspace.clone() else {
        let error = RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("method not found: {METHOD}"),
        );
        inner.respond(id, METHOD, Err(error)).await;
        return;
    };
    let request: WriteTextFileRequest = match serde_json::from_value(params.clone()) {
        Ok(request) => request,
        Err(e) => {
            let error = RpcError::new(codes::INVALID_PARAMS, format!("invalid params: {e}"));
            inner.respond(id, METHOD, Err(error)).await;
            return;
        }
    };
    // Nobody is asked about a write that would be refused anyway.
    let host = match workspace.to_host(&request.path) {
        Ok(host) => host,
        Err(e) => {
            inner.respond(id, METHOD, Err(e.to_rpc())).await;
            return;
        }
    };
    if lock(&inner.state).write_grants.covers(&host) {
        spawn_handler(inner, id, METHOD.to_owned(), write(workspace, request)).await;
        return;
    }
    let question = question(&id, &request);
    let policy = inner.options.permission.clone();
    let shown = policy.is_interactive();
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
    // Take the turn's cancel token now, in wire order.
    let cancel = lock(&inner.turn_cancel).clone();
    let task_inner = inner.clone();
    let request_id = id.clone();
    spawn_handler(inner, id, METHOD.to_owned(), async move {
        let decision = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            decision = policy.decide(&request_id, &question) => Some(decision),
        };
        if shown {
            let kind = answer_event(&request_id, decision.as_ref());
            task_inner
                .emit(Direction::Local, session, kind, Value::Null)
                .await;
        }
        let path = request.path.display();
        match decision {
            Some(PermissionDecision::Select(option)) if option == WRITE_ALLOW => {
                write(workspace, request).await
            }
            Some(PermissionDecision::Select(option)) if option == WRITE_REJECT => {
                Err(RpcError::new(
                    codes::PERMISSION_DENIED,
                    format!("permission denied: writing {path} was rejected"),
                ))
            }
            Some(PermissionDecision::Cancel) => Err(RpcError::new(
                codes::PERMISSION_DENIED,
                format!("permission denied: writing {path} was not allowed (no answer)"),
            )),
            Some(PermissionDecision::Select(option)) => Err(RpcError::new(
                codes::PERMISSION_DENIED,
                format!("permission denied: writing {path} was not allowed (answer {option})"),
            )),
            None => Err(RpcError::new(
                codes::REQUEST_CANCELLED,
                format!(
                    "permission denied: the turn was cancelled before writing {path} was allowed"
                ),
            )),
        }
    })
    .await;
}

/// The `permission_response` event of a question the client asked; `None`
/// when the turn was cancelled first.
fn answer_event(id: &Value, decision: Option<&PermissionDecision>) -> EventKind {
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

    #[test]
    fn grants_of_a_turn_end_with_it() {
        let mut grants = WriteGrants::default();
        grants.turn.insert(PathBuf::from("/h/a"));
        grants.always.insert(PathBuf::from("/h/b"));
        assert!(grants.covers(Path::new("/h/a")) && grants.covers(Path::new("/h/b")));
        grants.end_turn();
        assert!(!grants.covers(Path::new("/h/a")));
        assert!(grants.covers(Path::new("/h/b")));
    }
}
