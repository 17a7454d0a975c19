//! [`Streams`] in one process: messages kept in a SQLite file (so a
//! restarted process finds them, and each consumer's ack floor), consumers
//! woken in process when a message is stored.
//!
//! Within a run, a consumer remembers what it delivered and not yet
//! acknowledged; its ack floor, stored with every acknowledgement, is the
//! message before the first of those (or the last it read). A consumer
//! opened again (after a restart) reads on from its floor.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{
        Arc, Mutex, MutexGuard, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use kandev_common::sync::lock;
use sqlx::{SqlitePool, types::Json};
use tokio::{sync::watch, time::Instant};
use uuid::Uuid;

use super::{AckMode, Acker, Consumer, Delivered, Headers, Streams, stream_of};

mod commit;
use crate::{BusError, EventBus, subjects};

/// Rows read per query while skipping messages of other subjects.
const SCAN: i64 = 512;

/// The streams of one process, in a SQLite file.
#[derive(Debug, Clone)]
pub struct LocalStreams {
    pool: SqlitePool,
    /// The last stored seq of any stream: consumers wait for it to move.
    stored: Arc<watch::Sender<u64>>,
    /// What was stored last, so consumers that keep up do not read it back.
    recent: Arc<Mutex<Recent>>,
    /// Bumped each time a consumer read on: publishers waiting for room
    /// in memory look again.
    reads: Arc<watch::Sender<u64>>,
    /// The longest a publish waits for room (see [`LocalStreams::room`]).
    room_wait: Duration,
    /// Where publishes queue to be stored, several per statement.
    committer: tokio::sync::mpsc::Sender<commit::Publish>,
}

/// Bytes of payload kept in memory per stream (the newest messages).
const RECENT_BYTES: usize = 32 << 20;

/// The longest a publish waits for an open consumer to read what storing
/// it would push out of memory (see [`LocalStreams::room`]).
const ROOM_WAIT: Duration = Duration::from_secs(1);

/// A stored message.
#[derive(Debug, Clone)]
struct Stored {
    seq: u64,
    subject: String,
    headers: Headers,
    payload: Bytes,
}

/// The newest stored messages of each stream, by seq, up to
/// [`RECENT_BYTES`] each. A consumer reads from here while the seqs it
/// needs next are all here, and from the file otherwise (after a restart,
/// or when it fell behind): both hold the same messages.
#[derive(Debug, Default)]
struct Recent {
    streams: HashMap<String, RecentStream>,
    /// The read position of each open consumer, per stream (a dropped
    /// consumer's is skipped, and removed when the stream's next opens).
    readers: HashMap<String, Vec<Weak<AtomicU64>>>,
}

#[derive(Debug, Default)]
struct RecentStream {
    messages: BTreeMap<u64, Stored>,
    bytes: usize,
    /// The newest seq stored in this run, whether or not memory still
    /// holds it: a consumer that read it has nothing to look for in the
    /// file.
    newest: u64,
}

impl RecentStream {
    /// Drops the messages up to `seq`.
    fn forget_to(&mut self, seq: u64) {
        let rest = self.messages.split_off(&(seq + 1));
        let gone = std::mem::replace(&mut self.messages, rest);
        self.bytes -= gone.values().map(|m| m.payload.len()).sum::<usize>();
    }
}

impl Recent {
    fn keep(&mut self, stream: &str, message: Stored) {
        let recent = match self.streams.get_mut(stream) {
            Some(r) => r,
            None => self.streams.entry(stream.to_string()).or_default(),
        };
        recent.bytes += message.payload.len();
        recent.newest = recent.newest.max(message.seq);
        recent.messages.insert(message.seq, message);
        while recent.bytes > RECENT_BYTES {
            let Some((_, old)) = recent.messages.pop_first() else {
                break;
            };
            recent.bytes -= old.payload.len();
        }
    }

