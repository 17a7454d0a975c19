//! The scripts. Each takes a [`Turn`] and says how it ended; the dialect
//! runner turns that into a response (or seed/legacy completion lines).

use std::{io::Write, path::Path, time::Duration};

use serde_json::{Value, json};

use crate::{
    config::Dialect,
    scenario::{COMMANDS, Scenario},
    session::{SessionRecord, config_options_json},
    turn::{Turn, TurnEnd, chunk, unix_nanos},
    wire::{INTERNAL_ERROR, RpcError},
};

/// Runs one scenario to its end.
pub(crate) async fn run(turn: &Turn, scenario: Scenario) -> TurnEnd {
    if turn.is_cancelled() {
        return TurnEnd::cancelled();
    }
    match scenario {
        Scenario::Echo(text) => {
            let text = if text.is_empty() {
                turn.prompt_text.clone()
            } else {
                text
            };
            turn.say(&text).await;
            TurnEnd::end_turn()
        }
        Scenario::Code { file } => code(turn, &file).await,
        Scenario::Permission { file } => permission(turn, &file).await,
        Scenario::Flood { count, size, rate } => flood(turn, count, size, rate).await,
        Scenario::Slow { count, delay_ms } => slow(turn, count, delay_ms).await,
        Scenario::WaitCancel => {
            turn.say("Waiting for session/cancel.").await;
            tokio::select! {
                () = turn.cancel.cancelled() => {}
                () = turn.ctx.shutdown.cancelled() => {}
            }
            TurnEnd::cancelled()
        }
        Scenario::Crash { code } => {
            turn.say(&format!("Crashing now with exit code {code}."))
                .await;
            turn.ctx.out.flush().await;
            std::process::exit(code);
        }
        Scenario::Garbage => garbage(turn).await,
        Scenario::Oversized { bytes } => {
            let id = turn.new_message_id();
            turn.update(chunk("agent_message_chunk", &"x".repeat(bytes), Some(&id)))
                .await;
            turn.say("Oversized line done.").await;
            TurnEnd::end_turn()
        }
        Scenario::AllUpdates => all_updates(turn).await,
        Scenario::Error { message } => {
            turn.say(&format!("Something went wrong: {message}")).await;
            TurnEnd::Error(
                RpcError::new(INTERNAL_ERROR, "Internal error")
                    .with_data(json!({ "details": message })),
            )
        }
        Scenario::Stop { reason } => {
            turn.say(&format!("Stopping with {reason}.")).await;
            TurnEnd::Stop(reason)
        }
        Scenario::Hang => {
            turn.ctx.shutdown.cancelled().await;
            TurnEnd::Silent
        }
        Scenario::Stderr { lines } => {
            for i in 1..=lines {
                eprintln!("kandev-mock-agent stderr line {i}/{lines}");
            }
            turn.say(&format!("Wrote {lines} lines to stderr.")).await;
            TurnEnd::end_turn()
        }
        Scenario::SessionInfo => {
            turn.say(&session_info(turn)).await;
            TurnEnd::end_turn()
        }
        Scenario::Help => {
            let mut text =
                String::from("Scenarios (first word of the prompt, or a `scenario:` line):\n");
            for (name, description, args) in COMMANDS {
                text.push_str(&format!("- {name} {args}: {description}\n"));
            }
            turn.say(&text).await;
            TurnEnd::end_turn()
        }
    }
}

