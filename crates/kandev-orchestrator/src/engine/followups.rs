//! Follow-ups sent while a task's run is busy with a turn (issue 40).
//!
//! A follow-up for a launching or running run, from the run's own user (a
//! run carries its user's secrets: anyone else's is refused, as before), is
//! held in `pending_prompts` instead of going to the agent. It shows in
//! `GET .../pending-prompts`, can be edited or cancelled, and survives a
//! page reload or a restart of the orchestrator. When the turn ends (the
//! run's `agent.completed`, a cancelled turn included) the held follow-ups
//! of the run's user go to the agent together, as one prompt in the same
//! session, in the order they came; the task stays IN_PROGRESS instead of
//! finishing in between. A run that fails (for good) or is stopped keeps
//! them: the next run its user starts sends them first. At most
//! [`MAX_HELD_PROMPTS`] and [`MAX_HELD_BYTES`] per task; beyond that the
//! follow-up is refused (HTTP 429) and nothing held is lost.

use uuid::Uuid;

pub use super::store::PendingPrompt;
use super::{Engine, Execution, is_person};
use crate::domain::{OrchestratorError, Result};

/// The most follow-ups a task holds while its turn runs.
pub const MAX_HELD_PROMPTS: usize = 16;
/// The most bytes of follow-ups a task holds while its turn runs.
pub const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;
/// The longest follow-up (the gateway's default body limit).
pub const MAX_PROMPT_BYTES: usize = 1024 * 1024;

