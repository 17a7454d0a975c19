//! Durable consumers of `task.*` and `agent.*` (on any [`Streams`]: JetStream,
//! or the one process's own): events that arrive
//! while the orchestrator is down wait in their streams and are handled when
//! it comes back. Each message is acknowledged once the engine applied it;
//! the engine dedupes by envelope id.

use std::{sync::Arc, time::Duration};

use kandev_common::CancellationToken;
use kandev_events::durable::{AckMode, Delivered, Streams};
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
const MAX_DELIVER: u64 = 20;

/// The most events one fetch takes.
const FETCH: usize = 100;

/// Runs one durable consumer until `stop` fires.
pub async fn run(
    streams: Arc<dyn Streams>,
    source: Source,
    durable: String,
    filter: String,
    engine: Arc<Engine>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        let opened = streams
            .consumer(source.stream(), &durable, &filter, AckMode::Explicit)
            .await;
        let mut consumer = match opened {
            Ok(c) => c,
            Err(err) => {
                tracing::warn!(%err, ?source, "event consumer not ready, retrying");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        let mut failures = 0u32;
        loop {
            let fetched = tokio::select! {
                () = stop.cancelled() => return,
                fetched = consumer.fetch(FETCH, 1 << 20, Duration::from_secs(30)) => fetched,
            };
            let batch = match fetched {
                Ok(batch) => {
                    failures = 0;
                    batch
                }
                Err(err) => {
                    failures += 1;
                    tracing::warn!(%err, ?source, failures, "event consumer stream error");
                    if failures >= 3 {
                        // Opened again at the ack floor.
                        break;
                    }
                    continue;
                }
            };
            for msg in batch {
                handle(&engine, source, msg).await;
            }
        }
    }
}

/// Applies one event, then acknowledges it, or has it delivered again.
async fn handle(engine: &Engine, source: Source, msg: Delivered) {
    // Handled in the trace of whoever published the event.
    let span = tracing::info_span!(
        "event",
        subject = %msg.subject,
        trace_id = tracing::field::Empty,
    );
    kandev_common::trace::continue_from(&span, msg.header(kandev_common::trace::TRACEPARENT));
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
        Err(err) if msg.delivered >= MAX_DELIVER => {
            tracing::error!(%err, subject = %msg.subject, "giving up on an event");
            let _ = msg.ack().await;
        }
        Err(err) => {
            tracing::warn!(%err, subject = %msg.subject, "event handling failed, retrying");
            let _ = msg.nak(Duration::from_secs(1)).await;
        }
    }
}
