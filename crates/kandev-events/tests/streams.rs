//! The durable streams' contract (see `kandev_events::durable`), checked
//! against each implementation: NATS JetStream (a `nats-server -js` of the
//! test's own) and the in-process streams (a SQLite file of the test's own).

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use kandev_events::{
    EventBus, JetStreamBus,
    durable::{AckMode, Consumer, Delivered, Headers, JetStreamStreams, LocalStreams, Streams},
};
use kandev_testkit::OwnNats;
use uuid::Uuid;

const TASKS: &str = "KANDEV_TASKS";
const WAIT: Duration = Duration::from_secs(2);

/// One implementation, which can be restarted keeping what it stored.
/// (One per test: the size of its variants does not matter.)
#[allow(clippy::large_enum_variant)]
enum Backend {
    JetStream {
        nats: OwnNats,
        bus: JetStreamBus,
    },
    Local {
        dir: tempfile::TempDir,
        streams: LocalStreams,
    },
}

impl Backend {
    async fn jetstream() -> Backend {
        let nats = OwnNats::start().await;
        let bus = JetStreamBus::connect(&nats.url()).await.unwrap();
        bus.ensure_streams().await.unwrap();
        Backend::JetStream { nats, bus }
    }

    async fn local() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let streams = LocalStreams::open(&Self::local_url(&dir)).await.unwrap();
        Backend::Local { dir, streams }
    }

    fn local_url(dir: &tempfile::TempDir) -> String {
        format!("sqlite://{}", dir.path().join("streams.db").display())
    }

    fn streams(&self) -> Arc<dyn Streams> {
        match self {
            Backend::JetStream { bus, .. } => Arc::new(JetStreamStreams::new(bus.clone())),
            Backend::Local { streams, .. } => Arc::new(streams.clone()),
        }
    }

    fn events(&self) -> Arc<dyn EventBus> {
        match self {
            Backend::JetStream { bus, .. } => Arc::new(bus.clone()),
            Backend::Local { streams, .. } => Arc::new(streams.clone()),
        }
    }

    /// Stops and starts again on what was stored (a NATS server restarted
    /// on its store; the process's file opened again).
    async fn restart(&mut self) {
        match self {
            Backend::JetStream { nats, bus } => {
                nats.restart().await;
                *bus = JetStreamBus::connect(&nats.url()).await.unwrap();
            }
            Backend::Local { dir, streams } => {
                streams.close().await;
                *streams = LocalStreams::open(&Self::local_url(dir)).await.unwrap();
            }
        }
    }
}

/// Runs each named check against both implementations.
macro_rules! contract {
    ($($check:ident),* $(,)?) => {
        mod jetstream {
            $(
                #[tokio::test]
                async fn $check() {
                    super::$check(super::Backend::jetstream().await).await;
                }
            )*
        }
        mod local {
            $(
                #[tokio::test]
                async fn $check() {
                    super::$check(super::Backend::local().await).await;
                }
            )*
        }
    };
}

contract!(
    messages_come_in_order_filtered_and_once,
    what_is_not_acknowledged_comes_again_in_order,
    acknowledging_one_acknowledges_those_before_in_ack_all,
    a_nak_delivers_again_later_while_others_go_on,
    consumers_of_different_names_are_independent,
    messages_floors_and_ids_survive_a_restart,
    a_fetch_waits_for_the_next_message,
    the_last_message_of_a_subject_is_found,
    concurrent_publishers_each_get_one_place,
);

async fn publish(streams: &dyn Streams, subject: &str, id: Uuid, text: &str) {
    let headers: Headers = vec![("traceparent".into(), format!("tp-{text}"))];
    streams
        .publish_with(subject, id, &headers, Bytes::from(text.to_string()))
        .await
        .unwrap();
}

/// Publishes `texts` on `task.created`, each with an id of its own.
async fn publish_all(streams: &dyn Streams, texts: &[&str]) -> Vec<Uuid> {
    let mut ids = vec![];
    for text in texts {
        let id = Uuid::now_v7();
        publish(streams, "task.created", id, text).await;
        ids.push(id);
    }
    ids
}

