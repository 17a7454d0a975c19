//! The board signals of the boards this gateway's clients have open: one
//! subscription to `board.<board_id>` per board (on any [`Live`]: core
//! NATS, or the one process's own channels), whatever the number of
//! clients, fanned out as task ids to each client.
//!
//! A signal only says which card may have changed; a client reads that
//! card again. Signals are not stored: a client that misses some (its
//! queue overflowed, the NATS connection came back) reads its whole board
//! again.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt as _;
use kandev_events::{live::Live, subjects};
use tokio::sync::{broadcast, watch};
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

/// Signals a client may have queued before it reads its board again.
const CLIENT_QUEUE: usize = 1024;

/// One board's subscription and how many clients share it.
struct BoardFeed {
    tx: broadcast::Sender<Uuid>,
    ready: watch::Receiver<bool>,
    clients: usize,
    _reader: AbortOnDropHandle<()>,
}

/// The open boards' signals; cheap to share behind an `Arc`.
pub struct BoardFeeds {
    live: Arc<dyn Live>,
    boards: Mutex<HashMap<Uuid, BoardFeed>>,
    reconnects: watch::Receiver<u64>,
}

impl std::fmt::Debug for BoardFeeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoardFeeds").finish_non_exhaustive()
    }
}

/// One client's signals of one board.
pub struct BoardSub {
    /// Task ids whose card may have changed; `Lagged` when some were missed.
    pub rx: broadcast::Receiver<Uuid>,
    /// Changes when the live connection came back: signals were missed.
    pub reconnects: watch::Receiver<u64>,
    feeds: Arc<BoardFeeds>,
    board_id: Uuid,
}

impl Drop for BoardSub {
    fn drop(&mut self) {
        self.feeds.release(self.board_id);
    }
}

impl BoardFeeds {
    /// Signals read from `live`; `reconnects` changes when its connection
    /// came back.
    pub fn new(live: Arc<dyn Live>, reconnects: watch::Receiver<u64>) -> Arc<BoardFeeds> {
        Arc::new(BoardFeeds {
            live,
            boards: Mutex::new(HashMap::new()),
            reconnects,
        })
    }

    fn boards(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, BoardFeed>> {
        kandev_common::sync::lock(&self.boards)
    }

    /// Follows the board's signals, once the subscription is in place
    /// (waited for up to 5 s).
    pub async fn subscribe(self: &Arc<Self>, board_id: Uuid) -> BoardSub {
        let (rx, mut ready) = {
            let mut boards = self.boards();
            let feed = boards
                .entry(board_id)
                .or_insert_with(|| start(self.live.clone(), board_id));
            feed.clients += 1;
            (feed.tx.subscribe(), feed.ready.clone())
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), ready.wait_for(|r| *r)).await;
        let mut reconnects = self.reconnects.clone();
        reconnects.mark_unchanged();
        BoardSub {
            rx,
            reconnects,
            feeds: self.clone(),
            board_id,
        }
    }

    fn release(&self, board_id: Uuid) {
        let mut boards = self.boards();
        if let Some(feed) = boards.get_mut(&board_id) {
            feed.clients -= 1;
            if feed.clients == 0 {
                // Dropping it ends its reader and the subscription.
                boards.remove(&board_id);
            }
        }
    }

    /// Boards with a subscription now.
    pub fn boards_open(&self) -> usize {
        self.boards().len()
    }
}

fn start(live: Arc<dyn Live>, board_id: Uuid) -> BoardFeed {
    let (tx, _) = broadcast::channel(CLIENT_QUEUE);
    let (ready_tx, ready) = watch::channel(false);
    let sender = tx.clone();
    let reader = tokio::spawn(async move {
        let subject = subjects::board_live(&board_id);
        let mut sub = match live.subscribe(&subject).await {
            Ok(sub) => sub,
            Err(err) => {
                tracing::warn!(%board_id, %err, "cannot subscribe to the board's signals");
                let _ = ready_tx.send(true);
                return;
            }
        };
        let _ = ready_tx.send(true);
        while let Some(msg) = sub.next().await {
            let task = std::str::from_utf8(&msg.payload)
                .ok()
                .and_then(|s| Uuid::parse_str(s).ok());
            match task {
                Some(task_id) => {
                    // No client left is not an error: the feed is going away.
                    let _ = sender.send(task_id);
                }
                None => tracing::warn!(%board_id, "skipping a malformed board signal"),
            }
        }
    });
    BoardFeed {
        tx,
        ready,
        clients: 0,
        _reader: AbortOnDropHandle::new(reader),
    }
}

#[cfg(test)]
mod tests {
    use kandev_events::live::{LiveMessage, LocalLive};

    use super::*;

    #[tokio::test]
    async fn clients_of_a_board_share_one_subscription_and_get_its_signals() {
        let live = Arc::new(LocalLive::new(16));
        let feeds = BoardFeeds::new(live.clone(), watch::channel(0).1);
        let (board, other, task) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let mut a = feeds.subscribe(board).await;
        let mut b = feeds.subscribe(board).await;
        let mut c = feeds.subscribe(other).await;
        assert_eq!(feeds.boards_open(), 2);
        let signal = |board_id| {
            let live = live.clone();
            async move {
                let message = LiveMessage::bare(task.to_string());
                live.publish(&subjects::board_live(&board_id), message)
                    .await
                    .unwrap();
            }
        };
        signal(board).await;
        assert_eq!(a.rx.recv().await.unwrap(), task);
        assert_eq!(b.rx.recv().await.unwrap(), task);
        assert!(
            c.rx.try_recv().is_err(),
            "another board's client hears nothing"
        );
        drop((a, b));
        assert_eq!(feeds.boards_open(), 1);
        signal(other).await;
        assert_eq!(c.rx.recv().await.unwrap(), task);
    }
}
