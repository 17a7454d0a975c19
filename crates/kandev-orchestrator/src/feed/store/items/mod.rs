//! The compacted feed: a task's feed as a client that shows it reads it,
//! one item per message, thought or other event instead of one frame per
//! chunk, so opening a long session costs its messages, not its chunks.
//!
//! - Consecutive chunks of one message (or thought) become one item: same
//!   kind, role, `message_id` and agent instance, consecutive seqs and
//!   instance seqs, each with a text. Its text is the chunks' texts
//!   concatenated, at most [`ITEM_TEXT_BYTES`] (a longer message goes on
//!   in the next item; one chunk is never split, so a single larger chunk
//!   is an item of its own).
//! - Every other event (a tool call or its update, a permission request or
//!   answer, a turn end, a prompt, a chunk without text…) is an item of
//!   its own holding the event's JSON as it is in the frame.
//!
//! So items cover the task's seqs `1..=covered` exactly, each seq once and
//! in order. The rows are written in the transaction that stores the
//! frames (`feed_items` beside `feed_chunks`): the view never claims a seq
//! that is not stored, and a reader continues with the frames after the
//! last seq a page covers. Only the last item of a task may still grow: its
//! text is kept in pieces (one row per append that extended it), rewritten
//! as one row when the item closes or has [`MAX_PIECES`] rows, so an append
//! costs about the text it adds, not the whole item. A task whose items
//! are behind its stored frames (a feed stored before the view existed)
//! is brought up to date from the frames, in steps, when it is next
//! appended to or read. Writers of one task's items are serialized (a
//! transaction-scoped advisory lock on Postgres, `BEGIN IMMEDIATE` on
//! SQLite), so a reader's catch-up and the consumer's appends never
//! interleave.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::Result;
use crate::feed::Frame;

/// The most text bytes of one message or thought item (unless one chunk
/// alone has more).
pub const ITEM_TEXT_BYTES: usize = 64 * 1024;
/// The most bytes of items one page returns (at least one item).
pub const PAGE_BYTES: usize = 1024 * 1024;
/// Rows the last item may have before they are rewritten as one.
const MAX_PIECES: i64 = 32;
/// Frames read per step when items catch up with stored frames.
const CATCH_UP_STEP: i64 = 16_384;

/// What an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// Chunks of a user or agent message.
    Message,
    /// Chunks of the agent's reasoning.
    Thought,
    /// One event of any other kind.
    Event,
}

impl ItemKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Message => "message",
            ItemKind::Thought => "thought",
            ItemKind::Event => "event",
        }
    }

    fn parse(text: &str) -> Option<ItemKind> {
        match text {
            "message" => Some(ItemKind::Message),
            "thought" => Some(ItemKind::Thought),
            "event" => Some(ItemKind::Event),
            _ => None,
        }
    }
}

/// One item of a page, as the API shows it (`kind` tags it).
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FeedItem {
    Message(TextItem),
    Thought(TextItem),
    Event(EventItem),
}

/// A message or thought: its chunks' texts as one.
#[derive(Debug, Serialize)]
pub struct TextItem {
    pub first_seq: i64,
    pub last_seq: i64,
    pub instance_id: Uuid,
    pub first_instance_seq: i64,
    /// `agent` or `user`.
    pub role: String,
    pub message_id: Option<String>,
    /// The first chunk's `timestamp`.
    pub timestamp: Option<String>,
    pub text: String,
}

/// Any other event, its JSON as the frame `seq` (= `first_seq`) holds it.
#[derive(Debug, Serialize)]
pub struct EventItem {
    pub first_seq: i64,
    pub last_seq: i64,
    pub instance_id: Uuid,
    pub first_instance_seq: i64,
    pub event: Box<RawValue>,
}

impl FeedItem {
    /// The item's bytes that count towards a page's bound.
    fn bytes(&self) -> usize {
        match self {
            FeedItem::Message(t) | FeedItem::Thought(t) => t.text.len() + ITEM_OVERHEAD,
            FeedItem::Event(e) => e.event.get().len() + ITEM_OVERHEAD,
        }
    }

