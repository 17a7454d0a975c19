//! Where every running turn stands, stored together: one task writes the
//! positions of all the manager's turns that moved (the last published
//! `seq`, the output position that goes with it, the plan progress) in one
//! statement per flush, so fifty agents cost one write per flush, not
//! fifty. A restarted manager resumes from these positions; what was
//! published after the last flush is published again and dropped by the
//! bus as a copy.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use kandev_common::sync::lock;
use uuid::Uuid;

use crate::store::{Position, Store};

/// A turn the book keeps: it tells where its publishing stands.
pub(super) trait Standing: Send + Sync {
    fn position(&self, id: Uuid) -> Position;
}

/// The turns whose positions are flushed, and the task flushing them.
pub struct ProgressBook {
    store: Store,
    every: Duration,
    turns: Arc<Turns>,
    started: std::sync::OnceLock<()>,
}

#[derive(Default)]
struct Turns {
    watched: Mutex<HashMap<Uuid, Watched>>,
    /// Held while a flush writes: a turn that ends waits for it, so no
    /// flush stores an older position after the turn's last one.
    writing: tokio::sync::Mutex<()>,
}

struct Watched {
    state: Arc<dyn Standing>,
    /// The position stored last (`None`: store it at the next flush).
    saved: Option<Position>,
}

/// A turn's place in the book; [`Self::leave`] takes it out.
pub(super) struct Entry {
    id: Uuid,
    turns: Arc<Turns>,
}

impl ProgressBook {
    /// A book flushing to `store` every `every` (from the first turn on).
    pub fn new(store: Store, every: Duration) -> Self {
        ProgressBook {
            store,
            every,
            turns: Arc::default(),
            started: std::sync::OnceLock::new(),
        }
    }

    /// Flushes `state`'s position with the others' from now on.
    pub(super) fn enter(&self, id: Uuid, state: Arc<dyn Standing>) -> Entry {
        self.started.get_or_init(|| {
            let (store, every) = (self.store.clone(), self.every);
            tokio::spawn(flush_every(store, every, Arc::downgrade(&self.turns)));
        });
        let saved = Some(state.position(id));
        lock(&self.turns.watched).insert(id, Watched { state, saved });
        Entry {
            id,
            turns: self.turns.clone(),
        }
    }
}

impl Entry {
    /// Takes the turn out of the book, once no flush is writing its
    /// position any more.
    pub(super) async fn leave(self) {
        lock(&self.turns.watched).remove(&self.id);
        let _ = self.turns.writing.lock().await;
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        lock(&self.turns.watched).remove(&self.id);
    }
}

/// Flushes the book every `every` until the book is gone.
async fn flush_every(store: Store, every: Duration, turns: Weak<Turns>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(turns) = turns.upgrade() else {
            return;
        };
        flush(&store, &turns).await;
    }
}

/// Stores the positions that moved since they were stored last.
#[tracing::instrument(skip_all)]
async fn flush(store: &Store, turns: &Turns) {
    let _writing = turns.writing.lock().await;
    let moved = moved(turns);
    if moved.is_empty() {
        return;
    }
    if let Err(error) = store.save_progress(&moved).await {
        tracing::warn!(%error, turns = moved.len(), "cannot store the turns' positions");
        // Stored again at the next flush.
        let mut watched = lock(&turns.watched);
        for p in &moved {
            if let Some(w) = watched.get_mut(&p.id) {
                w.saved = None;
            }
        }
    }
}

/// The positions that moved, marked as stored.
fn moved(turns: &Turns) -> Vec<Position> {
    let mut watched = lock(&turns.watched);
    watched
        .iter_mut()
        .filter_map(|(id, w)| {
            let now = w.state.position(*id);
            let moved = now.last_seq > 0
                && w.saved
                    .is_none_or(|s| (s.last_seq, s.progress) != (now.last_seq, now.progress));
            moved.then(|| {
                w.saved = Some(now);
                now
            })
        })
        .collect()
}