fn texts(batch: &[Delivered]) -> Vec<String> {
    batch
        .iter()
        .map(|d| String::from_utf8(d.payload.to_vec()).unwrap())
        .collect()
}

/// Fetches until `n` messages came (or fails).
async fn take(consumer: &mut dyn Consumer, n: usize) -> Vec<Delivered> {
    let mut got = vec![];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {n} messages came",
            got.len()
        );
        got.extend(consumer.fetch(n - got.len(), 1 << 20, WAIT).await.unwrap());
    }
    got
}

async fn open(
    streams: &dyn Streams,
    durable: &str,
    filter: &str,
    mode: AckMode,
) -> Box<dyn Consumer> {
    streams
        .consumer(TASKS, durable, filter, mode)
        .await
        .unwrap()
}

async fn messages_come_in_order_filtered_and_once(backend: Backend) {
    let streams = backend.streams();
    let first = Uuid::now_v7();
    publish(streams.as_ref(), "task.created", first, "one").await;
    publish(streams.as_ref(), "task.updated", Uuid::now_v7(), "two").await;
    publish(
        streams.as_ref(),
        "agent.started",
        Uuid::now_v7(),
        "elsewhere",
    )
    .await;
    // The same id again: dropped.
    publish(streams.as_ref(), "task.created", first, "one again").await;
    publish(streams.as_ref(), "task.created", Uuid::now_v7(), "three").await;

    let mut all = open(streams.as_ref(), "all", "task.>", AckMode::Explicit).await;
    let got = take(all.as_mut(), 3).await;
    assert_eq!(texts(&got), ["one", "two", "three"]);
    assert!(got.windows(2).all(|w| w[0].stream_seq < w[1].stream_seq));
    assert_eq!(got[1].subject, "task.updated");
    assert_eq!(got[0].header("traceparent"), Some("tp-one"));
    assert!(got.iter().all(|d| d.delivered == 1));
    assert!(
        all.fetch(10, 1 << 20, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );

    let mut created = open(
        streams.as_ref(),
        "created",
        "task.created",
        AckMode::Explicit,
    )
    .await;
    assert_eq!(texts(&take(created.as_mut(), 2).await), ["one", "three"]);
}

async fn what_is_not_acknowledged_comes_again_in_order(backend: Backend) {
    let streams = backend.streams();
    publish_all(streams.as_ref(), &["1", "2", "3", "4"]).await;
    let mut consumer = open(streams.as_ref(), "c", "task.>", AckMode::Explicit).await;
    let got = take(consumer.as_mut(), 4).await;
    for i in [0, 1, 3] {
        got[i].ack().await.unwrap();
    }
    drop(consumer);
    let mut again = open(streams.as_ref(), "c", "task.>", AckMode::Explicit).await;
    let redelivered = take(again.as_mut(), 1).await;
    assert_eq!(texts(&redelivered)[0], "3", "after the floor, in order");
    // Nothing before the floor comes again.
    let rest = again
        .fetch(10, 1 << 20, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(texts(&rest).iter().all(|t| t == "4"), "{:?}", texts(&rest));
}

async fn acknowledging_one_acknowledges_those_before_in_ack_all(backend: Backend) {
    let streams = backend.streams();
    publish_all(streams.as_ref(), &["1", "2", "3", "4", "5"]).await;
    let mut consumer = open(streams.as_ref(), "feed", "task.>", AckMode::All).await;
    let got = take(consumer.as_mut(), 5).await;
    got[2].ack().await.unwrap();
    drop(consumer);
    let mut again = open(streams.as_ref(), "feed", "task.>", AckMode::All).await;
    assert_eq!(texts(&take(again.as_mut(), 2).await), ["4", "5"]);
}

async fn a_nak_delivers_again_later_while_others_go_on(backend: Backend) {
    let streams = backend.streams();
    publish_all(streams.as_ref(), &["failing", "fine"]).await;
    let mut consumer = open(streams.as_ref(), "c", "task.>", AckMode::Explicit).await;
    let got = take(consumer.as_mut(), 2).await;
    got[0].nak(Duration::from_millis(300)).await.unwrap();
    got[1].ack().await.unwrap();
    publish_all(streams.as_ref(), &["next"]).await;
    let mut later = take(consumer.as_mut(), 2).await;
    later.sort_by_key(|d| d.stream_seq);
    assert_eq!(texts(&later), ["failing", "next"]);
    assert_eq!((later[0].delivered, later[1].delivered), (2, 1));
    for d in &later {
        d.ack().await.unwrap();
    }
    assert!(
        consumer
            .fetch(10, 1 << 20, Duration::from_millis(500))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn consumers_of_different_names_are_independent(backend: Backend) {
    let streams = backend.streams();
    publish_all(streams.as_ref(), &["a", "b"]).await;
    let mut one = open(streams.as_ref(), "one", "task.>", AckMode::Explicit).await;
    let mut two = open(streams.as_ref(), "two", "task.>", AckMode::Explicit).await;
    for d in take(one.as_mut(), 2).await {
        d.ack().await.unwrap();
    }
    assert_eq!(texts(&take(two.as_mut(), 2).await), ["a", "b"]);
}

async fn messages_floors_and_ids_survive_a_restart(mut backend: Backend) {
    let streams = backend.streams();
    let ids = publish_all(streams.as_ref(), &["1", "2", "3"]).await;
    let mut consumer = open(streams.as_ref(), "c", "task.>", AckMode::All).await;
    let got = take(consumer.as_mut(), 3).await;
    got[0].ack().await.unwrap();
    drop((consumer, got, streams));

    backend.restart().await;
    let streams = backend.streams();
    // An id stored before the restart is still known.
    publish(streams.as_ref(), "task.created", ids[1], "2 again").await;
    publish_all(streams.as_ref(), &["4"]).await;
    let mut again = open(streams.as_ref(), "c", "task.>", AckMode::All).await;
    assert_eq!(texts(&take(again.as_mut(), 3).await), ["2", "3", "4"]);
    assert!(
        again
            .fetch(10, 1 << 20, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_fetch_waits_for_the_next_message(backend: Backend) {
    let streams = backend.streams();
    let mut consumer = open(streams.as_ref(), "c", "task.>", AckMode::Explicit).await;
    assert!(
        consumer
            .fetch(10, 1 << 20, Duration::from_millis(200))
            .await
            .unwrap()
            .is_empty(),
        "nothing yet"
    );
    let publisher = streams.clone();
    let later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        publish_all(publisher.as_ref(), &["late"]).await;
    });
    let got = consumer
        .fetch(1, 1 << 20, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(texts(&got), ["late"]);
    later.await.unwrap();
}

async fn the_last_message_of_a_subject_is_found(backend: Backend) {
    let events = backend.events();
    let subject = format!("acp.message.{}", Uuid::now_v7());
    assert_eq!(events.last_message(&subject).await.unwrap(), None);
    for text in ["first", "last"] {
        events
            .publish(&subject, Uuid::now_v7(), Bytes::from(text))
            .await
            .unwrap();
    }
    events
        .publish("acp.message.other", Uuid::now_v7(), Bytes::from("other"))
        .await
        .unwrap();
    assert_eq!(
        events.last_message(&subject).await.unwrap(),
        Some(Bytes::from("last"))
    );
}

async fn concurrent_publishers_each_get_one_place(backend: Backend) {
    let streams = backend.streams();
    let publishers = (0..8).map(|p| {
        let streams = streams.clone();
        tokio::spawn(async move {
            for i in 0..25 {
                let text = format!("{p}/{i}");
                publish(streams.as_ref(), "task.updated", Uuid::now_v7(), &text).await;
            }
        })
    });
    for publisher in futures::future::join_all(publishers).await {
        publisher.unwrap();
    }
    let mut consumer = open(streams.as_ref(), "c", "task.>", AckMode::Explicit).await;
    let got = take(consumer.as_mut(), 200).await;
    let mut seqs: Vec<u64> = got.iter().map(|d| d.stream_seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in stream order");
    seqs.dedup();
    assert_eq!(seqs.len(), 200);
    // Each publisher's messages in the order it sent them.
    for p in 0..8 {
        let mine: Vec<String> = texts(&got)
            .into_iter()
            .filter(|t| t.starts_with(&format!("{p}/")))
            .collect();
        let sent: Vec<String> = (0..25).map(|i| format!("{p}/{i}")).collect();
        assert_eq!(mine, sent);
    }
}

/// The in-process streams keep events as long as JetStream's do
/// (`STREAM_MAX_AGE`), then drop them, but the last of each stream: its
/// seq is where numbering goes on, so a consumer that read everything
/// before still gets what comes next.
#[tokio::test]
async fn local_streams_drop_what_is_older_than_their_age() {
    // (Its directory kept until the end.)
    let Backend::Local { streams, dir: _dir } = Backend::local().await else {
        unreachable!("a local backend")
    };
    publish_all(&streams, &["old", "older"]).await;
    let mut consumer = open(&streams, "c", "task.>", AckMode::Explicit).await;
    for d in take(consumer.as_mut(), 2).await {
        d.ack().await.unwrap();
    }
    assert_eq!(
        streams
            .prune(kandev_events::bus::STREAM_MAX_AGE)
            .await
            .unwrap(),
        0
    );
    assert_eq!(streams.prune(Duration::ZERO).await.unwrap(), 1);
    publish_all(&streams, &["new"]).await;
    assert_eq!(texts(&take(consumer.as_mut(), 1).await), ["new"]);
    drop(consumer);
    let mut consumer = open(&streams, "c", "task.>", AckMode::Explicit).await;
    assert_eq!(texts(&take(consumer.as_mut(), 1).await), ["new"]);
    // A consumer new to the stream reads what is kept.
    let mut late = open(&streams, "late", "task.>", AckMode::Explicit).await;
    assert_eq!(texts(&take(late.as_mut(), 2).await), ["older", "new"]);
}

/// Acknowledged messages of a stream whose consumers are all known go, but
/// the last of each subject: what is not acknowledged still comes, and the
/// last message of a subject is still found.
#[tokio::test]
async fn local_streams_drop_what_every_consumer_acknowledged() {
    let Backend::Local { streams, dir: _dir } = Backend::local().await else {
        unreachable!("a local backend")
    };
    // No consumer yet: nothing goes.
    publish_all(&streams, &["a", "b"]).await;
    assert_eq!(streams.prune_consumed(TASKS).await.unwrap(), 0);

    let mut first = open(&streams, "first", "task.>", AckMode::All).await;
    let mut second = open(&streams, "second", "task.>", AckMode::All).await;
    publish(&streams, "task.updated", Uuid::now_v7(), "c").await;
    publish_all(&streams, &["d"]).await;
    let got = take(first.as_mut(), 4).await;
    assert_eq!(texts(&got), ["a", "b", "c", "d"]);
    got[3].ack().await.unwrap();
    // The second consumer acknowledged nothing: nothing goes.
    assert_eq!(streams.prune_consumed(TASKS).await.unwrap(), 0);
    let got = take(second.as_mut(), 4).await;
    got[2].ack().await.unwrap();
    // a and b go; c and d stay, the last of their subjects (and d is not
    // acknowledged by the second).
    assert_eq!(streams.prune_consumed(TASKS).await.unwrap(), 2);
    assert_eq!(
        streams.last_message("task.updated").await.unwrap(),
        Some(Bytes::from("c"))
    );
    drop(second);
    let mut second = open(&streams, "second", "task.>", AckMode::All).await;
    assert_eq!(texts(&take(second.as_mut(), 1).await), ["d"]);
    // A message of a stream no one consumes is kept.
    publish(&streams, "agent.started", Uuid::now_v7(), "e").await;
    assert_eq!(streams.prune_consumed("KANDEV_AGENTS").await.unwrap(), 0);
}

/// A consumer far behind reads from the file what no longer fits in
/// memory, then goes on from memory: every message once, in order.
#[tokio::test]
async fn local_consumers_far_behind_read_from_the_file() {
    let Backend::Local { streams, dir: _dir } = Backend::local().await else {
        unreachable!("a local backend")
    };
    // 48 MiB, more than the streams keep in memory, stored before the
    // consumer opens (an open one would have the publisher wait for it).
    for i in 0..48 {
        publish_mib(&streams, i).await;
    }
    let mut consumer = open(&streams, "behind", "task.>", AckMode::All).await;
    let mut got = take_each(consumer.as_mut(), 48).await;
    publish(&streams, "task.created", Uuid::now_v7(), "48:").await;
    got.extend(take(consumer.as_mut(), 1).await);
    assert_eq!(order(&got), (0..49).collect::<Vec<_>>());
    let seqs: Vec<u64> = got.iter().map(|d| d.stream_seq).collect();
    assert_eq!(seqs, (1..=49).collect::<Vec<u64>>());
}

/// A consumer that keeps up gets each message once, in order, also across
/// the seqs that copies the stream dropped leave unused.
#[tokio::test]
async fn local_consumers_read_on_over_dropped_copies() {
    let Backend::Local { streams, dir: _dir } = Backend::local().await else {
        unreachable!("a local backend")
    };
    let mut consumer = open(&streams, "c", "task.>", AckMode::All).await;
    let again = Uuid::now_v7();
    publish(&streams, "task.created", again, "0:").await;
    assert_eq!(order(&take(consumer.as_mut(), 1).await), [0]);
    for i in 1..7 {
        publish(&streams, "task.created", Uuid::now_v7(), &format!("{i}:")).await;
        publish(&streams, "task.created", again, "0:").await;
        assert_eq!(order(&take(consumer.as_mut(), 1).await), [i]);
    }
    assert!(
        consumer
            .fetch(10, 1 << 20, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );
}

/// Two handles on one file (the data directory's lock keeps a second
/// process out; this is the case of a bug) number on from what the file
/// holds: neither overwrites the other's messages.
#[tokio::test]
async fn local_handles_on_one_file_number_on_from_the_file() {
    let Backend::Local { streams, dir } = Backend::local().await else {
        unreachable!("a local backend")
    };
    let other = LocalStreams::open(&Backend::local_url(&dir)).await.unwrap();
    for i in 0..6 {
        let handle = if i % 2 == 0 { &streams } else { &other };
        publish(handle, "task.created", Uuid::now_v7(), &format!("{i}:")).await;
    }
    let third = LocalStreams::open(&Backend::local_url(&dir)).await.unwrap();
    let mut consumer = open(&third, "c", "task.>", AckMode::All).await;
    let got = take_each(consumer.as_mut(), 6).await;
    assert_eq!(order(&got), (0..6).collect::<Vec<_>>());
    let seqs: Vec<u64> = got.iter().map(|d| d.stream_seq).collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<u64>>());
}

/// Message `i`: `i:` and 1 MiB of text.
async fn publish_mib(streams: &LocalStreams, i: usize) {
    let big = "x".repeat(1 << 20);
    publish(
        streams,
        "task.created",
        Uuid::now_v7(),
        &format!("{i}:{big}"),
    )
    .await;
}

/// Messages of 1 MiB published by a task of their own, counting each once
/// stored.
fn publish_in_background(
    streams: &LocalStreams,
    count: usize,
) -> (
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let stored = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let publisher = tokio::spawn({
        let streams = streams.clone();
        let stored = stored.clone();
        async move {
            for i in 0..count {
                publish_mib(&streams, i).await;
                stored.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    (stored, publisher)
}

/// In-process streams whose publishes wait at most `wait` for room, and a
/// consumer open on them (the directory goes with the first).
async fn paced(
    wait: Duration,
    durable: &str,
) -> (tempfile::TempDir, LocalStreams, Box<dyn Consumer>) {
    let Backend::Local { streams, dir } = Backend::local().await else {
        unreachable!("a local backend")
    };
    let streams = streams.with_room_wait(wait);
    let consumer = open(&streams, durable, "task.>", AckMode::All).await;
    (dir, streams, consumer)
}

/// Fetches one message at a time until `n` came.
async fn take_each(consumer: &mut dyn Consumer, n: usize) -> Vec<Delivered> {
    let mut got = Vec::new();
    while got.len() < n {
        got.extend(take(consumer, 1).await);
    }
    got
}

fn order(got: &[Delivered]) -> Vec<usize> {
    texts(got)
        .iter()
        .map(|t| t.split(':').next().unwrap().parse().unwrap())
        .collect()
}

/// A publisher that outruns an open consumer waits for it once memory
/// holds all it keeps, rather than push out what the consumer has not
/// read, and goes on as the consumer reads: every message once, in order.
#[tokio::test]
async fn local_publishers_wait_for_an_open_consumer_to_read() {
    // A bound no test machine reaches: the wait is the consumer's doing.
    let (_dir, streams, mut consumer) = paced(Duration::from_secs(120), "slow").await;
    let (stored, publisher) = publish_in_background(&streams, 48);
    // 32 MiB are kept in memory: the 32nd message of 1 MiB and a bit
    // waits for the consumer.
    let count = || stored.load(std::sync::atomic::Ordering::SeqCst);
    kandev_testkit::eventually(30, "31 messages stored", || async {
        (count() >= 31).then_some(())
    })
    .await;
    // Nothing moves it on but the consumer (an observation window: it can
    // only make this test pass wrongly, never fail it wrongly).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(count(), 31, "stored while the consumer read nothing");
    let got = take_each(consumer.as_mut(), 48).await;
    publisher.await.unwrap();
    assert_eq!(order(&got), (0..48).collect::<Vec<_>>());
}

/// A consumer that stops reading delays publishers by the bound and stops
/// nothing: what it did not read in time it reads from the file later.
#[tokio::test]
async fn local_publishers_go_on_when_a_consumer_stopped_reading() {
    let (_dir, streams, mut consumer) = paced(Duration::from_millis(20), "stopped").await;
    let (_, publisher) = publish_in_background(&streams, 40);
    tokio::time::timeout(Duration::from_secs(60), publisher)
        .await
        .expect("every publish ends within its bound")
        .unwrap();
    let got = take_each(consumer.as_mut(), 40).await;
    assert_eq!(order(&got), (0..40).collect::<Vec<_>>());
}

/// A message the server sent to a pull just as the connection dropped is
/// lost on the way; the server would send it again only after the ack wait
/// (ten minutes). The consumer re-opens at its ack floor once the client is
/// connected again, so it comes again at once.
#[tokio::test]
async fn a_message_lost_with_the_connection_comes_again_after_the_reconnect() {
    let Backend::JetStream { nats, bus } = Backend::jetstream().await else {
        unreachable!()
    };
    let streams = JetStreamStreams::new(bus.clone());
    publish_all(&streams, &["1", "2"]).await;
    let mut consumer = open(&streams, "c", "task.>", AckMode::Explicit).await;
    let got = take(consumer.as_mut(), 2).await;
    got[0].ack().await.unwrap();
    // "2" stands for the one lost: delivered, never acknowledged.
    drop(got);
    let reopened = bus.connections();
    let before = *reopened.borrow();
    bus.client().force_reconnect().await.unwrap();
    let again = take(consumer.as_mut(), 1).await;
    assert_eq!(texts(&again), ["2"]);
    assert!(*bus.connections().borrow() > before, "it reconnected");
    drop(nats);
}
