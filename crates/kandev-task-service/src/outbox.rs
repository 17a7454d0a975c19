//! The outbox relay: publishes committed events to the bus, in commit order,
//! at least once.
//!
//! Events are written to the `outbox` table in the transaction of their
//! change. The relay takes the oldest rows, publishes each and waits for the
//! bus to acknowledge it, then deletes it. When the bus is unreachable the
//! rows stay and the relay retries with backoff, so an event is published
//! late but never lost. A crash between publish and delete republishes the
//! event with the same id, which JetStream's duplicate window and consumers
//! drop. One relay at a time holds a batch ([`OutboxStore::claim`]: an
//! advisory lock on Postgres, where replicas share the database), which
//! keeps the order.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use kandev_common::{CancellationToken, trace};
use kandev_events::{BusError, EventBus};
use tokio::sync::Notify;
use tracing::Instrument as _;

use crate::store::OutboxStore;

const BATCH: i64 = 200;
const MAX_BACKOFF: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("outbox storage: {0}")]
    Storage(#[from] sqlx::Error),
}

/// Drains the outbox to an [`EventBus`].
pub struct OutboxRelay {
    outbox: Arc<dyn OutboxStore>,
    bus: Arc<dyn EventBus>,
    wake: Arc<Notify>,
    poll: Duration,
}

impl OutboxRelay {
    pub fn new(
        outbox: Arc<dyn OutboxStore>,
        bus: Arc<dyn EventBus>,
        wake: Arc<Notify>,
        poll: Duration,
    ) -> Self {
        OutboxRelay {
            outbox,
            bus,
            wake,
            poll,
        }
    }

    /// Publishes up to one batch. Returns how many events were published;
    /// stops at the first bus error, keeping that event and those after it.
    pub async fn drain_once(&self) -> Result<usize, RelayError> {
        let Some(batch) = self.outbox.claim(BATCH).await? else {
            return Ok(0);
        };
        let mut published = Vec::with_capacity(batch.events().len());
        let mut failure = None;
        for event in batch.events() {
            // Published in the trace of the request that made the change.
            let span = tracing::info_span!(
                "outbox_publish",
                subject = %event.subject,
                trace_id = tracing::field::Empty,
            );
            let traceparent = Some(event.traceparent.as_str()).filter(|t| !t.is_empty());
            trace::continue_from(&span, traceparent);
            match self
                .bus
                .publish(
                    &event.subject,
                    event.event_id,
                    Bytes::from(event.payload.clone()),
                )
                .instrument(span)
                .await
            {
                Ok(()) => published.push(event.id),
                Err(err) => {
                    failure = Some(err);
                    break;
                }
            }
        }
        batch.finish(&published).await?;
        metrics::counter!(crate::metric_names::OUTBOX_PUBLISHED).increment(published.len() as u64);
        match failure {
            Some(err) => Err(err.into()),
            None => Ok(published.len()),
        }
    }

    /// Number of events waiting to be published.
    pub async fn pending(&self) -> Result<i64, sqlx::Error> {
        self.outbox.pending().await
    }

    /// Runs until `shutdown`, then makes one last bounded attempt to drain.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.drain_once().await {
                Ok(n) if n as i64 >= BATCH => continue,
                Ok(_) => {
                    // A short batch emptied the outbox: nothing waits.
                    metrics::gauge!(crate::metric_names::OUTBOX_BACKLOG).set(0.0);
                    backoff = Duration::from_millis(100);
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep(self.poll) => {}
                    }
                }
                Err(err) => {
                    // The backlog while the bus is away: counted only then.
                    if let Ok(n) = self.pending().await {
                        metrics::gauge!(crate::metric_names::OUTBOX_BACKLOG).set(n as f64);
                    }
                    tracing::warn!(%err, retry_in_ms = backoff.as_millis() as u64, "outbox relay cannot publish");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        let last = tokio::time::timeout(Duration::from_secs(3), async {
            while let Ok(n) = self.drain_once().await {
                if n == 0 {
                    break;
                }
            }
        });
        if last.await.is_err() {
            tracing::warn!("outbox not fully drained at shutdown; it is published on next start");
        }
    }
}
