//! Replicas: any number of orchestrators run against one Postgres and one
//! NATS. Two Postgres advisory locks keep them exact:
//!
//! - **Leadership** ([`lead`]): one replica at a time holds a session lock
//!   on a connection of its own and runs the work that must be single: the
//!   feed consumer (the per-task seq counters live in its memory), the
//!   `task.*` and `agent.*` consumers and the scheduler. The others wait and
//!   take over as soon as the lock is free: at once when the leader's
//!   process dies (its connection closes), after the server's TCP keepalive
//!   when its host vanishes. A leader whose lock connection stops answering
//!   steps down first: it checks every `poll` and gives up after one failed
//!   check, well within the keepalive, so two never lead at once.
//! - **Decisions** ([`DecisionLock`]): every replica serves gRPC, REST and
//!   WebSocket; a decision (start, stop, an event's reaction, a scheduler
//!   tick) runs under a transaction-scoped lock, so decisions of all
//!   replicas are serialized as the in-process mutex serializes them in one.
//!
//! Both keys are derived from the service's schema, so installations that
//! share a database in separate schemas do not contend.
//!
//! On SQLite (one machine, one process) there are no replicas: the process
//! leads from its start ([`lead_alone`]) and decisions are serialized by the
//! in-process mutex alone ([`DecisionLock::local`]).

use std::{future::Future, time::Duration};

use kandev_common::CancellationToken;
use sqlx::{Connection as _, PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::{Mutex, MutexGuard};
use tokio_util::task::AbortOnDropHandle;

/// How long a check of the lock connection may take before the leader
/// steps down.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The advisory lock key of `what` in `schema` (FNV-1a, stable across
/// builds and platforms).
pub fn lock_key(schema: &str, what: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in "kandev-orchestrator/"
        .bytes()
        .chain(schema.bytes())
        .chain(std::iter::once(b'/'))
        .chain(what.bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

/// Serializes decisions within this process (a mutex) and across replicas
/// (an advisory lock held by a transaction until the guard drops; dropping
/// rolls it back, which releases the lock, and a connection that cannot
/// roll back is closed, which releases it too).
pub struct DecisionLock {
    local: Mutex<()>,
    /// The replicas' database and lock key; none for one process alone.
    shared: Option<(PgPool, i64)>,
}

/// Held while a decision runs.
pub struct DecisionGuard<'a> {
    _tx: Option<Transaction<'static, Postgres>>,
    _local: MutexGuard<'a, ()>,
}

impl DecisionLock {
    pub fn new(pool: PgPool, schema: &str) -> Self {
        DecisionLock {
            local: Mutex::new(()),
            shared: Some((pool, lock_key(schema, "decisions"))),
        }
    }

    /// For one process without replicas (SQLite): the mutex alone.
    pub fn local() -> Self {
        DecisionLock {
            local: Mutex::new(()),
            shared: None,
        }
    }

    /// Waits for the decision lock of every replica.
    pub async fn lock(&self) -> Result<DecisionGuard<'_>, sqlx::Error> {
        let local = self.local.lock().await;
        let Some((pool, key)) = &self.shared else {
            return Ok(DecisionGuard {
                _tx: None,
                _local: local,
            });
        };
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(key)
            .execute(&mut *tx)
            .await?;
        Ok(DecisionGuard {
            _tx: Some(tx),
            _local: local,
        })
    }
}

/// Runs `work` until `stop` fires, as the only orchestrator there is (one
/// process on SQLite: nobody to take the lead from).
pub async fn lead_alone<W, F>(stop: CancellationToken, work: W)
where
    W: FnOnce(CancellationToken) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    tracing::info!("leading alone: consuming events and scheduling");
    metrics::gauge!(crate::metric_names::LEADER).set(1.0);
    metrics::counter!(crate::metric_names::LEADERSHIP_ACQUIRED).increment(1);
    let running = AbortOnDropHandle::new(tokio::spawn(work(stop.child_token())));
    if let Err(err) = running.await {
        tracing::error!(%err, "the leader's work panicked");
    }
    metrics::gauge!(crate::metric_names::LEADER).set(0.0);
}