/// `name=fnv:<digest>` of each `{name, value}` (a secret's value never
/// leaves the agent; its digest shows which arrived).
fn digests(pairs: &Value) -> String {
    pairs
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let name = p["name"].as_str().unwrap_or("?");
            let value = p["value"].as_str().unwrap_or("");
            format!(
                "{name}=fnv:{:016x}",
                crate::session::fnv1a(&[value.as_bytes()])
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One line per MCP server the session was given.
fn server_line(server: &Value) -> String {
    let name = server["name"].as_str().unwrap_or("?");
    match server["type"].as_str() {
        Some(kind @ ("http" | "sse")) => format!(
            "- {name}: {kind} {} headers [{}]",
            server["url"].as_str().unwrap_or(""),
            digests(&server["headers"])
        ),
        _ => {
            let args: Vec<&str> = server["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            format!(
                "- {name}: stdio {} args [{}] env [{}]",
                server["command"].as_str().unwrap_or(""),
                args.join(" "),
                digests(&server["env"])
            )
        }
    }
}

/// What the session was given, for `session-info`.
fn session_info(turn: &Turn) -> String {
    let record = turn.session.lock().expect("session lock").record.clone();
    let mut text = format!(
        "Session info\nmode: {}\nmodel: {}\nmcp servers: {}\n",
        record.mode_id,
        record.model,
        record.mcp_servers.len()
    );
    for server in &record.mcp_servers {
        text.push_str(&server_line(server));
        text.push('\n');
    }
    text.push_str("prompt:\n");
    text.push_str(&turn.prompt_text);
    text
}

fn text_block(text: &str) -> Value {
    json!({ "type": "content", "content": { "type": "text", "text": text } })
}

fn plan(steps: &[String; 3], statuses: [&str; 3]) -> Value {
    let priorities = ["high", "high", "medium"];
    let entries: Vec<Value> = (0..3)
        .map(|i| json!({ "content": steps[i], "priority": priorities[i], "status": statuses[i] }))
        .collect();
    json!({ "sessionUpdate": "plan", "entries": entries })
}

fn tool_call(
    id: &str,
    title: &str,
    kind: &str,
    path: &Path,
    line: Option<usize>,
    raw_input: Value,
) -> Value {
    let mut location = json!({ "path": path });
    if let Some(line) = line {
        location["line"] = json!(line);
    }
    json!({
        "sessionUpdate": "tool_call",
        "toolCallId": id,
        "title": title,
        "kind": kind,
        "status": "pending",
        "locations": [location],
        "rawInput": raw_input,
    })
}

fn tool_update(id: &str, status: &str) -> Value {
    json!({ "sessionUpdate": "tool_call_update", "toolCallId": id, "status": status })
}

/// Tool call `id` failed, saying why.
fn failed_update(id: &str, why: &str) -> Value {
    with_content(tool_update(id, "failed"), json!([text_block(why)]))
}

/// Marks a tool call failed, explains why, and ends the turn normally.
async fn fail_tool(turn: &Turn, id: &str, error: &str) -> TurnEnd {
    turn.update(failed_update(id, error)).await;
    turn.say(&format!("I could not finish: {error}")).await;
    TurnEnd::end_turn()
}

fn usage(turn: &Turn) -> Value {
    let used = 1000 * turn.number + turn.prompt_text.len() as u64;
    json!({
        "sessionUpdate": "usage_update",
        "used": used,
        "size": 200_000,
        "cost": { "amount": 0.01 * turn.number as f64, "currency": "USD" },
    })
}

fn preview(content: Option<&str>) -> String {
    match content {
        None => "(the file does not exist yet)".to_owned(),
        Some(text) if text.len() <= 2000 => text.to_owned(),
        Some(text) => {
            let mut end = 2000;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}… ({} bytes in total)", &text[..end], text.len())
        }
    }
}

fn mode(turn: &Turn) -> String {
    turn.session
        .lock()
        .expect("session lock")
        .record
        .mode_id
        .clone()
}

/// Plan, thought, read → edit (with a diff) → verify (in a client terminal
/// when offered), a summary and a usage update.
async fn code(turn: &Turn, file: &str) -> TurnEnd {
    let path = turn.resolve(file);
    let n = turn.number;
    let steps = [
        format!("Read {file}"),
        format!("Append a line to {file}"),
        format!("Verify {file}"),
    ];

    turn.update(json!({ "sessionUpdate": "session_info_update", "title": format!("Edit {file}") }))
        .await;
    turn.update(plan(&steps, ["in_progress", "pending", "pending"]))
        .await;
    turn.think(&format!("The task is about {file}. I will read it first."))
        .await;
    let old = match read_step(turn, &path, &steps[0]).await {
        Ok(old) => old,
        Err(end) => return end,
    };
    turn.update(plan(&steps, ["completed", "in_progress", "pending"]))
        .await;

    let addition = format!("Edited by kandev-mock-agent (turn {n}).\n");
    if mode(turn) == "plan" {
        turn.say(&format!(
            "Plan mode is on, so I left {file} alone. I would append: {}",
            addition.trim_end()
        ))
        .await;
        return TurnEnd::end_turn();
    }
    turn.think("I will append one line that records this turn.")
        .await;
    let new_text = match edit_step(turn, &path, &steps[1], old.as_deref(), &addition).await {
        Ok(new_text) => new_text,
        Err(end) => return end,
    };
    turn.update(plan(&steps, ["completed", "completed", "in_progress"]))
        .await;

    let verified = if turn.caps.terminal {
        verify_in_terminal(turn, &path, &steps[2]).await
    } else {
        verify_by_reading(turn, &path, &steps[2], &new_text).await
    };
    if let Err(end) = verified {
        return end;
    }
    turn.update(plan(&steps, ["completed", "completed", "completed"]))
        .await;

    let id = turn.new_message_id();
    turn.say_chunk(&id, &format!("I read {file} and appended one line to it: "))
        .await;
    turn.say_chunk(
        &id,
        &format!("`{}`. The check passed.", addition.trim_end()),
    )
    .await;
    turn.update(usage(turn)).await;
    TurnEnd::end_turn()
}

/// `code`'s read: a `read` tool call whose content is a preview of the
/// file. The file's text (`None` when it does not exist), or how the turn
/// ended (it failed or was cancelled).
async fn read_step(turn: &Turn, path: &Path, title: &str) -> Result<Option<String>, TurnEnd> {
    let id = format!("call_read_{}", turn.number);
    let input = json!({ "path": path });
    turn.update(tool_call(&id, title, "read", path, None, input))
        .await;
    turn.update(tool_update(&id, "in_progress")).await;
    let old = match turn.read_text(path).await {
        Ok(old) => old,
        Err(e) => return Err(fail_tool(turn, &id, &e).await),
    };
    let done = with_content(
        tool_update(&id, "completed"),
        json!([text_block(&preview(old.as_deref()))]),
    );
    turn.update(done).await;
    if turn.is_cancelled() {
        return Err(TurnEnd::cancelled());
    }
    Ok(old)
}

/// `code`'s edit: `addition` appended to the file (`old`) as an `edit`
/// tool call whose content is the diff. The new text, or how the turn
/// ended.
async fn edit_step(
    turn: &Turn,
    path: &Path,
    title: &str,
    old: Option<&str>,
    addition: &str,
) -> Result<String, TurnEnd> {
    let old_text = old.unwrap_or_default();
    let mut new_text = old_text.to_owned();
    if !new_text.is_empty() && !new_text.ends_with('\n') {
        new_text.push('\n');
    }
    new_text.push_str(addition);
    let id = format!("call_edit_{}", turn.number);
    let line = old_text.lines().count() + 1;
    let input = json!({ "path": path, "append": addition });
    turn.update(tool_call(&id, title, "edit", path, Some(line), input))
        .await;
    turn.update(tool_update(&id, "in_progress")).await;
    if let Err(e) = turn.write_text(path, &new_text).await {
        return Err(fail_tool(turn, &id, &e).await);
    }
    let done = with_content(tool_update(&id, "completed"), diff(path, old, &new_text));
    turn.update(done).await;
    if turn.is_cancelled() {
        return Err(TurnEnd::cancelled());
    }
    Ok(new_text)
}

/// ACP diff content: `path` from `old` (`None`: a new file) to `new`.
fn diff(path: &Path, old: Option<&str>, new: &str) -> Value {
    json!([{ "type": "diff", "path": path, "oldText": old, "newText": new }])
}

/// `update` with `content`.
fn with_content(mut update: Value, content: Value) -> Value {
    update["content"] = content;
    update
}

/// `terminal/create` (`cat FILE`) → `wait_for_exit` → `output` → `release`.
async fn verify_in_terminal(turn: &Turn, path: &Path, title: &str) -> Result<(), TurnEnd> {
    let id = format!("call_exec_{}", turn.number);
    let input = json!({ "command": "cat", "args": [path] });
    turn.update(tool_call(&id, title, "execute", path, None, input))
        .await;
    let params = json!({
        "sessionId": turn.session_id,
        "command": "cat",
        "args": [path],
        "cwd": turn.cwd,
        "outputByteLimit": 65536,
    });
    let created = turn.request("terminal/create", params).await;
    let terminal_id = match created {
        Ok(result) => match result["terminalId"].as_str() {
            Some(t) => t.to_owned(),
            None => {
                return Err(
                    fail_tool(turn, &id, &format!("terminal/create returned {result}")).await,
                );
            }
        },
        Err(e) => return Err(fail_tool(turn, &id, &format!("terminal/create: {e}")).await),
    };
    let mut running = tool_update(&id, "in_progress");
    running["content"] = json!([{ "type": "terminal", "terminalId": terminal_id }]);
    turn.update(running).await;

    let target = json!({ "sessionId": turn.session_id, "terminalId": terminal_id });
    let exit = turn.request("terminal/wait_for_exit", target.clone()).await;
    let output = turn.request("terminal/output", target.clone()).await;
    let released = turn.request("terminal/release", target).await;
    let (exit, output) = match (exit, output, released) {
        (Ok(exit), Ok(output), Ok(_)) => (exit, output),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return Err(fail_tool(turn, &id, &format!("terminal: {e}")).await);
        }
    };
    let exit_code = exit["exitCode"].as_i64();
    let status = if exit_code == Some(0) {
        "completed"
    } else {
        "failed"
    };
    let mut done = tool_update(&id, status);
    done["rawOutput"] = json!({ "exitCode": exit["exitCode"], "output": output["output"] });
    turn.update(done).await;
    if exit_code == Some(0) {
        Ok(())
    } else {
        turn.say(&format!("The check failed with exit status {}.", exit))
            .await;
        Err(TurnEnd::end_turn())
    }
}

