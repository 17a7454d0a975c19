//! The writes the agent has permission for: the files of the tool calls
//! a person (or the policy) allowed, for the turn (`allow_once`) or for the
//! client's life (`allow_always`). See [`super::fs_permission`].

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
};

use agent_client_protocol::v1::schema::{
    ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};

use crate::workspace::Workspace;

/// At most this many files are remembered as granted for the client's
/// life; past it, writes to further files are asked again.
const MAX_GRANTS: usize = 1024;
/// At most this many tool calls of a turn are remembered; further ones
/// cover no write.
const MAX_CALLS: usize = 1024;
/// At most this many files are remembered per tool call.
const MAX_CALL_PATHS: usize = 64;
/// The `rawInput` fields that name the file a tool works on (Claude's
/// `file_path` and `notebook_path`, and the usual others).
const RAW_INPUT_PATHS: [&str; 4] = ["path", "file_path", "filePath", "notebook_path"];

/// How the agent's permission request for a tool call was allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Allowed {
    Once,
    Always,
}

/// What the client knows of one tool call of the turn.
#[derive(Debug, Default)]
struct ToolCallFiles {
    kind: Option<ToolKind>,
    /// The files it names, as host paths.
    paths: HashSet<PathBuf>,
    allowed: Option<Allowed>,
}

impl ToolCallFiles {
    /// Whether an allow answer for it is one to write its files.
    fn writes(&self) -> bool {
        matches!(
            self.kind,
            Some(ToolKind::Edit | ToolKind::Delete | ToolKind::Move)
        )
    }
}

/// The writes the agent has permission for, and the tool calls of the
/// turn they come from.
#[derive(Debug, Default)]
pub(super) struct WriteGrants {
    /// The turn's tool calls by `toolCallId`.
    calls: HashMap<String, ToolCallFiles>,
    /// Files allowed for the client's life (`allow_always`), host paths.
    always: HashSet<PathBuf>,
}

impl WriteGrants {
    /// Forgets the tool calls (and so the `allow_once` grants) of the turn
    /// that ended.
    pub(super) fn end_turn(&mut self) {
        self.calls.clear();
    }

    pub(super) fn covers(&self, path: &Path) -> bool {
        self.always.contains(path)
            || self
                .calls
                .values()
                .any(|c| c.allowed.is_some() && c.writes() && c.paths.contains(path))
    }

    /// Merges what the agent says of a tool call (a notification, or the
    /// tool call of its permission request). A finished tool call allowed
    /// once covers nothing more.
    pub(super) fn note(&mut self, workspace: &Workspace, update: &ToolCallUpdate) {
        let id = update.tool_call_id.0.as_ref();
        let fields = &update.fields;
        if matches!(
            fields.status,
            Some(ToolCallStatus::Completed | ToolCallStatus::Failed)
        ) {
            self.calls.remove(id);
            return;
        }
        if !self.calls.contains_key(id) && self.calls.len() >= MAX_CALLS {
            return;
        }
        let call = self.calls.entry(id.to_owned()).or_default();
        if fields.kind.is_some() {
            call.kind = fields.kind;
        }
        for path in named_files(fields).filter_map(|p| workspace.to_host(p).ok()) {
            if call.paths.len() >= MAX_CALL_PATHS {
                break;
            }
            call.paths.insert(path);
        }
        self.keep_always(id);
    }

    /// Records an allow answer to the agent's request for tool call `id`.
    pub(super) fn allow(&mut self, id: &str, allowed: Allowed) {
        if let Some(call) = self.calls.get_mut(id) {
            call.allowed = Some(allowed);
        }
        self.keep_always(id);
    }

    /// Copies the files of a tool call allowed always into the grants of
    /// the client's life.
    fn keep_always(&mut self, id: &str) {
        let Some(call) = self.calls.get(id) else {
            return;
        };
        if call.allowed != Some(Allowed::Always) || !call.writes() {
            return;
        }
        for path in &call.paths {
            if self.always.len() >= MAX_GRANTS {
                break;
            }
            self.always.insert(path.clone());
        }
    }
}

