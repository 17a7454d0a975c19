//! The ACP feed: every `acp.message.<task_id>` numbered per task, broadcast
//! live to the task's subscribers, then stored in batches.
//!
//! Exactness across restarts rests on three rules:
//! - ONE durable pull consumer reads `acp.message.>` in stream order. At
//!   start it is re-created at its ack floor, so messages that were delivered
//!   but not acknowledged before a crash come again first, in the same order.
//! - `seq` comes from a per-task counter initialized from the stored feed;
//!   an event whose `(instance_id, instance_seq)` was already numbered is
//!   skipped (a bus message is a batch of events, and a batch republished
//!   with other bounds overlaps). So the same events get the same numbers.
//! - A message is acknowledged (AckPolicy::All, on the last of a batch) only
//!   after its events are committed.
//!
//! The not-yet-stored tail of each task is kept in memory ([`FeedHub`]) so a
//! WebSocket replay can serve it without a gap.
//!
//! A client that shows the feed reads it compacted ([`FeedReader::page`]:
//! one item per message, thought or other event, newest page first), then
//! streams the frames after the last seq the page covers (`covers_to`):
//! the stored ones, the tail, then live ones, each once.
//!
//! # Layout
//! - this module: frames, the live hub and the reader.
//! - [`store`]: how the feed is kept in Postgres or SQLite (chunks of
//!   events, and the compacted view beside them).
//! - `consumer`: the consumer that numbers, broadcasts and stores.

mod consumer;
pub mod store;

pub use consumer::{ACP_STREAM, FeedConsumer};

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use axum::extract::ws::Utf8Bytes;
use kandev_common::CancellationToken;
use tokio::sync::mpsc;
use uuid::Uuid;

/// One numbered feed message: its WebSocket text frame
/// (`{"seq","task_id","instance_id","instance_seq","event"}`), built once
/// and shared by every subscriber.
#[derive(Debug)]
pub struct Frame {
    pub task_id: Uuid,
    pub seq: i64,
    pub instance_id: Uuid,
    pub instance_seq: i64,
    /// The WebSocket text frame; cheap to clone.
    pub text: Utf8Bytes,
    /// Where the event's JSON starts in `text` (it ends before the last `}`).
    event_start: usize,
    /// The agent manager's packed batch (`kandev_events::pack`) that held
    /// this frame's event, when its events are exactly the frames numbered
    /// from it: the feed stores such a batch as it came (one chunk, not
    /// compressed again). Shared by the batch's frames.
    pub batch: Option<bytes::Bytes>,
}

