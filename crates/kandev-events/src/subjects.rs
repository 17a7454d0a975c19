//! Subject names and the streams that persist them.

pub const TASK_CREATED: &str = "task.created";
pub const TASK_UPDATED: &str = "task.updated";
pub const TASK_STATE_CHANGED: &str = "task.state_changed";
pub const TASK_DELETED: &str = "task.deleted";

pub const AGENT_STARTED: &str = "agent.started";
pub const AGENT_RUNNING: &str = "agent.running";
pub const AGENT_COMPLETED: &str = "agent.completed";
pub const AGENT_FAILED: &str = "agent.failed";
pub const AGENT_STOPPED: &str = "agent.stopped";
pub const AGENT_WAITING_FOR_INPUT: &str = "agent.waiting_for_input";
pub const AGENT_INPUT_RECEIVED: &str = "agent.input_received";
/// Before the agent starts: its image is being built (progress in `summary`).
pub const AGENT_PREPARING: &str = "agent.preparing";

/// The prefix of per-task ACP message subjects.
pub const ACP_MESSAGE_PREFIX: &str = "acp.message.";

/// `acp.message.<task_id>`.
pub fn acp_message(task_id: &uuid::Uuid) -> String {
    format!("{ACP_MESSAGE_PREFIX}{task_id}")
}

/// The prefix of per-task live feed subjects (core NATS, not stored).
pub const FEED_LIVE_PREFIX: &str = "feed.";

/// `feed.<task_id>`: numbered feed frames as the orchestrator broadcasts
/// them, newline-separated, with [`LIVE_FIRST_SEQ`] and [`LIVE_LAST_SEQ`].
pub fn feed_live(task_id: &uuid::Uuid) -> String {
    format!("{FEED_LIVE_PREFIX}{task_id}")
}

/// The prefix of per-board live subjects (core NATS, not stored).
pub const BOARD_LIVE_PREFIX: &str = "board.";

/// `board.<board_id>`: a card of the board changed (its task or its
/// execution); the payload is the task id, as text. Only a hint: whoever
/// listens reads the card again, and reads the whole board after a gap
/// (a reconnect of its live connection).
pub fn board_live(board_id: &uuid::Uuid) -> String {
    format!("{BOARD_LIVE_PREFIX}{board_id}")
}

/// Header of a live feed message: the seq of its first frame.
pub const LIVE_FIRST_SEQ: &str = "Kandev-First-Seq";
/// Header of a live feed message: the seq of its last frame.
pub const LIVE_LAST_SEQ: &str = "Kandev-Last-Seq";

/// A JetStream stream: its name and the subjects it captures.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    pub name: &'static str,
    pub subjects: &'static [&'static str],
}

/// Every stream Kandev publishes into. Creating them is idempotent.
pub const STREAMS: &[StreamSpec] = &[
    StreamSpec {
        name: "KANDEV_TASKS",
        subjects: &["task.>"],
    },
    StreamSpec {
        name: "KANDEV_AGENTS",
        subjects: &["agent.>"],
    },
    StreamSpec {
        name: "KANDEV_ACP",
        subjects: &["acp.message.>"],
    },
];

/// Whether `subject` matches the NATS pattern `pattern` (`*` is one token,
/// a final `>` one or more).
pub fn matches(pattern: &str, subject: &str) -> bool {
    let mut subject = subject.split('.');
    for p in pattern.split('.') {
        match (p, subject.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (p, Some(s)) if p == s => {}
            _ => return false,
        }
    }
    subject.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_like_nats() {
        assert!(matches("acp.message.>", "acp.message.abc"));
        assert!(!matches("acp.message.>", "acp.message"));
        assert!(matches("task.*", "task.created"));
        assert!(!matches("task.*", "task.created.x"));
        assert!(matches("agent.started", "agent.started"));
        assert!(!matches("agent.started", "agent.stopped"));
    }
}