    /// Whether keeping `bytes` more of `stream` would push out of memory a
    /// message an open consumer has not read: that consumer would then
    /// read it back from the file.
    fn would_drop_unread(&self, stream: &str, bytes: usize) -> bool {
        let Some(recent) = self.streams.get(stream) else {
            return false;
        };
        let Some(mut excess) = (recent.bytes + bytes).checked_sub(RECENT_BYTES) else {
            return false;
        };
        let Some(readers) = self.readers.get(stream) else {
            return false;
        };
        let Some(slowest) = readers
            .iter()
            .filter_map(|r| r.upgrade())
            .map(|r| r.load(Ordering::Relaxed))
            .min()
        else {
            return false;
        };
        // The oldest messages go first, until the excess is gone.
        for (seq, message) in &recent.messages {
            if *seq > slowest {
                return true;
            }
            excess = excess.saturating_sub(message.payload.len());
            if excess == 0 {
                return false;
            }
        }
        false
    }

    /// Whether `stream` holds nothing after `after`: known when a message
    /// of it was stored in this run (every later one is kept here as it
    /// is stored, and wakes the consumers).
    fn read_up(&self, stream: &str, after: u64) -> bool {
        self.streams
            .get(stream)
            .is_some_and(|r| r.newest > 0 && r.newest <= after)
    }

    /// The messages of `stream` from `after + 1` on, while their seqs
    /// follow one another; empty when `after + 1` is not here.
    fn after(&self, stream: &str, after: u64, max: usize) -> Vec<Stored> {
        let Some(recent) = self.streams.get(stream) else {
            return Vec::new();
        };
        (after + 1..)
            .zip(recent.messages.range(after + 1..))
            .take_while(|(next, (seq, _))| *next == **seq)
            .take(max)
            .map(|(_, (_, message))| message.clone())
            .collect()
    }
}

fn storage(e: sqlx::Error) -> BusError {
    BusError::Unavailable(format!("local streams: {e}"))
}

impl LocalStreams {
    /// Opens (creating it when missing) the streams' file at `url`
    /// (`sqlite:///path/streams.db`).
    pub async fn open(url: &str) -> Result<Self, BusError> {
        let pool = kandev_common::db::sqlite::connect(url, 4)
            .await
            .map_err(storage)?;
        sqlx::migrate!("./migrations-sqlite")
            .run(&pool)
            .await
            .map_err(|e| storage(e.into()))?;
        let stored = Arc::new(watch::channel(0).0);
        let recent: Arc<Mutex<Recent>> = Arc::default();
        Ok(LocalStreams {
            committer: commit::start(pool.clone(), recent.clone(), stored.clone()),
            pool,
            stored,
            recent,
            reads: Arc::new(watch::channel(0).0),
            room_wait: ROOM_WAIT,
        })
    }

    /// The same streams, whose publishes wait at most `wait` for an open
    /// consumer to read what they would push out of memory.
    pub fn with_room_wait(mut self, wait: Duration) -> Self {
        self.room_wait = wait;
        self
    }

    /// Closes the file (at shutdown).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Drops messages stored more than `max_age` ago, as JetStream's
    /// `max_age` does (consumers that were away longer miss them), but the
    /// last of each stream: the next message is numbered after it, so it
    /// must stay for numbering to go on above every consumer's floor.
    /// Returns how many went.
    pub async fn prune(&self, max_age: Duration) -> Result<u64, BusError> {
        let max_age = chrono::Duration::from_std(max_age).unwrap_or(chrono::Duration::MAX);
        let cutoff = kandev_common::db::sqlite::time(chrono::Utc::now() - max_age);
        let done = sqlx::query(
            "DELETE FROM stream_messages AS m WHERE at < ?1
               AND seq < (SELECT max(seq) FROM stream_messages WHERE stream = m.stream)",
        )
        .bind(cutoff)
        .execute(&self.pool)
        .await
        .map_err(storage)?;
        if done.rows_affected() > 0 {
            // Rare (hourly, a week on): what memory held is read again.
            self.recent().streams.clear();
        }
        Ok(done.rows_affected())
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        lock(&self.recent)
    }

