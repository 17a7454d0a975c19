//! Why a turn was interrupted, and giving its client up: what a turn
//! that lost its agent's output decides before it ends or is recovered.

use std::time::Duration;

use kandev_acp::AcpClient;

use super::{Failure, Interruption, RunHandle, Slots, lock};
use crate::docker::Docker;

/// How long an engine that stopped an agent's container may take to go
/// away before the stop counts as someone else's: an engine shutting down
/// stops its containers first (each within its stop timeout), then exits.
const ENGINE_SHUTDOWN_WINDOW: Duration = Duration::from_secs(15);

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