/// The files a tool call names: its locations, the paths of its diffs and
/// the path fields of its `rawInput` (agent paths; relative ones are
/// refused by the workspace).
fn named_files(fields: &ToolCallUpdateFields) -> impl Iterator<Item = &Path> {
    let locations = fields.locations.iter().flatten().map(|l| l.path.as_path());
    let diffs = fields.content.iter().flatten().filter_map(|c| match c {
        ToolCallContent::Diff(d) => Some(d.path.as_path()),
        _ => None,
    });
    let raw = fields.raw_input.as_ref();
    let raw_paths = RAW_INPUT_PATHS
        .iter()
        .filter_map(move |key| raw?.get(*key)?.as_str())
        .map(Path::new);
    locations.chain(diffs).chain(raw_paths)
}

#[cfg(test)]
mod tests {
    use agent_client_protocol::v1::schema::ToolCallLocation;
    use serde_json::json;

    use super::*;

    fn workspace() -> Workspace {
        Workspace::new("/", "/workspace").expect("workspace")
    }

    fn tool_call(id: &str, fields: ToolCallUpdateFields) -> ToolCallUpdate {
        ToolCallUpdate::new(id.to_owned(), fields)
    }

    fn edit_of(file: &str) -> ToolCallUpdateFields {
        ToolCallUpdateFields::new()
            .kind(ToolKind::Edit)
            .locations(vec![ToolCallLocation::new(format!("/workspace/{file}"))])
    }

    #[test]
    fn an_allowed_edit_covers_its_files_until_it_finishes() {
        let ws = workspace();
        let mut grants = WriteGrants::default();
        grants.note(&ws, &tool_call("x", edit_of("a")));
        assert!(!grants.covers(Path::new("/a")), "not answered yet");
        grants.allow("x", Allowed::Once);
        assert!(grants.covers(Path::new("/a")));
        assert!(!grants.covers(Path::new("/b")));
        let done = ToolCallUpdateFields::new().status(ToolCallStatus::Completed);
        grants.note(&ws, &tool_call("x", done));
        assert!(!grants.covers(Path::new("/a")));
    }

    #[test]
    fn the_files_may_be_named_after_the_answer_or_in_raw_input() {
        let ws = workspace();
        let mut grants = WriteGrants::default();
        // The request names only the tool call; its notification follows.
        grants.note(&ws, &tool_call("x", ToolCallUpdateFields::new()));
        grants.allow("x", Allowed::Once);
        let raw = ToolCallUpdateFields::new()
            .kind(ToolKind::Edit)
            .raw_input(json!({"file_path": "/workspace/r.txt", "content": "x"}));
        grants.note(&ws, &tool_call("x", raw));
        assert!(grants.covers(Path::new("/r.txt")));
        // An allowed read covers no write.
        let read = ToolCallUpdateFields::new()
            .kind(ToolKind::Read)
            .locations(vec![ToolCallLocation::new("/workspace/s.txt")]);
        grants.note(&ws, &tool_call("y", read));
        grants.allow("y", Allowed::Once);
        assert!(!grants.covers(Path::new("/s.txt")));
    }

    #[test]
    fn once_grants_end_with_the_turn_always_grants_stay() {
        let ws = workspace();
        let mut grants = WriteGrants::default();
        grants.note(&ws, &tool_call("x", edit_of("a")));
        grants.allow("x", Allowed::Once);
        grants.note(&ws, &tool_call("y", edit_of("b")));
        grants.allow("y", Allowed::Always);
        assert!(grants.covers(Path::new("/a")) && grants.covers(Path::new("/b")));
        grants.end_turn();
        assert!(!grants.covers(Path::new("/a")));
        assert!(grants.covers(Path::new("/b")));
    }
}
