//! Payloads of `agent.*` lifecycle events and of `acp.message.<task_id>`.
//!
//! Event ids are derived, not random: the same message or lifecycle step
//! republished after a crash carries the same id, so JetStream's duplicate
//! window and every consumer drop the copy.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize, de::IgnoredAny};
use serde_json::{Value, value::RawValue};
use uuid::Uuid;

use crate::Envelope;

/// Namespace of derived event ids.
const ID_NAMESPACE: Uuid = Uuid::from_u128(0x6b61_6e64_6576_4556_454e_5453_0000_0001);

/// How far an agent's output was read: complete lines of each stream.
/// Every non-blank stdout line and every stderr line is exactly one event,
/// so this is where a reader that starts over (after a restart) goes on.
/// Stored as two integer columns of the same names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct OutputCursor {
    #[sqlx(try_from = "i64")]
    pub stdout_lines: u64,
    #[sqlx(try_from = "i64")]
    pub stderr_lines: u64,
}

/// `acp.message.<task_id>`: consecutive normalized ACP events of one agent
/// instance, `events[i]` having `instance_seq = first_seq + i`. Batches are
/// as large as the agent's pace makes them (one event when it is slow),
/// bounded by the bus's payload limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcpBatch {
    pub task_id: Uuid,
    pub instance_id: Uuid,
    /// The `instance_seq` of the first event: per instance, from 1,
    /// contiguous across batches.
    pub first_seq: u64,
    /// The agent's output read up to and including the last event.
    #[serde(default)]
    pub cursor: OutputCursor,
    /// Each as `kandev_acp::AcpEvent` serializes it: `seq`, `timestamp`,
    /// `direction`, `session_id`, `kind`, `data`, `raw`.
    pub events: Vec<Value>,
}

/// [`AcpBatch`] as a consumer reads it ([`read_batch`]): the events stay
/// JSON text, borrowed from the message.
#[derive(Debug)]
pub struct AcpBatchRef<'a> {
    pub task_id: Uuid,
    pub instance_id: Uuid,
    pub first_seq: u64,
    pub cursor: OutputCursor,
    pub events: Vec<&'a str>,
}

/// [`AcpBatchRef`] as JSON, its events read as `E`: each checked as a JSON
/// value (`Vec<&RawValue>`), or skipped when they were found otherwise.
#[derive(Deserialize)]
struct BatchFields<E> {
    task_id: Uuid,
    instance_id: Uuid,
    first_seq: u64,
    #[serde(default)]
    cursor: OutputCursor,
    events: E,
}

impl<E> BatchFields<E> {
    /// The batch, its events' text taken from what was read as `E`.
    fn into_ref<'a>(self, events: impl FnOnce(E) -> Vec<&'a str>) -> AcpBatchRef<'a> {
        AcpBatchRef {
            task_id: self.task_id,
            instance_id: self.instance_id,
            first_seq: self.first_seq,
            cursor: self.cursor,
            events: events(self.events),
        }
    }
}

/// Reads an `acp.message` envelope (its JSON, unpacked). A batch written
/// by [`BatchWriter`] has each event on a line of its own (JSON text holds
/// a raw newline only between tokens, and events are written compact), so
/// its events are found by their line breaks instead of by scanning every
/// byte of them as JSON; the envelope's other fields are parsed as usual.
/// Any other JSON (a batch written before events had lines of their own,
/// or by hand) is parsed whole.
pub fn read_batch(json: &[u8]) -> serde_json::Result<Envelope<AcpBatchRef<'_>>> {
    if let Some(read) = read_lines(json) {
        return read;
    }
    let envelope: Envelope<BatchFields<Vec<&RawValue>>> = serde_json::from_slice(json)?;
    Ok(envelope.map(|b| b.into_ref(|raw| raw.into_iter().map(RawValue::get).collect())))
}

/// [`read_batch`] of a batch laid out as [`BatchWriter`] writes it:
/// `{"data":{"events":[`, then each event after a newline (all but the
/// last followed by a comma), then a newline and `]` before the other
/// fields. `None` when `json` is not laid out so.
fn read_lines(json: &[u8]) -> Option<serde_json::Result<Envelope<AcpBatchRef<'_>>>> {
    let body = std::str::from_utf8(json.strip_prefix(BATCH_HEAD)?).ok()?;
    let mut events = Vec::new();
    let mut rest = body.strip_prefix('\n')?;
    let tail = loop {
        if let Some(tail) = rest.strip_prefix(']') {
            break tail;
        }
        let (line, after) = rest.split_once('\n')?;
        let event = line.strip_suffix(',').unwrap_or(line);
        if !(event.starts_with('{') && event.ends_with('}')) {
            return None;
        }
        events.push(event);
        rest = after;
    };
    // The envelope without its events: `{"data":{"events":[]` and the rest.
    let fields = [BATCH_HEAD, b"]", tail.as_bytes()].concat();
    Some(
        serde_json::from_slice::<Envelope<BatchFields<IgnoredAny>>>(&fields)
            .map(|envelope| envelope.map(|b| b.into_ref(|_| events))),
    )
}