    pub fn first_seq(&self) -> i64 {
        match self {
            FeedItem::Message(t) | FeedItem::Thought(t) => t.first_seq,
            FeedItem::Event(e) => e.first_seq,
        }
    }

    pub fn last_seq(&self) -> i64 {
        match self {
            FeedItem::Message(t) | FeedItem::Thought(t) => t.last_seq,
            FeedItem::Event(e) => e.last_seq,
        }
    }
}

/// A page of the compacted feed.
#[derive(Debug, Default, Serialize)]
pub struct FeedPage {
    /// In seq order.
    pub items: Vec<FeedItem>,
    /// The last seq the items cover (0 when there are none): after the
    /// newest page, the frames from `covers_to + 1` continue it.
    pub covers_to: i64,
    /// The first seq of the first item: the `before` of the previous page.
    pub earliest: Option<i64>,
    /// Whether items come before `earliest`.
    pub has_more: bool,
}

/// A row of `feed_items`: a whole item, or a piece of the last one
/// (`item_seq` is the first seq of the item it belongs to).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Row {
    pub task_id: Uuid,
    pub first_seq: i64,
    pub last_seq: i64,
    pub item_seq: i64,
    pub instance_id: Uuid,
    pub first_instance_seq: i64,
    pub kind: ItemKind,
    pub role: Option<String>,
    pub message_id: Option<String>,
    pub started_at: Option<String>,
    /// The item's text bytes up to the end of this row.
    pub item_bytes: i64,
    /// The item's rows up to this one.
    pub pieces: i64,
    pub text: String,
}

/// A row without its task id and text, as [`sql::LAST_ROW`] reads it.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct Meta {
    first_seq: i64,
    last_seq: i64,
    item_seq: i64,
    instance_id: Uuid,
    first_instance_seq: i64,
    kind: String,
    role: Option<String>,
    message_id: Option<String>,
    started_at: Option<String>,
    item_bytes: i64,
    pieces: i64,
}

/// [`Meta`] with the task id, as [`sql::last_rows`] reads it.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct TaskMeta {
    task_id: Uuid,
    #[sqlx(flatten)]
    meta: Meta,
}

/// [`Meta`] with the stored text, as [`sql::PAGE_ROWS`] reads it.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct StoredRow {
    #[sqlx(flatten)]
    meta: Meta,
    text: String,
    text_lz4: Option<Vec<u8>>,
}

impl Row {
    /// A row of [`sql::last_rows`] (no text).
    pub(super) fn from_task_meta(m: TaskMeta) -> Result<Row> {
        Row::from_meta(m.task_id, m.meta, String::new())
    }

    /// A row read back with its text.
    pub(super) fn read(task_id: Uuid, r: StoredRow) -> Result<Row> {
        let text = super::stored_text(r.text, r.text_lz4).map_err(|e| {
            sqlx::Error::Decode(
                format!(
                    "feed item of task {task_id} at seq {}: {e}",
                    r.meta.first_seq
                )
                .into(),
            )
        })?;
        Row::from_meta(task_id, r.meta, text)
    }

    /// A row read back (`text` already decoded).
    pub(super) fn from_meta(task_id: Uuid, m: Meta, text: String) -> Result<Row> {
        let kind = ItemKind::parse(&m.kind).ok_or_else(|| {
            sqlx::Error::Decode(
                format!(
                    "feed item of task {task_id} at seq {}: kind {:?}",
                    m.first_seq, m.kind
                )
                .into(),
            )
        })?;
        Ok(Row {
            task_id,
            first_seq: m.first_seq,
            last_seq: m.last_seq,
            item_seq: m.item_seq,
            instance_id: m.instance_id,
            first_instance_seq: m.first_instance_seq,
            kind,
            role: m.role,
            message_id: m.message_id,
            started_at: m.started_at,
            item_bytes: m.item_bytes,
            pieces: m.pieces,
            text,
        })
    }
}

mod classify;
pub(super) mod sql;
#[cfg(test)]
mod tests;

use classify::{Chunk, Class, classify};

