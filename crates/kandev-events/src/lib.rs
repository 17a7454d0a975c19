//! Kandev's events: subject names, payload types, and the bus they travel on.
//!
//! Every event is an [`Envelope`]: a unique `id` (consumers dedupe on it; it
//! is also the JetStream `Nats-Msg-Id`, so a republished event is dropped by
//! the server's duplicate window), the event `type` (its subject), when it
//! happened, and its `data`. The schemas are documented in `docs/events.md`.
//!
//! # Layout
//! - [`subjects`]: subject names and the JetStream streams that cover them.
//! - [`state`]: [`TaskState`], the task state contract of every service.
//! - [`task`]: payloads of `task.*` events.
//! - [`agent`]: payloads of `agent.*` events and `acp.message.<task_id>`.
//! - [`bus`]: the [`EventBus`] trait, its JetStream implementation and an
//!   in-process one.
//! - [`durable`]: durable streams and consumers behind [`durable::Streams`],
//!   on JetStream or in one process (a SQLite file).
//! - [`live`]: live messages behind [`live::Live`] (at most once, never
//!   stored), on core NATS or in one process.
//! - [`nats`]: connecting to NATS as one service, with its own user.
//! - [`managers`]: how agent managers announce themselves to the pool.
//! - [`pack`]: compression of large `acp.message` batches.
//! - [`metric_names`]: every metric the crate records, named and described once.

pub mod agent;
pub mod bus;
pub mod durable;
pub mod live;
pub mod managers;
pub mod metric_names;
pub mod nats;
pub mod pack;
pub mod state;
pub mod subjects;
pub mod task;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use bus::{BusError, EventBus, JetStreamBus, MemoryBus, traceparent};
pub use nats::{NatsLogin, NatsPassword};
pub use state::{TaskState, UnknownTaskState};

/// The JSON wrapper of every event on the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// Unique per event; redeliveries keep it.
    pub id: Uuid,
    /// The subject, e.g. `task.created`.
    #[serde(rename = "type")]
    pub event_type: String,
    pub occurred_at: DateTime<Utc>,
    pub data: T,
}

impl<T> Envelope<T> {
    /// The same envelope around `f(data)`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Envelope<U> {
        Envelope {
            id: self.id,
            event_type: self.event_type,
            occurred_at: self.occurred_at,
            data: f(self.data),
        }
    }
}

impl<T: Serialize> Envelope<T> {
    /// A new envelope with a fresh time-ordered id.
    pub fn new(event_type: impl Into<String>, data: T) -> Self {
        Envelope {
            id: Uuid::now_v7(),
            event_type: event_type.into(),
            occurred_at: Utc::now(),
            data,
        }
    }

    /// The JSON bytes that go on the wire.
    pub fn to_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }
}
