//! The agent's own session mode, as the type's permission policy wants it.
//!
//! Under `ask`, a person answers the agent's questions, so the agent must
//! ask: an agent that offers a mode that asks before it edits (Claude
//! Code's `default`, Codex's `read-only`) but starts in another is switched
//! to it. Claude Code's adapter starts in `auto`, where its own classifier
//! decides; Codex's in `agent`, which edits the workspace unasked.

use kandev_acp::{AcpClient, SessionInfo};
use serde_json::Value;

use crate::domain::{AgentType, PermissionPolicyKind};

/// The modes that ask before an edit, as the agents name them, in order
/// of preference.
const ASKING_MODES: &[&str] = &["default", "read-only"];

/// The mode to switch the session to, if any: the first of
/// [`ASKING_MODES`] the agent offers, when the policy is `ask` and the
/// session is in none of them.
pub fn asking_mode(policy: PermissionPolicyKind, session: &Value) -> Option<&'static str> {
    if policy != PermissionPolicyKind::Ask {
        return None;
    }
    let modes = session.get("modes")?;
    let current = modes.get("currentModeId")?.as_str()?;
    if ASKING_MODES.contains(&current) {
        return None;
    }
    let offered: Vec<&str> = modes
        .get("availableModes")?
        .as_array()?
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .collect();
    ASKING_MODES.iter().copied().find(|m| offered.contains(m))
}

/// Switches the session to the mode the policy wants; a refusal is logged
/// and the turn goes on in the agent's own mode.
pub async fn apply(client: &AcpClient, agent_type: &AgentType, session: &SessionInfo) {
    let Some(mode) = asking_mode(agent_type.permission_policy, &session.raw) else {
        return;
    };
    match client.set_mode(mode).await {
        Ok(()) => tracing::info!(mode, "switched the session to the mode that asks"),
        Err(e) => tracing::warn!(mode, error = %e, "the agent refused the mode that asks"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn session(current: &str) -> Value {
        json!({"sessionId": "s", "modes": {"currentModeId": current, "availableModes": [
            {"id": "auto", "name": "Auto"}, {"id": "default", "name": "Manual"},
            {"id": "bypassPermissions", "name": "Bypass"}]}})
    }

    #[test]
    fn ask_switches_to_the_mode_that_asks_only_when_offered_and_not_current() {
        assert_eq!(
            asking_mode(PermissionPolicyKind::Ask, &session("auto")),
            Some("default")
        );
        assert_eq!(
            asking_mode(PermissionPolicyKind::Ask, &session("default")),
            None
        );
        assert_eq!(
            asking_mode(PermissionPolicyKind::AutoApprove, &session("auto")),
            None
        );
        assert_eq!(
            asking_mode(PermissionPolicyKind::Deny, &session("auto")),
            None
        );
        let codex = json!({"modes": {"currentModeId": "agent", "availableModes": [
            {"id": "read-only"}, {"id": "workspace-write"}, {"id": "agent"}, {"id": "agent-full-access"}]}});
        assert_eq!(
            asking_mode(PermissionPolicyKind::Ask, &codex),
            Some("read-only")
        );
        let without =
            json!({"modes": {"currentModeId": "code", "availableModes": [{"id": "code"}]}});
        assert_eq!(asking_mode(PermissionPolicyKind::Ask, &without), None);
        assert_eq!(asking_mode(PermissionPolicyKind::Ask, &json!({})), None);
    }
}