/// Runs `work` while this replica leads, until `stop` fires: waits for the
/// leadership lock (trying every `poll`), starts `work` with a token of its
/// own, and cancels it and waits for its end when the lock is lost or
/// `stop` fires. Leadership is taken again after a loss.
pub async fn lead<W, F>(pool: PgPool, key: i64, poll: Duration, stop: CancellationToken, work: W)
where
    W: Fn(CancellationToken) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    metrics::gauge!(crate::metric_names::LEADER).set(0.0);
    let mut waiting_logged = false;
    // Kept between tries while standing by.
    let mut standby: Option<PgConnection> = None;
    loop {
        let tried = tokio::select! {
            () = stop.cancelled() => return,
            tried = try_lead(&pool, key, standby.take()) => tried,
        };
        let mut conn = match tried {
            Ok(Ok(conn)) => conn,
            Ok(Err(conn)) => {
                standby = Some(conn);
                if !waiting_logged {
                    tracing::info!("another orchestrator leads; standing by");
                    waiting_logged = true;
                }
                if sleep_or_stop(poll, &stop).await {
                    return;
                }
                continue;
            }
            Err(err) => {
                tracing::warn!(%err, "cannot try the leadership lock");
                if sleep_or_stop(poll, &stop).await {
                    return;
                }
                continue;
            }
        };
        waiting_logged = false;
        tracing::info!("leading: consuming events and scheduling");
        metrics::gauge!(crate::metric_names::LEADER).set(1.0);
        metrics::counter!(crate::metric_names::LEADERSHIP_ACQUIRED).increment(1);
        let token = stop.child_token();
        // Aborted if this future is dropped (the service's own end).
        let running = AbortOnDropHandle::new(tokio::spawn(work(token.clone())));
        let lost = loop {
            if sleep_or_stop(poll, &stop).await {
                break false;
            }
            let check = tokio::time::timeout(CHECK_TIMEOUT, conn.ping()).await;
            if !matches!(check, Ok(Ok(()))) {
                break true;
            }
        };
        if lost {
            tracing::warn!("the leadership lock's connection stopped answering; stepping down");
        }
        token.cancel();
        if let Err(err) = running.await {
            tracing::error!(%err, "the leader's work panicked");
        }
        metrics::gauge!(crate::metric_names::LEADER).set(0.0);
        // Closing the connection releases the lock for the next leader.
        let _ = tokio::time::timeout(CHECK_TIMEOUT, conn.close()).await;
        if !lost {
            return;
        }
    }
}

/// Tries the session lock `key` on `conn` (or a new connection of its
/// own, detached from the pool): `Ok(conn)` holding it, `Err(conn)` when
/// another replica holds it.
async fn try_lead(
    pool: &PgPool,
    key: i64,
    conn: Option<PgConnection>,
) -> Result<Result<PgConnection, PgConnection>, sqlx::Error> {
    let mut conn = match conn {
        Some(conn) => conn,
        None => {
            let mut conn = pool.acquire().await?.detach();
            // The server drops a vanished leader's session (and its lock)
            // after about 10 + 3 × 3 s; the leader itself notices within
            // `poll` + 2 s.
            for setting in [
                "SET tcp_keepalives_idle = 10",
                "SET tcp_keepalives_interval = 3",
                "SET tcp_keepalives_count = 3",
            ] {
                sqlx::query(setting).execute(&mut conn).await?;
            }
            conn
        }
    };
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut conn)
        .await?;
    Ok(if locked { Ok(conn) } else { Err(conn) })
}

/// Sleeps `d`; true when `stop` fired first.
pub(crate) async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(d) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_per_schema_and_purpose_and_are_stable() {
        let a = lock_key("orchestrator", "leader");
        assert_eq!(a, lock_key("orchestrator", "leader"));
        assert_ne!(a, lock_key("orchestrator", "decisions"));
        assert_ne!(a, lock_key("orchestrator_b", "leader"));
    }
}
