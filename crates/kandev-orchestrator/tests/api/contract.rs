//! The storage contract: what every [`ExecutionStore`] and [`FeedStore`]
//! does, checked against each database. Each check is one function over a
//! pair of stores on one fresh database; `contract!` runs it on Postgres
//! and on SQLite.

use std::{collections::HashMap, sync::Arc};

use chrono::Utc;
use kandev_orchestrator::{
    Settings,
    checks::{Check, CheckState},
    domain::ExecState,
    engine::store::{
        ChecksPoll, Enqueue, Execution, ExecutionStore, NewReviewComment, PgExecStore,
        ReviewCommentRow, Side, SqliteExecStore, TrackerIssueRow, TrackerLinkRow,
    },
    feed::{
        Frame,
        store::{FeedStore, PgFeedStore, SqliteFeedStore},
    },
    startup::{connect_database, connect_sqlite},
};
use kandev_testkit::TestDb;
use uuid::Uuid;

/// The engine's and the feed's stores on one fresh database.
struct Stores {
    exec: Arc<dyn ExecutionStore>,
    feed: Arc<dyn FeedStore>,
}

struct Backend {
    stores: Stores,
    db: Option<TestDb>,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    async fn postgres() -> Backend {
        let db = TestDb::create().await;
        let settings = Settings {
            common: kandev_common::config::ServiceSettings {
                database_url: db.url.clone(),
                ..Settings::default().common
            },
            ..Settings::default()
        };
        let pool = connect_database(&settings).await.expect("postgres opens");
        Backend {
            stores: Stores {
                exec: Arc::new(PgExecStore::new(pool.clone())),
                feed: Arc::new(PgFeedStore::new(pool)),
            },
            db: Some(db),
            _dir: None,
        }
    }

    async fn sqlite() -> Backend {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("orchestrator.db").display());
        let pool = connect_sqlite(&url).await.expect("sqlite opens");
        Backend {
            stores: Stores {
                exec: Arc::new(SqliteExecStore::new(pool.clone())),
                feed: Arc::new(SqliteFeedStore::new(pool)),
            },
            db: None,
            _dir: Some(dir),
        }
    }

    async fn remove(self) {
        if let Some(db) = self.db {
            db.drop_db().await;
        }
    }
}

/// Runs each named check against both databases.
macro_rules! contract {
    ($($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $check() {
                    let backend = super::Backend::postgres().await;
                    super::$check(&backend.stores).await;
                    backend.remove().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $check() {
                    let backend = super::Backend::sqlite().await;
                    super::$check(&backend.stores).await;
                    backend.remove().await;
                }
            )*
        }
    };
}

contract!(
    the_queue_orders_by_priority_then_arrival,
    a_run_goes_from_the_queue_to_its_end,
    retries_wait_until_they_are_due,
    a_moved_run_is_fenced_and_queued_again,
    finished_workspaces_are_due_after_their_retention,
    direct_clones_are_due_after_their_retention_until_forgotten,
    review_comments_are_kept_round_by_round,
    review_comments_are_resolved_and_opened_again,
    checks_are_watched_polled_and_fixed_once,
    tracker_links_are_kept_and_replaced,
    an_issue_is_claimed_once_per_board,
    events_are_applied_once,
    the_feed_keeps_every_seq_once_in_order,
    a_packed_batch_is_stored_as_it_came,
);

fn enqueue(task_id: Uuid, agent_type: &str, priority: i32) -> Enqueue<'_> {
    Enqueue {
        task_id,
        agent_type,
        priority,
        max_retries: 2,
        prompt: "",
        origin: "eligible",
        traceparent: "",
        run_as: "alice",
    }
}

async fn exec(stores: &Stores, task_id: Uuid) -> Execution {
    stores
        .exec
        .get(task_id)
        .await
        .unwrap()
        .expect("an execution")
}

fn ids(execs: &[Execution]) -> Vec<Uuid> {
    execs.iter().map(|e| e.task_id).collect()
}

