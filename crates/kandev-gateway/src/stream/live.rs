//! The live feed of the tasks this gateway's clients watch: one
//! subscription to `feed.<task_id>` per task (on any [`Live`]: core NATS,
//! or the one process's own channels), whatever the number of clients,
//! fanned out to each client's bounded queue.
//!
//! Live frames are numbered by the orchestrator and may be missed (nothing
//! stores them; a NATS reconnect drops some): clients detect a gap by `seq`
//! and read it from the orchestrator's stored feed.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use axum::extract::ws::Utf8Bytes;
use futures::StreamExt;
use kandev_common::CancellationToken;
use kandev_common::sync::lock;
use kandev_events::{
    live::{Live, LiveMessage},
    subjects,
};
use tokio::sync::{mpsc, watch};
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

/// Consecutive feed frames of one task, from `first_seq`.
#[derive(Debug)]
pub struct LiveBatch {
    pub first_seq: i64,
    pub frames: Vec<Utf8Bytes>,
}

impl LiveBatch {
    /// Reads a `feed.<task_id>` message: its seq headers and its frames,
    /// one per line. `None` when it is malformed.
    pub fn parse(message: &LiveMessage) -> Option<LiveBatch> {
        let payload = &message.payload;
        let header = |name: &str| -> Option<i64> { message.header(name)?.parse().ok() };
        let first_seq = header(subjects::LIVE_FIRST_SEQ)?;
        let last_seq = header(subjects::LIVE_LAST_SEQ)?;
        let mut frames = Vec::with_capacity(usize::try_from(last_seq - first_seq + 1).ok()?);
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', payload).chain(std::iter::once(payload.len())) {
            frames.push(Utf8Bytes::try_from(payload.slice(start..end)).ok()?);
            start = end + 1;
        }
        (frames.len() as i64 == last_seq - first_seq + 1).then_some(LiveBatch { first_seq, frames })
    }
}

struct Sub {
    id: u64,
    tx: mpsc::UnboundedSender<Arc<LiveBatch>>,
    /// Frames queued and not read yet.
    queued: Arc<AtomicUsize>,
    lagged: CancellationToken,
}

/// One task's subscription and its clients.
struct TaskFeed {
    subs: Mutex<Vec<Sub>>,
    ready: watch::Receiver<bool>,
    _reader: AbortOnDropHandle<()>,
}

/// The live feeds of this gateway; cheap to share behind an `Arc`.
pub struct LiveFeeds {
    live: Arc<dyn Live>,
    tasks: Mutex<HashMap<Uuid, Arc<TaskFeed>>>,
    next_id: AtomicU64,
    /// Frames a client may have queued before it counts as lagging.
    buffer: usize,
    /// Bumped each time the NATS connection comes back: what was published
    /// meanwhile is missed, so clients read their feed again.
    reconnects: watch::Sender<u64>,
}

impl std::fmt::Debug for LiveFeeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveFeeds")
            .field("buffer", &self.buffer)
            .finish_non_exhaustive()
    }
}

/// A client's view of one task's live feed.
pub struct LiveSub {
    rx: mpsc::UnboundedReceiver<Arc<LiveBatch>>,
    queued: Arc<AtomicUsize>,
    /// Fired when the client's queue overflowed; it gets no more batches.
    pub lagged: CancellationToken,
    /// Changes when the gateway's NATS connection came back.
    pub reconnects: watch::Receiver<u64>,
    feeds: Arc<LiveFeeds>,
    task_id: Uuid,
    id: u64,
}

impl LiveSub {
    /// The next batch; `None` when the feed ended (the gateway stops).
    pub async fn recv(&mut self) -> Option<Arc<LiveBatch>> {
        let batch = self.rx.recv().await?;
        self.queued.fetch_sub(batch.frames.len(), Ordering::Relaxed);
        Some(batch)
    }

