//! What a Responses API request says, in the script's terms: the
//! [`Conversation`] read from `input`, and the tools on offer (in `tools`, or
//! in Codex's `additional_tools` input items, possibly inside namespaces).
//!
//! Codex sends its own context as user-role messages too (the
//! `<environment_context>` block, AGENTS.md text, `<turn_aborted>` markers);
//! those are not prompts and are skipped.

use serde_json::Value;

use crate::script::Conversation;

/// Input item types that carry a tool's result back to the model.
const TOOL_OUTPUTS: [&str; 3] = [
    "function_call_output",
    "custom_tool_call_output",
    "local_shell_call_output",
];

/// Prefixes of the user-role messages Codex writes itself.
const CODEX_CONTEXT_PREFIXES: [&str; 2] = ["# AGENTS.md instructions", "<INSTRUCTIONS>"];

/// The conversation in a request's `input` (a string or a list of items).
pub fn conversation(body: &Value) -> Conversation {
    let Some(input) = body.get("input") else {
        return Conversation::default();
    };
    if let Some(text) = input.as_str() {
        return Conversation {
            first_prompt: text.to_string(),
            prompt: text.to_string(),
            tool_results: 0,
        };
    }
    let mut conversation = Conversation::default();
    let mut seen_prompt = false;
    for item in input.as_array().into_iter().flatten() {
        if let Some(text) = user_prompt(item) {
            if !seen_prompt {
                conversation.first_prompt = text.clone();
                seen_prompt = true;
            }
            conversation.prompt = text;
            conversation.tool_results = 0;
        } else if is_tool_output(item) {
            conversation.tool_results += 1;
        }
    }
    conversation
}

/// The text of a user message written by the user (not by Codex).
fn user_prompt(item: &Value) -> Option<String> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    if kind != "message" || item.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let text = message_text(item.get("content")?);
    (!is_codex_context(&text)).then_some(text)
}

/// A message's text: a string, or its text parts joined by newlines.
fn message_text(content: &Value) -> String {
    if let Some(text) = content.as_str() {
        return text.to_string();
    }
    content
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a user-role text is context Codex added: an XML-wrapped block
/// (`<environment_context>…</environment_context>`, `<user_instructions>`,
/// `<turn_aborted>`, …) or AGENTS.md instructions.
fn is_codex_context(text: &str) -> bool {
    let text = text.trim();
    if CODEX_CONTEXT_PREFIXES.iter().any(|p| text.starts_with(p)) {
        return true;
    }
    let Some(rest) = text.strip_prefix('<') else {
        return false;
    };
    let tag: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    !tag.is_empty() && text.ends_with(&format!("</{tag}>"))
}

fn is_tool_output(item: &Value) -> bool {
    item.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| TOOL_OUTPUTS.contains(&t))
}

/// A tool the request offers the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    /// `function` or `custom` (freeform), as the request declares it.
    pub kind: String,
    pub name: String,
    /// The namespace it was declared in, if any.
    pub namespace: Option<String>,
}

/// Every tool offered, from `tools` and from `additional_tools` items.
pub fn offered_tools(body: &Value) -> Vec<Offered> {
    let mut out = Vec::new();
    if let Some(tools) = body.get("tools") {
        collect(tools, None, &mut out);
    }
    for item in body
        .get("input")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if item.get("type").and_then(Value::as_str) == Some("additional_tools")
            && let Some(tools) = item.get("tools")
        {
            collect(tools, None, &mut out);
        }
    }
    out
}

fn collect(tools: &Value, namespace: Option<&str>, out: &mut Vec<Offered>) {
    for tool in tools.as_array().into_iter().flatten() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        if kind == "namespace" {
            if let Some(inner) = tool.get("tools") {
                collect(inner, Some(name), out);
            }
        } else if !name.is_empty() {
            out.push(Offered {
                kind: kind.to_string(),
                name: name.to_string(),
                namespace: namespace.map(str::to_string),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(text: &str) -> Value {
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    }

    #[test]
    fn codex_context_is_skipped_and_tool_outputs_counted() {
        let body = json!({"input": [
            user("<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"),
            user("first question"),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            user("# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>x</INSTRUCTIONS>"),
            user("kandev: run ls"),
            {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "input": "x"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
            {"type": "function_call_output", "call_id": "c2", "output": "done"},
        ]});
        let c = conversation(&body);
        assert_eq!(c.first_prompt, "first question");
        assert_eq!(c.prompt, "kandev: run ls");
        assert_eq!(c.tool_results, 2);
        assert!(!is_codex_context("<b>bold</b> then text"));
    }

    #[test]
    fn tools_are_found_inside_namespaces() {
        let body = json!({
            "tools": [{"type": "function", "name": "shell"}],
            "input": [{"type": "additional_tools", "tools": [
                {"type": "namespace", "name": "functions", "tools": [{"type": "custom", "name": "exec"}]}
            ]}]
        });
        let names: Vec<_> = offered_tools(&body).into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["shell", "exec"]);
    }
}
