//! Replicas on one real Postgres: one leader at a time, a fast takeover
//! when the leader goes, and decisions serialized across replicas.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use kandev_common::CancellationToken;
use kandev_orchestrator::leader::{self, DecisionLock};
use kandev_testkit::{TestDb, eventually};
use sqlx::postgres::PgPoolOptions;

async fn pool(db: &TestDb) -> sqlx::PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect(&db.url)
        .await
        .expect("connect")
}

/// A replica's leadership loop whose work counts how many lead at once.
fn replica(
    pool: sqlx::PgPool,
    key: i64,
    leading: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(leader::lead(
        pool,
        key,
        Duration::from_millis(50),
        stop,
        move |token| {
            let (leading, most) = (leading.clone(), most.clone());
            async move {
                let now = leading.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                token.cancelled().await;
                leading.fetch_sub(1, Ordering::SeqCst);
            }
        },
    ))
}

#[tokio::test]
async fn one_replica_leads_and_another_takes_over_when_it_goes() {
    let db = TestDb::create().await;
    let key = leader::lock_key("orchestrator", "leader");
    let leading = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    // Each replica on a pool of its own, as separate processes are.
    let (a_stop, b_stop) = (CancellationToken::new(), CancellationToken::new());
    let a = replica(
        pool(&db).await,
        key,
        leading.clone(),
        most.clone(),
        a_stop.clone(),
    );
    eventually(10, "replica A leads", || async {
        (leading.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    let b = replica(
        pool(&db).await,
        key,
        leading.clone(),
        most.clone(),
        b_stop.clone(),
    );
    // B tries several times while A leads.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(leading.load(Ordering::SeqCst), 1);

    // A's process dies: its future is dropped, its connections close.
    a.abort();
    let _ = a.await;
    leading.fetch_sub(1, Ordering::SeqCst);
    eventually(10, "replica B takes over", || async {
        (leading.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two leaders at once");

    // A stopped leader hands over too.
    let c = replica(
        pool(&db).await,
        key,
        leading.clone(),
        most.clone(),
        a_stop.clone(),
    );
    b_stop.cancel();
    b.await.expect("B stops");
    eventually(10, "replica C takes over from B", || async {
        (leading.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    a_stop.cancel();
    c.await.expect("C stops");
    assert_eq!(leading.load(Ordering::SeqCst), 0);
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two leaders at once");
    db.drop_db().await;
}

#[tokio::test]
async fn decisions_of_two_replicas_never_overlap() {
    let db = TestDb::create().await;
    let replicas = [
        Arc::new(DecisionLock::new(pool(&db).await, "orchestrator")),
        Arc::new(DecisionLock::new(pool(&db).await, "orchestrator")),
    ];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for i in 0..16 {
        let lock = replicas[i % 2].clone();
        let (inside, most) = (inside.clone(), most.clone());
        handles.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = lock.lock().await.expect("the decision lock");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
            }
        }));
    }
    for h in handles {
        h.await.expect("a decision maker");
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "one decision at a time");

    // Another schema (another installation) does not wait for this one.
    let held = replicas[0].lock().await.expect("held");
    let other = DecisionLock::new(pool(&db).await, "orchestrator_other");
    tokio::time::timeout(Duration::from_secs(5), other.lock())
        .await
        .expect("not blocked by another schema's lock")
        .expect("locked");
    drop(held);
    db.drop_db().await;
}