impl AcpBatchRef<'_> {
    /// The `instance_seq` of the last event (`first_seq - 1` when empty).
    pub fn last_seq(&self) -> u64 {
        (self.first_seq + self.events.len() as u64).saturating_sub(1)
    }
}

/// The envelope id of the batch of `instance`'s events `first..=last`:
/// stable across republishing, so JetStream drops a repeated batch.
pub fn batch_id(instance_id: &Uuid, first: u64, last: u64) -> Uuid {
    derived_id(instance_id, &format!("acp:{first}-{last}"))
}

/// Builds the envelope of an `acp.message` batch in one buffer: each event
/// is serialized straight into it, and the envelope's other fields are
/// written after the events (JSON does not order keys), so nothing is
/// copied again. One serialization per event on the hot path.
#[derive(Debug)]
pub struct BatchWriter {
    buf: Vec<u8>,
    first_seq: u64,
    count: usize,
}

const BATCH_HEAD: &[u8] = br#"{"data":{"events":["#;

impl BatchWriter {
    /// A batch whose first event has `first_seq`.
    pub fn new(first_seq: u64, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity.max(BATCH_HEAD.len() + 512));
        buf.extend_from_slice(BATCH_HEAD);
        BatchWriter {
            buf,
            first_seq,
            count: 0,
        }
    }

    /// Events so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The seq of the first event.
    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// Bytes so far (the envelope adds about 300).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether no event was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends one event, serialized by `write` (one JSON value). On an
    /// error nothing is added.
    pub fn push_with(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
    ) -> serde_json::Result<()> {
        let mark = self.buf.len();
        if self.count > 0 {
            self.buf.push(b',');
        }
        // Each event on a line of its own: see [`read_batch`].
        self.buf.push(b'\n');
        match write(&mut self.buf) {
            Ok(()) => {
                self.count += 1;
                Ok(())
            }
            Err(e) => {
                self.buf.truncate(mark);
                Err(e)
            }
        }
    }

    /// Removes the last event (added since `len` was `mark`).
    pub fn pop_to(&mut self, mark: usize) {
        if self.buf.len() > mark && self.count > 0 {
            self.buf.truncate(mark);
            self.count -= 1;
        }
    }

    /// The envelope: its id (derived from the instance and the seqs, so a
    /// republished batch dedupes) and its bytes.
    pub fn finish(
        mut self,
        task_id: &Uuid,
        instance_id: &Uuid,
        cursor: OutputCursor,
        occurred_at: DateTime<Utc>,
    ) -> (Uuid, Vec<u8>) {
        use std::io::Write;
        let first = self.first_seq;
        let last = (first + self.count as u64).saturating_sub(1);
        let id = batch_id(instance_id, first, last);
        let subject = crate::subjects::acp_message(task_id);
        // The closing bracket on a line of its own: see [`read_batch`].
        self.buf.push(b'\n');
        // Every value written here is a uuid, a number, a subject of uuid
        // characters or an RFC 3339 time: nothing needs escaping.
        let _ = write!(
            self.buf,
            r#"],"task_id":"{task_id}","instance_id":"{instance_id}","first_seq":{first},"cursor":{{"stdout_lines":{},"stderr_lines":{}}}}},"id":"{id}","type":"{subject}","occurred_at":"{}"}}"#,
            cursor.stdout_lines,
            cursor.stderr_lines,
            occurred_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        );
        (id, self.buf)
    }
}

impl AcpBatch {
    /// The `instance_seq` of the last event.
    pub fn last_seq(&self) -> u64 {
        (self.first_seq + self.events.len() as u64).saturating_sub(1)
    }

    /// Its envelope id and bytes.
    pub fn encode(&self) -> (Uuid, Vec<u8>) {
        let mut writer = BatchWriter::new(self.first_seq, 1024);
        for e in &self.events {
            // A Value always serializes.
            let _ = writer.push_with(|buf| serde_json::to_writer(buf, e));
        }
        writer.finish(&self.task_id, &self.instance_id, self.cursor, Utc::now())
    }
}