/// The last item, while it may still grow.
#[derive(Debug)]
struct Open {
    task_id: Uuid,
    item_seq: i64,
    first_instance_seq: i64,
    instance_id: Uuid,
    kind: ItemKind,
    role: String,
    message_id: Option<String>,
    started_at: Option<String>,
    last_seq: i64,
    last_instance_seq: i64,
    item_bytes: i64,
    /// Its rows already stored.
    stored: i64,
    /// Where the text not stored yet starts: (seq, instance seq).
    new_from: Option<(i64, i64)>,
    /// The text not stored yet.
    text: String,
}

impl Open {
    fn from_row(row: &Row) -> Option<Open> {
        let role = row.role.clone()?;
        if row.kind == ItemKind::Event {
            return None;
        }
        Some(Open {
            task_id: row.task_id,
            item_seq: row.item_seq,
            first_instance_seq: row.first_instance_seq - (row.first_seq - row.item_seq),
            instance_id: row.instance_id,
            kind: row.kind,
            role,
            message_id: row.message_id.clone(),
            started_at: row.started_at.clone(),
            last_seq: row.last_seq,
            last_instance_seq: row.first_instance_seq + (row.last_seq - row.first_seq),
            item_bytes: row.item_bytes,
            stored: row.pieces,
            new_from: None,
            text: String::new(),
        })
    }

    fn start(frame: &Frame, chunk: &Chunk<'_>) -> Open {
        Open {
            task_id: frame.task_id,
            item_seq: frame.seq,
            first_instance_seq: frame.instance_seq,
            instance_id: frame.instance_id,
            kind: chunk.kind,
            role: chunk.role.to_string(),
            message_id: chunk.message_id.as_deref().map(str::to_string),
            started_at: chunk.timestamp.as_deref().map(str::to_string),
            last_seq: frame.seq,
            last_instance_seq: frame.instance_seq,
            item_bytes: chunk.text.len() as i64,
            stored: 0,
            new_from: Some((frame.seq, frame.instance_seq)),
            text: chunk.text.to_string(),
        }
    }

    /// Whether `chunk` of `frame` goes on with this item.
    fn continues(&self, frame: &Frame, chunk: &Chunk<'_>) -> bool {
        self.kind == chunk.kind
            && self.role == chunk.role
            && self.message_id.as_deref() == chunk.message_id.as_deref()
            && self.instance_id == frame.instance_id
            && frame.seq == self.last_seq + 1
            && frame.instance_seq == self.last_instance_seq + 1
            && self.item_bytes as usize + chunk.text.len() <= ITEM_TEXT_BYTES
    }

    fn extend(&mut self, frame: &Frame, text: &str) {
        self.new_from.get_or_insert((frame.seq, frame.instance_seq));
        self.text.push_str(text);
        self.item_bytes += text.len() as i64;
        self.last_seq = frame.seq;
        self.last_instance_seq = frame.instance_seq;
    }

    /// The item as one row; as a rewrite, its `text` is what follows the
    /// stored rows' text.
    fn whole(self) -> Row {
        Row {
            task_id: self.task_id,
            first_seq: self.item_seq,
            last_seq: self.last_seq,
            item_seq: self.item_seq,
            instance_id: self.instance_id,
            first_instance_seq: self.first_instance_seq,
            kind: self.kind,
            role: Some(self.role),
            message_id: self.message_id,
            started_at: self.started_at,
            item_bytes: self.item_bytes,
            pieces: 1,
            text: self.text,
        }
    }

    /// The text not stored yet as a row of its own.
    fn piece(self, (first_seq, first_instance_seq): (i64, i64)) -> Row {
        let pieces = self.stored + 1;
        Row {
            first_seq,
            first_instance_seq,
            pieces,
            ..self.whole()
        }
    }
}

/// What one compaction writes.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Writes {
    /// Items whose stored rows become this one row: its `text` is what
    /// follows theirs.
    pub rewrites: Vec<Row>,
    pub inserts: Vec<Row>,
}

/// Folds frames of one task, in seq order, into rows.
pub(super) struct Compactor {
    open: Option<Open>,
    covered: i64,
    /// A frame did not follow the covered seqs: nothing more is taken.
    broken: bool,
    writes: Writes,
}

