//! What a launch does after it has answered: the clone of the task's
//! repository and the build of the agent's image, side by side, then the
//! first turn. The build's progress is published as `agent.preparing`, so
//! the card and the feed say "preparing the agent image".
//!
//! A failure ends the instance with `agent.failed`, whose `retryable`
//! says whether running again may succeed ([`AgentError::retryable`]): a
//! local repository gone or without the branch is not
//! ([`crate::preflight::explain_failed_clone`]); a remote that did not
//! answer, or a failed image build, may be.

use std::time::{Duration, Instant};

use kandev_events::agent::AgentEventKind;

use super::{AgentManager, NextTurn};
use crate::{
    domain::{AgentError, AgentInstance, AgentType},
    images::Progress,
    runner,
    workspace::{Prepared, PreparedWorkspace},
};

/// The fewest seconds between two published build steps.
const STEP_EVERY: Duration = Duration::from_secs(2);

/// What is left to prepare, and the first turn once it is.
#[derive(Debug)]
pub(super) struct Work {
    pub workspace: Prepared,
    /// The agent's image is built from its recipe first.
    pub build_image: bool,
    pub turn: NextTurn,
}

impl AgentManager {
    /// Runs a launch's clone and image build, then its first turn; a
    /// failure ends the instance `failed` with `agent.failed`. An instance
    /// stopped meanwhile stays stopped.
    pub(super) async fn prepare_then_start(&self, instance: AgentInstance, work: Work) {
        let image = async {
            if work.build_image {
                self.build_image(&instance, &work.turn.agent_type).await
            } else {
                Ok(())
            }
        };
        let (image, workspace) = tokio::join!(image, self.workspace_of(work.workspace));
        let ready = match image.and(workspace) {
            Ok(ready) => ready,
            Err(err) => {
                let retryable = err.retryable();
                tracing::warn!(error = %err, retryable, "preparing the launch failed");
                self.fail_early(&instance, &err).await;
                return;
            }
        };
        if let Err(err) = self.set_workspace(&instance, &ready).await {
            self.fail_early(&instance, &err).await;
            return;
        }
        match self.store().get_instance(instance.id).await {
            Ok(now) if now.status.is_terminal() => {
                tracing::info!(status = ?now.status, "ended while preparing; not started");
                return;
            }
            _ => {}
        }
        if let Err(err) = self
            .start_turn(instance.id, work.turn, ready.host_path)
            .await
        {
            tracing::warn!(error = %err, "cannot start the first turn after preparing");
        }
    }

    /// The workspace, once cloned.
    async fn workspace_of(&self, prepared: Prepared) -> Result<PreparedWorkspace, AgentError> {
        let clone = match prepared {
            Prepared::Ready(ready) => return Ok(ready),
            Prepared::Clone(clone) => clone,
        };
        let started = Instant::now();
        let ready = clone.run().await.inspect_err(|err| {
            tracing::warn!(error = %err, "clone failed");
        })?;
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "cloned");
        metrics::histogram!(crate::metric_names::LAUNCH_PHASE_SECONDS, "phase" => "clone")
            .record(started.elapsed().as_secs_f64());
        Ok(ready)
    }

    /// Builds the type's image (or waits for the build under way),
    /// publishing its progress for the task.
    async fn build_image(
        &self,
        instance: &AgentInstance,
        agent_type: &AgentType,
    ) -> Result<(), AgentError> {
        let image = agent_type.image.clone();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
        let build = self.inner.images.ensure(&image, move |p| {
            let _ = tx.send(p);
        });
        let publish = async {
            let mut last_step = None::<Instant>;
            while let Some(progress) = rx.recv().await {
                let text = match progress {
                    Progress::Started => format!("preparing the agent image {image}"),
                    Progress::Step(step) => {
                        if last_step.is_some_and(|t| t.elapsed() < STEP_EVERY) {
                            continue;
                        }
                        last_step = Some(Instant::now());
                        format!("preparing the agent image {image}: {step}")
                    }
                    Progress::Built { seconds } => {
                        format!("the agent image {image} was built in {seconds:.0} s")
                    }
                };
                self.publish_preparing(instance, text).await;
            }
        };
        let (built, ()) = tokio::join!(build, publish);
        // A failed build is made again by the next launch, which may pass
        // (a package registry back): retried.
        built.map(|_| ()).map_err(AgentError::Unavailable)
    }

    async fn publish_preparing(&self, instance: &AgentInstance, text: String) {
        runner::publish_lifecycle(
            self.inner.shared.bus.as_ref(),
            instance,
            AgentEventKind::Preparing,
            |e| e.summary = Some(text),
        )
        .await;
    }
}
