//! The feed consumer: numbers `acp.message.*` per task, broadcasts, then
//! stores in batches, acknowledging only what is committed.

use std::{collections::HashMap, sync::Arc, time::Duration};

use kandev_common::CancellationToken;
use kandev_events::{
    durable::{AckMode, Consumer, Delivered, Streams},
    live::{Live, LiveMessage},
    subjects,
};
use tokio::sync::mpsc;
use tracing::Instrument as _;
use uuid::Uuid;

use crate::leader::sleep_or_stop;

use super::{
    FeedHub, Frame,
    store::{self, FeedStore},
};

/// The most bus messages (each a batch of events) and bytes one pull asks
/// for: what the consumer holds in memory before it is numbered.
const PULL_MESSAGES: usize = 64;
const PULL_BYTES: usize = 4 * 1024 * 1024;

/// The stream that holds `acp.message.>`.
pub const ACP_STREAM: &str = "KANDEV_ACP";

struct Batch {
    frames: Vec<Arc<Frame>>,
    /// Acknowledging it acknowledges the batch (and those before).
    last: Delivered,
}

/// Numbers, broadcasts and stores `acp.message.*`.
pub struct FeedConsumer {
    pub store: Arc<dyn FeedStore>,
    pub hub: Arc<FeedHub>,
    /// Where `acp.message.*` is consumed from.
    pub streams: Arc<dyn Streams>,
    /// Where the live feed is published (`feed.<task_id>`).
    pub live: Arc<dyn Live>,
    pub durable: String,
    pub filter: String,
    pub flush_every: Duration,
    pub flush_max: usize,
    /// Instances whose run moved elsewhere: their messages are dropped.
    pub fence: Arc<super::Fence>,
}

#[derive(Default)]
struct Counters {
    /// Next seq per task.
    next_seq: HashMap<Uuid, i64>,
    /// Highest instance_seq numbered per instance.
    instance_last: HashMap<Uuid, i64>,
}

impl Counters {
    async fn next_seq(&mut self, store: &dyn FeedStore, task_id: Uuid) -> Result<i64, sqlx::Error> {
        if let Some(next) = self.next_seq.get(&task_id) {
            return Ok(*next);
        }
        let next = store.last_seq(task_id).await? + 1;
        self.next_seq.insert(task_id, next);
        Ok(next)
    }

    async fn instance_last(
        &mut self,
        store: &dyn FeedStore,
        instance: Uuid,
    ) -> Result<i64, sqlx::Error> {
        if let Some(last) = self.instance_last.get(&instance) {
            return Ok(*last);
        }
        let last = store.instance_last_seq(instance).await?;
        self.instance_last.insert(instance, last);
        Ok(last)
    }
}