impl Compactor {
    /// After `last`, the task's last stored row.
    pub fn new(last: Option<&Row>) -> Compactor {
        Compactor {
            open: last.and_then(Open::from_row),
            covered: last.map_or(0, |r| r.last_seq),
            broken: false,
            writes: Writes::default(),
        }
    }

    /// The last seq the items cover.
    pub fn covered(&self) -> i64 {
        self.covered
    }

    /// Adds a frame; one already covered is skipped; one after a gap
    /// stops the compaction (`false`).
    pub fn push(&mut self, frame: &Frame) -> bool {
        if frame.seq <= self.covered {
            return true;
        }
        if self.broken || frame.seq != self.covered + 1 {
            self.broken = true;
            return false;
        }
        self.covered = frame.seq;
        match classify(frame.event()) {
            Class::Chunk(chunk) => match &mut self.open {
                Some(open) if open.continues(frame, &chunk) => open.extend(frame, &chunk.text),
                _ => {
                    self.close();
                    self.open = Some(Open::start(frame, &chunk));
                }
            },
            Class::Event => {
                self.close();
                self.writes.inserts.push(Row {
                    task_id: frame.task_id,
                    first_seq: frame.seq,
                    last_seq: frame.seq,
                    item_seq: frame.seq,
                    instance_id: frame.instance_id,
                    first_instance_seq: frame.instance_seq,
                    kind: ItemKind::Event,
                    role: None,
                    message_id: None,
                    started_at: None,
                    item_bytes: frame.event().len() as i64,
                    pieces: 1,
                    text: frame.event().to_string(),
                });
            }
        }
        true
    }

    /// The open item is complete: one row.
    fn close(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        match open.stored {
            0 => self.writes.inserts.push(open.whole()),
            1 if open.text.is_empty() => {}
            _ => self.writes.rewrites.push(open.whole()),
        }
    }

    /// What to write; the last item stays open.
    pub fn finish(mut self) -> Writes {
        if let Some(open) = self.open.take()
            && let Some(from) = open.new_from
        {
            if open.stored == 0 {
                self.writes.inserts.push(open.whole());
            } else if open.stored >= MAX_PIECES {
                self.writes.rewrites.push(open.whole());
            } else {
                self.writes.inserts.push(open.piece(from));
            }
        }
        self.writes
    }
}

/// One database transaction, as the compaction uses it.
#[async_trait]
pub(super) trait ItemsTx: Send {
    /// The task's last row, without its text.
    async fn last_row(&mut self, task_id: Uuid) -> Result<Option<Row>>;
    /// The last row of each of these tasks that has one (at most
    /// [`sql::TASKS_PER_READ`]), without its text.
    async fn last_rows(&mut self, tasks: &[Uuid]) -> Result<Vec<Row>>;
    /// The text of each item's stored rows (by task id and item seq, at
    /// most [`sql::TASKS_PER_READ`]), in the order asked.
    async fn item_texts(&mut self, items: &[ItemKey]) -> Result<Vec<String>>;
    /// Deletes the stored rows of these items (at most
    /// [`sql::TASKS_PER_READ`]).
    async fn delete_items(&mut self, items: &[ItemKey]) -> Result<()>;
    async fn insert(&mut self, rows: &[Row]) -> Result<()>;
    /// Stored frames of the task after `after`, at most `limit`.
    async fn frames(&mut self, task_id: Uuid, after: i64, limit: i64) -> Result<Vec<Frame>>;
}

/// An item: its task and its first seq.
pub(super) type ItemKey = (Uuid, i64);

/// Writes what a compaction made: the rewritten items' stored text is read
/// and their rows deleted a group at a time, then every row is inserted,
/// so a flush costs a few statements however many tasks it holds.
async fn write(tx: &mut dyn ItemsTx, writes: Writes) -> Result<()> {
    let Writes {
        mut rewrites,
        inserts,
    } = writes;
    for group in rewrites.chunks_mut(sql::TASKS_PER_READ) {
        let keys: Vec<ItemKey> = group.iter().map(|r| (r.task_id, r.item_seq)).collect();
        let stored = tx.item_texts(&keys).await?;
        for (row, mut text) in group.iter_mut().zip(stored) {
            text.push_str(&row.text);
            row.text = text;
        }
        tx.delete_items(&keys).await?;
    }
    rewrites.extend(inserts);
    for rows in rewrites.chunks(sql::ROWS_PER_INSERT) {
        tx.insert(rows).await?;
    }
    Ok(())
}

