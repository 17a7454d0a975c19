//! Riding out a Docker engine that goes away mid-turn, and telling why an
//! agent's output ended.

use std::{sync::Arc, time::Duration};

use kandev_acp::AcpClient;

use super::{
    Failure, Interruption, RunHandle, Shared, Slots, TurnResult, TurnSpec, failed, lock,
    pipeline::Pipeline, turn,
};
use crate::docker::{ContainerState, Docker};

/// How long an engine that stopped an agent's container may take to go
/// away before the stop counts as someone else's: an engine shutting down
/// stops its containers first (each within its stop timeout), then exits.
const ENGINE_SHUTDOWN_WINDOW: Duration = Duration::from_secs(15);

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

/// Why the agent's output ended before the turn did: an engine that went
/// away, broke off the output or stopped the container on its way down is
/// not the agent's fault and may be survived; a container stopped by
/// someone else is said so; otherwise the agent exited or closed its
/// output. `since` (unix seconds) bounds the search for who stopped it.
/// `exited_before`: the container had exited before this run attached (the
/// manager was down), so who stopped it is not known beyond the signal.
pub(super) async fn output_ended(
    docker: &Docker,
    id: &str,
    slots: &Slots,
    during: &str,
    since: i64,
    exited_before: bool,
) -> Interruption {
    let engine_lost = |error: String| Interruption::EngineLost {
        during: during.to_string(),
        error,
    };
    if let Some(error) = lock(&slots.output_error).clone() {
        return engine_lost(error);
    }
    let code = tokio::time::timeout(Duration::from_secs(10), docker.wait_exit(id))
        .await
        .ok()
        .flatten();
    if code.is_none()
        && let Err(e) = docker.state(id).await
        && e.is_unreachable()
    {
        return engine_lost(e.to_string());
    }
    match docker.last_kill_signal(id, since).await {
        Err(e) if e.is_unreachable() => return engine_lost(e.to_string()),
        Ok(Some(signal)) if exited_before => {
            return Failure::Failed {
                error: format!(
                    "the agent's container was stopped (signal {signal}) during {during}"
                ),
                exit_code: code,
                retryable: true,
            }
            .into();
        }
        Ok(Some(signal)) => {
            if docker.goes_away(ENGINE_SHUTDOWN_WINDOW).await {
                return engine_lost(format!(
                    "the engine stopped the agent (signal {signal}) and went away"
                ));
            }
            return Failure::Failed {
                error: format!(
                    "the agent's container was stopped from outside Kandev (signal {signal}) during {during}"
                ),
                exit_code: code,
                retryable: true,
            }
            .into();
        }
        Ok(None) | Err(_) => {}
    }
    Failure::Failed {
        error: match code {
            Some(code) => format!("the agent exited with code {code} during {during}"),
            None => format!("the agent closed its output during {during}"),
        },
        exit_code: code,
        retryable: true,
    }
    .into()
}

/// Ends a client whose agent's engine went away: once it is shut down and
/// its last events are queued, the turn state says where a re-attached
/// client goes on.
pub(super) async fn abandon(
    client: &AcpClient,
    handle: &RunHandle,
    drain: tokio::task::JoinHandle<()>,
    interruption: Interruption,
) -> Interruption {
    if matches!(interruption, Interruption::EngineLost { .. }) {
        *lock(&handle.client) = None;
        lock(&handle.asks).clear();
        client.shutdown().await;
        let _ = drain.await;
    }
    interruption
}
