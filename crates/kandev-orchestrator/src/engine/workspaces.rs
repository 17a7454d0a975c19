//! The lifecycle of task clones: removed when their task is deleted, after
//! an approval has pushed their branch (Kandev's own repository of the
//! task stays until the retention, so the approved change can still be
//! read), and when a finished task's run ended longer ago than the
//! retention, whether it ran here or was launched directly; never while the
//! task can resume.

use kandev_events::TaskState;
use uuid::Uuid;

use super::{Engine, task_state};
use crate::domain::{OrchestratorError, Result};

/// Finished runs looked at per sweep.
const SWEEP_BATCH: i64 = 100;

impl Engine {
    /// Removes the task's clone, logging (not failing) when the agent
    /// manager cannot.
    pub(super) async fn remove_workspace(&self, task_id: Uuid, why: &str) -> bool {
        match self
            .agents
            .remove_workspace(&task_id.to_string(), false)
            .await
        {
            Ok(removed) => {
                if removed {
                    tracing::info!(%task_id, why, "task workspace removed");
                }
                self.store
                    .workspace_removed(task_id)
                    .await
                    .map_err(|err| tracing::warn!(%task_id, %err, "cannot record the removal"))
                    .is_ok()
            }
            Err(status) => {
                tracing::warn!(%task_id, why, msg = status.message(), "cannot remove the task's workspace");
                false
            }
        }
    }

    /// After a delivery: the agent's clone goes, Kandev's repository of the
    /// task stays, so the task's Changes still show the approved change.
    /// The run is not marked removed: the retention sweep removes the rest
    /// as it removes any finished task's clone.
    pub(super) async fn remove_delivered_clone(&self, task_id: Uuid) {
        match self
            .agents
            .remove_workspace(&task_id.to_string(), true)
            .await
        {
            Ok(removed) => {
                if removed {
                    tracing::info!(%task_id, "delivered: the task's clone removed, its repository kept");
                }
            }
            Err(status) => {
                tracing::warn!(%task_id, msg = status.message(), "cannot remove the delivered task's clone");
            }
        }
    }

    /// Removes the clones of finished tasks whose run ended more than the
    /// retention ago, directly launched runs included. A task that can
    /// still resume keeps its clone.
    pub async fn sweep_workspaces(&self) -> Result<usize> {
        let retention = i64::try_from(self.settings.workspace_retention_secs).unwrap_or(i64::MAX);
        let retention = retention as f64;
        let mut removed = 0;
        for task_id in self.store.clones_due(retention, SWEEP_BATCH).await? {
            if self.is_finished(task_id).await? && self.remove_workspace(task_id, "retention").await
            {
                removed += 1;
            }
        }
        for task_id in self.store.direct_clones_due(retention, SWEEP_BATCH).await? {
            if self.is_finished(task_id).await? && self.remove_workspace(task_id, "retention").await
            {
                self.store.forget_direct_clone(task_id).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Whether the task is finished (completed, cancelled, failed) or gone.
    async fn is_finished(&self, task_id: Uuid) -> Result<bool> {
        match self.get_task(task_id).await {
            Ok(task) => Ok(matches!(
                task_state(&task)?,
                TaskState::Completed | TaskState::Cancelled | TaskState::Failed
            )),
            Err(OrchestratorError::Upstream { status, .. })
                if status.code() == tonic::Code::NotFound =>
            {
                Ok(true)
            }
            Err(err) => Err(err),
        }
    }
}
