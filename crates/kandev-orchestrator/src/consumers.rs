//! Durable JetStream consumers of `task.*` and `agent.*`: events that arrive
//! while the orchestrator is down wait in their streams and are handled when
//! it comes back. Each message is acknowledged once the engine applied it;
//! the engine dedupes by envelope id.

use std::{sync::Arc, time::Duration};

use async_nats::jetstream::{
    AckKind,
    consumer::{AckPolicy, DeliverPolicy, pull},
};
use futures::StreamExt;
use kandev_common::CancellationToken;
use kandev_events::JetStreamBus;
use tracing::Instrument as _;

use crate::engine::Engine;

/// Which events a consumer feeds to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Tasks,
    Agents,
}

impl Source {
    fn stream(self) -> &'static str {
        match self {
            Source::Tasks => "KANDEV_TASKS",
            Source::Agents => "KANDEV_AGENTS",
        }
    }
}

/// How often a message whose handling failed is tried before it is dropped.
const MAX_DELIVER: i64 = 20;

/// Runs one durable consumer until `stop` fires.
pub async fn run(
    bus: JetStreamBus,
    source: Source,
    durable: String,
    filter: String,
    engine: Arc<Engine>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        let attempt = async {
            bus.ensure_streams().await.map_err(|e| e.to_string())?;
            let stream = bus
                .jetstream()
                .get_stream(source.stream())
                .await
                .map_err(|e| e.to_string())?;
            let consumer = stream
                .get_or_create_consumer(
                    &durable,
                    pull::Config {
                        durable_name: Some(durable.clone()),
                        filter_subject: filter.clone(),
                        ack_policy: AckPolicy::Explicit,
                        ack_wait: Duration::from_secs(120),
                        deliver_policy: DeliverPolicy::All,
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            consumer
                .stream()
                .max_messages_per_batch(100)
                .heartbeat(Duration::from_secs(5))
                .expires(Duration::from_secs(30))
                .messages()
                .await
                .map_err(|e| e.to_string())
        };
        let mut messages = match attempt.await {
            Ok(m) => m,
            Err(err) => {
                tracing::warn!(%err, ?source, "event consumer not ready, retrying");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return,
                next = messages.next() => next,
            };
            let msg = match next {
                Some(Ok(msg)) => msg,
                Some(Err(err)) => {
                    tracing::warn!(%err, ?source, "event consumer stream error");
                    continue;
                }
                None => break,
            };
            // Handled in the trace of whoever published the event.
            let span = tracing::info_span!(
                "event",
                subject = %msg.subject,
                trace_id = tracing::field::Empty,
            );
            kandev_common::trace::continue_from(
                &span,
                kandev_events::traceparent(msg.headers.as_ref()),
            );
            let result = match source {
                Source::Tasks => {
                    engine
                        .handle_task_event(&msg.subject, &msg.payload)
                        .instrument(span)
                        .await
                }
                Source::Agents => {
                    engine
                        .handle_agent_event(&msg.payload)
                        .instrument(span)
                        .await
                }
            };
            match result {
                Ok(()) => {
                    if let Err(err) = msg.ack().await {
                        tracing::warn!(%err, "event ack failed");
                    }
                }
                Err(err) => {
                    let delivered = msg.info().map(|i| i.delivered).unwrap_or(1);
                    if delivered >= MAX_DELIVER {
                        tracing::error!(%err, subject = %msg.subject, "giving up on an event");
                        let _ = msg.ack().await;
                    } else {
                        tracing::warn!(%err, subject = %msg.subject, "event handling failed, retrying");
                        let _ = msg
                            .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                            .await;
                    }
                }
            }
        }
    }
}
