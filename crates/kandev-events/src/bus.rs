//! The event bus: publish-with-acknowledgement, behind a trait so that a
//! one-binary mode can swap JetStream for an in-process bus.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_nats::{HeaderMap, jetstream};
use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::{nats::NatsLogin, subjects::STREAMS};

/// How long a stream keeps an event.
pub const STREAM_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why an event could not be published.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot connect to NATS at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error(
        "NATS at {url} refused {who} ({reason}): check KANDEV_NATS_USER and KANDEV_NATS_PASSWORD"
    )]
    Refused {
        url: String,
        who: String,
        reason: String,
    },
    #[error("event bus unavailable: {0}")]
    Unavailable(String),
    #[error("cannot set up stream {stream}: {reason}")]
    Stream { stream: String, reason: String },
}

impl From<BusError> for kandev_common::startup::StartError {
    fn from(err: BusError) -> Self {
        kandev_common::startup::StartError::Bus(Box::new(err))
    }
}

/// Publishes events durably. `publish` returns only once the bus has stored
/// the event; an error means it may not have been, and the caller retries
/// with the same `id` (which the bus deduplicates).
#[async_trait]
pub trait EventBus: Send + Sync + 'static {
    async fn publish(&self, subject: &str, id: Uuid, payload: Bytes) -> Result<(), BusError>;

    /// The largest payload the bus accepts, in bytes.
    fn max_payload(&self) -> usize {
        DEFAULT_MAX_PAYLOAD
    }

    /// The last event stored on `subject`, if any: where a publisher that
    /// restarted finds what it had already published.
    async fn last_message(&self, subject: &str) -> Result<Option<Bytes>, BusError>;
}

/// The `traceparent` header of a bus message, if it has one.
pub fn traceparent(headers: Option<&HeaderMap>) -> Option<&str> {
    headers?
        .get(kandev_common::trace::TRACEPARENT)
        .map(|v| v.as_str())
}

/// NATS's default `max_payload`.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// NATS JetStream. Streams from [`STREAMS`] are created on connect.
#[derive(Clone)]
pub struct JetStreamBus {
    client: async_nats::Client,
    js: jetstream::Context,
    /// Copies of each stream in a NATS cluster (1 on a single server).
    stream_replicas: usize,
    /// How many times the client has (re)connected: a consumer opened
    /// before the last one re-opens at its ack floor (see
    /// [`JetStreamBus::connections`]).
    connections: tokio::sync::watch::Receiver<u64>,
}

impl std::fmt::Debug for JetStreamBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamBus").finish_non_exhaustive()
    }
}

impl JetStreamBus {
    /// Connects without credentials (retrying in the background if NATS is
    /// not up yet) and makes sure the streams exist when NATS answers.
    pub async fn connect(url: &str) -> Result<Self, BusError> {
        Self::connect_as(url, &NatsLogin::anonymous("kandev")).await
    }

    /// Connects as `login` (see [`crate::nats::connect`]: refused
    /// credentials are an error at once, a NATS that does not answer yet is
    /// waited for in the background) and makes sure the streams exist when
    /// NATS answers.
    pub async fn connect_as(url: &str, login: &NatsLogin) -> Result<Self, BusError> {
        Self::connect_replicated(url, login, 1).await
    }

    /// [`Self::connect_as`], with streams kept in `stream_replicas` copies
    /// (`KANDEV_NATS_STREAM_REPLICAS`: 3 on a 3-node cluster, so losing a
    /// node loses nothing). `url` may list several servers, comma-separated.
    /// Existing streams with another count are updated to it.
    pub async fn connect_replicated(
        url: &str,
        login: &NatsLogin,
        stream_replicas: usize,
    ) -> Result<Self, BusError> {
        let (connected, connections) = tokio::sync::watch::channel(0u64);
        let on_event = move |event: &async_nats::Event| {
            if matches!(event, async_nats::Event::Connected) {
                connected.send_modify(|n| *n += 1);
            }
        };
        let client = crate::nats::connect(url, login, on_event).await?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(Duration::from_secs(5));
        let bus = JetStreamBus {
            client,
            js,
            stream_replicas: stream_replicas.max(1),
            connections,
        };
        if let Err(err) = bus.ensure_streams().await {
            // Not fatal: publishing retries, and streams are set up again.
            tracing::warn!(%err, "streams not ready yet");
        }
        Ok(bus)
    }

    /// Creates the Kandev streams when missing (idempotent).
    pub async fn ensure_streams(&self) -> Result<(), BusError> {
        for spec in STREAMS {
            let failed = |e: &dyn std::fmt::Display| BusError::Stream {
                stream: spec.name.to_string(),
                reason: e.to_string(),
            };
            let stream = self
                .js
                .get_or_create_stream(jetstream::stream::Config {
                    name: spec.name.to_string(),
                    subjects: spec.subjects.iter().map(|s| s.to_string()).collect(),
                    duplicate_window: Duration::from_secs(120),
                    // Consumers that were down catch up within this window;
                    // older events are dropped so a stream never grows without bound.
                    max_age: STREAM_MAX_AGE,
                    num_replicas: self.stream_replicas,
                    ..Default::default()
                })
                .await
                .map_err(|e| failed(&e))?;
            let config = &stream.cached_info().config;
            if config.num_replicas != self.stream_replicas {
                tracing::info!(
                    stream = spec.name,
                    from = config.num_replicas,
                    to = self.stream_replicas,
                    "changing the stream's replica count"
                );
                let mut config = config.clone();
                config.num_replicas = self.stream_replicas;
                self.js
                    .update_stream(config)
                    .await
                    .map_err(|e| failed(&e))?;
            }
        }
        Ok(())
    }

