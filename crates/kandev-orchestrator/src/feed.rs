//! The ACP feed: every `acp.message.<task_id>` numbered per task, broadcast
//! live to the task's subscribers, then stored in batches.
//!
//! Exactness across restarts rests on three rules:
//! - ONE durable pull consumer reads `acp.message.>` in stream order. At
//!   start it is re-created at its ack floor, so messages that were delivered
//!   but not acknowledged before a crash come again first, in the same order.
//! - `seq` comes from a per-task counter initialized from `max(seq)` in the
//!   `feed` table; a message whose `(instance_id, instance_seq)` was already
//!   numbered is skipped. So the same messages get the same numbers again.
//! - A message is acknowledged (AckPolicy::All, on the last of a batch) only
//!   after its batch is committed.
//!
//! The not-yet-stored tail of each task is kept in memory ([`FeedHub`]) so a
//! WebSocket replay can serve it without a gap.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use async_nats::jetstream::{
    self, AckKind,
    consumer::{AckPolicy, DeliverPolicy, pull},
};
use futures::StreamExt;
use kandev_common::CancellationToken;
use kandev_events::{Envelope, JetStreamBus, agent::AcpMessage};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::mpsc;
use uuid::Uuid;

/// One numbered feed message.
#[derive(Debug)]
pub struct Frame {
    pub task_id: Uuid,
    pub seq: i64,
    pub instance_id: Uuid,
    pub instance_seq: i64,
    pub event: Value,
    /// The WebSocket text frame.
    pub text: String,
}

#[derive(Serialize)]
struct FrameOut<'a> {
    seq: i64,
    task_id: Uuid,
    instance_id: Uuid,
    instance_seq: i64,
    event: &'a Value,
}

