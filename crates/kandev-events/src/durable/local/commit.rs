//! Group commit of [`LocalStreams`](super::LocalStreams)' publishes: what
//! is queued while a store runs goes in the next one, a multi-row `INSERT`.
//! Every statement is a round trip to the thread of a SQLite connection;
//! with many agents at modest rates one per message was most of what
//! storing cost, whatever the statement did.
//!
//! The committer is the only writer of `stream_messages` in its process,
//! so it numbers messages itself (from each stream's stored maximum, read
//! once). A message whose id its stream already holds is dropped by the
//! `INSERT` and leaves its number unused: consumers read on over the gap.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use kandev_common::{db::sqlite::now, sync::lock};
use sqlx::{SqlitePool, types::Json};
use tokio::sync::{mpsc, oneshot, watch};
use uuid::Uuid;

use super::{Recent, Stored, storage};
use crate::{BusError, durable::Headers};

/// The most messages one statement stores.
const MAX_ROWS: usize = 64;
/// The most payload bytes one statement stores (a larger message goes alone).
const MAX_BYTES: usize = 8 << 20;
/// Parameters of one row of [`insert`].
const PARAMS: usize = 7;

/// A message waiting to be stored, and who waits for it.
pub(super) struct Publish {
    pub(super) stream: &'static str,
    pub(super) subject: String,
    pub(super) id: Uuid,
    pub(super) headers: Headers,
    pub(super) payload: Bytes,
    pub(super) done: oneshot::Sender<Result<(), BusError>>,
}

/// Starts the committer of `pool`: stored messages are kept in `recent`
/// and announced on `stored`. It ends when every sender is dropped.
pub(super) fn start(
    pool: SqlitePool,
    recent: Arc<Mutex<Recent>>,
    stored: Arc<watch::Sender<u64>>,
) -> mpsc::Sender<Publish> {
    let (tx, rx) = mpsc::channel(1024);
    let committer = Committer {
        pool,
        recent,
        stored,
        next: HashMap::new(),
    };
    tokio::spawn(committer.run(rx));
    tx
}

struct Committer {
    pool: SqlitePool,
    recent: Arc<Mutex<Recent>>,
    stored: Arc<watch::Sender<u64>>,
    /// The next seq of each stream seen.
    next: HashMap<&'static str, u64>,
}

impl Committer {
    async fn run(mut self, mut rx: mpsc::Receiver<Publish>) {
        while let Some(first) = rx.recv().await {
            // Publishers woken together (the agent manager's publishers
            // share the ticks of one grid) queue theirs meanwhile.
            tokio::task::yield_now().await;
            let mut bytes = first.payload.len();
            let mut group = vec![first];
            while group.len() < MAX_ROWS && bytes < MAX_BYTES {
                match rx.try_recv() {
                    Ok(p) => {
                        bytes += p.payload.len();
                        group.push(p);
                    }
                    Err(_) => break,
                }
            }
            metrics::histogram!(crate::metric_names::LOCAL_STREAMS_GROUP_MESSAGES)
                .record(group.len() as f64);
            self.store(group).await;
        }
    }

    /// Stores `group`, once more with the numbering read again if the
    /// first try fails (another handle on the file stored meanwhile), and
    /// answers each publisher.
    async fn store(&mut self, group: Vec<Publish>) {
        let mut result = self.insert(&group).await;
        if result.is_err() {
            self.next.clear();
            result = self.insert(&group).await;
        }
        let stored = match result {
            Ok(stored) => stored,
            Err(e) => {
                self.next.clear();
                tracing::warn!(error = %e, messages = group.len(), "local streams: cannot store");
                for p in group {
                    let _ = p.done.send(Err(BusError::Unavailable(e.to_string())));
                }
                return;
            }
        };
        // Kept in memory as they are (moved, not copied), then announced;
        // the publishers are answered once consumers can read them.
        let mut newest = 0;
        let mut answers = Vec::with_capacity(group.len());
        {
            let mut recent = lock(&self.recent);
            for (p, seq) in group.into_iter().zip(stored) {
                if let Some(seq) = seq {
                    newest = newest.max(seq);
                    recent.keep(
                        p.stream,
                        Stored {
                            seq,
                            subject: p.subject,
                            headers: p.headers,
                            payload: p.payload,
                        },
                    );
                }
                answers.push(p.done);
            }
        }
        if newest > 0 {
            self.stored.send_replace(newest);
        }
        for done in answers {
            let _ = done.send(Ok(()));
        }
    }

    /// Numbers and inserts `group` in one statement: each message's seq,
    /// `None` for one its stream already held (by id).
    async fn insert(&mut self, group: &[Publish]) -> Result<Vec<Option<u64>>, BusError> {
        let mut seqs = Vec::with_capacity(group.len());
        for p in group {
            let seq = self.next_seq(p.stream).await?;
            seqs.push(seq);
        }
        let at = now();
        let mut query = sqlx::query_scalar::<_, i64>(insert(group.len()));
        for (p, seq) in group.iter().zip(&seqs) {
            query = query
                .bind(p.stream)
                .bind(*seq as i64)
                .bind(p.id)
                .bind(p.subject.as_str())
                .bind(Json(&p.headers))
                .bind(p.payload.as_ref())
                .bind(at.as_str());
        }
        let inserted: Vec<i64> = query.fetch_all(&self.pool).await.map_err(storage)?;
        Ok(seqs
            .into_iter()
            .map(|seq| inserted.contains(&(seq as i64)).then_some(seq))
            .collect())
    }

    /// The next seq of `stream`, read from the file the first time.
    async fn next_seq(&mut self, stream: &'static str) -> Result<u64, BusError> {
        let next = match self.next.get(stream) {
            Some(next) => *next,
            None => {
                let max: i64 = sqlx::query_scalar(
                    "SELECT coalesce(max(seq), 0) FROM stream_messages WHERE stream = ?1",
                )
                .bind(stream)
                .fetch_one(&self.pool)
                .await
                .map_err(storage)?;
                max as u64 + 1
            }
        };
        self.next.insert(stream, next + 1);
        Ok(next)
    }
}

/// The `INSERT` of `rows` messages; one text per row count, made once.
fn insert(rows: usize) -> &'static str {
    static SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        kandev_common::db::multi_row(
            "INSERT INTO stream_messages (stream, seq, msg_id, subject, headers, payload, at)
             VALUES",
            PARAMS,
            MAX_ROWS,
            " ON CONFLICT (stream, msg_id) DO NOTHING RETURNING seq",
        )
    });
    &SQL[rows]
}