    /// The core NATS client, for subscribers.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context, for durable consumers.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// Counts the client's connections. A message the server sent to a
    /// pull just as the connection dropped is lost on the way, and the
    /// server sends it again only after the consumer's ack wait (minutes):
    /// a consumer re-opened at its ack floor after a reconnect gets it at
    /// once.
    pub fn connections(&self) -> tokio::sync::watch::Receiver<u64> {
        self.connections.clone()
    }

    /// Connects as `login` to the NATS of `settings`, with its streams in
    /// as many copies as they say (see [`Self::connect_replicated`]).
    pub async fn connect_configured(
        login: &NatsLogin,
        settings: &kandev_common::config::ServiceSettings,
    ) -> Result<Self, BusError> {
        Self::connect_replicated(&settings.nats_url, login, settings.nats_stream_replicas).await
    }

    /// [`Self::check_connected`] as a service's `/readyz` check.
    pub fn readiness(&self) -> kandev_common::serve::ReadinessCheck {
        let bus = self.clone();
        kandev_common::serve::sync_check(move || bus.check_connected())
    }

    /// Whether the connection to NATS is up.
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// [`Self::is_connected`] as a readiness probe, with the reason when not.
    pub fn check_connected(&self) -> Result<(), String> {
        if self.is_connected() {
            Ok(())
        } else {
            Err("nats not connected".to_string())
        }
    }
}

#[async_trait]
impl EventBus for JetStreamBus {
    fn max_payload(&self) -> usize {
        match self.client.server_info().max_payload {
            0 => DEFAULT_MAX_PAYLOAD,
            n => n,
        }
    }

    async fn last_message(&self, subject: &str) -> Result<Option<Bytes>, BusError> {
        let stream = STREAMS
            .iter()
            .find(|s| {
                s.subjects
                    .iter()
                    .any(|p| crate::subjects::matches(p, subject))
            })
            .ok_or_else(|| BusError::Unavailable(format!("no stream holds {subject}")))?;
        let stream = self
            .js
            .get_stream(stream.name)
            .await
            .map_err(|e| BusError::Unavailable(e.to_string()))?;
        match stream.get_last_raw_message_by_subject(subject).await {
            Ok(message) => Ok(Some(message.payload)),
            Err(e)
                if matches!(
                    e.kind(),
                    jetstream::stream::LastRawMessageErrorKind::NoMessageFound
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(BusError::Unavailable(e.to_string())),
        }
    }

    async fn publish(&self, subject: &str, id: Uuid, payload: Bytes) -> Result<(), BusError> {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", id.to_string().as_str());
        // The publishing span's trace goes with the event (W3C
        // `traceparent`), so its consumers continue it.
        if let Some(traceparent) = kandev_common::trace::current() {
            headers.insert(kandev_common::trace::TRACEPARENT, traceparent.as_str());
        }
        let ack = self
            .js
            .publish_with_headers(subject.to_string(), headers, payload)
            .await
            .map_err(|e| BusError::Unavailable(e.to_string()))?;
        match ack.await {
            Ok(_) => Ok(()),
            Err(err) => {
                // A missing stream (NATS restarted without its store) is
                // recreated so the next attempt can land.
                if let Err(stream_err) = self.ensure_streams().await {
                    tracing::debug!(%stream_err, "stream re-creation failed");
                }
                Err(BusError::Unavailable(err.to_string()))
            }
        }
    }
}

/// One event seen on the in-process bus.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryEvent {
    pub subject: String,
    pub id: Uuid,
    pub payload: Bytes,
}

/// An in-process bus (for tests and a future one-binary mode): every
/// published event goes to current subscribers.
#[derive(Debug, Clone)]
pub struct MemoryBus {
    tx: broadcast::Sender<MemoryEvent>,
    last: Arc<Mutex<HashMap<String, Bytes>>>,
}

impl MemoryBus {
    pub fn new(capacity: usize) -> Self {
        MemoryBus {
            tx: broadcast::channel(capacity).0,
            last: Arc::default(),
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<MemoryEvent> {
        self.tx.subscribe()
    }
}

#[async_trait]
impl EventBus for MemoryBus {
    async fn last_message(&self, subject: &str) -> Result<Option<Bytes>, BusError> {
        Ok(kandev_common::sync::lock(&self.last).get(subject).cloned())
    }

    async fn publish(&self, subject: &str, id: Uuid, payload: Bytes) -> Result<(), BusError> {
        kandev_common::sync::lock(&self.last).insert(subject.to_string(), payload.clone());
        // No subscriber is not an error: the event simply has no audience.
        let _ = self.tx.send(MemoryEvent {
            subject: subject.to_string(),
            id,
            payload,
        });
        Ok(())
    }
}
