//! [`Streams`] on NATS JetStream.

use std::{sync::Arc, time::Duration};

use async_nats::jetstream::{
    self, AckKind,
    consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull},
};
use async_trait::async_trait;
use bytes::Bytes;
use futures::{FutureExt as _, StreamExt as _};
use uuid::Uuid;

use super::{AckMode, Acker, Consumer, Delivered, Headers, Streams, from_nats, to_nats};
use crate::{BusError, JetStreamBus};

/// NATS JetStream, through a connected [`JetStreamBus`].
#[derive(Debug, Clone)]
pub struct JetStreamStreams {
    bus: JetStreamBus,
}

impl JetStreamStreams {
    pub fn new(bus: JetStreamBus) -> Self {
        JetStreamStreams { bus }
    }
}

/// The header JetStream deduplicates by.
const MSG_ID: &str = "Nats-Msg-Id";

fn unavailable(e: impl std::fmt::Display) -> BusError {
    BusError::Unavailable(e.to_string())
}

#[async_trait]
impl Streams for JetStreamStreams {
    async fn publish_with(
        &self,
        subject: &str,
        id: Uuid,
        headers: &Headers,
        payload: Bytes,
    ) -> Result<(), BusError> {
        let mut map = to_nats(headers);
        map.insert(MSG_ID, id.to_string().as_str());
        let ack = self
            .bus
            .jetstream()
            .publish_with_headers(subject.to_string(), map, payload)
            .await
            .map_err(unavailable)?;
        ack.await.map(drop).map_err(unavailable)
    }

    async fn consumer(
        &self,
        stream: &str,
        durable: &str,
        filter: &str,
        mode: AckMode,
    ) -> Result<Box<dyn Consumer>, BusError> {
        self.bus.ensure_streams().await?;
        let stream = self
            .bus
            .jetstream()
            .get_stream(stream)
            .await
            .map_err(unavailable)?;
        let mut connections = self.bus.connections();
        connections.mark_unchanged();
        let consumer = open_at_ack_floor(&stream, durable, filter, mode).await?;
        Ok(Box::new(JsConsumer {
            stream,
            durable: durable.to_string(),
            filter: filter.to_string(),
            mode,
            consumer,
            messages: None,
            connections,
            reopen: false,
        }))
    }
}