async fn the_queue_orders_by_priority_then_arrival(stores: &Stores) {
    let store = &stores.exec;
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    assert!(store.get(a).await.unwrap().is_none());
    store.enqueue(&enqueue(a, "mock-agent", 0)).await.unwrap();
    store.enqueue(&enqueue(b, "mock-agent", 0)).await.unwrap();
    store.enqueue(&enqueue(c, "mock-agent", 5)).await.unwrap();
    assert_eq!(ids(&store.queued().await.unwrap()), [c, a, b]);
    assert_eq!(
        store.queue_positions().await.unwrap(),
        HashMap::from([(c, 1), (a, 2), (b, 3)])
    );
    let queued_a = exec(stores, a).await;
    assert_eq!(queued_a.state(), ExecState::Queued);
    assert_eq!((queued_a.attempts, queued_a.max_retries), (0, 2));
    assert_eq!(
        store
            .queued_ahead(queued_a.priority, queued_a.queue_order)
            .await
            .unwrap(),
        1
    );

    // Queued again while queued: it keeps its place.
    store
        .enqueue(&Enqueue {
            prompt: "again",
            ..enqueue(a, "mock-agent", 0)
        })
        .await
        .unwrap();
    assert_eq!(ids(&store.queued().await.unwrap()), [c, a, b]);
    assert_eq!(exec(stores, a).await.prompt, "again");
    store.update_queued(b, 9, 4).await.unwrap();
    assert_eq!(ids(&store.queued().await.unwrap()), [b, c, a]);
    assert_eq!(exec(stores, b).await.max_retries, 4);
    store.set_prompt(c, "do this instead").await.unwrap();
    assert_eq!(exec(stores, c).await.prompt, "do this instead");
    // Whose run it is: as queued, then whoever starts it.
    assert_eq!(exec(stores, c).await.run_as, "alice");
    store.set_run_as(c, "bob").await.unwrap();
    assert_eq!(exec(stores, c).await.run_as, "bob");
    store
        .enqueue(&Enqueue {
            run_as: "carol",
            ..enqueue(a, "mock-agent", 0)
        })
        .await
        .unwrap();
    assert_eq!(exec(stores, a).await.run_as, "carol");

    let mut many = ids(&store.get_many(&[a, c, Uuid::now_v7()]).await.unwrap());
    many.sort();
    let mut want = vec![a, c];
    want.sort();
    assert_eq!(many, want);
    assert!(store.get_many(&[]).await.unwrap().is_empty());
    store.delete(a).await.unwrap();
    assert!(store.get(a).await.unwrap().is_none());
}

async fn a_run_goes_from_the_queue_to_its_end(stores: &Stores) {
    let store = &stores.exec;
    let (run, other, queued) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    store.enqueue(&enqueue(run, "mock-agent", 0)).await.unwrap();
    store.enqueue(&enqueue(other, "codex", 0)).await.unwrap();
    store
        .enqueue(&enqueue(queued, "mock-agent", 0))
        .await
        .unwrap();
    store.set_prompt(run, "a follow-up").await.unwrap();
    store.begin_launch(run, 1).await.unwrap();
    store.begin_launch(other, 1).await.unwrap();
    let launching = exec(stores, run).await;
    assert_eq!(launching.state(), ExecState::Launching);
    assert_eq!((launching.attempts, launching.queue_order), (1, None));
    let mut now_launching = ids(&store.launching().await.unwrap());
    now_launching.sort();
    let mut want = vec![run, other];
    want.sort();
    assert_eq!(now_launching, want);

    let instance = Uuid::now_v7();
    store
        .launched(run, Some(instance), "manager-1")
        .await
        .unwrap();
    store.set_session(run, "session-1").await.unwrap();
    let running = exec(stores, run).await;
    assert_eq!(running.state(), ExecState::Running);
    assert_eq!(running.instance_id, Some(instance));
    assert_eq!(running.manager_id, "manager-1");
    assert_eq!(running.acp_session_id, "session-1");
    assert_eq!(running.prompt, "", "a launched prompt is used up");
    let mut active = store.active_by_type().await.unwrap();
    active.sort();
    assert_eq!(active, [("codex".into(), 1), ("mock-agent".into(), 1)]);

    store.drop_launch(other, 1).await.unwrap();
    assert_eq!(exec(stores, other).await.state(), ExecState::Stopped);
    store.failed(run, "it broke").await.unwrap();
    let failed = exec(stores, run).await;
    assert_eq!(
        (failed.state(), failed.last_error.as_str()),
        (ExecState::Failed, "it broke")
    );

    // Queued again: a fresh run at the end of the queue.
    store.enqueue(&enqueue(run, "mock-agent", 0)).await.unwrap();
    let again = exec(stores, run).await;
    assert_eq!((again.attempts, again.last_error.as_str()), (0, ""));
    assert_eq!(again.instance_id, None);
    assert_eq!(ids(&store.queued().await.unwrap()), [queued, run]);
    store.set_state(run, ExecState::Completed).await.unwrap();
    assert_eq!(exec(stores, run).await.state(), ExecState::Completed);
    // The adopted instance of a recovered run.
    store.adopt(queued, instance, "manager-2").await.unwrap();
    let adopted = exec(stores, queued).await;
    assert_eq!(
        (adopted.state(), adopted.instance_id),
        (ExecState::Running, Some(instance))
    );
    assert_eq!(adopted.manager_id, "manager-2");
}

