//! Reading a `GenerateContentRequest`: the conversation in the script's
//! terms, the tools Gemini CLI offers, and whether a side call asks for
//! JSON.
//!
//! Gemini CLI puts its own context in the user's turn: the first user
//! message starts with a `<session_context>` part ("This is the Gemini CLI.
//! We are setting up the context for our chat. ..."), and the prompt is a
//! later part of the same message. Such injected parts are skipped; a user
//! message made only of `functionResponse` parts is a tool result.

use serde_json::{Map, Value};

use crate::script::Conversation;

/// Markers of text Gemini CLI injects into user messages itself.
const INJECTED: &[&str] = &[
    "<session_context>",
    "This is the Gemini CLI. We are setting up the context",
];

/// The conversation in `contents`, in the script's terms.
pub(super) fn conversation(request: &Value) -> Conversation {
    let mut conversation = Conversation::default();
    let contents = request["contents"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    for content in contents {
        if content["role"].as_str().is_some_and(|r| r != "user") {
            continue;
        }
        let parts = content["parts"].as_array().map_or(&[][..], Vec::as_slice);
        let results = parts
            .iter()
            .filter(|p| p.get("functionResponse").is_some())
            .count();
        if results > 0 {
            conversation.tool_results += results;
            continue;
        }
        let text = user_text(parts);
        if text.is_empty() {
            continue;
        }
        if conversation.first_prompt.is_empty() {
            conversation.first_prompt.clone_from(&text);
        }
        conversation.prompt = text;
        conversation.tool_results = 0;
    }
    conversation
}

/// The user's own text in a message's parts (injected context left out).
fn user_text(parts: &[Value]) -> String {
    parts
        .iter()
        .filter_map(|p| p["text"].as_str())
        .filter(|t| !INJECTED.iter().any(|m| t.trim_start().starts_with(m)))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A function the request offers, with its declared parameter names.
#[derive(Debug, Clone)]
pub(super) struct Function {
    pub name: String,
    pub params: Vec<String>,
}

/// The functions declared in `tools[].functionDeclarations`.
pub(super) fn functions(request: &Value) -> Vec<Function> {
    let tools = request["tools"].as_array().map_or(&[][..], Vec::as_slice);
    tools
        .iter()
        .filter_map(|t| t["functionDeclarations"].as_array())
        .flatten()
        .filter_map(|f| {
            let name = f["name"].as_str()?.to_string();
            let schema = f
                .get("parametersJsonSchema")
                .or_else(|| f.get("parameters"))
                .unwrap_or(&Value::Null);
            let params = schema["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            Some(Function { name, params })
        })
        .collect()
}

/// The JSON schema a side call asks its answer to match, if any.
pub(super) fn response_schema(request: &Value) -> Option<&Value> {
    let config = &request["generationConfig"];
    [
        "responseJsonSchema",
        "responseSchema",
        "response_json_schema",
    ]
    .iter()
    .find_map(|k| config.get(*k).filter(|s| s.is_object()))
    .or_else(|| {
        let json = config["responseMimeType"].as_str() == Some("application/json");
        json.then_some(&Value::Null)
    })
}

/// The workspace directory in Gemini CLI's injected context, if any
/// (`- **Workspace Directories:**` then `  - /path`).
pub(super) fn workspace(request: &Value) -> Option<String> {
    let contents = request["contents"].as_array()?;
    let context = contents
        .iter()
        .filter_map(|c| c["parts"].as_array())
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .find(|t| t.trim_start().starts_with(INJECTED[0]))?;
    let mut lines = context
        .lines()
        .skip_while(|l| !l.contains("Workspace Directories"));
    lines.next()?;
    let dir = lines.next()?.trim().strip_prefix("- ")?.trim();
    dir.starts_with('/').then(|| dir.to_string())
}

/// Arguments for `function`, set only where it declares the parameter.
pub(super) fn args(function: &Function, values: &[(&[&str], String)]) -> Map<String, Value> {
    let mut args = Map::new();
    for (names, value) in values {
        if let Some(name) = names
            .iter()
            .find(|n| function.params.iter().any(|p| p == *n))
        {
            args.insert((*name).to_string(), Value::String(value.clone()));
        }
    }
    args
}