    /// Waits, at most [`ROOM_WAIT`] (or as set), until keeping `bytes`
    /// more of `stream` in memory no longer pushes out a message an open
    /// consumer has not read. Publishers that outrun a consumer are slowed
    /// to its pace (an agent's output waits in its pipe, as it would for
    /// any reader) instead of growing a backlog the consumer then reads
    /// back from the file, at twice the cost; a consumer that stopped
    /// reading delays each publish by the bound, and stops nothing.
    async fn room(&self, stream: &str, bytes: usize) {
        let mut reads = self.reads.subscribe();
        let deadline = Instant::now() + self.room_wait;
        loop {
            reads.borrow_and_update();
            if !self.recent().would_drop_unread(stream, bytes) {
                return;
            }
            match tokio::time::timeout_at(deadline, reads.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    metrics::counter!(crate::metric_names::LOCAL_STREAMS_ROOM_TIMEOUTS)
                        .increment(1);
                    return;
                }
            }
        }
    }

    /// Drops the messages of `stream` that every durable consumer of it
    /// has acknowledged, but the last of each subject (which
    /// [`EventBus::last_message`] answers with); returns how many. Nothing
    /// goes while the stream has no consumer. For a stream whose consumers
    /// are all known from the start (the agents' output, read by the
    /// feed): it then holds what is in flight, not a copy of the feed, and
    /// its file stops growing.
    pub async fn prune_consumed(&self, stream: &str) -> Result<u64, BusError> {
        let floor: Option<i64> =
            sqlx::query_scalar("SELECT min(ack_floor) FROM stream_consumers WHERE stream = ?1")
                .bind(stream)
                .fetch_one(&self.pool)
                .await
                .map_err(storage)?;
        let Some(floor) = floor else {
            return Ok(0);
        };
        let done = sqlx::query(
            "DELETE FROM stream_messages
             WHERE stream = ?1 AND seq <= ?2
               AND seq NOT IN (SELECT max(seq) FROM stream_messages
                               WHERE stream = ?1 GROUP BY subject)",
        )
        .bind(stream)
        .bind(floor)
        .execute(&self.pool)
        .await
        .map_err(storage)?;
        // Memory holds no message the file lost: a consumer new to the
        // stream reads the kept ones from the file.
        if let Some(recent) = self.recent().streams.get_mut(stream) {
            recent.forget_to(floor as u64);
        }
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl Streams for LocalStreams {
    async fn publish_with(
        &self,
        subject: &str,
        id: Uuid,
        headers: &Headers,
        payload: Bytes,
    ) -> Result<(), BusError> {
        let stream = stream_of(subject)?.name;
        self.room(stream, payload.len()).await;
        let (done, stored) = tokio::sync::oneshot::channel();
        let publish = commit::Publish {
            stream,
            subject: subject.to_string(),
            id,
            headers: headers.clone(),
            payload,
            done,
        };
        let closed = || BusError::Unavailable("local streams: closed".into());
        self.committer.send(publish).await.map_err(|_| closed())?;
        stored.await.map_err(|_| closed())?
    }

    async fn consumer(
        &self,
        stream: &str,
        durable: &str,
        filter: &str,
        mode: AckMode,
    ) -> Result<Box<dyn Consumer>, BusError> {
        sqlx::query(
            "INSERT INTO stream_consumers (stream, durable, ack_floor) VALUES (?1, ?2, 0)
             ON CONFLICT DO NOTHING",
        )
        .bind(stream)
        .bind(durable)
        .execute(&self.pool)
        .await
        .map_err(storage)?;
        let floor: i64 = sqlx::query_scalar(
            "SELECT ack_floor FROM stream_consumers WHERE stream = ?1 AND durable = ?2",
        )
        .bind(stream)
        .bind(durable)
        .fetch_one(&self.pool)
        .await
        .map_err(storage)?;
        let state = Arc::new(LocalAcks {
            pool: self.pool.clone(),
            stream: stream.to_string(),
            durable: durable.to_string(),
            mode,
            books: Mutex::new(Books {
                read: floor as u64,
                floor: floor as u64,
                ..Books::default()
            }),
        });
        let position = Arc::new(AtomicU64::new(floor as u64));
        {
            let mut recent = self.recent();
            let readers = recent.readers.entry(stream.to_string()).or_default();
            // Those of consumers dropped since go as a new one comes.
            readers.retain(|r| r.strong_count() > 0);
            readers.push(Arc::downgrade(&position));
        }
        Ok(Box::new(LocalConsumer {
            pool: self.pool.clone(),
            recent: self.recent.clone(),
            filter: filter.to_string(),
            stored: self.stored.subscribe(),
            acks: state,
            position,
            reads: self.reads.clone(),
        }))
    }
}

#[async_trait]
impl EventBus for LocalStreams {
    async fn publish(&self, subject: &str, id: Uuid, payload: Bytes) -> Result<(), BusError> {
        let mut headers = Headers::new();
        if let Some(traceparent) = kandev_common::trace::current() {
            headers.push((kandev_common::trace::TRACEPARENT.to_string(), traceparent));
        }
        self.publish_with(subject, id, &headers, payload).await
    }

    async fn last_message(&self, subject: &str) -> Result<Option<Bytes>, BusError> {
        let stream = stream_of(subject)?.name;
        let payload: Option<Vec<u8>> = sqlx::query_scalar(
            "SELECT payload FROM stream_messages WHERE stream = ?1 AND subject = ?2
             ORDER BY seq DESC LIMIT 1",
        )
        .bind(stream)
        .bind(subject)
        .fetch_optional(&self.pool)
        .await
        .map_err(storage)?;
        Ok(payload.map(Bytes::from))
    }
}

/// What a consumer delivered and what was acknowledged.
#[derive(Debug, Default)]
struct Books {
    /// The last seq read from the stream.
    read: u64,
    /// The stored ack floor.
    floor: u64,
    /// Delivered and not acknowledged yet.
    pending: BTreeSet<u64>,
    /// How many times each pending message was delivered.
    deliveries: HashMap<u64, u64>,
    /// Messages to deliver again, by when.
    again: BTreeMap<(Instant, u64), ()>,
}

impl Books {
    /// The floor these books allow: before the first pending message.
    fn floor(&self) -> u64 {
        self.pending
            .first()
            .map_or(self.read, |first| first.saturating_sub(1))
    }
}

struct LocalAcks {
    pool: SqlitePool,
    stream: String,
    durable: String,
    mode: AckMode,
    books: Mutex<Books>,
}

impl LocalAcks {
    fn books(&self) -> MutexGuard<'_, Books> {
        lock(&self.books)
    }
}