async fn retries_wait_until_they_are_due(stores: &Stores) {
    let store = &stores.exec;
    let (due, later, waiting) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    for id in [due, later, waiting] {
        store.enqueue(&enqueue(id, "mock-agent", 0)).await.unwrap();
        store.begin_launch(id, 1).await.unwrap();
    }
    store
        .enqueue(&enqueue(waiting, "mock-agent", 0))
        .await
        .unwrap();
    let past = Utc::now() - chrono::Duration::seconds(5);
    let future = Utc::now() + chrono::Duration::hours(1);
    store
        .retry_later(due, past, "first try failed")
        .await
        .unwrap();
    store
        .retry_later(later, future, "also failed")
        .await
        .unwrap();
    let retry = exec(stores, later).await;
    assert_eq!(retry.state(), ExecState::RetryWait);
    assert_eq!(retry.last_error, "also failed");
    assert_eq!(
        retry.retry_at.unwrap().timestamp_micros(),
        future.timestamp_micros()
    );

    store.requeue_due_retries().await.unwrap();
    assert_eq!(exec(stores, due).await.state(), ExecState::Queued);
    assert_eq!(exec(stores, due).await.retry_at, None);
    assert_eq!(exec(stores, later).await.state(), ExecState::RetryWait);
    assert_eq!(
        ids(&store.queued().await.unwrap()),
        [waiting, due],
        "a retry goes to the end of the queue"
    );
}

async fn a_moved_run_is_fenced_and_queued_again(stores: &Stores) {
    let store = &stores.exec;
    let (moved, local) = (Uuid::now_v7(), Uuid::now_v7());
    let (instance, local_instance) = (Uuid::now_v7(), Uuid::now_v7());
    for id in [moved, local] {
        store.enqueue(&enqueue(id, "mock-agent", 0)).await.unwrap();
        store.begin_launch(id, 2).await.unwrap();
    }
    store.launched(moved, Some(instance), "gone").await.unwrap();
    store
        .launched(local, Some(local_instance), "")
        .await
        .unwrap();
    assert_eq!(ids(&store.placed_runs().await.unwrap()), [moved]);

    let run = exec(stores, moved).await;
    store.move_run(&run).await.unwrap();
    assert!(store.is_moved(instance).await.unwrap());
    assert!(!store.is_moved(local_instance).await.unwrap());
    assert_eq!(stores.feed.moved_instances().await.unwrap(), [instance]);
    let requeued = exec(stores, moved).await;
    assert_eq!(requeued.state(), ExecState::Queued);
    assert_eq!((requeued.attempts, requeued.origin.as_str()), (1, "manual"));
    assert_eq!(
        (requeued.instance_id, requeued.manager_id.as_str()),
        (None, "")
    );
    assert!(store.placed_runs().await.unwrap().is_empty());
    // Moving twice fences once.
    store.move_run(&run).await.unwrap();
    assert_eq!(stores.feed.moved_instances().await.unwrap().len(), 1);

    store.requeue_interrupted(local).await.unwrap();
    store.requeue_interrupted(local).await.unwrap();
    store.requeue_interrupted(local).await.unwrap();
    let interrupted = exec(stores, local).await;
    assert_eq!(
        (interrupted.state(), interrupted.attempts),
        (ExecState::Queued, 0)
    );
}

async fn finished_workspaces_are_due_after_their_retention(stores: &Stores) {
    let store = &stores.exec;
    let (done, removed, running) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    for id in [done, removed, running] {
        store.enqueue(&enqueue(id, "mock-agent", 0)).await.unwrap();
        store.begin_launch(id, 1).await.unwrap();
    }
    store.set_state(done, ExecState::Completed).await.unwrap();
    store.drop_launch(removed, 1).await.unwrap();
    store.workspace_removed(removed).await.unwrap();
    store.launched(running, None, "").await.unwrap();
    kandev_testkit::eventually(5, "the finished run to be due", || async {
        (store.clones_due(0.0, 10).await.unwrap() == [done]).then_some(())
    })
    .await;
    assert!(store.clones_due(3600.0, 10).await.unwrap().is_empty());
    assert!(store.clones_due(0.0, 0).await.unwrap().is_empty());
    // Queued again, its workspace is in use again.
    store
        .enqueue(&enqueue(removed, "mock-agent", 0))
        .await
        .unwrap();
    store
        .set_state(removed, ExecState::Completed)
        .await
        .unwrap();
    kandev_testkit::eventually(5, "both runs to be due", || async {
        (store.clones_due(0.0, 10).await.unwrap().len() == 2).then_some(())
    })
    .await;
}

