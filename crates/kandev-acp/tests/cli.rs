//! `kandev-acp run` end to end, with real subprocesses.
//!
//! Needs `bash`, `jq` and `uuidgen` (Debian/Ubuntu packages `bash`, `jq`,
//! `uuid-runtime`) for the seed agent script.

use std::process::{Command, Output};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kandev-acp"))
        .arg("run")
        .args(args)
        .output()
        .expect("run kandev-acp")
}

fn events(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("stdout is NDJSON"))
        .collect()
}

#[test]
fn seed_agent_script_completes_a_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/seed-agent.sh");
    let cwd = dir.path().to_str().expect("utf-8 path");
    let output = run(&[
        "--cwd",
        cwd,
        "--prompt",
        "fix the login bug",
        "--",
        "bash",
        script,
        "--acp",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}; stderr:\n{stderr}",
        output.status
    );
    assert!(stderr.contains("turn completed (end_turn)"), "{stderr}");
    let events = events(&output);
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], 1 + i as u64);
    }
    let dialect = events
        .iter()
        .find(|e| e["data"]["phase"] == "dialect_detected")
        .expect("dialect event");
    assert_eq!(dialect["data"]["dialect"], "seed");
    let chunk = events
        .iter()
        .find(|e| e["kind"] == "message_chunk")
        .expect("content update");
    assert_eq!(chunk["data"]["text"], "Processing: fix the login bug");
    let end = events
        .iter()
        .find(|e| e["kind"] == "turn_end")
        .expect("turn end");
    assert_eq!(end["data"]["stop_reason"], "end_turn");
    assert_eq!(end["raw"]["params"]["type"], "complete");
    let session = end["session_id"].as_str().expect("session id");
    assert_eq!(session.len(), 36, "uuidgen session id: {session}");
}

#[test]
fn crashed_agent_exits_non_zero() {
    let output = run(&["--prompt", "x", "--", "sh", "-c", "echo boom >&2; exit 3"]);
    assert_eq!(output.status.code(), Some(5));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("agent crashed or exited"), "{stderr}");
    assert!(stderr.contains("agent stderr: boom"), "{stderr}");
    let events = events(&output);
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "log" && e["data"]["line"] == "boom")
    );
}

#[test]
fn auth_required_exits_non_zero_with_the_agents_message() {
    let agent = r#"
        read -r l; echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[{"id":"login","name":"Login"}]}}'
        read -r l; echo '{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"run agent login first"}}'
        read -r l
    "#;
    let output = run(&["--prompt", "x", "--", "bash", "-c", agent]);
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("authentication required"), "{stderr}");
    assert!(stderr.contains("run agent login first"), "{stderr}");
}

#[test]
fn unsupported_protocol_version_is_a_protocol_error() {
    let agent =
        r#"read -r l; echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":7}}'; read -r l"#;
    let output = run(&["--prompt", "x", "--", "bash", "-c", agent]);
    assert_eq!(output.status.code(), Some(6));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("protocol error"), "{stderr}");
}

#[test]
fn silent_agent_times_out() {
    let output = run(&["--init-timeout", "1", "--prompt", "x", "--", "sleep", "30"]);
    assert_eq!(output.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("timeout: initialize timed out"), "{stderr}");
}