/// The state an `agent.*` event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEventKind {
    Started,
    Running,
    Completed,
    Failed,
    Stopped,
    /// The agent asks a person (a permission under the `ask` policy) and
    /// waits for the answer.
    WaitingForInput,
    /// The question of a `waiting_for_input` was answered.
    InputReceived,
    /// Before the agent starts: its image is being built; `summary` says
    /// how far, in words.
    Preparing,
}

impl AgentEventKind {
    /// The subject this kind is published on.
    pub fn subject(self) -> &'static str {
        use crate::subjects::*;
        match self {
            AgentEventKind::Started => AGENT_STARTED,
            AgentEventKind::Running => AGENT_RUNNING,
            AgentEventKind::Completed => AGENT_COMPLETED,
            AgentEventKind::Failed => AGENT_FAILED,
            AgentEventKind::Stopped => AGENT_STOPPED,
            AgentEventKind::WaitingForInput => AGENT_WAITING_FOR_INPUT,
            AgentEventKind::InputReceived => AGENT_INPUT_RECEIVED,
            AgentEventKind::Preparing => AGENT_PREPARING,
        }
    }
}

/// `agent.started`, `agent.running`, `agent.completed`, `agent.failed`,
/// `agent.stopped`, `agent.waiting_for_input` and `agent.input_received` all
/// carry this payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentLifecycle {
    pub kind: AgentEventKind,
    pub task_id: Uuid,
    pub instance_id: Uuid,
    pub agent_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// The ACP session, once the agent created or loaded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_session_id: Option<String>,
    /// For `completed`: the prompt turn's stop reason (`end_turn`, `cancelled`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// For `completed`: the agent's final message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// For `failed`: what went wrong, readable by a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// For `waiting_for_input` and `input_received`: the JSON-RPC id of the
    /// agent's permission request (JSON text), pairing the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// For `failed`: whether running again may succeed (`false` for the
    /// agent's own error answer or missing credentials: no retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// The last `instance_seq` published for this instance before this event.
    #[serde(default)]
    pub last_seq: u64,
    pub at: DateTime<Utc>,
}

impl AgentLifecycle {
    /// An event of `kind` about the instance, now, before any output
    /// (`last_seq` 0) and with none of the optional fields.
    pub fn new(kind: AgentEventKind, task_id: Uuid, instance_id: Uuid, agent_type: &str) -> Self {
        AgentLifecycle {
            kind,
            task_id,
            instance_id,
            agent_type: agent_type.to_owned(),
            container_id: None,
            acp_session_id: None,
            stop_reason: None,
            summary: None,
            error: None,
            exit_code: None,
            request_id: None,
            retryable: None,
            last_seq: 0,
            at: Utc::now(),
        }
    }

    /// The envelope id: one per (instance, kind, turn), stable across
    /// republishing. `turn` tells apart the completions of follow-up turns.
    pub fn event_id(&self, turn: u64) -> Uuid {
        let what = match &self.request_id {
            // Several questions per turn: one event each.
            Some(request) => format!("{}:{turn}:{request}", self.kind.subject()),
            // Many steps per preparation: one event each.
            None if self.kind == AgentEventKind::Preparing => format!(
                "{}:{turn}:{}",
                self.kind.subject(),
                self.summary.as_deref().unwrap_or_default()
            ),
            None => format!("{}:{turn}", self.kind.subject()),
        };
        derived_id(&self.instance_id, &what)
    }
}

