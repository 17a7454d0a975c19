//! Reading a Messages API request into the script's vendor-neutral
//! [`Conversation`], and finding the agent's working directory in it.
//!
//! Claude Code puts its own context into user messages as text blocks that
//! start with `<system-reminder>` (git status, attribution, ...); those are
//! not the user's words and are skipped. It also sends `role: "system"`
//! messages mid-conversation; those are skipped too.

use serde_json::Value;

use crate::script::Conversation;

/// What Claude Code wraps its own context in.
const REMINDER: &str = "<system-reminder>";

/// How the environment section of Claude Code's prompt names the directory.
const CWD_MARKERS: &[&str] = &["Primary working directory: ", "Working directory: "];

/// The conversation in a request's `messages`: the first user prompt, the
/// latest user prompt (a user message with the user's own text and no tool
/// results), and how many `tool_result` blocks came after it.
pub fn conversation(body: &Value) -> Conversation {
    let mut conversation = Conversation::default();
    let mut seen_prompt = false;
    for message in messages(body) {
        if message.get("role").and_then(Value::as_str) != Some("user") {
            continue;
        }
        let blocks = blocks(message);
        let results = blocks
            .iter()
            .filter(|b| block_type(b) == Some("tool_result"))
            .count();
        if results > 0 {
            conversation.tool_results += results;
            continue;
        }
        let text = user_text(&blocks);
        if text.is_empty() {
            continue;
        }
        if !seen_prompt {
            conversation.first_prompt = text.clone();
            seen_prompt = true;
        }
        conversation.prompt = text;
        conversation.tool_results = 0;
    }
    conversation
}

/// The agent's working directory, as Claude Code tells the model: the
/// `safeguards` classifier context's `live_cwd`, else the environment
/// section of the system prompt (or of a `system` message).
pub fn working_dir(body: &Value) -> Option<String> {
    let from_safeguards = body
        .get("safeguards")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|s| s.pointer("/classifier_context/live_cwd")?.as_str());
    if let Some(cwd) = from_safeguards {
        return Some(cwd.to_string());
    }
    let system = body.get("system").into_iter();
    let system_messages = messages(body)
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        .filter_map(|m| m.get("content"));
    system
        .chain(system_messages)
        .flat_map(texts)
        .find_map(|text| cwd_in(&text))
}

fn cwd_in(text: &str) -> Option<String> {
    CWD_MARKERS.iter().find_map(|marker| {
        let (_, rest) = text.split_once(marker)?;
        let line = rest.lines().next()?.trim();
        line.starts_with('/').then(|| line.to_string())
    })
}

fn messages(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A message's content as blocks (a plain string is one text block).
fn blocks(message: &Value) -> Vec<Value> {
    match message.get("content") {
        Some(Value::String(text)) => vec![serde_json::json!({ "type": "text", "text": text })],
        Some(Value::Array(blocks)) => blocks.clone(),
        _ => Vec::new(),
    }
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

/// The user's own text in a message's blocks, reminders left out.
fn user_text(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter(|b| block_type(b) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .filter(|t| !t.trim_start().starts_with(REMINDER))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

/// The texts in a `system` value or a message's content (string or blocks).
fn texts(value: &Value) -> Vec<String> {
    match value {
        Value::String(text) => vec![text.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reminders_are_skipped_and_tool_results_counted() {
        let body = json!({"messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\ngit status</system-reminder>"},
                {"type": "text", "text": "first words"}]},
            {"role": "system", "content": [{"type": "text", "text": "Primary working directory: /w\n"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": "kandev: edit a => b"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Read", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "x"},
                {"type": "text", "text": "<system-reminder>x</system-reminder>"}]},
        ]});
        let c = conversation(&body);
        assert_eq!(c.first_prompt, "first words");
        assert_eq!(c.prompt, "kandev: edit a => b");
        assert_eq!(c.tool_results, 1);
        assert_eq!(working_dir(&body).as_deref(), Some("/w"));
    }
}