impl Frame {
    /// A frame around `event`, the event's JSON text.
    pub fn new(task_id: Uuid, seq: i64, instance_id: Uuid, instance_seq: i64, event: &str) -> Self {
        // Written piece by piece: through `fmt`, the numbers and ids cost
        // more than copying the event.
        let mut number = itoa::Buffer::new();
        let mut id = Uuid::encode_buffer();
        let mut text = String::with_capacity(event.len() + 160);
        text.push_str(r#"{"seq":"#);
        text.push_str(number.format(seq));
        text.push_str(r#","task_id":""#);
        text.push_str(task_id.hyphenated().encode_lower(&mut id));
        text.push_str(r#"","instance_id":""#);
        text.push_str(instance_id.hyphenated().encode_lower(&mut id));
        text.push_str(r#"","instance_seq":"#);
        text.push_str(number.format(instance_seq));
        text.push_str(r#","event":"#);
        let event_start = text.len();
        text.push_str(event);
        text.push('}');
        Frame {
            task_id,
            seq,
            instance_id,
            instance_seq,
            text: text.into(),
            event_start,
            batch: None,
        }
    }

    /// Whether this frame's event came in the same packed batch as `other`'s.
    pub fn same_batch(&self, other: &Frame) -> bool {
        match (&self.batch, &other.batch) {
            (Some(a), Some(b)) => a.as_ptr() == b.as_ptr() && a.len() == b.len(),
            _ => false,
        }
    }

    /// The event's JSON text.
    pub fn event(&self) -> &str {
        let text = self.text.as_str();
        &text[self.event_start..text.len() - 1]
    }
}

/// Instances whose run moved to another agent manager (theirs was gone):
/// whatever they still send (a manager back from a partition, before it is
/// told to stop them) is not part of the task's feed.
#[derive(Default)]
pub struct Fence {
    moved: std::sync::RwLock<std::collections::HashSet<Uuid>>,
}

impl Fence {
    pub fn contains(&self, instance: &Uuid) -> bool {
        self.moved
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(instance)
    }

    pub fn insert(&self, instance: Uuid) {
        self.moved
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(instance);
    }

    /// Adds every moved instance stored.
    pub async fn load(&self, store: &dyn store::FeedStore) -> Result<(), sqlx::Error> {
        let moved = store.moved_instances().await?;
        self.moved
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .extend(moved);
        Ok(())
    }
}

struct Subscriber {
    id: u64,
    tx: mpsc::Sender<Arc<Frame>>,
    lagged: CancellationToken,
}

#[derive(Default)]
struct TaskChannel {
    subscribers: Vec<Subscriber>,
    /// Broadcast but not yet committed, in seq order.
    pending: VecDeque<Arc<Frame>>,
}

/// Live fan-out of feed frames per task, and the unflushed tail.
pub struct FeedHub {
    tasks: Mutex<HashMap<Uuid, TaskChannel>>,
    next_id: std::sync::atomic::AtomicU64,
    buffer: usize,
}

/// A client's view of one task's feed: frames not yet stored when it
/// subscribed, then every new frame, through a bounded queue.
pub struct Subscription {
    pub tail: Vec<Arc<Frame>>,
    pub rx: mpsc::Receiver<Arc<Frame>>,
    /// Fired when the client's queue overflowed; it gets no more frames.
    pub lagged: CancellationToken,
    hub: Arc<FeedHub>,
    task_id: Uuid,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(self.task_id, self.id);
    }
}

impl FeedHub {
    pub fn new(buffer: usize) -> Arc<Self> {
        Arc::new(FeedHub {
            tasks: Mutex::new(HashMap::new()),
            next_id: 0.into(),
            buffer,
        })
    }

    pub fn buffer(&self) -> usize {
        self.buffer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, TaskChannel>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes to live frames and takes the unflushed tail, atomically.
    pub fn subscribe(self: &Arc<Self>, task_id: Uuid) -> Subscription {
        let (tx, rx) = mpsc::channel(self.buffer);
        let lagged = CancellationToken::new();
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tasks = self.lock();
        let channel = tasks.entry(task_id).or_default();
        channel.subscribers.push(Subscriber {
            id,
            tx,
            lagged: lagged.clone(),
        });
        Subscription {
            tail: channel.pending.iter().cloned().collect(),
            rx,
            lagged,
            hub: self.clone(),
            task_id,
            id,
        }
    }

    fn unsubscribe(&self, task_id: Uuid, id: u64) {
        let mut tasks = self.lock();
        if let Some(channel) = tasks.get_mut(&task_id) {
            channel.subscribers.retain(|s| s.id != id);
            if channel.subscribers.is_empty() && channel.pending.is_empty() {
                tasks.remove(&task_id);
            }
        }
    }

    /// Sends frames of one task to every subscriber without waiting: a
    /// full queue marks its client as lagging and drops it.
    pub fn publish(&self, task_id: Uuid, frames: &[Arc<Frame>]) {
        if frames.is_empty() {
            return;
        }
        let mut tasks = self.lock();
        let channel = tasks.entry(task_id).or_default();
        channel.pending.extend(frames.iter().cloned());
        channel.subscribers.retain(|sub| {
            for frame in frames {
                match sub.tx.try_send(frame.clone()) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        sub.lagged.cancel();
                        return false;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return false,
                }
            }
            true
        });
    }

    /// Forgets the tail up to `seq`, now that it is stored.
    pub fn flushed(&self, task_id: Uuid, seq: i64) {
        let mut tasks = self.lock();
        if let Some(channel) = tasks.get_mut(&task_id) {
            while channel.pending.front().is_some_and(|f| f.seq <= seq) {
                channel.pending.pop_front();
            }
            if channel.subscribers.is_empty() && channel.pending.is_empty() {
                tasks.remove(&task_id);
            }
        }
    }

    /// The frames of a task numbered but not stored yet, in seq order.
    pub fn tail(&self, task_id: Uuid) -> Vec<Arc<Frame>> {
        self.lock()
            .get(&task_id)
            .map(|c| c.pending.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The highest seq numbered but not yet stored, if any.
    pub fn pending_last_seq(&self, task_id: Uuid) -> Option<i64> {
        self.lock()
            .get(&task_id)
            .and_then(|c| c.pending.back().map(|f| f.seq))
    }
}

/// Reads a task's feed for a client that replays it: stored frames, then
/// the tail numbered but not stored yet, contiguous from `after + 1`.
#[derive(Clone)]
pub struct FeedReader {
    pub store: Arc<dyn store::FeedStore>,
    pub hub: Arc<FeedHub>,
}

/// The most bytes of frames one read returns (at least one frame).
const READ_BYTES: usize = 2 * 1024 * 1024;

/// Items of a compacted page when the client does not say, and at most.
pub const PAGE_ITEMS: i64 = 50;
pub const PAGE_ITEMS_MAX: i64 = 500;

impl FeedReader {
    /// A page of the task's compacted feed (see [`store::FeedStore::page`]):
    /// the newest `limit` items before `before` (before the end when
    /// `None`). The frames after its `covers_to` continue it: read them
    /// with [`FeedReader::read`] or a stream from `?after=covers_to`.
    #[tracing::instrument(skip(self))]
    pub async fn page(
        &self,
        task_id: Uuid,
        before: Option<i64>,
        limit: i64,
    ) -> Result<store::FeedPage, sqlx::Error> {
        self.store.page(task_id, before, limit).await
    }

    /// At most `limit` frames with `seq > after`, in order, without a gap.
    pub async fn read(
        &self,
        task_id: Uuid,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Arc<Frame>>, sqlx::Error> {
        // The tail first: whatever leaves it afterwards is stored by then,
        // so the stored page and the tail meet without a gap.
        let tail = self.hub.tail(task_id);
        let mut frames: Vec<Arc<Frame>> = self
            .store
            .history(task_id, after, limit)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut last = frames.last().map_or(after, |f| f.seq);
        for frame in tail {
            if frames.len() as i64 >= limit {
                break;
            }
            if frame.seq == last + 1 {
                last = frame.seq;
                frames.push(frame);
            }
        }
        let mut bytes = 0;
        let keep = frames
            .iter()
            .take_while(|f| {
                bytes += f.text.len();
                bytes <= READ_BYTES
            })
            .count()
            .max(1);
        frames.truncate(keep);
        Ok(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_the_documented_text_around_its_event() {
        let task = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let instance = Uuid::from_u128(u128::MAX);
        let event = r#"{"seq":3,"kind":"message_chunk"}"#;
        for (seq, instance_seq) in [(1, 1), (-7, i64::MAX), (i64::MIN, 0)] {
            let frame = Frame::new(task, seq, instance, instance_seq, event);
            assert_eq!(
                frame.text.as_str(),
                format!(
                    r#"{{"seq":{seq},"task_id":"{task}","instance_id":"{instance}","instance_seq":{instance_seq},"event":{event}}}"#
                )
            );
            assert_eq!(frame.event(), event);
            let parsed: serde_json::Value = serde_json::from_str(frame.text.as_str()).unwrap();
            assert_eq!(parsed["task_id"], task.to_string());
            assert_eq!(parsed["instance_seq"], instance_seq);
        }
    }
}