/// Held follow-ups as the one prompt they are sent as.
fn joined(held: &[PendingPrompt]) -> String {
    held.iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A held follow-up as gRPC carries it.
pub fn pending_to_proto(p: &PendingPrompt) -> kandev_proto::v1::PendingPrompt {
    kandev_proto::v1::PendingPrompt {
        id: p.id.to_string(),
        task_id: p.task_id.to_string(),
        text: p.text.clone(),
        author: p.author.clone(),
        queued_at: Some(kandev_proto::time::from_chrono(p.queued_at)),
    }
}

/// The id of a held follow-up, as a caller sends it.
pub fn parse_prompt_id(raw: &str) -> Result<Uuid> {
    Uuid::parse_str(raw)
        .map_err(|_| OrchestratorError::BadRequest(format!("prompt id {raw:?} is not a UUID")))
}

/// The prompt that carries `held` follow-ups, then `prompt`.
pub(super) fn with_held(held: &[PendingPrompt], prompt: Option<String>) -> Option<String> {
    if held.is_empty() {
        return prompt;
    }
    let held = joined(held);
    Some(match prompt {
        Some(p) => format!("{held}\n\n{p}"),
        None => held,
    })
}

/// A follow-up's text as it may be held: not blank, not too long.
fn checked(text: &str) -> Result<&str> {
    if text.trim().is_empty() {
        return Err(OrchestratorError::Validation(
            "the prompt must not be empty".into(),
        ));
    }
    if text.len() > MAX_PROMPT_BYTES {
        return Err(OrchestratorError::Validation(format!(
            "a prompt may be at most {MAX_PROMPT_BYTES} bytes"
        )));
    }
    Ok(text)
}

impl Engine {
    /// Holds `text` until the turn of `exec` (launching or running) ends,
    /// as a follow-up of `actor` (the run's user; the caller checked that
    /// no one else sends it). Under the lock.
    pub(super) async fn hold_follow_up(
        &self,
        exec: &Execution,
        actor: &str,
        text: &str,
    ) -> Result<PendingPrompt> {
        let text = checked(text)?;
        let task_id = exec.task_id;
        let held = self.store.pending_prompts(task_id).await?;
        let bytes: usize = held.iter().map(|p| p.text.len()).sum();
        if held.len() >= MAX_HELD_PROMPTS || bytes + text.len() > MAX_HELD_BYTES {
            let n = held.len();
            return Err(OrchestratorError::Full(format!(
                "this run already has {n} follow-up{} waiting; wait for the turn to end",
                if n == 1 { "" } else { "s" }
            )));
        }
        let author = if is_person(actor) {
            actor
        } else {
            exec.run_as.as_str()
        };
        let pending = self.store.hold_prompt(task_id, author, text).await?;
        tracing::info!(%task_id, id = %pending.id, author, waiting = held.len() + 1,
            "follow-up held until the turn ends");
        Ok(pending)
    }

    /// The turn of `exec` ended (its state is `completed` now): the
    /// follow-ups held for its user go to the agent as the next turn, in
    /// the same session; whether they went. When they cannot go (the agent
    /// manager refuses), they stay held and the run finishes as any other
    /// does. Under the lock.
    pub(super) async fn send_held(&self, exec: &Execution) -> bool {
        let task_id = exec.task_id;
        let held = match self.store.pending_prompts(task_id).await {
            Ok(held) => held,
            Err(err) => {
                tracing::warn!(%task_id, %err, "cannot read the held follow-ups");
                return false;
            }
        };
        if !held.iter().any(|p| p.author == exec.run_as) {
            return false;
        }
        // The follow-up path takes them (and forgets them once sent).
        match self
            .follow_up_completed(exec.clone(), None, &exec.run_as)
            .await
        {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(%task_id, %err, "the held follow-ups could not be sent; they stay held");
                false
            }
        }
    }

    /// The follow-ups `run_as` left held for the task, in order: they go
    /// first in the next prompt of a run of theirs (see [`with_held`]).
    pub(super) async fn held_for(&self, task_id: Uuid, run_as: &str) -> Result<Vec<PendingPrompt>> {
        Ok(self
            .store
            .pending_prompts(task_id)
            .await?
            .into_iter()
            .filter(|p| p.author == run_as)
            .collect())
    }

    /// Held follow-ups that went to the agent (or into the queue entry of
    /// a run) are held no more.
    pub(super) async fn forget_held(&self, task_id: Uuid, sent: &[PendingPrompt]) {
        if !sent.is_empty() {
            tracing::info!(%task_id, sent = sent.len(), "held follow-ups sent");
        }
        for p in sent {
            if let Err(err) = self.store.drop_pending_prompt(task_id, p.id).await {
                tracing::warn!(%task_id, id = %p.id, %err, "cannot forget a sent follow-up");
            }
        }
    }

    /// The held follow-up `id` of the task, for its author (or a caller
    /// without a person) to change: not found when it is not held (sent,
    /// or cancelled), refused for anyone else.
    async fn own_held(&self, task_id: Uuid, id: Uuid, actor: &str) -> Result<PendingPrompt> {
        let held = self
            .store
            .pending_prompts(task_id)
            .await?
            .into_iter()
            .find(|p| p.id == id)
            .ok_or_else(|| {
                OrchestratorError::NotFound(format!(
                    "no follow-up {id} is waiting: it was sent, or cancelled"
                ))
            })?;
        if is_person(actor) && held.author != actor {
            return Err(OrchestratorError::FailedPrecondition(format!(
                "this follow-up is {}'s; only they can change it",
                held.author
            )));
        }
        Ok(held)
    }

    /// Replaces the text of a held follow-up before it goes.
    pub(super) async fn edit_held(
        &self,
        task_id: Uuid,
        id: Uuid,
        text: &str,
        actor: &str,
    ) -> Result<PendingPrompt> {
        let text = checked(text)?;
        let _guard = self.lock.lock().await?;
        let held = self.own_held(task_id, id, actor).await?;
        let others: usize = self
            .store
            .pending_prompts(task_id)
            .await?
            .iter()
            .filter(|p| p.id != id)
            .map(|p| p.text.len())
            .sum();
        if others + text.len() > MAX_HELD_BYTES {
            return Err(OrchestratorError::Full(format!(
                "the follow-ups waiting may hold at most {MAX_HELD_BYTES} bytes"
            )));
        }
        self.store
            .edit_pending_prompt(task_id, held.id, text)
            .await?
            .ok_or_else(|| OrchestratorError::NotFound(format!("no follow-up {id} is waiting")))
    }

    /// Cancels a held follow-up: it is never sent.
    pub(super) async fn cancel_held(&self, task_id: Uuid, id: Uuid, actor: &str) -> Result<()> {
        let _guard = self.lock.lock().await?;
        let held = self.own_held(task_id, id, actor).await?;
        self.store.drop_pending_prompt(task_id, held.id).await?;
        tracing::info!(%task_id, %id, "held follow-up cancelled");
        Ok(())
    }

    /// The task's held follow-ups, in the order they came.
    pub(super) async fn held(&self, task_id: Uuid) -> Result<Vec<PendingPrompt>> {
        Ok(self.store.pending_prompts(task_id).await?)
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn held(text: &str) -> PendingPrompt {
        PendingPrompt {
            id: Uuid::now_v7(),
            task_id: Uuid::nil(),
            text: text.into(),
            author: "alice".into(),
            queued_at: Utc::now(),
        }
    }

    #[test]
    fn held_follow_ups_go_as_one_prompt_in_order() {
        assert_eq!(joined(&[held("first"), held("second")]), "first\n\nsecond");
        assert_eq!(joined(&[held("only")]), "only");
        assert_eq!(
            with_held(&[held("a")], Some("b".into())).as_deref(),
            Some("a\n\nb")
        );
        assert_eq!(with_held(&[], Some("b".into())).as_deref(), Some("b"));
        assert_eq!(with_held(&[], None), None);
    }

    #[test]
    fn a_blank_or_huge_follow_up_is_refused() {
        assert!(checked("  \n").is_err());
        assert!(checked(&"x".repeat(MAX_PROMPT_BYTES + 1)).is_err());
        assert_eq!(checked("go on").unwrap(), "go on");
    }
}
