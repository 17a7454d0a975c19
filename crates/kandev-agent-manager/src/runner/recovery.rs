//! Riding out a Docker engine that goes away mid-turn, and telling why an
//! agent's output ended.

use std::{sync::Arc, time::Duration};

use super::{
    Failure, Interruption, RunHandle, Shared, Slots, TurnResult, TurnSpec, failed, lock,
    pipeline::Pipeline, turn,
};
use crate::docker::ContainerState;

/// Drives the turn to its end. When the Docker engine goes away mid-turn
/// (a restart, a crash), waits up to `engine_grace_secs` for it to answer
/// again: an agent that survived (the engine's live restore) is
/// re-attached and its stream goes on from the last queued event; one the
/// restart stopped or removed ends the turn `failed`, saying so.
pub(super) async fn drive_until_done(
    shared: &Shared,
    mut spec: TurnSpec,
    handle: &Arc<RunHandle>,
    slots: &Arc<Slots>,
    pipeline: &Pipeline,
) -> Result<TurnResult, Failure> {
    loop {
        *lock(&slots.output_error) = None;
        let attempt = match spec.reattach.clone() {
            Some(id) => turn::resume(shared, &spec, &id, handle, slots, pipeline).await,
            None => turn::start_fresh(shared, &spec, handle, slots, pipeline).await,
        };
        let (during, error) = match attempt {
            Ok(turn) => return Ok(turn),
            Err(Interruption::Failure(failure)) => return Err(failure),
            Err(Interruption::EngineLost { during, error }) => (during, error),
        };
        let Some(id) = lock(&slots.container).clone() else {
            return Err(failed(format!("{during}: {error}")));
        };
        let grace = Duration::from_secs(shared.settings.engine_grace_secs);
        tracing::warn!(instance = %spec.instance.id, container = %id, %error, "lost the Docker engine during {during}; waiting {} s for it", grace.as_secs());
        if let Err(last) = shared.docker.wait_reachable(grace).await {
            return Err(failed(format!(
                "the Docker engine went away during {during} and did not answer again within {} s ({last})",
                grace.as_secs()
            )));
        }
        let session = lock(&pipeline.state).session_id.clone();
        let restarted = format!("the Docker engine restarted during {during}");
        match shared.docker.state(&id).await {
            Ok(ContainerState::Running) if !session.is_empty() => {}
            Ok(ContainerState::Running) => {
                return Err(failed(format!(
                    "{restarted}, before the ACP session was set up"
                )));
            }
            Ok(ContainerState::Exited(code)) => {
                let code_text = code
                    .map(|c| format!(" (exit code {c})"))
                    .unwrap_or_default();
                return Err(Failure::Failed {
                    error: format!("{restarted} and stopped the agent{code_text}"),
                    exit_code: code,
                    retryable: true,
                });
            }
            Ok(ContainerState::Missing) => {
                return Err(failed(format!(
                    "{restarted} and the agent's container is gone"
                )));
            }
            Err(e) => return Err(failed(format!("{restarted}: {e}"))),
        }
        // The agent survived the restart: re-attach and read its output
        // from the last line the earlier client consumed, numbering on.
        let (queued_seq, queued_cursor) = {
            let s = lock(&pipeline.state);
            (s.queued_seq, s.queued_cursor)
        };
        tracing::info!(instance = %spec.instance.id, container = %id, "the Docker engine is back and the agent still runs; re-attaching");
        spec.instance.last_seq = i64::try_from(queued_seq).unwrap_or(i64::MAX);
        spec.instance.cursor = queued_cursor;
        spec.instance.sync_event = None;
        spec.instance.acp_session_id = session;
        spec.instance.container_id.clone_from(&id);
        spec.reattach = Some(id);
    }
}
