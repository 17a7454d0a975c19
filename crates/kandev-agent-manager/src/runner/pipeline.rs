//! The event pipeline of a turn: drain → publisher, with a log writer
//! beside them and the turn's position in the manager's
//! [`ProgressBook`](super::ProgressBook).
//!
//! Exactness rests on one rule: every event is published in order, and the
//! position published with it (its `seq` and the output lines read up to
//! it) is enough to reproduce what follows. Events that come from an
//! output line can be reproduced by re-reading the agent's output from
//! that position. The others (messages the client sent, its own lifecycle
//! events) cannot: each ends its batch, and that batch is stored as a
//! *sync point* before it is published, so a restarted manager publishes
//! it again (same id: the bus drops the copy) and goes on after it.
//!
//! The publisher awaits each batch's acknowledgement before sending the
//! next, so the bus holds batches in order whatever fails; throughput comes
//! from batching: while one batch is on its way, the next one fills with
//! everything the agent writes meanwhile.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::Utc;
use kandev_acp::{
    AcpEvent, Direction, EventKind, EventStream,
    event::{ChunkRole, LogSource},
};
use kandev_events::{
    EventBus,
    agent::{BatchWriter, OutputCursor},
    subjects,
};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use uuid::Uuid;

mod linger;

use self::linger::{Bounds, Linger};
use super::{
    EventSender, Shared, bounded_text, lock,
    output::Line,
    progress::{Entry, Standing},
    publish_retrying,
};
use crate::{
    domain::{AgentInstance, LogLine},
    store::{Position, Store},
};

/// An event and the output line it came from (`None`: a sync point).
pub(super) type Positioned = (AcpEvent, Option<Line>);

/// The most events a batch takes from the queue at once.
const MAX_BATCH_EVENTS: usize = 4096;
/// The largest batch, whatever the bus allows.
const MAX_BATCH_BYTES: usize = 256 * 1024;
/// Room left in a bus message for the batch's envelope.
const ENVELOPE_ROOM: usize = 4 * 1024;
/// What a new batch has room for beyond the size of the last one.
const BATCH_ROOM: usize = 16 * 1024;
/// How much of an oversized event's wire message is kept.
const OVERSIZED_PREVIEW: usize = 4 * 1024;
/// The longest agent message kept for the turn's summary.
const MAX_SUMMARY: usize = 64 * 1024;

/// Live state of the turn, kept by the drain and the publisher.
#[derive(Debug, Default)]
pub(super) struct TurnState {
    /// The agent's current (last) message.
    pub(super) summary: String,
    summary_id: Option<String>,
    in_message: bool,
    pub(super) progress: f64,
    /// The last seq the bus acknowledged.
    pub(super) published_seq: u64,
    /// The output read up to the last published event.
    pub(super) cursor: OutputCursor,
    /// The last seq queued for publishing, and the output read up to it:
    /// where a client re-attached in the same run goes on.
    pub(super) queued_seq: u64,
    pub(super) queued_cursor: OutputCursor,
    /// The ACP session of the turn, once set up.
    pub(super) session_id: String,
}

impl TurnState {
    /// Where the turn's publishing stands, as the store keeps it.
    pub(super) fn position(&self, id: Uuid) -> Position {
        Position {
            id,
            last_seq: seq_i64(self.published_seq),
            progress: self.progress,
            cursor: self.cursor,
        }
    }

    fn observe(&mut self, event: &AcpEvent) {
        match &event.kind {
            EventKind::MessageChunk(chunk) if chunk.role == ChunkRole::Agent => {
                if !self.in_message || chunk.message_id != self.summary_id {
                    self.summary.clear();
                    self.summary_id = chunk.message_id.clone();
                    self.in_message = true;
                }
                if let Some(text) = &chunk.text
                    && self.summary.len() < MAX_SUMMARY
                {
                    self.summary.push_str(text);
                }
            }
            EventKind::Plan(plan) => {
                self.in_message = false;
                let total = plan.entries.len();
                if total > 0 {
                    let done = plan
                        .entries
                        .iter()
                        .filter(|e| e.status == "completed")
                        .count();
                    self.progress = done as f64 / total as f64;
                }
            }
            EventKind::ThoughtChunk(_)
            | EventKind::ToolCall(_)
            | EventKind::ToolCallUpdate(_)
            | EventKind::PermissionRequest(_) => self.in_message = false,
            _ => {}
        }
    }
}

