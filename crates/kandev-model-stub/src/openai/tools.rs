//! The script's abstract [`Action`]s as calls of the tools a request offers.
//!
//! Codex offers different tool sets by version and configuration:
//! - direct tools: `exec_command` (`{"cmd"}`), `shell_command`
//!   (`{"command": "..."}`), `shell` (`{"command": [argv]}`), `apply_patch`
//!   (freeform with the patch grammar, or a function taking `{"input"}`),
//!   sometimes `read_file` (`{"file_path"}`);
//! - "code mode" (Codex 0.16x): one freeform `exec` tool taking JavaScript
//!   that calls the nested tools, e.g. `await tools.exec_command({cmd})`.
//!
//! Reads become `cat` where no `read_file` is offered; writes become an
//! `apply_patch` adding the file (which overwrites it) or, failing that, a
//! shell `printf`.

use serde_json::{Value, json};

use super::request::Offered;
use crate::script::Action;

/// One tool call for the model to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// A function tool, with its JSON arguments (as a string).
    Function {
        name: String,
        namespace: Option<String>,
        arguments: String,
    },
    /// A freeform (custom) tool, with its raw input.
    Custom {
        name: String,
        namespace: Option<String>,
        input: String,
    },
}

/// The call carrying out `action` with the offered tools, if any fits.
pub fn call_for(action: &Action, offered: &[Offered]) -> Option<Call> {
    match action {
        Action::Read { path } => read(path, offered),
        Action::Write { path, content } => write(path, content, offered),
        Action::Shell { command } => shell(command, offered),
    }
}

fn find<'a>(offered: &'a [Offered], name: &str) -> Option<&'a Offered> {
    offered.iter().find(|t| t.name == name)
}

fn function(tool: &Offered, arguments: Value) -> Call {
    Call::Function {
        name: tool.name.clone(),
        namespace: tool.namespace.clone(),
        arguments: arguments.to_string(),
    }
}

fn custom(tool: &Offered, input: String) -> Call {
    Call::Custom {
        name: tool.name.clone(),
        namespace: tool.namespace.clone(),
        input,
    }
}

/// A JavaScript string literal (JSON's is one).
fn js_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

fn shell(command: &str, offered: &[Offered]) -> Option<Call> {
    if let Some(t) = find(offered, "exec_command").filter(|t| t.kind == "function") {
        return Some(function(t, json!({"cmd": command})));
    }
    if let Some(t) = find(offered, "shell_command") {
        return Some(function(t, json!({"command": command})));
    }
    if let Some(t) = find(offered, "shell") {
        return Some(function(t, json!({"command": ["bash", "-lc", command]})));
    }
    let t = find(offered, "exec").filter(|t| t.kind == "custom")?;
    let js = format!(
        "const r = await tools.exec_command({{cmd: {}}});\ntext(typeof r === \"string\" ? r : (r.output ?? JSON.stringify(r)));\n",
        js_string(command)
    );
    Some(custom(t, js))
}

fn read(path: &str, offered: &[Offered]) -> Option<Call> {
    if let Some(t) = find(offered, "read_file").filter(|t| t.kind == "function") {
        return Some(function(t, json!({"file_path": path})));
    }
    shell(&format!("cat {}", shell_quote(path)), offered)
}

fn write(path: &str, content: &str, offered: &[Offered]) -> Option<Call> {
    let patch = add_file_patch(path, content);
    if let Some(t) = find(offered, "apply_patch") {
        return Some(if t.kind == "custom" {
            custom(t, patch)
        } else {
            function(t, json!({"input": patch}))
        });
    }
    if let Some(t) = find(offered, "exec").filter(|t| t.kind == "custom") {
        let js = format!(
            "const r = await tools.apply_patch({});\ntext(r);\n",
            js_string(&patch)
        );
        return Some(custom(t, js));
    }
    let command = format!(
        "printf '%s\\n' {} > {}",
        shell_quote(content),
        shell_quote(path)
    );
    shell(&command, offered)
}

/// A patch (Codex's `apply_patch` grammar) that writes `content` to `path`.
fn add_file_patch(path: &str, content: &str) -> String {
    let mut patch = format!("*** Begin Patch\n*** Add File: {path}\n");
    for line in content.lines() {
        patch.push('+');
        patch.push_str(line);
        patch.push('\n');
    }
    patch.push_str("*** End Patch\n");
    patch
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(kind: &str, name: &str) -> Offered {
        Offered {
            kind: kind.into(),
            name: name.into(),
            namespace: None,
        }
    }

    #[test]
    fn direct_tools_are_preferred_over_code_mode() {
        let offered = [tool("custom", "exec"), tool("function", "exec_command")];
        let call = call_for(
            &Action::Shell {
                command: "ls".into(),
            },
            &offered,
        );
        assert!(matches!(call, Some(Call::Function { name, arguments, .. })
            if name == "exec_command" && arguments == r#"{"cmd":"ls"}"#));
    }

    #[test]
    fn code_mode_wraps_nested_tools_in_javascript() {
        let offered = [tool("custom", "exec")];
        let write = Action::Write {
            path: "a.txt".into(),
            content: "x".into(),
        };
        let Some(Call::Custom { input, .. }) = call_for(&write, &offered) else {
            panic!("no custom call");
        };
        assert!(input.contains(r#"tools.apply_patch("*** Begin Patch\n*** Add File: a.txt\n+x\n"#));
        let read = call_for(&Action::Read { path: "a b".into() }, &offered);
        assert!(
            matches!(read, Some(Call::Custom { input, .. }) if input.contains(r#"{cmd: "cat 'a b'"}"#))
        );
        assert_eq!(call_for(&write, &[]), None);
    }
}