#[async_trait]
impl Acker for LocalAcks {
    async fn ack(&self, seq: u64) -> Result<(), BusError> {
        let floor = {
            let mut books = self.books();
            match self.mode {
                AckMode::Explicit => {
                    books.pending.remove(&seq);
                }
                AckMode::All => {
                    let rest = books.pending.split_off(&(seq + 1));
                    books.pending = rest;
                }
            }
            let pending = books.pending.clone();
            books.deliveries.retain(|s, _| pending.contains(s));
            books.again.retain(|(_, s), _| pending.contains(s));
            let floor = books.floor();
            if floor <= books.floor {
                return Ok(());
            }
            books.floor = floor;
            floor
        };
        sqlx::query(
            "UPDATE stream_consumers SET ack_floor = max(ack_floor, ?3)
             WHERE stream = ?1 AND durable = ?2",
        )
        .bind(&self.stream)
        .bind(&self.durable)
        .bind(floor as i64)
        .execute(&self.pool)
        .await
        .map_err(storage)?;
        Ok(())
    }

    async fn nak(&self, seq: u64, delay: Duration) -> Result<(), BusError> {
        let mut books = self.books();
        if books.pending.contains(&seq) {
            books.again.insert((Instant::now() + delay, seq), ());
        }
        Ok(())
    }
}

struct LocalConsumer {
    pool: SqlitePool,
    recent: Arc<Mutex<Recent>>,
    filter: String,
    stored: watch::Receiver<u64>,
    acks: Arc<LocalAcks>,
    /// The last seq read, as publishers see it (see [`LocalStreams::room`]).
    position: Arc<AtomicU64>,
    reads: Arc<watch::Sender<u64>>,
}

type Row = (i64, String, Json<Headers>, Vec<u8>);

impl From<Row> for Stored {
    fn from((seq, subject, headers, payload): Row) -> Stored {
        Stored {
            seq: seq as u64,
            subject,
            headers: headers.0,
            payload: Bytes::from(payload),
        }
    }
}