/// Without a client terminal the check is a read-back of the file.
async fn verify_by_reading(
    turn: &Turn,
    path: &Path,
    title: &str,
    expected: &str,
) -> Result<(), TurnEnd> {
    let id = format!("call_exec_{}", turn.number);
    let input = json!({ "command": "read-back", "path": path });
    turn.update(tool_call(&id, title, "execute", path, None, input))
        .await;
    turn.update(tool_update(&id, "in_progress")).await;
    match turn.read_text(path).await {
        Ok(Some(actual)) if actual == expected => {
            let mut done = tool_update(&id, "completed");
            done["content"] = json!([text_block(&format!(
                "{} bytes; the edit is present",
                actual.len()
            ))]);
            turn.update(done).await;
            Ok(())
        }
        Ok(_) => Err(fail_tool(turn, &id, "the file does not contain the edit").await),
        Err(e) => Err(fail_tool(turn, &id, &e).await),
    }
}

enum Decision {
    Allow,
    Reject,
    Cancelled,
    Failed(String),
}

/// `session/request_permission` with allow_once / allow_always / reject_once.
async fn ask_permission(turn: &Turn, call: &Value) -> Decision {
    let mut tool_call = call.clone();
    if let Some(obj) = tool_call.as_object_mut() {
        obj.remove("sessionUpdate");
    }
    let params = json!({
        "sessionId": turn.session_id,
        "toolCall": tool_call,
        "options": [
            { "optionId": "allow-once", "name": "Allow once", "kind": "allow_once" },
            { "optionId": "allow-always", "name": "Always allow", "kind": "allow_always" },
            { "optionId": "reject-once", "name": "Reject", "kind": "reject_once" },
        ],
    });
    let request = turn.request("session/request_permission", params);
    tokio::pin!(request);
    let result = tokio::select! {
        result = &mut request => result,
        () = turn.cancel.cancelled() => {
            // The client must answer a pending permission request with `cancelled`;
            // give it a moment, then stop waiting.
            match tokio::time::timeout(Duration::from_secs(5), &mut request).await {
                Ok(result) => result,
                Err(_) => return Decision::Cancelled,
            }
        }
    };
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => return Decision::Failed(e.to_string()),
    };
    match (
        outcome["outcome"]["outcome"].as_str(),
        outcome["outcome"]["optionId"].as_str(),
    ) {
        (Some("selected"), Some("allow-once")) => Decision::Allow,
        (Some("selected"), Some("allow-always")) => {
            turn.session
                .lock()
                .expect("session lock")
                .record
                .allow_always = true;
            Decision::Allow
        }
        (Some("selected"), Some("reject-once")) => Decision::Reject,
        (Some("cancelled"), _) => Decision::Cancelled,
        _ => Decision::Failed(format!("unexpected permission outcome {outcome}")),
    }
}