    /// The next batch and those queued behind it, up to about `frames`
    /// frames (at least one batch): a client that fell behind catches up
    /// in one write. `None` when the feed ended.
    pub async fn recv_burst(&mut self, frames: usize) -> Option<Vec<Arc<LiveBatch>>> {
        let first = self.recv().await?;
        let mut taken = first.frames.len();
        let mut burst = vec![first];
        while taken < frames {
            let Ok(batch) = self.rx.try_recv() else { break };
            self.queued.fetch_sub(batch.frames.len(), Ordering::Relaxed);
            taken += batch.frames.len();
            burst.push(batch);
        }
        Some(burst)
    }
}

impl Drop for LiveSub {
    fn drop(&mut self) {
        self.feeds.unsubscribe(self.task_id, self.id);
    }
}

impl LiveFeeds {
    /// Feeds over `live`; on NATS, `reconnects` is bumped by the
    /// connection's event callback (see [`LiveFeeds::reconnected`]).
    pub fn new(live: Arc<dyn Live>, buffer: usize) -> Arc<LiveFeeds> {
        Arc::new(LiveFeeds {
            live,
            tasks: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            buffer: buffer.max(1),
            reconnects: watch::channel(0).0,
        })
    }

    /// Frames a client may have queued before it counts as lagging.
    pub fn buffer(&self) -> usize {
        self.buffer
    }

    /// The live messages these feeds read (board signals read them too).
    pub fn live(&self) -> Arc<dyn Live> {
        self.live.clone()
    }

    /// Changes each time the live connection came back (see
    /// [`LiveFeeds::reconnected`]).
    pub fn reconnects(&self) -> watch::Receiver<u64> {
        self.reconnects.subscribe()
    }

    /// Tells every client that live frames may have been missed.
    pub fn reconnected(&self) {
        self.reconnects.send_modify(|n| *n += 1);
    }

    /// Subscribes a client to the task's live feed and waits (briefly) until
    /// the subscription is in place.
    pub async fn subscribe(self: &Arc<Self>, task_id: Uuid) -> LiveSub {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let lagged = CancellationToken::new();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let feed = {
            let mut tasks = lock(&self.tasks);
            let feed = tasks
                .entry(task_id)
                .or_insert_with(|| self.start(task_id))
                .clone();
            lock(&feed.subs).push(Sub {
                id,
                tx,
                queued: queued.clone(),
                lagged: lagged.clone(),
            });
            feed
        };
        let mut ready = feed.ready.clone();
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(5), ready.wait_for(|r| *r)).await;
        LiveSub {
            rx,
            queued,
            lagged,
            reconnects: self.reconnects.subscribe(),
            feeds: self.clone(),
            task_id,
            id,
        }
    }

    fn start(self: &Arc<Self>, task_id: Uuid) -> Arc<TaskFeed> {
        let (ready_tx, ready) = watch::channel(false);
        let live = self.live.clone();
        let feeds = Arc::downgrade(self);
        let buffer = self.buffer;
        let reader = tokio::spawn(async move {
            let subject = subjects::feed_live(&task_id);
            let mut sub = match live.subscribe(&subject).await {
                Ok(sub) => sub,
                Err(err) => {
                    tracing::warn!(%task_id, %err, "cannot subscribe to the live feed");
                    let _ = ready_tx.send(true);
                    return;
                }
            };
            let _ = ready_tx.send(true);
            while let Some(msg) = sub.next().await {
                let Some(batch) = LiveBatch::parse(&msg) else {
                    tracing::warn!(%task_id, "skipping a malformed live feed message");
                    continue;
                };
                let Some(feeds) = feeds.upgrade() else { return };
                let Some(feed) = lock(&feeds.tasks).get(&task_id).cloned() else {
                    return;
                };
                fan_out(&feed, Arc::new(batch), buffer);
            }
        });
        Arc::new(TaskFeed {
            subs: Mutex::new(Vec::new()),
            ready,
            _reader: AbortOnDropHandle::new(reader),
        })
    }

    fn unsubscribe(&self, task_id: Uuid, id: u64) {
        let mut tasks = lock(&self.tasks);
        if let Some(feed) = tasks.get(&task_id) {
            let empty = {
                let mut subs = lock(&feed.subs);
                subs.retain(|s| s.id != id);
                subs.is_empty()
            };
            if empty {
                // Dropping the feed ends its reader and the subscription.
                tasks.remove(&task_id);
            }
        }
    }

    /// Tasks with a live subscription now.
    pub fn tasks(&self) -> usize {
        lock(&self.tasks).len()
    }
}

