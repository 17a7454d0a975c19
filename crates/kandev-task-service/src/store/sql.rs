//! [`SqlTaskStore`], the task service's store in either database: its
//! handles. What it does is in [`super::tasks`], [`super::workflow`] and
//! [`super::deps`].

use std::sync::Arc;

use sqlx::{Pool, Transaction};
use tokio::sync::{Mutex, Notify};

use super::dialect::Dialect;

/// Boards, tasks, their history and outbox in database `D`. `outbox_wake`
/// is poked after every commit that wrote an event, so the relay publishes
/// without waiting for its next poll; `relay` is this process's claim on
/// the outbox.
pub struct SqlTaskStore<D: Dialect> {
    pub(super) pool: Pool<D>,
    pub(super) outbox_wake: Arc<Notify>,
    pub(super) relay: Arc<Mutex<()>>,
}

impl<D: Dialect> Clone for SqlTaskStore<D> {
    fn clone(&self) -> Self {
        SqlTaskStore {
            pool: self.pool.clone(),
            outbox_wake: self.outbox_wake.clone(),
            relay: self.relay.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlTaskStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTaskStore")
            .field("database", &D::NAME)
            .finish_non_exhaustive()
    }
}

pub(super) type Tx<D> = Transaction<'static, D>;