/// A write the user is asked to allow (unless the session allows it
/// already), then done, refused or given up as the answer says.
async fn permission(turn: &Turn, file: &str) -> TurnEnd {
    let path = turn.resolve(file);
    let id = format!("call_write_{}", turn.number);
    let (mode, allow_always) = {
        let session = turn.session.lock().expect("session lock");
        (session.record.mode_id.clone(), session.record.allow_always)
    };
    if mode == "plan" {
        turn.say(&format!("Plan mode is on, so I will not write {file}."))
            .await;
        return TurnEnd::end_turn();
    }
    let title = format!("Write {file}");
    let input = json!({ "path": path, "content": PERMITTED_CONTENT });
    let call = tool_call(&id, &title, "edit", &path, None, input);
    turn.update(call.clone()).await;

    // The file as it was, read once: asked about below, diffed when done.
    let (decision, before) = if allow_always || mode == "accept-edits" {
        turn.think("Writing files is already allowed in this session.")
            .await;
        (Decision::Allow, None)
    } else {
        // The request shows the write it asks for, as ACP diff content.
        let old = turn.read_text(&path).await.unwrap_or(None);
        let asked = with_content(call, diff(&path, old.as_deref(), PERMITTED_CONTENT));
        (ask_permission(turn, &asked).await, Some(old))
    };
    match decision {
        Decision::Allow if turn.is_cancelled() => {
            turn.update(failed_update(&id, "cancelled")).await;
            TurnEnd::cancelled()
        }
        Decision::Allow => write_permitted(turn, file, &path, &id, before).await,
        Decision::Reject => {
            turn.update(failed_update(&id, "permission denied")).await;
            turn.say(&format!("Permission denied; {file} was not written."))
                .await;
            TurnEnd::end_turn()
        }
        Decision::Cancelled => {
            turn.update(failed_update(&id, "cancelled")).await;
            TurnEnd::cancelled()
        }
        Decision::Failed(why) => {
            turn.update(failed_update(&id, &why)).await;
            turn.say(&format!(
                "I could not ask for permission ({why}); {file} was not written."
            ))
            .await;
            TurnEnd::end_turn()
        }
    }
}

