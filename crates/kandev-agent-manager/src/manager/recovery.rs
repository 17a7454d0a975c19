//! Recovery: bringing containers in line with the database at start and
//! after the Docker engine comes back, watching the engine, and
//! re-attaching to the agents that outlived this process.

use std::time::Duration;

use futures::StreamExt as _;
use kandev_common::CancellationToken;
use kandev_events::agent::AgentEventKind;
use uuid::Uuid;

use super::AgentManager;
use crate::{
    docker::{LABEL_INSTANCE, LABEL_TURN},
    domain::{AgentInstance, InstanceStatus},
    runner::{self, TurnSpec},
    store::Outcome,
};

impl AgentManager {
    /// Brings the agent containers in line with the database; run at
    /// start and each time the Docker engine answers again after it went
    /// away:
    /// - containers of unknown or ended instances, and those of an earlier
    ///   turn, are removed (also those the engine kept while it was away);
    /// - containers whose turn runs in this process are left to it;
    /// - the others, left by an earlier run of the manager, are resumed:
    ///   their output is re-read from the stored log position and
    ///   numbered from the stored `last_seq + 1` (events published after
    ///   the last stored position come again with the same seq and id, so
    ///   JetStream and consumers drop them). A running agent is
    ///   re-attached and its turn goes on; one that exited meanwhile gets
    ///   its final status from what it wrote (the end of its turn, or
    ///   `failed` with its exit code). A container that cannot be resumed
    ///   is removed and its instance ends `failed`;
    /// - active instances of an earlier run without a container end
    ///   `failed`.
    ///
    /// No orphan is left. An engine that does not answer is logged and left
    /// for the next call.
    pub async fn reconcile(&self) {
        let docker = &self.inner.shared.docker;
        let containers = match docker.list_managed(&self.settings().manager_id).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reconcile agent containers now");
                return;
            }
        };
        let mut seen = std::collections::HashSet::new();
        for c in containers {
            let Some(container_id) = c.id.clone() else {
                continue;
            };
            let label = |name: &str| c.labels.as_ref().and_then(|l| l.get(name)).cloned();
            let instance_id = label(LABEL_INSTANCE).and_then(|v| Uuid::parse_str(&v).ok());
            // A run of this process owns its instance's current container;
            // it was registered before the instance is read, so a turn
            // ending meanwhile reads as ended, never as a leftover.
            let owned = instance_id.is_some_and(|id| self.run(id).is_some());
            let instance = match instance_id {
                Some(id) => self.store().get_instance(id).await.ok(),
                None => None,
            };
            // Containers from before the turn label are taken as current.
            let turn = label(LABEL_TURN).and_then(|t| t.parse::<i64>().ok());
            let current = |i: &AgentInstance| turn.is_none_or(|t| t == i.turns);
            let Some(instance) =
                instance.filter(|i| current(i) && (owned || !i.status.is_terminal()))
            else {
                tracing::info!(container = %container_id, "removing the container of an ended, earlier or unknown turn");
                docker.remove(&container_id).await;
                continue;
            };
            seen.insert(instance.id);
            if owned {
                continue;
            }
            match self.reattach(&instance, &container_id).await {
                Reattach::Started | Reattach::Owned => continue,
                Reattach::Impossible => {}
            }
            let running = docker.is_running(&container_id).await == Some(true);
            let exit_code = if running {
                None
            } else {
                docker.exit_code(&container_id).await
            };
            docker.remove(&container_id).await;
            let error = match exit_code {
                Some(code) => {
                    format!("the agent exited with code {code} while the manager was not running")
                }
                None => "the manager restarted during the turn; the agent was stopped".to_string(),
            };
            self.end_failed(&instance, error, exit_code).await;
        }
        let active = match self.store().active_instances().await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "cannot list active instances");
                return;
            }
        };
        for instance in active {
            if !seen.contains(&instance.id)
                && instance.created_at < self.inner.created_at
                && self.run(instance.id).is_none()
            {
                self.end_failed(
                    &instance,
                    "the manager restarted before the agent container was running".into(),
                    None,
                )
                .await;
            }
        }
    }

    /// Watches the Docker engine until `shutdown`: while its event stream
    /// is open the engine runs; when the stream breaks (a restart, a
    /// crash) the manager waits for the engine to answer again, then
    /// reconciles, which removes the containers that could not be removed
    /// while it was away. `reconciled` says whether the start already
    /// reconciled (an engine that was down then is reconciled when it first
    /// answers). Turns survive an engine restart on their own (see
    /// `runner`); this only cleans up.
    pub async fn watch_engine(&self, shutdown: CancellationToken, reconciled: bool) {
        let docker = self.inner.shared.docker.clone();
        let manager_id = self.settings().manager_id.clone();
        let mut reconcile = !reconciled;
        loop {
            let ping = tokio::select! {
                () = shutdown.cancelled() => return,
                ping = docker.ping() => ping,
            };
            if let Err(e) = ping {
                tracing::warn!(error = %e, "the Docker engine does not answer; waiting for it");
                // No deadline: this waits as long as the engine is away.
                let forever = Duration::from_secs(u64::from(u32::MAX));
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = docker.wait_reachable(forever) => {}
                }
                tracing::info!("the Docker engine answers again");
            }
            // The event stream connects while reconciliation runs, so an
            // engine lost in the meantime is noticed too.
            let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<String>();
            let mut events = docker.container_events(&manager_id);
            let watcher = tokio::spawn(async move {
                let reason = loop {
                    match events.next().await {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => break e.to_string(),
                        None => break "the event stream ended".to_string(),
                    }
                };
                let _ = lost_tx.send(reason);
            });
            if reconcile {
                self.reconcile().await;
            }
            reconcile = true;
            tokio::select! {
                () = shutdown.cancelled() => {
                    watcher.abort();
                    return;
                }
                reason = lost_rx => {
                    let reason = reason.unwrap_or_default();
                    tracing::warn!(%reason, "lost the Docker engine's event stream");
                }
            }
        }
    }

    async fn end_failed(&self, instance: &AgentInstance, error: String, exit_code: Option<i64>) {
        let outcome = Outcome {
            error: error.clone(),
            exit_code,
            ..Outcome::default()
        };
        match self
            .store()
            .finish(instance.id, InstanceStatus::Failed, &outcome)
            .await
        {
            Ok(true) => {
                runner::publish_lifecycle(
                    self.inner.shared.bus.as_ref(),
                    instance,
                    AgentEventKind::Failed,
                    |e| {
                        e.error = Some(error);
                        e.exit_code = exit_code;
                    },
                )
                .await;
            }
            Ok(false) => {}
            Err(e) => tracing::error!(error = %e, "cannot store the failure"),
        }
    }

    /// Resumes the turn of `container_id` (running or exited).
    async fn reattach(&self, instance: &AgentInstance, container_id: &str) -> Reattach {
        if instance.workspace_path.is_empty() || instance.acp_session_id.is_empty() {
            return Reattach::Impossible;
        }
        let Ok(agent_type) = self.store().get_type(&instance.agent_type).await else {
            return Reattach::Impossible;
        };
        let Some(handle) = self.register_run(instance.id) else {
            return Reattach::Owned;
        };
        let mut instance = instance.clone();
        instance.container_id = container_id.to_string();
        runner::resume_point(self.inner.shared.bus.as_ref(), &mut instance).await;
        let host_path = std::path::PathBuf::from(&instance.workspace_path);
        // The container exists: its spec only names it.
        let container =
            crate::container::spec(self.settings(), &instance, &agent_type, &host_path, vec![]);
        let spec = TurnSpec {
            instance: instance.clone(),
            agent_type,
            container,
            workspace: host_path,
            prompt: String::new(),
            resume_session: None,
            reattach: Some(container_id.to_string()),
            // A re-attached turn has its session already.
            profile: None,
        };
        self.spawn_turn(&instance, spec, handle);
        Reattach::Started
    }
}

/// What [`AgentManager::reattach`] did.
enum Reattach {
    Started,
    /// A turn of this process owns the instance already.
    Owned,
    /// The instance lacks what resuming needs (its type, workspace or
    /// session).
    Impossible,
}
