//! How the feed is kept, behind [`FeedStore`]: in Postgres
//! ([`PgFeedStore`]) or in a SQLite file ([`SqliteFeedStore`]), one store
//! over either ([`DbFeedStore`], the two databases' differences in
//! `db::FeedDb`), in chunks,
//! each a run of consecutive
//! events of one task from one agent instance (`first_seq..=last_seq`,
//! numbered from `first_instance_seq` within the instance), their JSON
//! texts in one array, or the agent manager's packed batch that held
//! exactly those events, kept as it came (a flood's batches: not
//! compressed a second time, and a seventh of the bytes to write).
//!
//! A row per event would cost a heap tuple and two index entries per
//! message; a chunk costs them once per write batch, and Postgres stores
//! the array compressed. The chunking and the reading of chunks back are
//! here, once; the backends only read and write rows. Chunks of a task
//! never overlap: the consumer numbers each event once, and a chunk written
//! twice (a commit whose answer was lost) has the same `(task_id,
//! first_seq)` and is dropped.
//!
//! Beside the chunks, in the same transaction, the compacted view of each
//! task's feed ([`items`]): one item per message, thought or other event,
//! what a client that shows the feed reads ([`FeedStore::page`]).

// `db::FeedDb`, sealed in these private modules, names the crate's own
// `Chunk`.
#[allow(private_interfaces)]
mod db;
mod items;
#[allow(private_interfaces)]
mod pg;
mod reads;
#[allow(private_interfaces)]
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use kandev_events::pack;
use serde_json::value::RawValue;
use uuid::Uuid;

pub use db::DbFeedStore;
pub use items::{EventItem, FeedItem, FeedPage, ITEM_TEXT_BYTES, ItemKind, PAGE_BYTES, TextItem};
pub use pg::PgFeedStore;
pub use sqlite::SqliteFeedStore;

use super::Frame;

type Result<T> = std::result::Result<T, sqlx::Error>;

/// The stored feed. Its contract (`tests/api/contract.rs` and
/// `tests/api/feed_items.rs` check it against both databases): seqs of a
/// task are stored once each, a chunk written twice is dropped, reads
/// return stored frames in seq order; the compacted view covers the stored
/// seqs from 1 without a gap, each once.
#[async_trait]
pub trait FeedStore: Send + Sync + 'static {
    /// Stored frames of a task with `seq > after`, in order, at most `limit`.
    async fn history(&self, task_id: Uuid, after: i64, limit: i64) -> Result<Vec<Frame>>;
    /// A page of the task's compacted feed: the newest `limit` items (at
    /// most [`PAGE_BYTES`] of them, at least one) that start before
    /// `before`, or before the end when `None`. A read of the newest page
    /// first brings the view up to the stored frames when it is behind
    /// (a feed stored before the view existed).
    async fn page(&self, task_id: Uuid, before: Option<i64>, limit: i64) -> Result<FeedPage>;
    /// Instances whose run moved to another agent manager (see
    /// [`super::Fence`]).
    async fn moved_instances(&self) -> Result<Vec<Uuid>>;
    /// The highest stored seq of a task (0 when none).
    async fn last_seq(&self, task_id: Uuid) -> Result<i64>;
    /// The highest stored `instance_seq` of an agent instance (0 when none).
    async fn instance_last_seq(&self, instance_id: Uuid) -> Result<i64>;
    /// Appends frames, already numbered, in one transaction.
    async fn append(&self, frames: &[Arc<Frame>]) -> Result<()>;
}

/// A stored chunk as read back: `(first_seq, last_seq, instance_id,
/// first_instance_seq, events, events_lz4)`; the events are the JSON text of
/// `events`, or of `events_lz4` when it is set: an array compressed here, or
/// the agent manager's whole `acp.message` batch as it came (packed by
/// `kandev_events::pack`, which starts `KLZ4`: read as a size, more than
/// any chunk may claim, so the two never mix up).
type ChunkRow = (i64, i64, Uuid, i64, String, Option<Vec<u8>>);

/// The largest chunk text a compressed chunk may claim (a chunk holds at
/// most [`CHUNK_BYTES`] and one event): more is a damaged row, refused
/// before anything is allocated for it.
const MAX_UNPACKED: usize = 64 << 20;

/// A chunk's events as `events_lz4` keeps them.
fn pack(events: &str) -> Vec<u8> {
    lz4_flex::compress_prepend_size(events.as_bytes())
}

