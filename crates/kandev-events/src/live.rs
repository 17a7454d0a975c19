//! Live messages, behind [`Live`]: published to whoever listens at that
//! moment and never stored (at most once), such as the numbered feed frames
//! the orchestrator sends every gateway (`feed.<task_id>`). A reader that
//! misses some sees a gap in their numbers and reads it from the store.
//!
//! - [`NatsLive`]: core NATS, between processes.
//! - [`LocalLive`]: one process's own channels (the `kandev` binary).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt as _, stream::BoxStream};
use tokio::sync::broadcast;

use crate::{
    BusError,
    durable::{self, Headers},
};

/// One live message.
#[derive(Debug, Clone)]
pub struct LiveMessage {
    pub headers: Headers,
    pub payload: Bytes,
}

impl LiveMessage {
    /// A message with no headers.
    pub fn bare(payload: impl Into<Bytes>) -> LiveMessage {
        LiveMessage {
            headers: Headers::new(),
            payload: payload.into(),
        }
    }

    /// The value of header `name`, if it has one.
    pub fn header(&self, name: &str) -> Option<&str> {
        durable::header(&self.headers, name)
    }
}

/// Publishing and following live messages.
#[async_trait]
pub trait Live: Send + Sync + 'static {
    /// Sends to the current subscribers of `subject`, if any.
    async fn publish(&self, subject: &str, message: LiveMessage) -> Result<(), BusError>;
    /// The messages of `subject` published once this returns.
    async fn subscribe(&self, subject: &str) -> Result<BoxStream<'static, LiveMessage>, BusError>;
}

/// Core NATS.
#[derive(Debug, Clone)]
pub struct NatsLive {
    client: async_nats::Client,
}

impl NatsLive {
    pub fn new(client: async_nats::Client) -> Self {
        NatsLive { client }
    }
}

#[async_trait]
impl Live for NatsLive {
    async fn publish(&self, subject: &str, message: LiveMessage) -> Result<(), BusError> {
        let headers = durable::to_nats(&message.headers);
        self.client
            .publish_with_headers(subject.to_string(), headers, message.payload)
            .await
            .map_err(|e| BusError::Unavailable(e.to_string()))
    }

    async fn subscribe(&self, subject: &str) -> Result<BoxStream<'static, LiveMessage>, BusError> {
        let subscriber = self
            .client
            .subscribe(subject.to_string())
            .await
            .map_err(|e| BusError::Unavailable(e.to_string()))?;
        // In place once the server saw it.
        let _ = self.client.flush().await;
        Ok(subscriber
            .map(|msg| LiveMessage {
                headers: durable::from_nats(msg.headers.as_ref(), ""),
                payload: msg.payload,
            })
            .boxed())
    }
}

/// Channels of one process: a broadcast channel per subject listened to.
#[derive(Debug, Clone)]
pub struct LocalLive {
    subjects: Arc<Mutex<HashMap<String, broadcast::Sender<LiveMessage>>>>,
    capacity: usize,
}

impl LocalLive {
    /// Each subscriber may fall `capacity` messages behind before it misses
    /// some (and sees the gap).
    pub fn new(capacity: usize) -> Self {
        LocalLive {
            subjects: Arc::default(),
            capacity: capacity.max(1),
        }
    }

    fn subjects(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, broadcast::Sender<LiveMessage>>> {
        kandev_common::sync::lock(&self.subjects)
    }
}

#[async_trait]
impl Live for LocalLive {
    async fn publish(&self, subject: &str, message: LiveMessage) -> Result<(), BusError> {
        let mut subjects = self.subjects();
        if let Some(tx) = subjects.get(subject)
            && tx.send(message).is_err()
        {
            // Nobody listens any more.
            subjects.remove(subject);
        }
        Ok(())
    }

    async fn subscribe(&self, subject: &str) -> Result<BoxStream<'static, LiveMessage>, BusError> {
        let rx = self
            .subjects()
            .entry(subject.to_string())
            .or_insert_with(|| broadcast::channel(self.capacity).0)
            .subscribe();
        // A subscriber that fell behind skips what it missed.
        Ok(tokio_stream::wrappers::BroadcastStream::new(rx)
            .filter_map(|m| async move { m.ok() })
            .boxed())
    }
}