impl Frame {
    pub fn new(
        task_id: Uuid,
        seq: i64,
        instance_id: Uuid,
        instance_seq: i64,
        event: Value,
    ) -> Self {
        let text = serde_json::to_string(&FrameOut {
            seq,
            task_id,
            instance_id,
            instance_seq,
            event: &event,
        })
        .unwrap_or_default();
        Frame {
            task_id,
            seq,
            instance_id,
            instance_seq,
            event,
            text,
        }
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

    /// Sends a frame to every subscriber without waiting: a full queue marks
    /// its client as lagging and drops it.
    pub fn publish(&self, frame: Arc<Frame>) {
        let mut tasks = self.lock();
        let channel = tasks.entry(frame.task_id).or_default();
        channel.pending.push_back(frame.clone());
        channel
            .subscribers
            .retain(|sub| match sub.tx.try_send(frame.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    sub.lagged.cancel();
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
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

    /// The highest seq numbered but not yet stored, if any.
    pub fn pending_last_seq(&self, task_id: Uuid) -> Option<i64> {
        self.lock()
            .get(&task_id)
            .and_then(|c| c.pending.back().map(|f| f.seq))
    }
}

/// Stored frames of a task with `seq > after`, in order, at most `limit`.
pub async fn history(
    pool: &PgPool,
    task_id: Uuid,
    after: i64,
    limit: i64,
) -> Result<Vec<Frame>, sqlx::Error> {
    let rows: Vec<(i64, Uuid, i64, Value)> = sqlx::query_as(
        "SELECT seq, instance_id, instance_seq, event FROM feed
         WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    )
    .bind(task_id)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(seq, instance_id, instance_seq, event)| {
            Frame::new(task_id, seq, instance_id, instance_seq, event)
        })
        .collect())
}

/// The highest stored seq of a task (0 when none).
pub async fn stored_last_seq(pool: &PgPool, task_id: Uuid) -> Result<i64, sqlx::Error> {
    let (max,): (Option<i64>,) = sqlx::query_as("SELECT max(seq) FROM feed WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(pool)
        .await?;
    Ok(max.unwrap_or(0))
}

/// Why the feed consumer could not start.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("jetstream: {0}")]
    JetStream(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

fn js_err(e: impl std::fmt::Display) -> FeedError {
    FeedError::JetStream(e.to_string())
}

/// The stream that holds `acp.message.>`.
pub const ACP_STREAM: &str = "KANDEV_ACP";

/// Creates the durable consumer, positioned at its ack floor: a consumer
/// that existed is re-created to start at the first unacknowledged message,
/// so redeliveries come first and in stream order.
pub async fn acp_consumer(
    bus: &JetStreamBus,
    durable: &str,
    filter: &str,
) -> Result<jetstream::consumer::PullConsumer, FeedError> {
    bus.ensure_streams().await.map_err(js_err)?;
    let stream = bus
        .jetstream()
        .get_stream(ACP_STREAM)
        .await
        .map_err(js_err)?;
    let deliver_policy = match stream.consumer_info(durable).await {
        Ok(info) => {
            let start = info.ack_floor.stream_sequence + 1;
            stream.delete_consumer(durable).await.map_err(js_err)?;
            DeliverPolicy::ByStartSequence {
                start_sequence: start,
            }
        }
        Err(_) => DeliverPolicy::All,
    };
    stream
        .create_consumer(pull::Config {
            durable_name: Some(durable.to_string()),
            filter_subject: filter.to_string(),
            ack_policy: AckPolicy::All,
            ack_wait: Duration::from_secs(600),
            max_ack_pending: 100_000,
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(js_err)
}

struct Batch {
    frames: Vec<Arc<Frame>>,
    last: jetstream::Message,
}

/// Numbers, broadcasts and stores `acp.message.*`.
pub struct FeedConsumer {
    pub pool: PgPool,
    pub hub: Arc<FeedHub>,
    pub bus: JetStreamBus,
    pub durable: String,
    pub filter: String,
    pub flush_every: Duration,
    pub flush_max: usize,
}

#[derive(Default)]
struct Counters {
    /// Next seq per task.
    next_seq: HashMap<Uuid, i64>,
    /// Highest instance_seq numbered per instance.
    instance_last: HashMap<Uuid, i64>,
}

impl Counters {
    async fn next_seq(&mut self, pool: &PgPool, task_id: Uuid) -> Result<i64, sqlx::Error> {
        if let Some(next) = self.next_seq.get(&task_id) {
            return Ok(*next);
        }
        let next = stored_last_seq(pool, task_id).await? + 1;
        self.next_seq.insert(task_id, next);
        Ok(next)
    }

    async fn instance_last(&mut self, pool: &PgPool, instance: Uuid) -> Result<i64, sqlx::Error> {
        if let Some(last) = self.instance_last.get(&instance) {
            return Ok(*last);
        }
        let (max,): (Option<i64>,) =
            sqlx::query_as("SELECT max(instance_seq) FROM feed WHERE instance_id = $1")
                .bind(instance)
                .fetch_one(pool)
                .await?;
        let last = max.unwrap_or(0);
        self.instance_last.insert(instance, last);
        Ok(last)
    }
}

impl FeedConsumer {
    /// Runs until `stop` fires; the last batch is flushed before returning.
    pub async fn run(self, stop: CancellationToken) {
        let (batch_tx, batch_rx) = mpsc::channel::<Batch>(64);
        let writer = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(write_batches(
            self.pool.clone(),
            self.hub.clone(),
            batch_rx,
            stop.clone(),
        )));
        let mut counters = Counters::default();
        let mut frames: Vec<Arc<Frame>> = Vec::new();
        let mut last: Option<jetstream::Message> = None;
        let mut deadline = tokio::time::Instant::now() + self.flush_every;
        let mut consumer: Option<jetstream::consumer::PullConsumer> = None;
        let mut failures = 0u32;

        'outer: while !stop.is_cancelled() {
            // (Re-)created at the ack floor: at start, and when pulling keeps
            // failing (say NATS lost the consumer). Messages numbered but not
            // yet acknowledged come again and are skipped as duplicates.
            if consumer.is_none() || failures >= 3 {
                match acp_consumer(&self.bus, &self.durable, &self.filter).await {
                    Ok(c) => {
                        consumer = Some(c);
                        failures = 0;
                    }
                    Err(err) => {
                        tracing::warn!(%err, "acp consumer not ready, retrying");
                        tokio::select! {
                            () = stop.cancelled() => break,
                            () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        }
                    }
                }
            }
            let Some(current) = consumer.as_ref() else {
                continue;
            };
            let mut messages = match current
                .stream()
                .max_messages_per_batch(self.flush_max.max(1))
                .heartbeat(Duration::from_secs(5))
                .expires(Duration::from_secs(30))
                .messages()
                .await
            {
                Ok(m) => {
                    failures = 0;
                    m
                }
                Err(err) => {
                    failures += 1;
                    tracing::warn!(%err, failures, "acp consumer: cannot pull, retrying");
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            loop {
                let flush_due = last.is_some();
                tokio::select! {
                    biased;
                    () = stop.cancelled() => break 'outer,
                    () = tokio::time::sleep_until(deadline), if flush_due => {
                        send_batch(&batch_tx, &mut frames, &mut last).await;
                    }
                    next = messages.next() => match next {
                        Some(Ok(msg)) => {
                            if last.is_none() {
                                deadline = tokio::time::Instant::now() + self.flush_every;
                            }
                            if let Some(frame) = self.number(&mut counters, &msg).await {
                                self.hub.publish(frame.clone());
                                frames.push(frame);
                            }
                            last = Some(msg);
                            if frames.len() >= self.flush_max {
                                send_batch(&batch_tx, &mut frames, &mut last).await;
                            }
                            // Let the clients' writers run between bursts.
                            if frames.len().is_multiple_of(64) {
                                tokio::task::yield_now().await;
                            }
                        }
                        Some(Err(err)) => {
                            tracing::warn!(%err, "acp consumer: stream error");
                        }
                        None => {
                            tracing::warn!("acp consumer: stream ended, re-pulling");
                            continue 'outer;
                        }
                    }
                }
            }
        }
        send_batch(&batch_tx, &mut frames, &mut last).await;
        drop(batch_tx);
        let _ = writer.await;
    }

    /// Numbers one message, or `None` when it is malformed or a duplicate.
    async fn number(
        &self,
        counters: &mut Counters,
        msg: &jetstream::Message,
    ) -> Option<Arc<Frame>> {
        let envelope: Envelope<AcpMessage> = match serde_json::from_slice(&msg.payload) {
            Ok(e) => e,
            Err(err) => {
                tracing::warn!(%err, subject = %msg.subject, "skipping a malformed acp message");
                return None;
            }
        };
        let m = envelope.data;
        let instance_seq = i64::try_from(m.instance_seq).unwrap_or(i64::MAX);
        // The database is the truth; retry until it answers.
        loop {
            let result = async {
                let last = counters.instance_last(&self.pool, m.instance_id).await?;
                let next = counters.next_seq(&self.pool, m.task_id).await?;
                Ok::<_, sqlx::Error>((last, next))
            }
            .await;
            match result {
                Ok((last, _)) if instance_seq <= last => return None,
                Ok((_, seq)) => {
                    counters.instance_last.insert(m.instance_id, instance_seq);
                    counters.next_seq.insert(m.task_id, seq + 1);
                    return Some(Arc::new(Frame::new(
                        m.task_id,
                        seq,
                        m.instance_id,
                        instance_seq,
                        m.event,
                    )));
                }
                Err(err) => {
                    tracing::warn!(%err, "acp consumer: database unavailable, retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

async fn send_batch(
    tx: &mpsc::Sender<Batch>,
    frames: &mut Vec<Arc<Frame>>,
    last: &mut Option<jetstream::Message>,
) {
    if let Some(last) = last.take() {
        let batch = Batch {
            frames: std::mem::take(frames),
            last,
        };
        let _ = tx.send(batch).await;
    }
}

/// Commits batches in order, then acknowledges them and trims the tail.
async fn write_batches(
    pool: PgPool,
    hub: Arc<FeedHub>,
    mut rx: mpsc::Receiver<Batch>,
    stop: CancellationToken,
) {
    while let Some(batch) = rx.recv().await {
        let mut attempt = 0u32;
        loop {
            match insert(&pool, &batch.frames).await {
                Ok(()) => break,
                Err(err) => {
                    attempt += 1;
                    tracing::warn!(%err, attempt, "feed write failed, retrying");
                    if stop.is_cancelled() && attempt > 3 {
                        // Not acknowledged: the messages come again after a restart.
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        if let Err(err) = batch.last.double_ack_with(AckKind::Ack).await {
            // Redelivered later and skipped as duplicates.
            tracing::warn!(%err, "feed ack failed");
        }
        let mut last_per_task: HashMap<Uuid, i64> = HashMap::new();
        for f in &batch.frames {
            last_per_task.insert(f.task_id, f.seq);
        }
        for (task_id, seq) in last_per_task {
            hub.flushed(task_id, seq);
        }
    }
}

async fn insert(pool: &PgPool, frames: &[Arc<Frame>]) -> Result<(), sqlx::Error> {
    if frames.is_empty() {
        return Ok(());
    }
    let task_ids: Vec<Uuid> = frames.iter().map(|f| f.task_id).collect();
    let seqs: Vec<i64> = frames.iter().map(|f| f.seq).collect();
    let instance_ids: Vec<Uuid> = frames.iter().map(|f| f.instance_id).collect();
    let instance_seqs: Vec<i64> = frames.iter().map(|f| f.instance_seq).collect();
    let events: Vec<Value> = frames.iter().map(|f| f.event.clone()).collect();
    sqlx::query(
        "INSERT INTO feed (task_id, seq, instance_id, instance_seq, event)
         SELECT * FROM UNNEST($1::uuid[], $2::int8[], $3::uuid[], $4::int8[], $5::jsonb[])
         ON CONFLICT DO NOTHING",
    )
    .bind(task_ids)
    .bind(seqs)
    .bind(instance_ids)
    .bind(instance_seqs)
    .bind(events)
    .execute(pool)
    .await?;
    Ok(())
}
