//! Mapping the script's abstract [`Action`]s onto the tools a request
//! offers: Claude Code's built-in `Read`/`Write`/`Bash`, or an ACP adapter's
//! `mcp__acp__*` variants when those are offered instead. The input follows
//! the schema the tool declares (`file_path` or `path`; `description` only
//! when the tool has one). Claude Code's file tools want absolute paths, so a
//! relative path is joined to the working directory the request names.

use serde_json::{Map, Value, json};

use crate::script::Action;

/// The tool names tried for each action, first offered wins.
const READ: &[&str] = &["mcp__acp__Read", "Read", "read_file"];
const WRITE: &[&str] = &["mcp__acp__Write", "Write", "write_file"];
const SHELL: &[&str] = &["mcp__acp__Bash", "Bash", "run_shell_command"];

/// The property names a file tool may call its path.
const PATH_KEYS: &[&str] = &["file_path", "path", "filePath", "absolute_path"];

/// A tool call: the offered tool's name and its input.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub input: Value,
}

/// The call that performs `action` with one of the offered `tools`, or
/// `None` when no fitting tool is offered.
pub fn call_for(action: &Action, tools: &[Value], cwd: Option<&str>) -> Option<ToolCall> {
    let (candidates, args): (&[&str], Vec<(&str, String)>) = match action {
        Action::Read { path } => (READ, vec![("path", absolute(path, cwd))]),
        Action::Write { path, content } => (
            WRITE,
            vec![("path", absolute(path, cwd)), ("content", content.clone())],
        ),
        Action::Shell { command } => (
            SHELL,
            vec![
                ("command", command.clone()),
                ("description", format!("Run {command}")),
            ],
        ),
    };
    let tool = candidates
        .iter()
        .find_map(|name| tools.iter().find(|t| tool_name(t) == Some(*name)))?;
    let properties = tool
        .pointer("/input_schema/properties")
        .and_then(Value::as_object);
    let mut input = Map::new();
    for (key, value) in args {
        if let Some(key) = property_for(key, properties) {
            input.insert(key, json!(value));
        }
    }
    Some(ToolCall {
        name: tool_name(tool)?.to_string(),
        input: Value::Object(input),
    })
}

/// What the model says when no offered tool fits the action.
pub fn missing(action: &Action) -> String {
    match action {
        Action::Read { path } => format!("No tool to read {path} is offered."),
        Action::Write { path, .. } => format!("No tool to write {path} is offered."),
        Action::Shell { command } => format!("No tool to run {command} is offered."),
    }
}

fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("name").and_then(Value::as_str)
}

/// The schema's name for an abstract argument: a path under one of
/// [`PATH_KEYS`]; `description` only when declared; anything else as is.
/// Without a schema, the Claude Code names are used.
fn property_for(key: &str, properties: Option<&Map<String, Value>>) -> Option<String> {
    let Some(properties) = properties else {
        return match key {
            "path" => Some("file_path".into()),
            other => Some(other.into()),
        };
    };
    match key {
        "path" => PATH_KEYS
            .iter()
            .find(|k| properties.contains_key(**k))
            .map(|k| (*k).to_string()),
        "description" => properties.contains_key(key).then(|| key.to_string()),
        other => Some(other.to_string()),
    }
}

fn absolute(path: &str, cwd: Option<&str>) -> String {
    match cwd {
        Some(cwd) if !path.starts_with('/') => {
            format!(
                "{}/{}",
                cwd.trim_end_matches('/'),
                path.trim_start_matches("./")
            )
        }
        _ => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, props: &[&str]) -> Value {
        let properties: Map<String, Value> = props
            .iter()
            .map(|p| ((*p).to_string(), json!({"type": "string"})))
            .collect();
        json!({"name": name, "input_schema": {"type": "object", "properties": properties}})
    }

    #[test]
    fn acp_variants_win_and_paths_become_absolute() {
        let tools = [
            tool("Read", &["file_path"]),
            tool("mcp__acp__Read", &["file_path", "limit"]),
            tool("Bash", &["command"]),
        ];
        let read = Action::Read {
            path: "a/b.txt".into(),
        };
        let call = call_for(&read, &tools, Some("/w/")).expect("read offered");
        assert_eq!(call.name, "mcp__acp__Read");
        assert_eq!(call.input, json!({"file_path": "/w/a/b.txt"}));
        let run = Action::Shell {
            command: "ls".into(),
        };
        let call = call_for(&run, &tools, None).expect("bash offered");
        assert_eq!(call.input, json!({"command": "ls"}));
        let write = Action::Write {
            path: "x".into(),
            content: "y".into(),
        };
        assert_eq!(call_for(&write, &tools, None), None);
    }
}