fn derived_id(instance: &Uuid, what: &str) -> Uuid {
    let mut name = instance.as_bytes().to_vec();
    name.extend_from_slice(what.as_bytes());
    Uuid::new_v5(&ID_NAMESPACE, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_batches_are_packed_and_unpack_to_the_same_json() {
        let events: Vec<Value> = (0..500)
            .map(|i| serde_json::json!({"seq": i, "kind": "message_chunk", "data": {"text": format!("chunk {i} of a long message")}}))
            .collect();
        let batch = AcpBatch {
            task_id: Uuid::from_u128(1),
            instance_id: Uuid::from_u128(2),
            first_seq: 1,
            cursor: OutputCursor::default(),
            events,
        };
        let (_, json) = batch.encode();
        assert!(json.len() > crate::pack::PACK_ABOVE);
        let packed = crate::pack::pack(json.clone());
        assert!(crate::pack::is_packed(&packed));
        assert!(
            packed.len() * 4 < json.len(),
            "{} of {}",
            packed.len(),
            json.len()
        );
        assert_eq!(
            crate::pack::unpack(&packed).unwrap().as_ref(),
            json.as_slice()
        );
    }

    #[test]
    fn batch_ids_are_stable_and_distinct() {
        let i = Uuid::from_u128(7);
        assert_eq!(batch_id(&i, 1, 5), batch_id(&i, 1, 5));
        assert_ne!(batch_id(&i, 1, 5), batch_id(&i, 1, 6));
        assert_ne!(batch_id(&i, 1, 5), batch_id(&Uuid::from_u128(8), 1, 5));
    }

    #[test]
    fn an_encoded_batch_reads_back() {
        let batch = AcpBatch {
            task_id: Uuid::from_u128(1),
            instance_id: Uuid::from_u128(2),
            first_seq: 4,
            cursor: OutputCursor {
                stdout_lines: 10,
                stderr_lines: 2,
            },
            events: vec![
                serde_json::json!({"seq": 4, "text": "a \"quoted\" line"}),
                serde_json::json!({"seq": 5}),
            ],
        };
        let (id, bytes) = batch.encode();
        let env: crate::Envelope<AcpBatch> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(env.id, id);
        assert_eq!(
            env.event_type,
            "acp.message.00000000-0000-0000-0000-000000000001"
        );
        assert_eq!(env.data, batch);
        let borrowed = read_batch(&bytes).unwrap();
        assert_eq!(borrowed.id, id);
        assert_eq!(borrowed.data.last_seq(), 5);
        assert_eq!(borrowed.data.cursor, batch.cursor);
        assert_eq!(borrowed.data.events[1], r#"{"seq":5}"#);
        assert_eq!(id, batch_id(&batch.instance_id, 4, 5));
    }

    /// A batch whose events hold what could pass for separators inside
    /// their strings: escaped newlines, `},{`, brackets.
    fn tricky_batch(events: usize) -> AcpBatch {
        AcpBatch {
            task_id: Uuid::from_u128(1),
            instance_id: Uuid::from_u128(2),
            first_seq: 1,
            cursor: OutputCursor {
                stdout_lines: 3,
                stderr_lines: 0,
            },
            events: (0..events)
                .map(|i| serde_json::json!({"seq": i + 1, "text": "a\n},\n{\"x\":[1]}\n]", "n": [i, {"k": "]"}]}))
                .collect(),
        }
    }

    #[test]
    fn a_written_batch_is_read_by_its_lines_and_reads_as_json_would() {
        for events in [0, 1, 3] {
            let batch = tricky_batch(events);
            let (id, bytes) = batch.encode();
            assert!(read_lines(&bytes).is_some(), "laid out one event per line");
            let read = read_batch(&bytes).unwrap();
            // The same bytes read as plain JSON (what an older reader does).
            let json: crate::Envelope<AcpBatch> = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(read.id, id);
            assert_eq!(read.data.task_id, json.data.task_id);
            assert_eq!(read.data.instance_id, json.data.instance_id);
            assert_eq!(read.data.first_seq, 1);
            assert_eq!(read.data.cursor, batch.cursor);
            let parsed: Vec<Value> = read
                .data
                .events
                .iter()
                .map(|e| serde_json::from_str(e).unwrap())
                .collect();
            assert_eq!(parsed, json.data.events);
            assert_eq!(parsed, batch.events);
        }
    }

    #[test]
    fn a_batch_not_laid_out_by_lines_is_parsed_whole() {
        let batch = tricky_batch(2);
        // As written before events had lines of their own: compact JSON.
        let compact = serde_json::to_vec(&crate::Envelope::new("acp.message.x", &batch)).unwrap();
        assert!(read_lines(&compact).is_none());
        let read = read_batch(&compact).unwrap();
        assert_eq!(read.data.events.len(), 2);
        let first: Value = serde_json::from_str(read.data.events[0]).unwrap();
        assert_eq!(first, batch.events[0]);
        // Laid out by lines but a line is not an object: parsed whole,
        // and refused as the JSON it is not.
        let (_, bytes) = batch.encode();
        let text = String::from_utf8(bytes).unwrap();
        let broken = text.replacen("\n{", "\n[", 1);
        assert!(read_lines(broken.as_bytes()).is_none());
        assert!(read_batch(broken.as_bytes()).is_err());
        // Damaged after its events: the envelope's fields do not parse.
        let cut = &text[..text.len() - 10];
        assert!(read_batch(cut.as_bytes()).is_err());
    }
}