/// The text of `events_lz4`.
fn unpack(packed: &[u8]) -> std::result::Result<String, String> {
    let (claimed, block) = lz4_flex::block::uncompressed_size(packed)
        .map_err(|e| format!("compressed events without their size: {e}"))?;
    if claimed > MAX_UNPACKED {
        return Err(format!("compressed events claim {claimed} bytes"));
    }
    let bytes = lz4_flex::decompress(block, claimed).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// The text of an item row: `text`, or `text_lz4` when it is set.
fn stored_text(text: String, packed: Option<Vec<u8>>) -> std::result::Result<String, String> {
    match packed {
        Some(p) => unpack(&p),
        None => Ok(text),
    }
}

/// The range of chunk starts that may hold `after+1..=after+limit`: seqs of
/// a task are contiguous and a chunk holds at most [`CHUNK_EVENTS`].
fn chunk_starts(after: i64, limit: i64) -> (i64, i64) {
    (after - CHUNK_EVENTS as i64, after + limit)
}

/// The events of a chunk stored as the agent manager's batch, which must
/// be of `instance_id` from `first_instance_seq`.
fn batch_events(
    json: &[u8],
    instance_id: Uuid,
    first_instance_seq: i64,
) -> std::result::Result<Vec<&str>, String> {
    let batch = kandev_events::agent::read_batch(json).map_err(|e| e.to_string())?;
    let b = batch.data;
    if b.instance_id != instance_id || i64::try_from(b.first_seq) != Ok(first_instance_seq) {
        return Err(format!(
            "a batch of instance {} from {} stored as {instance_id} from {first_instance_seq}",
            b.instance_id, b.first_seq
        ));
    }
    Ok(b.events)
}

/// The frames of `rows` (chunks of `task_id` in `first_seq` order) with
/// `after < seq <= after + limit`.
fn frames_of(task_id: Uuid, after: i64, limit: i64, rows: Vec<ChunkRow>) -> Result<Vec<Frame>> {
    let mut frames = Vec::new();
    for (first_seq, last_seq, instance_id, first_instance_seq, events, packed) in rows {
        let bad = |what: String| {
            sqlx::Error::Decode(
                format!("feed chunk of task {task_id} at seq {first_seq}: {what}").into(),
            )
        };
        enum Stored {
            Array(String),
            Batch(Vec<u8>),
        }
        let stored = match packed {
            Some(p) if pack::is_packed(&p) => {
                Stored::Batch(pack::unpack(&p).map_err(bad)?.into_owned())
            }
            Some(p) => Stored::Array(unpack(&p).map_err(bad)?),
            None => Stored::Array(events),
        };
        let events: Vec<&str> = match &stored {
            Stored::Batch(json) => {
                batch_events(json, instance_id, first_instance_seq).map_err(bad)?
            }
            Stored::Array(text) => serde_json::from_str::<Vec<&RawValue>>(text)
                .map_err(|e| bad(e.to_string()))?
                .into_iter()
                .map(RawValue::get)
                .collect(),
        };
        if events.len() as i64 != last_seq - first_seq + 1 {
            return Err(bad(format!(
                "{} events for seqs up to {last_seq}",
                events.len()
            )));
        }
        for (i, event) in events.into_iter().enumerate() {
            let seq = first_seq + i as i64;
            if seq > after && seq <= after + limit {
                frames.push(Frame::new(
                    task_id,
                    seq,
                    instance_id,
                    first_instance_seq + i as i64,
                    event,
                ));
            }
        }
    }
    Ok(frames)
}

/// Records what one append stored.
fn appended(frames: usize, started: std::time::Instant) {
    metrics::counter!(crate::metric_names::ACP_MESSAGES, "hop" => "orchestrator_store")
        .increment(frames as u64);
    metrics::histogram!(crate::metric_names::FEED_STORE_BATCH_SIZE).record(frames as f64);
    metrics::histogram!(crate::metric_names::FEED_STORE_SECONDS)
        .record(started.elapsed().as_secs_f64());
}

/// The most events and bytes of one chunk.
const CHUNK_EVENTS: usize = 2048;
const CHUNK_BYTES: usize = 512 * 1024;

/// Whether `events` events may make one chunk (a batch stored whole).
pub(crate) fn is_one_chunk(events: usize) -> bool {
    events <= CHUNK_EVENTS
}

/// One chunk to write.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    pub task_id: Uuid,
    pub first_seq: i64,
    pub last_seq: i64,
    pub instance_id: Uuid,
    pub first_instance_seq: i64,
    last_instance_seq: i64,
    /// The events' JSON array; empty when the chunk is `batch`.
    pub events: String,
    /// The agent manager's packed batch the chunk's frames are exactly the
    /// events of: stored as it came.
    pub batch: Option<bytes::Bytes>,
    count: usize,
}

