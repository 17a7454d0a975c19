//! How a run ends and how a conversation goes on: an agent that ignores
//! the end of its input is stopped as soon as its turn ended and its output
//! is read; a follow-up whose session the agent no longer has starts a new
//! session with the conversation so far summarised before the prompt.

use crate::helpers::{Launched, containers_of, spawn_app};
use kandev_proto::v1 as pb;

fn timestamp(value: &serde_json::Value) -> chrono::DateTime<chrono::Utc> {
    value
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("not a timestamp: {value}"))
        .into()
}

#[tokio::test]
async fn an_agent_that_ignores_end_of_input_is_stopped_once_its_turn_ended() {
    let mut app = spawn_app().await;
    // Like claude-agent-acp and codex-acp: neither the end of its input nor
    // SIGTERM ends it; and it writes once more after the prompt's response.
    let Launched {
        mut watch,
        instance,
        ..
    } = app
        .launch_quirky(
            "mock-lingering",
            "ignore-eof,ignore-sigterm,late-updates",
            "slow 5 20",
        )
        .await;
    let done = watch.until("agent.completed", 0).await;
    assert_eq!(done["stop_reason"], "end_turn");

    // Ended well before the old 5 s grace after the turn's end.
    let turn_end = watch
        .events
        .iter()
        .find(|e| e["kind"] == "turn_end")
        .unwrap_or_else(|| panic!("no turn_end in {:?}", watch.kinds()));
    let after = timestamp(&done["at"]) - timestamp(&turn_end["timestamp"]);
    assert!(
        after < chrono::Duration::milliseconds(2500),
        "the run ended {after} after its turn"
    );

    // Nothing lost, in order: the late update after the response too.
    watch.assert_contiguous();
    let seqs = watch.seqs();
    let late = watch
        .events
        .iter()
        .position(|e| {
            e["kind"] == "message_chunk"
                && e["data"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("a late update"))
        })
        .unwrap_or_else(|| panic!("the late update is missing: {:?}", watch.kinds()));
    let end = watch
        .events
        .iter()
        .position(|e| e["kind"] == "turn_end")
        .unwrap();
    assert!(late > end, "the late update comes after the turn's end");
    let chunks = watch
        .events
        .iter()
        .filter(|e| e["kind"] == "message_chunk" && e["data"]["role"] == "agent")
        .count();
    assert!(chunks >= 6, "{chunks} agent chunks");

    let status = app.status(&instance.id).await;
    assert_eq!(status.status, pb::AgentStatus::Completed as i32);
    assert_eq!(status.last_seq, *seqs.last().unwrap() as i64);
    assert_eq!(status.exit_code, None, "stopped by Kandev after its turn");
    assert!(containers_of(&instance.id).is_empty());
    app.stop().await;
}

/// The text of the last `session/prompt` the agent received.
fn last_prompt_text(events: &[serde_json::Value]) -> String {
    let prompt = events
        .iter()
        .rev()
        .find(|e| e["direction"] == "to_agent" && e["raw"]["method"] == "session/prompt")
        .expect("a session/prompt was sent");
    prompt["raw"]["params"]["prompt"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_follow_up_whose_session_is_gone_starts_a_new_one_with_the_conversation() {
    let mut app = spawn_app().await;
    // The agent answers every session/load "Session not found", as a real
    // agent does when its session store went with the earlier container.
    let Launched {
        mut watch,
        instance,
        ..
    } = app
        .launch_quirky("mock-forgetful", "lose-sessions", "echo the first question")
        .await;
    let first = watch.until("agent.completed", 0).await;
    let first_session = first["acp_session_id"].as_str().unwrap().to_string();
    assert!(!first_session.is_empty());

    app.send_prompt(&instance.id, "echo the second question")
        .await;
    let second = watch.until("agent.completed", 1).await;
    assert!(
        !watch.lifecycle.iter().any(|(s, _)| s == "agent.failed"),
        "{:?}",
        watch.lifecycle
    );
    assert_eq!(second["stop_reason"], "end_turn");
    let second_session = second["acp_session_id"].as_str().unwrap().to_string();
    assert!(!second_session.is_empty());
    assert_ne!(second_session, first_session, "a new session");

    // The new session is the instance's now.
    let session = app.session(&instance.id).await;
    assert_eq!(session.session_id, second_session);
    let status = app.status(&instance.id).await;
    assert_eq!(status.status, pb::AgentStatus::Completed as i32);

    // The agent got the conversation so far, labelled, before the prompt.
    let text = last_prompt_text(&watch.events);
    assert!(
        text.starts_with("[Kandev: the agent's earlier session for this task could not be resumed"),
        "{text}"
    );
    assert!(text.contains("Session not found"), "{text}");
    let earlier = text
        .find("echo the first question")
        .expect("the earlier prompt");
    let now = text.rfind("echo the second question").unwrap();
    assert!(earlier < now, "{text}");
    assert!(text.ends_with("echo the second question"), "{text}");
    assert!(text.len() <= 8 * 1024 + 64, "{} bytes", text.len());
    // The new session was created after the failed load.
    assert!(
        watch.events.iter().any(|e| e["kind"] == "lifecycle"
            && e["data"]["phase"] == "session_created"
            && e["session_id"] == second_session.as_str()),
        "no session_created for the new session"
    );

    // Every later follow-up gets the whole conversation the same way.
    app.send_prompt(&instance.id, "echo the third question")
        .await;
    watch.until("agent.completed", 2).await;
    let text = last_prompt_text(&watch.events);
    let first_at = text.find("echo the first question").unwrap();
    let second_at = text.find("echo the second question").unwrap();
    assert!(
        first_at < second_at,
        "both earlier prompts, in order: {text}"
    );
    assert!(text.ends_with("echo the third question"));
    app.stop().await;
}
