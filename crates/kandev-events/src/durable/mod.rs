//! Durable streams behind [`Streams`]: publishing with an id the stream
//! deduplicates, and durable consumers that read a stream in order, from
//! where they were acknowledged. Two implementations keep the one contract
//! `tests/streams.rs` checks against each:
//!
//! - [`JetStreamStreams`]: NATS JetStream, the services' deployment.
//! - [`LocalStreams`]: a SQLite file and in-process wake-ups, for one
//!   process on one machine (the `kandev` binary): the same order, the same
//!   at-least-once delivery, durable across a restart of the process.
//!
//! The contract:
//! - a message published with an id already in its stream is dropped;
//! - a consumer gets the messages of its filter in stream order;
//! - [`AckMode::Explicit`]: each message is acknowledged on its own;
//!   [`AckMode::All`]: acknowledging one acknowledges those before it;
//! - a consumer opened again starts after its ack floor (the last message
//!   before which all are acknowledged): every message not acknowledged
//!   comes again, in order (and some acknowledged after a gap may too,
//!   which consumers drop by id, as they do any redelivery);
//! - [`Delivered::nak`] delivers the message again after a delay, with its
//!   delivery count one higher, while the others keep coming;
//! - consumers of different names are independent.

mod jetstream;
mod local;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use uuid::Uuid;

pub use jetstream::JetStreamStreams;
pub use local::LocalStreams;

use crate::BusError;

/// Headers of a message, in order.
pub type Headers = Vec<(String, String)>;

/// The value of header `name` (any case) in `headers`, if it has one.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `headers` as NATS sends them.
pub(crate) fn to_nats(headers: &Headers) -> async_nats::HeaderMap {
    let mut map = async_nats::HeaderMap::new();
    for (k, v) in headers {
        map.insert(k.as_str(), v.as_str());
    }
    map
}

/// The headers of a NATS message, but `skip`.
pub(crate) fn from_nats(headers: Option<&async_nats::HeaderMap>, skip: &str) -> Headers {
    headers
        .iter()
        .flat_map(|h| h.iter())
        .filter(|(k, _)| AsRef::<str>::as_ref(k) != skip)
        .flat_map(|(k, values)| {
            values
                .iter()
                .map(move |v| (k.to_string(), v.as_str().to_string()))
        })
        .collect()
}

/// How a consumer's acknowledgements count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// Each message on its own.
    Explicit,
    /// A message and every one before it.
    All,
}

/// Durable streams: what publishers and durable consumers need.
#[async_trait]
pub trait Streams: Send + Sync + 'static {
    /// Stores the message in the stream that holds `subject`, unless one
    /// with `id` is there already; returns once it is stored.
    async fn publish_with(
        &self,
        subject: &str,
        id: Uuid,
        headers: &Headers,
        payload: Bytes,
    ) -> Result<(), BusError>;

    /// The consumer `durable` of `stream`, for subjects matching `filter`,
    /// positioned after its ack floor.
    async fn consumer(
        &self,
        stream: &str,
        durable: &str,
        filter: &str,
        mode: AckMode,
    ) -> Result<Box<dyn Consumer>, BusError>;
}

/// A durable consumer.
#[async_trait]
pub trait Consumer: Send {
    /// The next messages: at most `max` and about `max_bytes` (at least
    /// one), waiting up to `wait` for the first; none when none came.
    async fn fetch(
        &mut self,
        max: usize,
        max_bytes: usize,
        wait: Duration,
    ) -> Result<Vec<Delivered>, BusError>;
}

/// Acknowledges messages of one consumer.
#[async_trait]
trait Acker: Send + Sync {
    async fn ack(&self, stream_seq: u64) -> Result<(), BusError>;
    async fn nak(&self, stream_seq: u64, delay: Duration) -> Result<(), BusError>;
}

/// A message delivered to a consumer.
pub struct Delivered {
    pub subject: String,
    pub headers: Headers,
    pub payload: Bytes,
    /// Its place in its stream.
    pub stream_seq: u64,
    /// How many times it was delivered (1 the first time).
    pub delivered: u64,
    acker: Arc<dyn Acker>,
}

impl std::fmt::Debug for Delivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivered")
            .field("subject", &self.subject)
            .field("stream_seq", &self.stream_seq)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

impl Delivered {
    /// The value of header `name`, if it has one.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Acknowledges it (and, in [`AckMode::All`], those before it).
    pub async fn ack(&self) -> Result<(), BusError> {
        self.acker.ack(self.stream_seq).await
    }

    /// Delivers it again after `delay`.
    pub async fn nak(&self, delay: Duration) -> Result<(), BusError> {
        self.acker.nak(self.stream_seq, delay).await
    }
}

/// The stream that holds `subject`.
fn stream_of(subject: &str) -> Result<&'static crate::subjects::StreamSpec, BusError> {
    crate::subjects::STREAMS
        .iter()
        .find(|s| {
            s.subjects
                .iter()
                .any(|p| crate::subjects::matches(p, subject))
        })
        .ok_or_else(|| BusError::Unavailable(format!("no stream holds {subject}")))
}