impl Chunk {
    /// The chunk of `frames`, every event of one packed batch.
    fn whole_batch(frames: &[Arc<Frame>], batch: bytes::Bytes) -> Chunk {
        let (first, last) = (&frames[0], &frames[frames.len() - 1]);
        Chunk {
            task_id: first.task_id,
            first_seq: first.seq,
            last_seq: last.seq,
            instance_id: first.instance_id,
            first_instance_seq: first.instance_seq,
            last_instance_seq: last.instance_seq,
            events: String::new(),
            batch: Some(batch),
            count: frames.len(),
        }
    }

    fn start(frame: &Frame, capacity: usize) -> Chunk {
        let mut events = String::with_capacity(capacity.min(CHUNK_BYTES) + 2);
        events.push('[');
        events.push_str(frame.event());
        Chunk {
            task_id: frame.task_id,
            first_seq: frame.seq,
            last_seq: frame.seq,
            instance_id: frame.instance_id,
            first_instance_seq: frame.instance_seq,
            last_instance_seq: frame.instance_seq,
            events,
            batch: None,
            count: 1,
        }
    }

    /// Adds the frame when it continues this chunk.
    fn extend(&mut self, frame: &Frame) -> bool {
        let continues = frame.task_id == self.task_id
            && frame.instance_id == self.instance_id
            && frame.seq == self.last_seq + 1
            && frame.instance_seq == self.last_instance_seq + 1
            && self.count < CHUNK_EVENTS
            && self.events.len() + frame.event().len() < CHUNK_BYTES;
        if continues {
            self.events.push(',');
            self.events.push_str(frame.event());
            self.last_seq = frame.seq;
            self.last_instance_seq = frame.instance_seq;
            self.count += 1;
        }
        continues
    }
}