/// Queues a batch for every client without waiting: a client whose queue
/// would pass `buffer` frames is marked lagging and dropped.
fn fan_out(feed: &TaskFeed, batch: Arc<LiveBatch>, buffer: usize) {
    let n = batch.frames.len();
    lock(&feed.subs).retain(|sub| {
        if sub.queued.load(Ordering::Relaxed) + n > buffer {
            sub.lagged.cancel();
            return false;
        }
        sub.queued.fetch_add(n, Ordering::Relaxed);
        sub.tx.send(batch.clone()).is_ok()
    });
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn message(first: i64, last: i64, payload: &Bytes) -> LiveMessage {
        LiveMessage {
            headers: vec![
                (subjects::LIVE_FIRST_SEQ.into(), first.to_string()),
                (subjects::LIVE_LAST_SEQ.into(), last.to_string()),
            ],
            payload: payload.clone(),
        }
    }

    #[tokio::test]
    async fn a_burst_takes_the_batches_queued_up_to_its_frames() {
        let local = Arc::new(kandev_events::live::LocalLive::new(64));
        let feeds = LiveFeeds::new(local.clone(), 1000);
        let task = Uuid::new_v4();
        let mut sub = feeds.subscribe(task).await;
        let publish = |first: i64, last: i64| {
            let payload: Vec<String> = (first..=last)
                .map(|s| format!(r#"{{"seq":{s}}}"#))
                .collect();
            let m = message(first, last, &Bytes::from(payload.join("\n")));
            let local = local.clone();
            async move {
                local.publish(&subjects::feed_live(&task), m).await.unwrap();
            }
        };
        // Four batches of 3 frames, queued before the client reads.
        for first in [1, 4, 7, 10] {
            publish(first, first + 2).await;
        }
        kandev_testkit::eventually(10, "12 frames queued", || {
            let queued = sub.queued.load(Ordering::Relaxed);
            async move { (queued == 12).then_some(()) }
        })
        .await;
        let firsts =
            |burst: &[Arc<LiveBatch>]| burst.iter().map(|b| b.first_seq).collect::<Vec<_>>();
        // Batches are whole: the burst stops at the first to reach 5 frames.
        let burst = sub.recv_burst(5).await.unwrap();
        assert_eq!(firsts(&burst), vec![1, 4]);
        let burst = sub.recv_burst(100).await.unwrap();
        assert_eq!(
            firsts(&burst),
            vec![7, 10],
            "whatever is queued, no waiting"
        );
        assert_eq!(sub.queued.load(Ordering::Relaxed), 0);
        // One batch is taken even when it alone is over the limit.
        publish(13, 20).await;
        let burst = sub.recv_burst(1).await.unwrap();
        assert_eq!(firsts(&burst), vec![13]);
        assert_eq!(burst[0].frames.len(), 8);
    }

    #[test]
    fn a_live_message_splits_into_its_frames() {
        let payload = Bytes::from_static(b"{\"seq\":4}\n{\"seq\":5}\n{\"seq\":6}");
        let batch = LiveBatch::parse(&message(4, 6, &payload)).unwrap();
        assert_eq!(batch.first_seq, 4);
        let texts: Vec<&str> = batch.frames.iter().map(|f| f.as_str()).collect();
        assert_eq!(texts, vec![r#"{"seq":4}"#, r#"{"seq":5}"#, r#"{"seq":6}"#]);
        // Counts that disagree, or no headers, are refused.
        assert!(LiveBatch::parse(&message(4, 7, &payload)).is_none());
        let headerless = LiveMessage {
            headers: vec![],
            payload,
        };
        assert!(LiveBatch::parse(&headerless).is_none());
    }
}
