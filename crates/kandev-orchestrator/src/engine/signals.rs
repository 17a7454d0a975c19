//! Board signals: a live message on `board.<board_id>` (the task id, as
//! text) each time one of the board's cards may have changed: a `task.*`
//! event (the task itself) or an `agent.*` event (its execution). Gateways
//! listening for an open board read the card again and push it to the
//! browser; nothing is stored, so a gateway that missed some (a NATS
//! reconnect) reads the whole board again.
//!
//! Sending never waits on the engine's decisions: a message goes out on a
//! task of its own, and a task whose board is not known yet (an agent event
//! after a restart) is looked up from the task service first.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use kandev_common::trace::TracedChannel;
use kandev_events::{
    live::{Live, LiveMessage},
    subjects,
};
use kandev_proto::v1::{self as pb, task_service_client::TaskServiceClient};
use uuid::Uuid;

/// Boards remembered, at most (then forgotten all at once: a lookup each
/// costs one `GetTask`).
const MAX_KNOWN: usize = 50_000;

/// Sends the signals; cheap to share behind an `Arc`.
pub struct BoardSignals {
    live: Arc<dyn Live>,
    tasks: TaskServiceClient<TracedChannel>,
    /// Task id -> board id.
    boards: Mutex<HashMap<Uuid, Uuid>>,
}

impl std::fmt::Debug for BoardSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoardSignals").finish_non_exhaustive()
    }
}

impl BoardSignals {
    pub fn new(live: Arc<dyn Live>, tasks: TaskServiceClient<TracedChannel>) -> Arc<Self> {
        Arc::new(BoardSignals {
            live,
            tasks,
            boards: Mutex::new(HashMap::new()),
        })
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Uuid>> {
        self.boards.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The task (on `board_id`) changed.
    pub fn task_changed(self: &Arc<Self>, board_id: Uuid, task_id: Uuid, deleted: bool) {
        {
            let mut known = self.known();
            if deleted {
                known.remove(&task_id);
            } else {
                if known.len() >= MAX_KNOWN {
                    known.clear();
                }
                known.insert(task_id, board_id);
            }
        }
        self.send(board_id, task_id);
    }

    /// The task's execution changed.
    pub fn execution_changed(self: &Arc<Self>, task_id: Uuid) {
        let board = self.known().get(&task_id).copied();
        match board {
            Some(board_id) => self.send(board_id, task_id),
            None => {
                let this = self.clone();
                tokio::spawn(async move {
                    let found = this
                        .tasks
                        .clone()
                        .get_task(pb::GetTaskRequest {
                            id: task_id.to_string(),
                        })
                        .await;
                    let board = found
                        .ok()
                        .and_then(|t| Uuid::parse_str(&t.into_inner().board_id).ok());
                    // A task gone meanwhile has no card left to change.
                    if let Some(board_id) = board {
                        this.task_changed(board_id, task_id, false);
                    }
                });
            }
        }
    }

    fn send(&self, board_id: Uuid, task_id: Uuid) {
        let live = self.live.clone();
        tokio::spawn(async move {
            let subject = subjects::board_live(&board_id);
            let message = LiveMessage::bare(task_id.to_string());
            if let Err(err) = live.publish(&subject, message).await {
                tracing::debug!(%err, %board_id, "board signal not sent");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::StreamExt as _;
    use kandev_events::live::LocalLive;

    use super::*;

    #[tokio::test]
    async fn a_known_task_signals_its_board_at_once() {
        let live = Arc::new(LocalLive::new(16));
        let token = "t".repeat(40).into();
        let tasks = crate::clients::task_client("http://127.0.0.1:9", &token).unwrap();
        let signals = BoardSignals::new(live.clone(), tasks);
        let (board, task) = (Uuid::new_v4(), Uuid::new_v4());
        let mut sub = live.subscribe(&subjects::board_live(&board)).await.unwrap();
        signals.task_changed(board, task, false);
        signals.execution_changed(task);
        for _ in 0..2 {
            let m = sub.next().await.unwrap();
            assert_eq!(m.payload, Bytes::from(task.to_string()));
        }
    }
}