/// Groups frames (in any task order, each task's in seq order) into chunks.
fn chunks(frames: &[Arc<Frame>]) -> Vec<Chunk> {
    // Room for every event of the batch's task: no chunk grows by copying.
    let room = |task: Uuid| -> usize {
        frames
            .iter()
            .filter(|f| f.task_id == task)
            .map(|f| f.event().len() + 1)
            .sum()
    };
    let mut open: Vec<Chunk> = Vec::new();
    let mut done: Vec<Chunk> = Vec::new();
    let mut next = 0;
    while next < frames.len() {
        let frame = &frames[next];
        if let Some(batch) = &frame.batch {
            // The batch's frames follow one another (numbered together);
            // the task's open chunk comes before them.
            let n = frames[next..]
                .iter()
                .take_while(|f| f.same_batch(frame))
                .count();
            if let Some(at) = open.iter().position(|c| c.task_id == frame.task_id) {
                done.push(open.remove(at));
            }
            done.push(Chunk::whole_batch(&frames[next..next + n], batch.clone()));
            next += n;
            continue;
        }
        next += 1;
        match open.iter_mut().position(|c| c.task_id == frame.task_id) {
            Some(i) if open[i].extend(frame) => {}
            Some(i) => {
                let next = Chunk::start(frame, room(frame.task_id));
                done.push(std::mem::replace(&mut open[i], next));
            }
            None => open.push(Chunk::start(frame, room(frame.task_id))),
        }
    }
    done.extend(open);
    for c in done.iter_mut().filter(|c| c.batch.is_none()) {
        c.events.push(']');
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_read_back_from_text_or_compressed() {
        let task = Uuid::from_u128(1);
        let instance = Uuid::from_u128(2);
        let text = r#"[{"a":1},{"b":"two"}]"#;
        let rows = vec![
            (1, 2, instance, 1, text.to_string(), None),
            (3, 4, instance, 3, String::new(), Some(pack(text))),
        ];
        let frames = frames_of(task, 0, 10, rows).expect("reads");
        let got: Vec<(i64, i64, &str)> = frames
            .iter()
            .map(|f| (f.seq, f.instance_seq, f.event()))
            .collect();
        assert_eq!(
            got,
            [
                (1, 1, r#"{"a":1}"#),
                (2, 2, r#"{"b":"two"}"#),
                (3, 3, r#"{"a":1}"#),
                (4, 4, r#"{"b":"two"}"#),
            ]
        );
    }

    #[test]
    fn a_damaged_compressed_chunk_is_an_error_not_an_allocation() {
        assert!(unpack(&[1, 2]).is_err());
        // Claims 4 GiB.
        assert!(unpack(&[0xff, 0xff, 0xff, 0xff, 0]).is_err());
        let mut packed = pack("[1,2,3]");
        packed.truncate(packed.len() - 1);
        assert!(unpack(&packed).is_err());
        let row = (
            1,
            1,
            Uuid::nil(),
            1,
            String::new(),
            Some(vec![3, 0, 0, 0, 0x30, 1, 2]),
        );
        let err = frames_of(Uuid::nil(), 0, 10, vec![row]).unwrap_err();
        assert!(err.to_string().contains("feed chunk"), "{err}");
    }

    fn frame(task: u128, seq: i64, instance: u128, iseq: i64) -> Arc<Frame> {
        Arc::new(Frame::new(
            Uuid::from_u128(task),
            seq,
            Uuid::from_u128(instance),
            iseq,
            &format!(r#"{{"seq":{iseq}}}"#),
        ))
    }

    #[test]
    fn a_batch_is_one_chunk_in_its_place_and_must_match_its_row() {
        let (task, instance) = (Uuid::from_u128(1), Uuid::from_u128(10));
        let events: Vec<serde_json::Value> = (2..=301)
            .map(|n| serde_json::json!({"seq": n, "text": "words ".repeat(20)}))
            .collect();
        let batch = kandev_events::agent::AcpBatch {
            task_id: task,
            instance_id: instance,
            first_seq: 2,
            cursor: Default::default(),
            events: events.clone(),
        };
        let packed = bytes::Bytes::from(pack::pack(batch.encode().1));
        assert!(pack::is_packed(&packed));
        let mut frames = vec![frame(1, 1, 10, 1), frame(2, 1, 20, 1)];
        for (i, event) in events.iter().enumerate() {
            let n = 2 + i as i64;
            let mut f = Frame::new(task, n, instance, n, &event.to_string());
            f.batch = Some(packed.clone());
            frames.push(Arc::new(f));
        }
        frames.push(frame(1, 302, 10, 302));
        let c = chunks(&frames);
        let summary: Vec<(u128, i64, i64, bool)> = c
            .iter()
            .map(|c| {
                (
                    c.task_id.as_u128(),
                    c.first_seq,
                    c.last_seq,
                    c.batch.is_some(),
                )
            })
            .collect();
        // Task 1's first frame, its batch, its last frame; task 2's frame.
        assert_eq!(
            summary,
            vec![
                (1, 1, 1, false),
                (1, 2, 301, true),
                (2, 1, 1, false),
                (1, 302, 302, false)
            ]
        );
        assert!(c[1].events.is_empty());

        let row = |instance, first_instance_seq| {
            (
                2,
                301,
                instance,
                first_instance_seq,
                String::new(),
                Some(packed.to_vec()),
            )
        };
        let back = frames_of(task, 0, 1000, vec![row(instance, 2)]).expect("reads");
        assert_eq!(back.len(), 300);
        for (got, want) in back.iter().zip(&frames[2..302]) {
            assert_eq!(got.text, want.text);
        }
        for wrong in [row(Uuid::from_u128(11), 2), row(instance, 3)] {
            let err = frames_of(task, 0, 1000, vec![wrong]).unwrap_err();
            assert!(err.to_string().contains("a batch of instance"), "{err}");
        }
    }

    #[test]
    fn frames_group_into_runs_per_task_and_instance() {
        let frames = vec![
            frame(1, 1, 10, 1),
            frame(2, 1, 20, 1),
            frame(1, 2, 10, 2),
            frame(2, 2, 20, 2),
            // A new instance of task 1 continues the task's seqs.
            frame(1, 3, 11, 1),
            frame(1, 4, 11, 2),
        ];
        let c = chunks(&frames);
        let summary: Vec<(u128, i64, i64, u128, i64, &str)> = c
            .iter()
            .map(|c| {
                (
                    c.task_id.as_u128(),
                    c.first_seq,
                    c.last_seq,
                    c.instance_id.as_u128(),
                    c.first_instance_seq,
                    c.events.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, 1, 2, 10, 1, r#"[{"seq":1},{"seq":2}]"#),
                (1, 3, 4, 11, 1, r#"[{"seq":1},{"seq":2}]"#),
                (2, 1, 2, 20, 1, r#"[{"seq":1},{"seq":2}]"#),
            ]
        );
    }
}
