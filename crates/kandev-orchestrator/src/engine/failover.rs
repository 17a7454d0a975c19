//! Runs on a pool of agent managers (see `crate::pool`): when a manager
//! has not been heard from for the grace, its runs go back to the queue and
//! launch on another, and its instances are fenced off (their messages are
//! dropped from the feed, their events ignored). A manager that comes back
//! is told to stop the instances whose runs moved.

use super::Engine;
use crate::domain::Result;

impl Engine {
    /// Moves the runs of gone managers, then stops moved instances on
    /// managers that were just heard (again); part of the scheduler tick.
    pub(super) async fn failover(&self) -> Result<()> {
        for exec in self.store.placed_runs().await? {
            if !self.agents.manager_gone(&exec.manager_id) {
                continue;
            }
            tracing::warn!(task_id = %exec.task_id, manager = %exec.manager_id,
                instance = ?exec.instance_id, "the run's agent manager is gone; moving the run");
            self.store.move_run(&exec).await?;
            if let Some(instance) = exec.instance_id {
                self.fence.insert(instance);
            }
            metrics::counter!(crate::metric_names::RUNS_MOVED).increment(1);
        }
        for manager in self.agents.take_to_reconcile() {
            let instances = match self.agents.active_on(&manager).await {
                Ok(list) => list,
                Err(status) => {
                    tracing::warn!(%manager, %status, "cannot list a returning manager's instances");
                    continue;
                }
            };
            for instance in instances {
                let Ok(id) = uuid::Uuid::parse_str(&instance.id) else {
                    continue;
                };
                if !self.store.is_moved(id).await? {
                    continue;
                }
                tracing::info!(%manager, instance = %id, "stopping an instance whose run moved");
                if let Err(status) = self
                    .agents
                    .stop(&instance.id, "its run moved to another agent manager")
                    .await
                {
                    tracing::warn!(%manager, instance = %id, %status, "cannot stop a moved instance");
                }
            }
        }
        Ok(())
    }
}