async fn direct_clones_are_due_after_their_retention_until_forgotten(stores: &Stores) {
    let store = &stores.exec;
    let (older, newer, rerun) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    store.direct_run_ended(newer, hour_ago).await.unwrap();
    store
        .direct_run_ended(older, hour_ago - chrono::Duration::minutes(1))
        .await
        .unwrap();
    assert_eq!(
        store.direct_clones_due(0.0, 10).await.unwrap(),
        [older, newer]
    );
    assert_eq!(store.direct_clones_due(0.0, 1).await.unwrap(), [older]);
    assert!(
        store
            .direct_clones_due(7200.0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A later run of the same task ends now: it is due after the retention
    // again, counted from its own end.
    store.direct_run_ended(rerun, hour_ago).await.unwrap();
    store.direct_run_ended(rerun, Utc::now()).await.unwrap();
    assert_eq!(
        store.direct_clones_due(1800.0, 10).await.unwrap(),
        [older, newer]
    );
    store.forget_direct_clone(older).await.unwrap();
    store.forget_direct_clone(older).await.unwrap();
    assert_eq!(store.direct_clones_due(1800.0, 10).await.unwrap(), [newer]);
}

async fn events_are_applied_once(stores: &Stores) {
    let store = &stores.exec;
    let event = Uuid::now_v7();
    assert!(!store.seen(event).await.unwrap());
    store.mark_seen(event).await.unwrap();
    store.mark_seen(event).await.unwrap();
    assert!(store.seen(event).await.unwrap());
    assert!(!store.seen(Uuid::now_v7()).await.unwrap());
    assert_eq!(store.prune_seen().await.unwrap(), 0, "kept for a day");
    assert!(store.seen(event).await.unwrap());
}

fn frame(task: Uuid, seq: i64, instance: Uuid, instance_seq: i64) -> Arc<Frame> {
    Arc::new(Frame::new(
        task,
        seq,
        instance,
        instance_seq,
        &batch_event(seq),
    ))
}

fn seqs(frames: &[Frame]) -> Vec<(i64, Uuid, i64)> {
    frames
        .iter()
        .map(|f| (f.seq, f.instance_id, f.instance_seq))
        .collect()
}

async fn the_feed_keeps_every_seq_once_in_order(stores: &Stores) {
    let feed = &stores.feed;
    let (task, other) = (Uuid::now_v7(), Uuid::now_v7());
    let (first, second, theirs) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    assert_eq!(feed.last_seq(task).await.unwrap(), 0);
    assert!(feed.history(task, 0, 10).await.unwrap().is_empty());

    // Two tasks interleaved; the task's second instance goes on numbering.
    let batch = vec![
        frame(task, 1, first, 1),
        frame(other, 1, theirs, 1),
        frame(task, 2, first, 2),
        frame(task, 3, second, 1),
    ];
    feed.append(&batch).await.unwrap();
    feed.append(&[frame(task, 4, second, 2), frame(task, 5, second, 3)])
        .await
        .unwrap();
    // A batch committed twice (its answer lost) is stored once.
    feed.append(&batch).await.unwrap();
    feed.append(&[]).await.unwrap();

    let all = feed.history(task, 0, 100).await.unwrap();
    assert_eq!(
        seqs(&all),
        [
            (1, first, 1),
            (2, first, 2),
            (3, second, 1),
            (4, second, 2),
            (5, second, 3)
        ]
    );
    assert_eq!(all[4].event(), batch_event(5));
    assert_eq!(
        seqs(&feed.history(task, 1, 2).await.unwrap()),
        [(2, first, 2), (3, second, 1)]
    );
    assert!(feed.history(task, 5, 10).await.unwrap().is_empty());
    assert_eq!(feed.last_seq(task).await.unwrap(), 5);
    assert_eq!(feed.last_seq(other).await.unwrap(), 1);
    assert_eq!(feed.instance_last_seq(first).await.unwrap(), 2);
    assert_eq!(feed.instance_last_seq(second).await.unwrap(), 3);
    assert_eq!(feed.instance_last_seq(Uuid::now_v7()).await.unwrap(), 0);
    assert_eq!(
        stores
            .exec
            .last_seqs(&[task, other, Uuid::now_v7()])
            .await
            .unwrap(),
        HashMap::from([(task, 5), (other, 1)])
    );
    assert_eq!(stores.exec.last_seq(task).await.unwrap(), 5);

    // A long feed: chunks split, reads page through it without a gap.
    let many: Vec<_> = (6..=5000).map(|s| frame(task, s, second, s - 2)).collect();
    feed.append(&many).await.unwrap();
    let mut after = 0;
    while let Some(last) = feed.history(task, after, 700).await.unwrap().last() {
        assert_eq!(last.seq, (after + 700).min(5000));
        after = last.seq;
    }
    assert_eq!(after, 5000);

    // Many tasks in one batch (more chunks than one statement writes),
    // committed twice: each task's frames once.
    let tasks: Vec<(Uuid, Uuid)> = (0..70).map(|_| (Uuid::now_v7(), Uuid::now_v7())).collect();
    let wide: Vec<_> = (1..=2)
        .flat_map(|s| tasks.iter().map(move |&(t, i)| frame(t, s, i, s)))
        .collect();
    feed.append(&wide).await.unwrap();
    feed.append(&wide).await.unwrap();
    for &(t, i) in &tasks {
        let frames = feed.history(t, 0, 10).await.unwrap();
        assert_eq!(seqs(&frames), [(1, i, 1), (2, i, 2)]);
        assert_eq!(frames[1].event(), batch_event(2));
    }
}

/// Frames numbered `first_seq..` from one packed `acp.message` batch of
/// `n` events of `instance` from `first_instance_seq`, marked as its frames
/// (as the consumer marks a batch it numbered whole).
fn packed_frames(
    task: Uuid,
    first_seq: i64,
    instance: Uuid,
    first_instance_seq: i64,
    n: i64,
) -> Vec<Arc<Frame>> {
    let events: Vec<serde_json::Value> = (0..n)
        .map(|i| serde_json::json!({"n": first_instance_seq + i, "text": "some words of prose ".repeat(8)}))
        .collect();
    let batch = kandev_events::agent::AcpBatch {
        task_id: task,
        instance_id: instance,
        first_seq: first_instance_seq as u64,
        cursor: Default::default(),
        events: events.clone(),
    };
    let packed = bytes::Bytes::from(kandev_events::pack::pack(batch.encode().1));
    assert!(
        kandev_events::pack::is_packed(&packed),
        "large enough to pack"
    );
    events
        .iter()
        .enumerate()
        .map(|(i, event)| {
            let i = i as i64;
            let mut f = Frame::new(
                task,
                first_seq + i,
                instance,
                first_instance_seq + i,
                &event.to_string(),
            );
            f.batch = Some(packed.clone());
            Arc::new(f)
        })
        .collect()
}

async fn a_packed_batch_is_stored_as_it_came(stores: &Stores) {
    let feed = &stores.feed;
    let (task, instance) = (Uuid::now_v7(), Uuid::now_v7());
    // Text chunks before and after the batch, in one append; the batch
    // alone in the next; then all again (a commit whose answer was lost).
    let mut first = vec![frame(task, 1, instance, 1)];
    first.extend(packed_frames(task, 2, instance, 2, 150));
    first.push(frame(task, 152, instance, 152));
    let second = packed_frames(task, 153, instance, 153, 200);
    for _ in 0..2 {
        feed.append(&first).await.unwrap();
        feed.append(&second).await.unwrap();
    }
    let want: Vec<_> = first.iter().chain(&second).collect();
    // Read whole, and in pages that start and end inside the batches.
    let all = feed.history(task, 0, 1000).await.unwrap();
    assert_eq!(all.len(), want.len());
    for (got, want) in all.iter().zip(&want) {
        assert_eq!(
            (got.seq, got.instance_id, got.instance_seq, got.event()),
            (want.seq, want.instance_id, want.instance_seq, want.event())
        );
        assert_eq!(got.text, want.text);
    }
    let mut after = 0;
    while let Some(last) = feed.history(task, after, 37).await.unwrap().last() {
        assert_eq!(last.seq, (after + 37).min(352));
        after = last.seq;
    }
    assert_eq!(after, 352);
    assert_eq!(feed.last_seq(task).await.unwrap(), 352);
    assert_eq!(feed.instance_last_seq(instance).await.unwrap(), 352);
}

fn batch_event(seq: i64) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"n":{seq}}}}}"#)
}