/// Brings a task's items up to `upto` from its stored frames, at most
/// `steps` steps of [`CATCH_UP_STEP`] frames; the task's last row then.
async fn catch_up(
    tx: &mut dyn ItemsTx,
    task_id: Uuid,
    upto: i64,
    steps: usize,
) -> Result<Option<Row>> {
    let mut last = tx.last_row(task_id).await?;
    for _ in 0..steps {
        let covered = last.as_ref().map_or(0, |r| r.last_seq);
        if covered >= upto {
            break;
        }
        let frames = tx
            .frames(task_id, covered, (upto - covered).min(CATCH_UP_STEP))
            .await?;
        let mut compactor = Compactor::new(last.as_ref());
        let taken = frames.iter().take_while(|f| compactor.push(f)).count();
        let stuck = taken < frames.len() || compactor.covered() == covered;
        write(tx, compactor.finish()).await?;
        last = tx.last_row(task_id).await?;
        if stuck {
            tracing::warn!(%task_id, covered, upto, "feed items cannot catch up: stored frames miss seqs");
            break;
        }
    }
    Ok(last)
}

/// Adds `tasks`' frames (each task's in seq order, just stored in `tx`)
/// to their items, after catching up with whatever stored frames the items
/// do not cover yet. The tasks' last rows are read together and the new
/// rows written together: an append of many tasks' frames costs a few
/// statements, not a few per task.
pub(super) async fn append(tx: &mut dyn ItemsTx, tasks: &[Vec<&Frame>]) -> Result<()> {
    let mut writes = Writes::default();
    for group in tasks.chunks(sql::TASKS_PER_READ) {
        let ids: Vec<Uuid> = group.iter().map(|frames| frames[0].task_id).collect();
        let mut last: std::collections::HashMap<Uuid, Row> = tx
            .last_rows(&ids)
            .await?
            .into_iter()
            .map(|r| (r.task_id, r))
            .collect();
        for frames in group {
            let first = frames[0];
            let mut row = last.remove(&first.task_id);
            if row.as_ref().map_or(0, |r| r.last_seq) < first.seq - 1 {
                row = catch_up(tx, first.task_id, first.seq - 1, usize::MAX).await?;
            }
            let covered = row.as_ref().map_or(0, |r| r.last_seq);
            if covered < first.seq - 1 {
                continue;
            }
            let mut compactor = Compactor::new(row.as_ref());
            if !frames.iter().all(|f| compactor.push(f)) {
                tracing::warn!(task_id = %first.task_id, covered, "feed items: frames out of order, view left behind");
            }
            let done = compactor.finish();
            writes.rewrites.extend(done.rewrites);
            writes.inserts.extend(done.inserts);
        }
    }
    write(tx, writes).await
}

/// One step of bringing a task's items up to `upto` (its stored frames):
/// the seq they cover then.
pub(super) async fn repair_step(tx: &mut dyn ItemsTx, task_id: Uuid, upto: i64) -> Result<i64> {
    let last = catch_up(tx, task_id, upto, 1).await?;
    Ok(last.map_or(0, |r| r.last_seq))
}

/// Frames grouped by task, each task's in seq order, tasks in id order.
pub(super) fn by_task(frames: &[std::sync::Arc<Frame>]) -> Vec<Vec<&Frame>> {
    let mut tasks: std::collections::BTreeMap<Uuid, Vec<&Frame>> = Default::default();
    for frame in frames {
        tasks.entry(frame.task_id).or_default().push(frame);
    }
    tasks.into_values().collect()
}

