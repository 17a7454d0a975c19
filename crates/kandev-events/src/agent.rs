//! Payloads of `agent.*` lifecycle events and of `acp.message.<task_id>`.
//!
//! Event ids are derived, not random: the same message or lifecycle step
//! republished after a crash carries the same id, so JetStream's duplicate
//! window and every consumer drop the copy.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// Namespace of derived event ids.
const ID_NAMESPACE: Uuid = Uuid::from_u128(0x6b61_6e64_6576_4556_454e_5453_0000_0001);

/// `acp.message.<task_id>`: one normalized ACP event of one agent instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcpMessage {
    pub task_id: Uuid,
    pub instance_id: Uuid,
    /// The event's `seq`: per instance, from 1, contiguous.
    pub instance_seq: u64,
    /// The event as `kandev_acp::AcpEvent` serializes it: `seq`, `timestamp`,
    /// `direction`, `session_id`, `kind`, `data`, `raw`.
    pub event: Value,
}

impl AcpMessage {
    /// The envelope id: one per (instance, seq), stable across republishing.
    pub fn event_id(&self) -> Uuid {
        derived_id(&self.instance_id, &format!("acp:{}", self.instance_seq))
    }
}

/// The state an `agent.*` event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEventKind {
    Started,
    Running,
    Completed,
    Failed,
    Stopped,
}

impl AgentEventKind {
    /// The subject this kind is published on.
    pub fn subject(self) -> &'static str {
        use crate::subjects::*;
        match self {
            AgentEventKind::Started => AGENT_STARTED,
            AgentEventKind::Running => AGENT_RUNNING,
            AgentEventKind::Completed => AGENT_COMPLETED,
            AgentEventKind::Failed => AGENT_FAILED,
            AgentEventKind::Stopped => AGENT_STOPPED,
        }
    }
}

/// `agent.started`, `agent.running`, `agent.completed`, `agent.failed` and
/// `agent.stopped` all carry this payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentLifecycle {
    pub kind: AgentEventKind,
    pub task_id: Uuid,
    pub instance_id: Uuid,
    pub agent_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// The ACP session, once the agent created or loaded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_session_id: Option<String>,
    /// For `completed`: the prompt turn's stop reason (`end_turn`, `cancelled`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// For `completed`: the agent's final message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// For `failed`: what went wrong, readable by a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// The last `instance_seq` published for this instance before this event.
    #[serde(default)]
    pub last_seq: u64,
    pub at: DateTime<Utc>,
}

impl AgentLifecycle {
    /// The envelope id: one per (instance, kind, turn), stable across
    /// republishing. `turn` tells apart the completions of follow-up turns.
    pub fn event_id(&self, turn: u64) -> Uuid {
        derived_id(
            &self.instance_id,
            &format!("{}:{turn}", self.kind.subject()),
        )
    }
}

fn derived_id(instance: &Uuid, what: &str) -> Uuid {
    let mut name = instance.as_bytes().to_vec();
    name.extend_from_slice(what.as_bytes());
    Uuid::new_v5(&ID_NAMESPACE, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let msg = |seq| AcpMessage {
            task_id: Uuid::nil(),
            instance_id: Uuid::from_u128(7),
            instance_seq: seq,
            event: Value::Null,
        };
        assert_eq!(msg(1).event_id(), msg(1).event_id());
        assert_ne!(msg(1).event_id(), msg(2).event_id());
    }
}