/// What the `permission` scenario writes.
const PERMITTED_CONTENT: &str = "Written by kandev-mock-agent after permission was granted.\n";

/// The allowed write of tool call `id`, diffed against the file as it
/// was (`before`, when it was read for the question).
async fn write_permitted(
    turn: &Turn,
    file: &str,
    path: &Path,
    id: &str,
    before: Option<Option<String>>,
) -> TurnEnd {
    turn.update(tool_update(id, "in_progress")).await;
    let old = match before {
        Some(old) => old,
        None => turn.read_text(path).await.unwrap_or(None),
    };
    if let Err(e) = turn.write_text(path, PERMITTED_CONTENT).await {
        return fail_tool(turn, id, &e).await;
    }
    let done = with_content(
        tool_update(id, "completed"),
        diff(path, old.as_deref(), PERMITTED_CONTENT),
    );
    turn.update(done).await;
    turn.say(&format!("Permission granted; I wrote {file}."))
        .await;
    TurnEnd::end_turn()
}

/// The fixed part of an ACP flood line, up to the index value.
/// Words the flood's text is made of: plain ASCII, nothing to escape.
const FLOOD_WORDS: &[&str] = &[
    "the",
    "function",
    "returns",
    "a",
    "value",
    "when",
    "file",
    "is",
    "read",
    "and",
    "we",
    "update",
    "tests",
    "for",
    "error",
    "handling",
    "in",
    "module",
    "config",
    "parser",
    "should",
    "check",
    "this",
    "path",
    "before",
    "writing",
    "output",
    "to",
    "disk",
    "then",
    "run",
    "cargo",
    "build",
    "again",
    "with",
    "new",
    "flag",
    "struct",
    "field",
    "missing",
    "import",
    "fix",
    "type",
    "mismatch",
    "line",
    "42",
    "src/lib.rs",
    "let",
    "me",
    "look",
    "at",
    "it",
];