impl FeedConsumer {
    /// Runs until `stop` fires; the last batch is flushed before returning.
    pub async fn run(self, stop: CancellationToken) {
        // Before the first message: which instances' messages to drop.
        while let Err(err) = self.fence.load(self.store.as_ref()).await {
            tracing::warn!(%err, "acp consumer: cannot read moved instances, retrying");
            if sleep_or_stop(Duration::from_millis(500), &stop).await {
                return;
            }
        }
        // A few batches in flight: when Postgres lags, pulling waits.
        let (batch_tx, batch_rx) = mpsc::channel::<Batch>(8);
        let writer = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(write_batches(
            self.store.clone(),
            self.hub.clone(),
            batch_rx,
            stop.clone(),
        )));
        let mut pending = Pending::new(self.flush_every);
        let mut counters = Counters::default();
        let mut consumer: Option<Box<dyn Consumer>> = None;
        let mut failures = 0u32;
        while !stop.is_cancelled() {
            // (Re-)opened at the ack floor: at start, and when pulling keeps
            // failing (say NATS lost the consumer). Messages numbered but not
            // yet acknowledged come again and are skipped as duplicates.
            if consumer.is_none() || failures >= 3 {
                let opened = self
                    .streams
                    .consumer(ACP_STREAM, &self.durable, &self.filter, AckMode::All)
                    .await;
                failures = 0;
                match opened {
                    Ok(c) => consumer = Some(c),
                    Err(err) => {
                        tracing::warn!(%err, "acp consumer not ready, retrying");
                        // What is numbered (and live) is stored meanwhile.
                        pending.send(&batch_tx).await;
                        consumer = None;
                        if sleep_or_stop(Duration::from_secs(1), &stop).await {
                            break;
                        }
                        continue;
                    }
                }
            }
            let Some(current) = consumer.as_mut() else {
                continue;
            };
            let fetched = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                // Messages are batches of events: bound the pull by bytes.
                fetched = current.fetch(PULL_MESSAGES, PULL_BYTES, pending.wait()) => fetched,
            };
            match fetched {
                Ok(messages) => {
                    failures = 0;
                    self.take(messages, &mut counters, &mut pending, &batch_tx)
                        .await;
                }
                Err(err) => {
                    failures += 1;
                    tracing::warn!(%err, failures, "acp consumer: cannot pull, retrying");
                    pending.send(&batch_tx).await;
                    if sleep_or_stop(Duration::from_secs(1), &stop).await {
                        break;
                    }
                }
            }
        }
        pending.send(&batch_tx).await;
        drop(batch_tx);
        let _ = writer.await;
    }

    /// Numbers pulled messages, sends them live at once, and hands them to
    /// the writer in batches (by size, or once the batch is due).
    async fn take(
        &self,
        messages: Vec<Delivered>,
        counters: &mut Counters,
        pending: &mut Pending,
        batch_tx: &mpsc::Sender<Batch>,
    ) {
        for msg in messages {
            pending.start();
            let numbered = self.number(counters, &msg).await;
            if let Some(first) = numbered.first() {
                self.hub.publish(first.task_id, &numbered);
                self.publish_live(first.task_id, &numbered).await;
            }
            pending.frames.extend(numbered);
            pending.last = Some(msg);
            if pending.frames.len() >= self.flush_max {
                pending.send(batch_tx).await;
            }
            // Let the clients' writers run between bursts.
            tokio::task::yield_now().await;
        }
        if pending.due() {
            pending.send(batch_tx).await;
        }
    }

    /// Sends numbered frames to `feed.<task_id>` (live, not stored):
    /// the live feed every gateway fans out to its clients. Frames are
    /// joined by newlines (JSON text holds none); headers give the seqs.
    /// Lost live frames are no loss: readers fill gaps from `ReadFeed`.
    async fn publish_live(&self, task_id: Uuid, frames: &[Arc<Frame>]) {
        let (Some(first), Some(last)) = (frames.first(), frames.last()) else {
            return;
        };
        let size = frames.iter().map(|f| f.text.len() + 1).sum();
        let mut payload = Vec::with_capacity(size);
        for (i, f) in frames.iter().enumerate() {
            if i > 0 {
                payload.push(b'\n');
            }
            payload.extend_from_slice(f.text.as_bytes());
        }
        let message = LiveMessage {
            headers: vec![
                (subjects::LIVE_FIRST_SEQ.to_string(), first.seq.to_string()),
                (subjects::LIVE_LAST_SEQ.to_string(), last.seq.to_string()),
            ],
            payload: payload.into(),
        };
        if let Err(err) = self
            .live
            .publish(&subjects::feed_live(&task_id), message)
            .await
        {
            tracing::debug!(%err, "live feed not published");
        }
    }

    /// Numbers the events of one batch that were not numbered before; none
    /// when the message is malformed or only repeats numbered events.
    async fn number(&self, counters: &mut Counters, msg: &Delivered) -> Vec<Arc<Frame>> {
        let json = match kandev_events::pack::unpack(&msg.payload) {
            Ok(json) => json,
            Err(err) => {
                tracing::warn!(%err, subject = %msg.subject, "skipping a damaged acp batch");
                return Vec::new();
            }
        };
        let envelope = match kandev_events::agent::read_batch(&json) {
            Ok(e) => e,
            Err(err) => {
                tracing::warn!(%err, subject = %msg.subject, "skipping a malformed acp batch");
                return Vec::new();
            }
        };
        let b = envelope.data;
        if self.fence.contains(&b.instance_id) {
            tracing::info!(task_id = %b.task_id, instance = %b.instance_id,
                "dropping messages of an instance whose run moved to another manager");
            metrics::counter!(crate::metric_names::FEED_FENCED_BATCHES).increment(1);
            return Vec::new();
        }
        // The database is the truth; retry until it answers.
        let (mut last, mut seq) = loop {
            let result = async {
                let last = counters
                    .instance_last(self.store.as_ref(), b.instance_id)
                    .await?;
                let next = counters.next_seq(self.store.as_ref(), b.task_id).await?;
                Ok::<_, sqlx::Error>((last, next))
            }
            .await;
            match result {
                Ok(found) => break found,
                Err(err) => {
                    tracing::warn!(%err, "acp consumer: database unavailable, retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let mut frames = Vec::with_capacity(b.events.len());
        for (i, event) in b.events.iter().enumerate() {
            let instance_seq = i64::try_from(b.first_seq + i as u64).unwrap_or(i64::MAX);
            if instance_seq <= last {
                continue;
            }
            frames.push(Frame::new(
                b.task_id,
                seq,
                b.instance_id,
                instance_seq,
                event,
            ));
            seq += 1;
            last = instance_seq;
        }
        counters.instance_last.insert(b.instance_id, last);
        counters.next_seq.insert(b.task_id, seq);
        // A packed batch numbered whole is stored as it came.
        let whole = frames.len() == b.events.len()
            && store::is_one_chunk(frames.len())
            && kandev_events::pack::is_packed(&msg.payload);
        frames
            .into_iter()
            .map(|mut frame| {
                if whole {
                    frame.batch = Some(msg.payload.clone());
                }
                Arc::new(frame)
            })
            .collect()
    }
}

/// Numbered frames not yet handed to the writer, with the message that
/// acknowledges them, due by `deadline`.
struct Pending {
    frames: Vec<Arc<Frame>>,
    last: Option<Delivered>,
    flush_every: Duration,
    deadline: tokio::time::Instant,
}

impl Pending {
    fn new(flush_every: Duration) -> Self {
        Pending {
            frames: Vec::new(),
            last: None,
            flush_every,
            deadline: tokio::time::Instant::now() + flush_every,
        }
    }

    /// A message is about to join: the first of a batch sets its deadline.
    fn start(&mut self) {
        if self.last.is_none() {
            self.deadline = tokio::time::Instant::now() + self.flush_every;
        }
    }

    /// How long a pull may wait: until the batch in hand is due, or a
    /// pull's length when there is none.
    fn wait(&self) -> Duration {
        if self.last.is_some() {
            self.deadline
                .saturating_duration_since(tokio::time::Instant::now())
        } else {
            Duration::from_secs(30)
        }
    }

    fn due(&self) -> bool {
        self.last.is_some() && tokio::time::Instant::now() >= self.deadline
    }

    /// Hands the batch to the writer.
    async fn send(&mut self, tx: &mpsc::Sender<Batch>) {
        if let Some(last) = self.last.take() {
            let batch = Batch {
                frames: std::mem::take(&mut self.frames),
                last,
            };
            let _ = tx.send(batch).await;
        }
    }
}

/// Commits batches in order, then acknowledges them and trims the tail.
async fn write_batches(
    store: Arc<dyn FeedStore>,
    hub: Arc<FeedHub>,
    mut rx: mpsc::Receiver<Batch>,
    stop: CancellationToken,
) {
    let mut queued = Vec::new();
    // Whatever queued while the last commit ran goes in one commit (group
    // commit): a slow disk costs bigger writes, not a stalled feed.
    while rx.recv_many(&mut queued, 64).await > 0 {
        let frames: Vec<Arc<Frame>> = queued
            .iter()
            .flat_map(|b| b.frames.iter().cloned())
            .collect();
        let Some(last) = queued.pop().map(|b| b.last) else {
            continue;
        };
        queued.clear();
        let span = tracing::info_span!("feed_store", frames = frames.len());
        let mut attempt = 0u32;
        loop {
            match store.append(&frames).instrument(span.clone()).await {
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
        // Acknowledges every message up to the last (AckPolicy::All).
        if let Err(err) = last.ack().instrument(span).await {
            // Redelivered later and skipped as duplicates.
            tracing::warn!(%err, "feed ack failed");
        }
        let mut last_per_task: HashMap<Uuid, i64> = HashMap::new();
        for f in &frames {
            last_per_task.insert(f.task_id, f.seq);
        }
        for (task_id, seq) in last_per_task {
            hub.flushed(task_id, seq);
        }
    }
}