/// The page of `rows` (every row of the page's items, in order);
/// `more`: items come before them.
pub(super) fn page(rows: Vec<Row>, more: bool) -> Result<FeedPage> {
    let mut items: Vec<FeedItem> = Vec::new();
    let mut rows = rows.into_iter().peekable();
    while let Some(head) = rows.next() {
        let mut whole = head;
        while let Some(next) = rows.next_if(|r| r.item_seq == whole.item_seq) {
            whole.text.push_str(&next.text);
            whole.last_seq = next.last_seq;
        }
        items.push(item(whole)?);
    }
    let mut bytes: usize = items.iter().map(FeedItem::bytes).sum();
    let mut dropped = 0;
    while bytes > PAGE_BYTES && items.len() - dropped > 1 {
        bytes -= items[dropped].bytes();
        dropped += 1;
    }
    items.drain(..dropped);
    Ok(FeedPage {
        covers_to: items.last().map_or(0, FeedItem::last_seq),
        earliest: items.first().map(FeedItem::first_seq),
        has_more: more || dropped > 0,
        items,
    })
}

/// Bytes an item adds to a page besides its text.
const ITEM_OVERHEAD: usize = 200;

/// The first seqs of the page's first and last items, from the heads read
/// (newest first, up to `limit + 1`, with their bytes), and whether items
/// come before them: at most `limit` items and, by the heads' bytes,
/// [`PAGE_BYTES`] (at least one item), so a page reads no more rows than
/// it returns.
pub(super) fn page_bounds(heads: &[(i64, i64)], limit: i64) -> Option<(i64, i64, bool)> {
    let newest = heads.first()?.0;
    let limit = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
    let mut bytes = 0;
    let taken = heads
        .iter()
        .take(limit)
        .take_while(|(_, b)| {
            bytes += usize::try_from(*b).unwrap_or(0) + ITEM_OVERHEAD;
            bytes <= PAGE_BYTES
        })
        .count()
        .max(1);
    Some((heads[taken - 1].0, newest, taken < heads.len()))
}

/// Each of `items`' text from its stored rows (`(n, first_seq, text,
/// packed text)`, `n` the item's place in `items`, in order).
pub(super) fn join_texts(
    items: &[ItemKey],
    rows: Vec<(i64, i64, String, Option<Vec<u8>>)>,
) -> Result<Vec<String>> {
    let mut texts = vec![String::new(); items.len()];
    for (n, _, plain, packed) in rows {
        let (text, (task_id, item_seq)) = usize::try_from(n)
            .ok()
            .and_then(|n| Some((texts.get_mut(n)?, items[n])))
            .ok_or_else(|| sqlx::Error::Decode(format!("feed item text for item {n}").into()))?;
        let piece = super::stored_text(plain, packed).map_err(|e| {
            sqlx::Error::Decode(
                format!("feed item of task {task_id} at seq {item_seq}: {e}").into(),
            )
        })?;
        text.push_str(&piece);
    }
    Ok(texts)
}

fn item(row: Row) -> Result<FeedItem> {
    let bad = |what: String| {
        sqlx::Error::Decode(
            format!(
                "feed item of task {} at seq {}: {what}",
                row.task_id, row.first_seq
            )
            .into(),
        )
    };
    if row.kind == ItemKind::Event {
        let event = RawValue::from_string(row.text.clone()).map_err(|e| bad(e.to_string()))?;
        return Ok(FeedItem::Event(EventItem {
            first_seq: row.first_seq,
            last_seq: row.last_seq,
            instance_id: row.instance_id,
            first_instance_seq: row.first_instance_seq,
            event,
        }));
    }
    let role = row.role.clone().ok_or_else(|| bad("no role".into()))?;
    let text = TextItem {
        first_seq: row.first_seq,
        last_seq: row.last_seq,
        instance_id: row.instance_id,
        first_instance_seq: row.first_instance_seq,
        role,
        message_id: row.message_id,
        timestamp: row.started_at,
        text: row.text,
    };
    Ok(if row.kind == ItemKind::Message {
        FeedItem::Message(text)
    } else {
        FeedItem::Thought(text)
    })
}

/// The advisory lock key that serializes writers of a task's items.
pub(super) fn lock_key(task_id: Uuid) -> i64 {
    let n = task_id.as_u128();
    ((n >> 64) as u64 ^ n as u64 ^ 0x6665_6564_6974_656d) as i64
}