/// A fixed text of words in a fixed pseudo-random order (the same in every
/// run), that flood chunks are cut from: chunks read like prose and differ
/// from one another, as an agent's do, so no hop gains from repeated text.
fn flood_corpus(len: usize) -> String {
    let mut corpus = String::with_capacity(len + 16);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while corpus.len() < len {
        // xorshift64: deterministic, no dependency.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        corpus.push_str(FLOOD_WORDS[(x % FLOOD_WORDS.len() as u64) as usize]);
        corpus.push(' ');
    }
    corpus
}

/// The `size` bytes of text of flood chunk `index`.
fn flood_text(corpus: &str, size: usize, index: u64) -> &str {
    let starts = corpus.len().saturating_sub(size).max(1) as u64;
    let start = (index.wrapping_mul(7919) % starts) as usize;
    // The corpus is ASCII: every index is a char boundary.
    &corpus[start..(start + size).min(corpus.len())]
}

/// The parts of a flood line around its text and index.
struct FloodLine {
    head: String,
    middle: String,
}

impl FloodLine {
    fn new(session_id: &str, message_id: &str, count: u64) -> Self {
        // Ids are `[A-Za-z0-9_-]` and the text is words, so nothing needs escaping.
        FloodLine {
            head: format!(
                concat!(
                    r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"{}","update":{{"#,
                    r#""sessionUpdate":"agent_message_chunk","messageId":"{}","content":{{"type":"text","text":""#
                ),
                session_id, message_id
            ),
            middle: format!(r#""}},"_meta":{{"kandev/count":{count},"kandev/index":"#),
        }
    }

    fn line(&self, text: &str, index: u64, sent_at: u64) -> Vec<u8> {
        let mut line = Vec::with_capacity(self.head.len() + text.len() + self.middle.len() + 48);
        line.extend_from_slice(self.head.as_bytes());
        line.extend_from_slice(text.as_bytes());
        line.extend_from_slice(self.middle.as_bytes());
        // Closes _meta, update, params and the message.
        let _ = write!(line, r#"{index},"kandev/sentAtNanos":{sent_at}}}}}}}}}"#);
        line
    }
}

/// `count` chunks of `size` bytes, each stamped with its index and send
/// time; as fast as possible, or `rate` per second when it is not 0 (each
/// chunk is due at `start + index / rate`, so a late one does not slow the
/// rest).
async fn flood(turn: &Turn, count: u64, size: usize, rate: u64) -> TurnEnd {
    let corpus = flood_corpus(64 * 1024 + size);
    let message_id = turn.new_message_id();
    let lines = FloodLine::new(&turn.session_id, &message_id, count);
    let start = tokio::time::Instant::now();
    for index in 0..count {
        if let Some(nanos) = index.saturating_mul(1_000_000_000).checked_div(rate) {
            let due = start + Duration::from_nanos(nanos);
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                () = turn.cancel.cancelled() => return TurnEnd::cancelled(),
            }
        } else if index % 256 == 0 && turn.is_cancelled() {
            return TurnEnd::cancelled();
        }
        let text = flood_text(&corpus, size, index);
        if turn.dialect == Dialect::Acp {
            turn.ctx
                .out
                .raw(lines.line(text, index, unix_nanos()))
                .await;
        } else {
            let mut update = chunk("agent_message_chunk", text, Some(&message_id));
            update["_meta"] = json!({ "kandev/count": count, "kandev/index": index, "kandev/sentAtNanos": unix_nanos() });
            turn.update(update).await;
        }
    }
    turn.say(&format!("Flood done: {count} chunks of {size} bytes."))
        .await;
    TurnEnd::end_turn()
}

async fn slow(turn: &Turn, count: u64, delay_ms: u64) -> TurnEnd {
    let id = turn.new_message_id();
    for i in 1..=count {
        turn.say_chunk(&id, &format!("chunk {i}/{count}\n")).await;
        if i < count && !turn.sleep(Duration::from_millis(delay_ms)).await {
            return TurnEnd::cancelled();
        }
    }
    TurnEnd::end_turn()
}

/// Lines no client should choke on: they are not ACP messages.
pub(crate) const GARBAGE: [&[u8]; 8] = [
    b"this line is not JSON",
    br#"{"jsonrpc":"2.0","method":"session/update","params":{"#,
    b"\xff\xfe invalid UTF-8 \xc3\x28 bytes",
    b"",
    br#"{"hello":"world"}"#,
    b"[1,2,3]",
    b"\x1b[32mINFO\x1b[0m a banner an agent printed to stdout",
    br#"{"jsonrpc":"2.0","id":987654321,"result":{}}"#,
];

async fn garbage(turn: &Turn) -> TurnEnd {
    for line in GARBAGE {
        turn.ctx.out.raw(line.to_vec()).await;
    }
    turn.say("Garbage done; the stream is healthy again.").await;
    TurnEnd::end_turn()
}

/// Every `session/update` variant the client may receive (notice and
/// compaction only when advertised).
async fn all_updates(turn: &Turn) -> TurnEnd {
    let (record, boolean_config) = {
        let session = turn.session.lock().expect("session lock");
        (session.record.clone(), turn.caps.boolean_config)
    };
    turn.update(chunk(
        "user_message_chunk",
        "A user message chunk (normally only seen during session/load).",
        None,
    ))
    .await;
    turn.think("Thinking about which updates exist.").await;
    turn.say("Sending one update of every kind.").await;
    turn.update(updates_plan("in_progress", "pending")).await;
    think_tool_call(turn).await;
    session_state_updates(turn, &record, boolean_config).await;
    turn.update(usage(turn)).await;
    if turn.caps.notices {
        turn.update(json!({
            "sessionUpdate": "notice",
            "severity": "info",
            "title": "Mock notice",
            "description": "Sent because the client advertised session.notices.",
        }))
        .await;
    }
    if turn.caps.compaction {
        compaction(turn).await;
    }
    turn.update(updates_plan("completed", "completed")).await;
    turn.say("All updates sent.").await;
    TurnEnd::end_turn()
}

/// `all_updates`'s plan: its two entries' statuses.
fn updates_plan(send: &str, finish: &str) -> Value {
    json!({
        "sessionUpdate": "plan",
        "entries": [
            { "content": "Send every update", "priority": "high", "status": send },
            { "content": "Finish the turn", "priority": "low", "status": finish },
        ],
    })
}

/// A `think` tool call, started and completed.
async fn think_tool_call(turn: &Turn) {
    let id = format!("call_think_{}", turn.number);
    turn.update(json!({
        "sessionUpdate": "tool_call",
        "toolCallId": id,
        "title": "Think",
        "kind": "think",
        "status": "in_progress",
        "rawInput": { "topic": "updates" },
    }))
    .await;
    let mut done = with_content(
        tool_update(&id, "completed"),
        json!([text_block("Thought about it.")]),
    );
    done["rawOutput"] = json!({ "ok": true });
    turn.update(done).await;
}

/// The session's commands, mode, config options and info.
async fn session_state_updates(turn: &Turn, record: &SessionRecord, boolean_config: bool) {
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|(name, description, hint)| {
            let mut command = json!({ "name": name, "description": description });
            if !hint.is_empty() {
                command["input"] = json!({ "hint": hint });
            }
            command
        })
        .collect();
    turn.update(
        json!({ "sessionUpdate": "available_commands_update", "availableCommands": commands }),
    )
    .await;
    turn.update(json!({ "sessionUpdate": "current_mode_update", "currentModeId": record.mode_id }))
        .await;
    turn.update(json!({
        "sessionUpdate": "config_option_update",
        "configOptions": config_options_json(record, boolean_config),
    }))
    .await;
    turn.update(json!({
        "sessionUpdate": "session_info_update",
        "title": "All updates",
        "updatedAt": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }))
    .await;
}

/// A compaction: started, its summary, completed.
async fn compaction(turn: &Turn) {
    let compaction_id = format!("cmp_{}", turn.number);
    let status = |status: &str| json!({ "sessionUpdate": "compaction_update", "compactionId": compaction_id, "status": status });
    turn.update(status("in_progress")).await;
    turn.update(json!({
        "sessionUpdate": "compaction_summary_chunk",
        "compactionId": compaction_id,
        "content": { "type": "text", "text": "Summary of the conversation so far." },
    }))
    .await;
    turn.update(status("completed")).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flood_lines_are_valid_json() {
        let line = FloodLine::new("sess_1", "msg_1", 2).line("two words", 1, 42);
        let v: Value = serde_json::from_slice(&line).expect("valid JSON");
        assert_eq!(
            v,
            json!({
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": "sess_1",
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "messageId": "msg_1",
                        "content": { "type": "text", "text": "two words" },
                        "_meta": { "kandev/count": 2, "kandev/index": 1, "kandev/sentAtNanos": 42 },
                    },
                },
            })
        );
    }

    #[test]
    fn flood_texts_have_their_size_differ_and_need_no_escaping() {
        let corpus = flood_corpus(64 * 1024 + 200);
        let texts: Vec<&str> = (0..1000).map(|i| flood_text(&corpus, 200, i)).collect();
        assert!(texts.iter().all(|t| t.len() == 200));
        assert!(
            texts
                .iter()
                .all(|t| t.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
                    && !t.contains(['"', '\\']))
        );
        let distinct: std::collections::HashSet<&&str> = texts.iter().collect();
        assert_eq!(distinct.len(), texts.len(), "every chunk differs");
        assert_eq!(
            flood_corpus(1000),
            flood_corpus(1000),
            "the same in every run"
        );
    }

    #[test]
    fn preview_cuts_on_a_char_boundary() {
        let long = "é".repeat(1500);
        assert!(preview(Some(&long)).ends_with("(3000 bytes in total)"));
        assert_eq!(preview(None), "(the file does not exist yet)");
    }
}
