//! Many tasks' executions in one go: what a board shows on its cards.

use std::collections::HashMap;

use uuid::Uuid;

use super::{Engine, Execution, SELECT_EXEC};
use crate::domain::{ExecState, ExecutionView, Result};

/// At most this many tasks per call.
pub const MAX_TASKS: usize = 1000;

impl Engine {
    /// The executions of `task_ids` (idle views for tasks never run), in
    /// three queries whatever their number: the rows, the queue positions
    /// and the stored feed positions. Read without the engine's lock, as
    /// `get_execution` is.
    pub(crate) async fn executions_of(&self, task_ids: &[Uuid]) -> Result<Vec<ExecutionView>> {
        let rows: Vec<Execution> =
            sqlx::query_as(&format!("{SELECT_EXEC} WHERE task_id = ANY($1)"))
                .bind(task_ids)
                .fetch_all(&self.pool)
                .await?;
        let queued: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT task_id, row_number() OVER (ORDER BY priority DESC, queue_order)
               FROM executions WHERE state = 'queued'",
        )
        .fetch_all(&self.pool)
        .await?;
        let positions: HashMap<Uuid, i64> = queued.into_iter().collect();
        let seqs: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT task_id, max(last_seq) FROM feed_chunks WHERE task_id = ANY($1)
              GROUP BY task_id",
        )
        .bind(task_ids)
        .fetch_all(&self.pool)
        .await?;
        let seqs: HashMap<Uuid, i64> = seqs.into_iter().collect();
        let mut rows: HashMap<Uuid, Execution> = rows.into_iter().map(|e| (e.task_id, e)).collect();
        Ok(task_ids
            .iter()
            .map(|&task_id| {
                let stored = seqs.get(&task_id).copied().unwrap_or(0);
                let last_seq = stored.max(self.hub.pending_last_seq(task_id).unwrap_or(0));
                match rows.remove(&task_id) {
                    Some(exec) => ExecutionView {
                        task_id,
                        state: exec.state(),
                        instance_id: exec.instance_id,
                        attempts: exec.attempts,
                        queue_position: if exec.state() == ExecState::Queued {
                            positions.get(&task_id).map_or(0, |p| *p as i32)
                        } else {
                            0
                        },
                        last_error: exec.last_error,
                        acp_session_id: exec.acp_session_id,
                        updated_at: exec.updated_at,
                        last_seq,
                    },
                    None => ExecutionView::idle(task_id, last_seq),
                }
            })
            .collect())
    }
}