impl LocalConsumer {
    fn delivered(&self, message: Stored) -> Delivered {
        let Stored {
            seq,
            subject,
            headers,
            payload,
        } = message;
        let delivered = {
            let mut books = self.acks.books();
            books.pending.insert(seq);
            let count = books.deliveries.entry(seq).or_insert(0);
            *count += 1;
            *count
        };
        Delivered {
            subject,
            headers,
            payload,
            stream_seq: seq,
            delivered,
            acker: self.acks.clone(),
        }
    }

    /// Messages whose redelivery is due, and when the next one is.
    fn due(&self) -> (Vec<u64>, Option<Instant>) {
        let mut books = self.acks.books();
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some((&(at, seq), _)) = books.again.first_key_value() {
            if at > now {
                return (due, Some(at));
            }
            books.again.remove(&(at, seq));
            due.push(seq);
        }
        (due, None)
    }

    async fn row(&self, seq: u64) -> Result<Option<Stored>, BusError> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT seq, subject, headers, payload FROM stream_messages
             WHERE stream = ?1 AND seq = ?2",
        )
        .bind(&self.acks.stream)
        .bind(seq as i64)
        .fetch_optional(&self.pool)
        .await
        .map_err(storage)?;
        Ok(row.map(Stored::from))
    }

    /// New messages of the filter after the last read, up to the limits;
    /// tells waiting publishers how far it read.
    async fn read_on(&self, max: usize, max_bytes: usize) -> Result<Vec<Delivered>, BusError> {
        let out = self.scan_on(max, max_bytes).await;
        let read = self.acks.books().read;
        if self.position.swap(read, Ordering::Relaxed) != read {
            self.reads.send_modify(|n| *n = n.wrapping_add(1));
        }
        out
    }

    /// [`Self::read_on`] without telling publishers.
    async fn scan_on(&self, max: usize, max_bytes: usize) -> Result<Vec<Delivered>, BusError> {
        let mut out = Vec::new();
        let mut bytes = 0;
        loop {
            let after = self.acks.books().read;
            let (kept, read_up) = {
                let recent = lock(&self.recent);
                let kept = recent.after(&self.acks.stream, after, SCAN as usize);
                (kept, recent.read_up(&self.acks.stream, after))
            };
            if read_up {
                return Ok(out);
            }
            let rows: Vec<Stored> = if kept.is_empty() {
                self.stored_after(after).await?
            } else {
                kept
            };
            let scanned = rows.len() as i64;
            for row in rows {
                if out.len() >= max || (!out.is_empty() && bytes + row.payload.len() > max_bytes) {
                    return Ok(out);
                }
                self.acks.books().read = row.seq;
                if subjects::matches(&self.filter, &row.subject) {
                    bytes += row.payload.len();
                    out.push(self.delivered(row));
                }
            }
            if scanned < SCAN || !out.is_empty() {
                return Ok(out);
            }
        }
    }

    /// Up to [`SCAN`] stored messages after `after`, from the file.
    async fn stored_after(&self, after: u64) -> Result<Vec<Stored>, BusError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT seq, subject, headers, payload FROM stream_messages
                 WHERE stream = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )
        .bind(&self.acks.stream)
        .bind(after as i64)
        .bind(SCAN)
        .fetch_all(&self.pool)
        .await
        .map_err(storage)?;
        Ok(rows.into_iter().map(Stored::from).collect())
    }
}

#[async_trait]
impl Consumer for LocalConsumer {
    async fn fetch(
        &mut self,
        max: usize,
        max_bytes: usize,
        wait: Duration,
    ) -> Result<Vec<Delivered>, BusError> {
        let deadline = Instant::now() + wait;
        loop {
            // What is seen stored from here on wakes the wait below.
            self.stored.borrow_and_update();
            let (due, next) = self.due();
            let mut out = Vec::new();
            for seq in due {
                if let Some(row) = self.row(seq).await? {
                    out.push(self.delivered(row));
                }
            }
            if out.len() < max {
                out.extend(self.read_on(max - out.len(), max_bytes).await?);
            }
            if !out.is_empty() {
                return Ok(out);
            }
            let until = next.map_or(deadline, |n| n.min(deadline));
            tokio::select! {
                changed = self.stored.changed() => {
                    if changed.is_err() {
                        return Ok(out);
                    }
                }
                () = tokio::time::sleep_until(until) => {
                    if Instant::now() >= deadline {
                        return Ok(out);
                    }
                }
            }
        }
    }
}