fn review_comment(path: &str, line: Option<u32>, side: Side, body: &str) -> NewReviewComment {
    NewReviewComment {
        path: path.into(),
        line,
        side,
        line_text: line.map(|l| format!("line {l}")).unwrap_or_default(),
        body: body.into(),
    }
}

/// (round, path, line, side, line_text, body, author) of each comment.
type Said = (i32, String, Option<i32>, Side, String, String, String);

fn said(comments: &[ReviewCommentRow]) -> Vec<Said> {
    comments
        .iter()
        .map(|c| {
            (
                c.round,
                c.path.clone(),
                c.line,
                c.side,
                c.line_text.clone(),
                c.body.clone(),
                c.author.clone(),
            )
        })
        .collect()
}

async fn review_comments_are_kept_round_by_round(stores: &Stores) {
    let store = &stores.exec;
    let (task, other) = (Uuid::now_v7(), Uuid::now_v7());
    assert!(store.review_comments(task).await.unwrap().is_empty());
    let before = Utc::now();
    let first = [
        review_comment("", None, Side::New, "Close, but not yet."),
        review_comment(
            "src/lib.rs",
            Some(12),
            Side::New,
            "Handle the empty case.\nAnd say why.",
        ),
        review_comment("src/lib.rs", Some(3), Side::Old, "Why remove this?"),
        review_comment("README.md", None, Side::New, "Say more here."),
    ];
    assert_eq!(
        store.add_review_round(task, "alice", &first).await.unwrap(),
        1
    );
    assert_eq!(
        store
            .add_review_round(
                task,
                "bob",
                &[review_comment("b.rs", Some(1), Side::New, "Again.")]
            )
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .add_review_round(other, "carol", &first[..1])
            .await
            .unwrap(),
        1,
        "rounds count per task"
    );
    let kept = store.review_comments(task).await.unwrap();
    let text = |s: &str| s.to_string();
    assert_eq!(
        said(&kept),
        [
            (
                1,
                text(""),
                None,
                Side::New,
                text(""),
                text("Close, but not yet."),
                text("alice")
            ),
            (
                1,
                text("src/lib.rs"),
                Some(12),
                Side::New,
                text("line 12"),
                text("Handle the empty case.\nAnd say why."),
                text("alice")
            ),
            (
                1,
                text("src/lib.rs"),
                Some(3),
                Side::Old,
                text("line 3"),
                text("Why remove this?"),
                text("alice")
            ),
            (
                1,
                text("README.md"),
                None,
                Side::New,
                text(""),
                text("Say more here."),
                text("alice")
            ),
            (
                2,
                text("b.rs"),
                Some(1),
                Side::New,
                text("line 1"),
                text("Again."),
                text("bob")
            ),
        ],
        "in writing order, round by round"
    );
    for c in &kept {
        assert_eq!(c.task_id, task);
        assert!(
            c.created_at >= before - chrono::Duration::seconds(1),
            "{c:?}"
        );
        assert_eq!(
            (c.resolved_by.as_deref(), c.resolved_at),
            (None, None),
            "open"
        );
    }
    // A round whose request failed is forgotten; the next takes its number.
    store.forget_review_round(task, 2).await.unwrap();
    assert_eq!(store.review_comments(task).await.unwrap().len(), 4);
    assert_eq!(
        store
            .add_review_round(task, "bob", &first[..1])
            .await
            .unwrap(),
        2
    );
    // The task is deleted: its comments go, another task's stay.
    store.delete_review_comments(task).await.unwrap();
    assert!(store.review_comments(task).await.unwrap().is_empty());
    assert_eq!(store.review_comments(other).await.unwrap().len(), 1);
}

