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

/// The prefix of per-task ACP message subjects.
pub const ACP_MESSAGE_PREFIX: &str = "acp.message.";

/// `acp.message.<task_id>`.
pub fn acp_message(task_id: &uuid::Uuid) -> String {
    format!("{ACP_MESSAGE_PREFIX}{task_id}")
}

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