pub(super) type SharedState = Arc<Mutex<TurnState>>;

impl Standing for Mutex<TurnState> {
    fn position(&self, id: Uuid) -> Position {
        lock(self).position(id)
    }
}

/// The tasks of one turn's pipeline.
pub(super) struct Pipeline {
    pub(super) state: SharedState,
    events: EventSender,
    logs: mpsc::Sender<LogLine>,
    publisher: tokio::task::JoinHandle<()>,
    /// The turn's place in the manager's [`ProgressBook`](super::ProgressBook).
    progress: Entry,
    log_writer: tokio::task::JoinHandle<()>,
}

impl Pipeline {
    /// Starts publishing for `instance` from its stored position.
    pub(super) fn start(shared: &Shared, instance: &AgentInstance) -> Pipeline {
        let settings = &shared.settings;
        let start_seq = u64::try_from(instance.last_seq).unwrap_or(0);
        let state = Arc::new(Mutex::new(TurnState {
            cursor: instance.cursor,
            progress: instance.progress,
            published_seq: start_seq,
            queued_seq: start_seq,
            queued_cursor: instance.cursor,
            session_id: instance.acp_session_id.clone(),
            ..TurnState::default()
        }));
        let (events, events_rx) = mpsc::channel(settings.publish_queue);
        let (logs, logs_rx) = mpsc::channel(1024);
        let max_bytes = shared
            .bus
            .max_payload()
            .saturating_sub(ENVELOPE_ROOM)
            .clamp(16 * 1024, MAX_BATCH_BYTES);
        let publisher = tokio::spawn(
            publisher(
                shared.bus.clone(),
                shared.store.clone(),
                instance.clone(),
                events_rx,
                state.clone(),
                max_bytes,
                Linger::new(Duration::from_millis(settings.publish_linger_ms)),
            )
            .in_current_span(),
        );
        let progress = shared.progress.enter(instance.id, state.clone());
        let log_writer = tokio::spawn(
            log_writer(
                shared.store.clone(),
                instance.id,
                settings.max_log_lines,
                logs_rx,
            )
            .in_current_span(),
        );
        Pipeline {
            state,
            events,
            logs,
            publisher,
            progress,
            log_writer,
        }
    }

    /// Starts draining a client's events into the pipeline. `turn_end`
    /// (resumed turns) is told the stop reason of the first response the
    /// agent sends, which ends the turn the earlier manager prompted.
    pub(super) fn drain(
        &self,
        events: EventStream,
        lines: super::output::LineQueue,
        turn_end: Option<watch::Sender<Option<String>>>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(
            drain(
                events,
                self.events.clone(),
                self.logs.clone(),
                self.state.clone(),
                lines,
                turn_end,
            )
            .in_current_span(),
        )
    }

    /// Waits for every queued event to be published and stores the final
    /// position; the turn's summary (the agent's last message).
    pub(super) async fn finish(self, store: &Store, id: Uuid) -> String {
        // Closing both queues ends the publisher and the log writer.
        drop(self.events);
        drop(self.logs);
        if tokio::time::timeout(Duration::from_secs(30), self.publisher)
            .await
            .is_err()
        {
            tracing::warn!(instance = %id, "event publishing did not drain in 30 s");
        }
        self.progress.leave().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.log_writer).await;
        let (last, summary) = {
            let s = lock(&self.state);
            (s.position(id), s.summary.clone())
        };
        if last.last_seq > 0
            && let Err(e) = store.save_progress(&[last]).await
        {
            tracing::warn!(error = %e, "cannot store last_seq");
        }
        summary
    }
}

