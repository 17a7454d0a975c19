//! Many tasks' executions in one go: what a board shows on its cards.

use std::collections::HashMap;

use uuid::Uuid;

use super::{Engine, Execution};
use crate::domain::{ExecState, ExecutionView, Result};

/// At most this many tasks per call.
pub const MAX_TASKS: usize = 1000;

impl Engine {
    /// The executions of `task_ids` (idle views for tasks never run), in
    /// three queries whatever their number: the rows, the queue positions
    /// and the stored feed positions. Read without the engine's lock, as
    /// `get_execution` is.
    pub(crate) async fn executions_of(&self, task_ids: &[Uuid]) -> Result<Vec<ExecutionView>> {
        let rows = self.store.get_many(task_ids).await?;
        let positions = self.store.queue_positions().await?;
        let seqs = self.store.last_seqs(task_ids).await?;
        let mut rows: HashMap<Uuid, Execution> = rows.into_iter().map(|e| (e.task_id, e)).collect();
        Ok(task_ids
            .iter()
            .map(|&task_id| {
                let stored = seqs.get(&task_id).copied().unwrap_or(0);
                let last_seq = stored.max(self.hub.pending_last_seq(task_id).unwrap_or(0));
                match rows.remove(&task_id) {
                    Some(exec) => {
                        let position = if exec.state() == ExecState::Queued {
                            positions.get(&task_id).map_or(0, |p| *p as i32)
                        } else {
                            0
                        };
                        self.view_of(exec, last_seq, position)
                    }
                    None => ExecutionView::idle(task_id, last_seq),
                }
            })
            .collect())
    }

    /// The view of a task's execution, `queue_position` in the queue (0:
    /// not queued), its feed at `last_seq`.
    pub(super) fn view_of(
        &self,
        exec: Execution,
        last_seq: i64,
        queue_position: i32,
    ) -> ExecutionView {
        ExecutionView {
            task_id: exec.task_id,
            state: exec.state(),
            instance_id: exec.instance_id,
            attempts: exec.attempts,
            queue_position,
            last_error: exec.last_error,
            acp_session_id: exec.acp_session_id,
            updated_at: exec.updated_at,
            last_seq,
            agent_manager_url: self
                .agents
                .manager_url(&exec.manager_id)
                .unwrap_or_default(),
            run_as: exec.run_as,
        }
    }
}