/// Creates the durable consumer `durable`, or re-creates it at its ack
/// floor, so what was not acknowledged comes again at once and in order
/// (not after the ack wait).
async fn open_at_ack_floor(
    stream: &jetstream::stream::Stream,
    durable: &str,
    filter: &str,
    mode: AckMode,
) -> Result<PullConsumer, BusError> {
    let deliver_policy = match stream.consumer_info(durable).await {
        Ok(info) => {
            let start = info.ack_floor.stream_sequence + 1;
            stream.delete_consumer(durable).await.map_err(unavailable)?;
            DeliverPolicy::ByStartSequence {
                start_sequence: start,
            }
        }
        Err(_) => DeliverPolicy::All,
    };
    stream
        .create_consumer(pull::Config {
            durable_name: Some(durable.to_string()),
            filter_subject: filter.to_string(),
            ack_policy: match mode {
                AckMode::Explicit => AckPolicy::Explicit,
                AckMode::All => AckPolicy::All,
            },
            ack_wait: Duration::from_secs(600),
            max_ack_pending: 100_000,
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(unavailable)
}

/// A consumer reading one continuous pull (re-pulled by the client as each
/// pull expires, with heartbeats), opened at the first fetch with its sizes.
/// Re-opened at its ack floor after the client reconnects (see
/// [`JetStreamBus::connections`](crate::JetStreamBus::connections)).
struct JsConsumer {
    stream: jetstream::stream::Stream,
    durable: String,
    filter: String,
    mode: AckMode,
    consumer: PullConsumer,
    messages: Option<pull::Stream>,
    connections: tokio::sync::watch::Receiver<u64>,
    /// A reconnect was seen while waiting: re-open at the next fetch.
    reopen: bool,
}

/// How long one pull lasts before the client renews it.
const PULL_EXPIRES: Duration = Duration::from_secs(30);

/// The acknowledgement of one JetStream message.
struct JsAcker(jetstream::message::Acker);

#[async_trait]
impl Acker for JsAcker {
    async fn ack(&self, _: u64) -> Result<(), BusError> {
        self.0
            .double_ack_with(AckKind::Ack)
            .await
            .map_err(unavailable)
    }

    async fn nak(&self, _: u64, delay: Duration) -> Result<(), BusError> {
        self.0
            .ack_with(AckKind::Nak(Some(delay)))
            .await
            .map_err(unavailable)
    }
}

impl JsConsumer {
    fn delivered(message: jetstream::Message) -> Result<Delivered, BusError> {
        let (stream_seq, delivered) = message
            .info()
            .map(|i| (i.stream_sequence, i.delivered as u64))
            .map_err(unavailable)?;
        let (message, acker) = message.split();
        let headers = from_nats(message.headers.as_ref(), MSG_ID);
        Ok(Delivered {
            subject: message.subject.to_string(),
            headers,
            payload: message.payload,
            stream_seq,
            delivered,
            acker: Arc::new(JsAcker(acker)),
        })
    }
}

#[async_trait]
impl Consumer for JsConsumer {
    async fn fetch(
        &mut self,
        max: usize,
        max_bytes: usize,
        wait: Duration,
    ) -> Result<Vec<Delivered>, BusError> {
        if self.reopen || self.connections.has_changed().unwrap_or(false) {
            self.connections.mark_unchanged();
            // Until it is open again, each fetch tries.
            self.reopen = true;
            self.messages = None;
            tracing::info!(durable = %self.durable, "reconnected to NATS: re-opening the consumer at its ack floor");
            metrics::counter!(crate::metric_names::BUS_CONSUMER_REOPENED).increment(1);
            self.consumer =
                open_at_ack_floor(&self.stream, &self.durable, &self.filter, self.mode).await?;
            self.reopen = false;
        }
        let messages = match &mut self.messages {
            Some(messages) => messages,
            None => self.messages.insert(
                self.consumer
                    .stream()
                    .max_messages_per_batch(max.max(1))
                    .max_bytes_per_batch(max_bytes.max(1))
                    .heartbeat(Duration::from_secs(5))
                    .expires(PULL_EXPIRES)
                    .messages()
                    .await
                    .map_err(unavailable)?,
            ),
        };
        let next = tokio::select! {
            next = tokio::time::timeout(wait, messages.next()) => next,
            // Re-opened by the next fetch (a client gone for good waits
            // for the pull).
            () = async {
                if self.connections.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            } => {
                self.reopen = true;
                return Ok(Vec::new());
            }
        };
        let first = match next {
            Err(_) => return Ok(Vec::new()),
            Ok(Some(Ok(message))) => message,
            // A pull's error (a missed heartbeat, say) is the client's to
            // recover from, as it re-pulls: not a reason to re-open.
            Ok(Some(Err(err))) => {
                tracing::warn!(%err, "pull error; the client pulls again");
                return Ok(Vec::new());
            }
            Ok(None) => {
                // Ended: the next fetch pulls again.
                self.messages = None;
                return Ok(Vec::new());
            }
        };
        let mut bytes = first.payload.len();
        let mut out = vec![Self::delivered(first)?];
        // Then what is already here, without waiting.
        while out.len() < max && bytes < max_bytes {
            match messages.next().now_or_never() {
                Some(Some(Ok(message))) => {
                    bytes += message.payload.len();
                    out.push(Self::delivered(message)?);
                }
                Some(None) => {
                    self.messages = None;
                    break;
                }
                Some(Some(Err(_))) | None => break,
            }
        }
        Ok(out)
    }
}