fn seq_i64(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// Reads the client's events: pairs each with its output line, updates the
/// turn state, queues stderr lines for storage (dropping them when the
/// writer lags) and queues every event for publishing.
async fn drain(
    mut events: EventStream,
    out: EventSender,
    logs: mpsc::Sender<LogLine>,
    state: SharedState,
    lines: super::output::LineQueue,
    turn_end: Option<watch::Sender<Option<String>>>,
) {
    while let Some(event) = events.recv().await {
        let is_stderr =
            matches!(&event.kind, EventKind::Log(log) if log.source == LogSource::Stderr);
        let line = if event.direction == Direction::FromAgent {
            lines.pop(is_stderr)
        } else {
            None
        };
        {
            let mut s = lock(&state);
            s.observe(&event);
            s.queued_seq = event.seq;
            if let Some(line) = line {
                line.advance(&mut s.queued_cursor);
            }
        }
        if is_stderr && let EventKind::Log(log) = &event.kind {
            let _ = logs.try_send(LogLine {
                at: event.timestamp,
                stream: "stderr".into(),
                line: log.line.clone(),
            });
        }
        if let Some(tx) = &turn_end
            && event.direction == Direction::FromAgent
            && event.raw.get("method").is_none()
            && event.raw.get("id").is_some_and(|id| !id.is_null())
        {
            let stop = if let Some(result) = event.raw.get("result") {
                result
                    .get("stopReason")
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
            } else {
                event.raw.get("error").map(|_| "error".to_string())
            };
            if let Some(stop) = stop {
                let _ = tx.send(Some(stop));
            }
        }
        if out.send((event, line)).await.is_err() {
            break;
        }
    }
}

/// One event as JSON into `buf`, at most `max` bytes: an event too large
/// for the bus keeps a preview of its wire message and of its text, marked
/// `"truncated"` with the original size; the rest of the feed is intact.
fn write_event(buf: &mut Vec<u8>, event: &AcpEvent, max: usize) -> serde_json::Result<()> {
    let mark = buf.len();
    event.write_json(buf)?;
    let size = buf.len() - mark;
    if size <= max {
        return Ok(());
    }
    buf.truncate(mark);
    let mut value = serde_json::to_value(event)?;
    let raw_text = match &value["raw"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    value["raw"] = Value::String(bounded_text(&raw_text, OVERSIZED_PREVIEW));
    value["truncated"] = serde_json::json!({ "bytes": size });
    if let Some(text) = value.pointer_mut("/data/text")
        && let Some(s) = text.as_str()
    {
        *text = Value::String(bounded_text(s, max / 2));
    }
    let mut bytes = serde_json::to_vec(&value)?;
    if bytes.len() > max {
        value["data"] = serde_json::json!({ "truncated": true });
        bytes = serde_json::to_vec(&value)?;
    }
    tracing::warn!(
        seq = event.seq,
        bytes = size,
        "an acp event larger than the bus allows was truncated"
    );
    buf.extend_from_slice(&bytes);
    Ok(())
}

/// A batch being filled, and the output read up to its last event.
struct Batch {
    writer: BatchWriter,
    cursor: OutputCursor,
}

/// Whether a batch goes at once after this event: a sync point, or the
/// end of the turn (its last events are not held back).
fn ends_batch((event, line): &Positioned) -> bool {
    line.is_none() || matches!(event.kind, EventKind::TurnEnd(_))
}

/// About how many bytes an event takes in a batch.
fn event_weight((event, _): &Positioned) -> usize {
    event
        .raw_json
        .as_ref()
        .map_or(256, |raw| raw.get().len() + 128)
}

/// Sends every event of the queue to `acp.message.<task_id>`, in order,
/// in batches: everything queued at once or within the linger, up to
/// `max_bytes`, each batch ending at a sync point.
async fn publisher(
    bus: Arc<dyn EventBus>,
    store: Store,
    instance: AgentInstance,
    mut rx: mpsc::Receiver<Positioned>,
    state: SharedState,
    max_bytes: usize,
    linger: Linger,
) {
    let bounds = Bounds {
        max_items: MAX_BATCH_EVENTS,
        max_bytes,
        weight: event_weight,
        ends: ends_batch,
    };
    let mut queued = Vec::with_capacity(MAX_BATCH_EVENTS);
    let cursor = lock(&state).cursor;
    let mut publisher = Publisher {
        subject: subjects::acp_message(&instance.task_id),
        cursor,
        bus,
        store,
        instance,
        state,
        stop: CancellationToken::new(),
        batch: None,
        max_bytes,
        // The largest event leaves room for the envelope.
        max_event: max_bytes.saturating_sub(ENVELOPE_ROOM),
        capacity: BATCH_ROOM,
        packer: kandev_events::pack::Packer::default(),
    };
    while linger.gather(&mut rx, &mut queued, &bounds).await > 0 {
        for (event, line) in queued.drain(..) {
            publisher.add(event, line).await;
        }
        publisher.send_open(false).await;
    }
}

/// The state of a turn's [`publisher`].
struct Publisher {
    bus: Arc<dyn EventBus>,
    store: Store,
    instance: AgentInstance,
    state: SharedState,
    subject: String,
    stop: CancellationToken,
    /// The output read up to the last event added.
    cursor: OutputCursor,
    /// The batch being filled.
    batch: Option<Batch>,
    max_bytes: usize,
    max_event: usize,
    /// What a new batch is made with room for: as large as the last one
    /// was, with room for the event that fills it. A flood's batches are
    /// written without growing (each growth copies what is there), a slow
    /// agent's stay small.
    capacity: usize,
    packer: kandev_events::pack::Packer,
}

impl Publisher {
    /// Adds an event to the open batch: a batch it would overfill goes
    /// first, and a sync point goes at once with its batch.
    async fn add(&mut self, event: AcpEvent, line: Option<Line>) {
        let (max_bytes, max_event, cursor) = (self.max_bytes, self.max_event, self.cursor);
        let capacity = self.capacity;
        let b = self.batch.get_or_insert_with(|| Batch {
            writer: BatchWriter::new(event.seq, capacity),
            cursor,
        });
        let mark = b.writer.len();
        if let Err(e) = b
            .writer
            .push_with(|buf| write_event(buf, &event, max_event))
        {
            tracing::error!(error = %e, seq = event.seq, "cannot serialize an acp event");
            return;
        }
        if b.writer.len() > max_bytes && b.writer.count() > 1 {
            // Full: send it without this event, which starts the next.
            b.writer.pop_to(mark);
            self.send_open(false).await;
            let mut next = BatchWriter::new(event.seq, self.capacity);
            if let Err(e) = next.push_with(|buf| write_event(buf, &event, max_event)) {
                tracing::error!(error = %e, seq = event.seq, "cannot serialize an acp event");
                return;
            }
            self.batch = Some(Batch {
                writer: next,
                cursor,
            });
        }
        match line {
            Some(line) => {
                line.advance(&mut self.cursor);
                if let Some(b) = self.batch.as_mut() {
                    b.cursor = self.cursor;
                }
            }
            None => self.send_open(true).await,
        }
    }

    /// Sends the open batch, if there is one.
    async fn send_open(&mut self, sync: bool) {
        if let Some(batch) = self.batch.take() {
            self.capacity = (batch.writer.len() + BATCH_ROOM).min(self.max_bytes + BATCH_ROOM);
            self.send(batch, sync).await;
        }
    }

    /// Publishes `batch` until the bus takes it (a sync point stored
    /// first), then records how far the published events go.
    async fn send(&mut self, batch: Batch, sync: bool) {
        let instance = &self.instance;
        let first_seq = batch.writer.first_seq();
        let last_seq = first_seq + batch.writer.count() as u64 - 1;
        let (id, bytes) =
            batch
                .writer
                .finish(&instance.task_id, &instance.id, batch.cursor, Utc::now());
        if sync {
            self.save_sync(last_seq, batch.cursor, &bytes).await;
        }
        let count = last_seq + 1 - first_seq;
        let bytes = self.packer.pack(bytes);
        let size = bytes.len();
        let started = std::time::Instant::now();
        publish_retrying(
            self.bus.as_ref(),
            &self.subject,
            id,
            bytes.into(),
            &self.stop,
        )
        .await;
        metrics::histogram!(crate::metric_names::BUS_PUBLISH_SECONDS)
            .record(started.elapsed().as_secs_f64());
        metrics::histogram!(crate::metric_names::BUS_BATCH_SIZE).record(count as f64);
        metrics::counter!(crate::metric_names::ACP_MESSAGES, "hop" => "agent_manager")
            .increment(count);
        metrics::counter!(crate::metric_names::ACP_BYTES, "hop" => "agent_manager")
            .increment(size as u64);
        let mut s = lock(&self.state);
        s.published_seq = last_seq;
        s.cursor = batch.cursor;
    }

    /// Stores a sync point's batch before it leaves: a replay after a
    /// restart publishes it again and numbers what follows exactly as
    /// before.
    async fn save_sync(&self, last_seq: u64, cursor: OutputCursor, bytes: &[u8]) {
        let progress = lock(&self.state).progress;
        let stored: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        if let Err(e) = self
            .store
            .save_sync(
                self.instance.id,
                seq_i64(last_seq),
                progress,
                cursor,
                &stored,
            )
            .await
        {
            tracing::warn!(error = %e, "cannot store a sync point");
        }
    }
}

/// Batches log lines into `agent_logs`.
async fn log_writer(store: Store, id: Uuid, keep: i64, mut rx: mpsc::Receiver<LogLine>) {
    let mut batch = Vec::with_capacity(128);
    while rx.recv_many(&mut batch, 128).await > 0 {
        if let Err(e) = store.append_logs(id, &batch, keep).await {
            tracing::warn!(error = %e, "cannot store agent logs");
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use kandev_acp::event::{ChunkData, LogData};

    use super::*;

    fn chunk(seq: u64, text: &str) -> AcpEvent {
        AcpEvent {
            seq,
            timestamp: Utc::now(),
            direction: Direction::FromAgent,
            session_id: Some("s".into()),
            kind: EventKind::MessageChunk(ChunkData {
                role: ChunkRole::Agent,
                text: Some(text.into()),
                content_type: "text".into(),
                message_id: None,
            }),
            raw: serde_json::json!({"method": "session/update", "params": {"text": text}}),
            raw_json: None,
        }
    }

    fn encode_event(event: &AcpEvent, max: usize) -> Vec<u8> {
        let mut buf = Vec::new();
        write_event(&mut buf, event, max).unwrap();
        buf
    }

    #[test]
    fn small_events_are_encoded_whole() {
        let event = chunk(3, "hello");
        let bytes = encode_event(&event, 1024);
        let back: AcpEvent = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, event);
    }

    #[test]
    fn an_oversized_event_is_truncated_with_a_marker() {
        let text = "é".repeat(300_000);
        let bytes = encode_event(&chunk(9, &text), 100_000);
        assert!(bytes.len() <= 100_000, "{}", bytes.len());
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["seq"], 9);
        assert_eq!(v["kind"], "message_chunk");
        assert!(v["truncated"]["bytes"].as_u64().unwrap() > 1_000_000);
        let shown = v["data"]["text"].as_str().unwrap();
        assert!(
            shown.ends_with("the whole text is in the task's feed]"),
            "{}",
            &shown[shown.len() - 80..]
        );
        assert!(v["raw"].as_str().unwrap().len() < OVERSIZED_PREVIEW + 200);
    }

    #[test]
    fn the_summary_is_bounded() {
        let mut state = TurnState::default();
        let big = "x".repeat(40 * 1024);
        state.observe(&chunk(1, &big));
        state.observe(&chunk(2, &big));
        state.observe(&chunk(3, &big));
        assert!(state.summary.len() <= MAX_SUMMARY + big.len());
        let log = AcpEvent {
            kind: EventKind::Log(LogData {
                source: LogSource::Stderr,
                level: None,
                line: "l".into(),
            }),
            ..chunk(4, "")
        };
        state.observe(&log);
        assert!(state.in_message, "a log line does not end the message");
    }
}