async fn review_comments_are_resolved_and_opened_again(stores: &Stores) {
    let store = &stores.exec;
    let (task, other) = (Uuid::now_v7(), Uuid::now_v7());
    let comments = [
        review_comment("a.rs", Some(1), Side::New, "One."),
        review_comment("a.rs", Some(2), Side::New, "Two."),
    ];
    store
        .add_review_round(task, "alice", &comments)
        .await
        .unwrap();
    let kept = store.review_comments(task).await.unwrap();
    let (one, two) = (kept[0].id, kept[1].id);
    let at = Utc::now() - chrono::Duration::minutes(5);
    let resolved = store
        .resolve_review_comment(task, one, Some(("bob", at)))
        .await
        .unwrap()
        .expect("the comment");
    assert_eq!(resolved.id, one);
    assert_eq!(resolved.resolved_by.as_deref(), Some("bob"));
    let when = resolved.resolved_at.expect("resolved at");
    assert!((when - at).num_milliseconds().abs() < 1, "{when} vs {at}");
    // Resolved again: who resolved it first, and when, stay.
    let again = store
        .resolve_review_comment(task, one, Some(("carol", Utc::now())))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (again.resolved_by.as_deref(), again.resolved_at),
        (Some("bob"), Some(when))
    );
    let kept = store.review_comments(task).await.unwrap();
    assert_eq!(kept[0].resolved_by.as_deref(), Some("bob"));
    assert_eq!(kept[1].resolved_by, None, "only that one");
    // Opened again.
    let open = store
        .resolve_review_comment(task, one, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((open.resolved_by, open.resolved_at), (None, None));
    // Another task's comment, or none: not found, nothing changed.
    assert!(
        store
            .resolve_review_comment(other, two, Some(("bob", at)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .resolve_review_comment(task, Uuid::now_v7(), None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .review_comments(task)
            .await
            .unwrap()
            .iter()
            .all(|c| c.resolved_at.is_none())
    );
}

fn ci_check(name: &str, status: &str, failed: bool) -> Check {
    Check {
        name: name.into(),
        kind: "check_run".into(),
        status: status.into(),
        conclusion: if failed {
            "failure".into()
        } else {
            String::new()
        },
        url: format!("https://ci.example/{name}"),
        failed,
        log_tail: if failed {
            "error: it broke\n".into()
        } else {
            String::new()
        },
    }
}

/// A pushed commit's checks: watched, due when their time comes, each
/// read recorded for that commit only, a fix recorded once for the
/// automation, and gone with the task.
async fn checks_are_watched_polled_and_fixed_once(stores: &Stores) {
    let store = &stores.exec;
    let (task, other) = (Uuid::now_v7(), Uuid::now_v7());
    let now = Utc::now();
    let later = now + chrono::Duration::seconds(60);
    assert!(store.task_checks(task).await.unwrap().is_none());
    store
        .watch_checks(task, "https://github.com/acme/app", "aaa111", now)
        .await
        .unwrap();
    store
        .watch_checks(other, "https://github.com/acme/app", "bbb222", later)
        .await
        .unwrap();
    let row = store.task_checks(task).await.unwrap().unwrap();
    assert_eq!(
        (row.sha.as_str(), row.state, row.polls, row.checks.0.len()),
        ("aaa111", CheckState::Pending, 0, 0)
    );
    assert_eq!(row.repository_url, "https://github.com/acme/app");
    assert!(row.fix_sent_at.is_none());
    // Only the one whose time has come is due.
    let due = store.checks_due(now, 10).await.unwrap();
    assert_eq!(due.iter().map(|r| r.task_id).collect::<Vec<_>>(), [task]);

    // A read: still running, polled again later.
    let running = [ci_check("build", "in_progress", false)];
    let poll = ChecksPoll {
        state: CheckState::Pending,
        checks: &running,
        error: "",
        polls: 1,
        next_poll_at: Some(later),
        at: now,
    };
    assert!(store.record_checks(task, "aaa111", &poll).await.unwrap());
    assert!(store.checks_due(now, 10).await.unwrap().is_empty());
    // A read of a commit no longer watched is not recorded.
    assert!(!store.record_checks(task, "old000", &poll).await.unwrap());

    // Failed: no longer polled, the checks and their log kept.
    let failed = [
        ci_check("build", "completed", true),
        ci_check("lint", "completed", false),
    ];
    let poll = ChecksPoll {
        state: CheckState::Failure,
        checks: &failed,
        error: "",
        polls: 2,
        next_poll_at: None,
        at: now,
    };
    assert!(store.record_checks(task, "aaa111", &poll).await.unwrap());
    let row = store.task_checks(task).await.unwrap().unwrap();
    assert_eq!(row.state, CheckState::Failure);
    assert_eq!(row.checks.0, failed);
    assert_eq!(row.polls, 2);
    assert!(row.next_poll_at.is_none());
    assert!(
        store
            .checks_due(later + chrono::Duration::hours(1), 10)
            .await
            .unwrap()
            .iter()
            .all(|r| r.task_id != task)
    );

    // The automation sends a fix once; a person may send it again.
    assert!(store.fix_sent(task, "aaa111", now, true).await.unwrap());
    assert!(!store.fix_sent(task, "aaa111", now, true).await.unwrap());
    assert!(store.fix_sent(task, "aaa111", later, false).await.unwrap());
    assert!(!store.fix_sent(task, "old000", now, false).await.unwrap());
    let sent = store.task_checks(task).await.unwrap().unwrap().fix_sent_at;
    assert_eq!(sent.map(|t| t.timestamp()), Some(later.timestamp()));

    // A new push starts over.
    store
        .watch_checks(task, "https://github.com/acme/app", "ccc333", now)
        .await
        .unwrap();
    let row = store.task_checks(task).await.unwrap().unwrap();
    assert_eq!(
        (row.sha.as_str(), row.state, row.polls, row.checks.0.len()),
        ("ccc333", CheckState::Pending, 0, 0)
    );
    assert!(row.fix_sent_at.is_none() && row.error.is_empty());

    store.drop_checks(task).await.unwrap();
    assert!(store.task_checks(task).await.unwrap().is_none());
    assert!(store.task_checks(other).await.unwrap().is_some());
}
fn tracker_link(board: Uuid, repository: &str, secret: &str) -> TrackerLinkRow {
    TrackerLinkRow {
        board_id: board,
        kind: "github".into(),
        repository_url: format!("https://github.com/{repository}.git"),
        repository: repository.into(),
        label: "kandev".into(),
        agent_type: "mock-agent".into(),
        webhook_secret: secret.into(),
        token_secret: "GITHUB_TOKEN".into(),
        created_by: "alice".into(),
        last_error: String::new(),
        last_synced_at: None,
        created_at: Utc::now(),
    }
}

async fn tracker_links_are_kept_and_replaced(stores: &Stores) {
    let store = &stores.exec;
    let (board, other) = (Uuid::now_v7(), Uuid::now_v7());
    assert!(store.tracker_link(board).await.unwrap().is_none());
    let link = store
        .put_tracker_link(&tracker_link(board, "acme/app", "s3cret"))
        .await
        .unwrap();
    assert_eq!(link.repository, "acme/app");
    assert_eq!(link.webhook_secret, "s3cret");
    assert_eq!(link.token_secret, "GITHUB_TOKEN");
    assert_eq!(link.last_synced_at, None);
    assert!(!format!("{link:?}").contains("s3cret"), "{link:?}");
    store
        .put_tracker_link(&tracker_link(other, "acme/other", ""))
        .await
        .unwrap();

    let synced = Utc::now();
    store
        .tracker_synced(board, "the repository acme/app was not found", synced)
        .await
        .unwrap();
    let failed = store.tracker_link(board).await.unwrap().unwrap();
    assert_eq!(failed.last_error, "the repository acme/app was not found");
    let at = failed.last_synced_at.expect("synced");
    assert!((at - synced).num_milliseconds().abs() < 5, "{at} {synced}");

    // Replaced: the new repository and secret, its sync starts over.
    let replaced = store
        .put_tracker_link(&tracker_link(board, "acme/renamed", "new"))
        .await
        .unwrap();
    assert_eq!(
        (
            replaced.repository.as_str(),
            replaced.webhook_secret.as_str()
        ),
        ("acme/renamed", "new")
    );
    assert_eq!(replaced.last_error, "");
    assert_eq!(replaced.last_synced_at, None);
    let all = store.tracker_links().await.unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.iter().any(|l| l.board_id == other));

    assert!(store.delete_tracker_link(board).await.unwrap());
    assert!(!store.delete_tracker_link(board).await.unwrap());
    assert!(store.tracker_link(board).await.unwrap().is_none());
    assert_eq!(store.tracker_links().await.unwrap().len(), 1);
}

async fn an_issue_is_claimed_once_per_board(stores: &Stores) {
    let store = &stores.exec;
    let (board, other) = (Uuid::now_v7(), Uuid::now_v7());
    let url = "https://github.com/acme/app/issues/7";
    assert!(store.claim_issue(board, 7, url).await.unwrap());
    assert!(
        !store.claim_issue(board, 7, url).await.unwrap(),
        "claimed once"
    );
    assert!(store.claim_issue(other, 7, url).await.unwrap(), "per board");
    assert_eq!(
        store.tracker_issue(board, 7).await.unwrap(),
        Some(TrackerIssueRow {
            board_id: board,
            number: 7,
            task_id: None,
            url: url.into()
        })
    );
    // A claim whose task could not be made is given up, and claimed again.
    store.release_issue(board, 7).await.unwrap();
    assert!(store.tracker_issue(board, 7).await.unwrap().is_none());
    assert!(store.claim_issue(board, 7, url).await.unwrap());

    let task = Uuid::now_v7();
    store.issue_task_made(board, 7, task).await.unwrap();
    let made = store.issue_of_task(task).await.unwrap().expect("its issue");
    assert_eq!(
        (made.board_id, made.number, made.task_id),
        (board, 7, Some(task))
    );
    // A made task's claim is not given up.
    store.release_issue(board, 7).await.unwrap();
    assert_eq!(
        store
            .tracker_issue(board, 7)
            .await
            .unwrap()
            .unwrap()
            .task_id,
        Some(task)
    );
    assert!(store.issue_of_task(Uuid::now_v7()).await.unwrap().is_none());
}
