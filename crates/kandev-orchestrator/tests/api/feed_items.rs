//! The compacted feed's contract (`FeedStore::page`), checked against both
//! databases: consecutive chunks of one message or thought become one item,
//! everything else an item of its own; items cover the stored seqs from 1
//! without a gap or a repeat whatever the appends' sizes, retries and
//! restarts; pages go back to the first item; a page and the frames after
//! its `covers_to` are exactly the feed.

use std::sync::Arc;

use kandev_orchestrator::feed::{
    Frame,
    store::{FeedItem, FeedPage, FeedStore, ITEM_TEXT_BYTES, PgFeedStore, SqliteFeedStore},
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::databases::Scratch;

/// A feed store on a fresh database, and a way to write behind its back.
struct Backend {
    feed: Arc<dyn FeedStore>,
    raw: Raw,
    scratch: Scratch,
}

enum Raw {
    Pg(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

impl Backend {
    async fn postgres() -> Backend {
        let (pool, scratch) = Scratch::postgres().await;
        Backend {
            feed: Arc::new(PgFeedStore::new(pool.clone())),
            raw: Raw::Pg(pool),
            scratch,
        }
    }

    async fn sqlite() -> Backend {
        let (pool, scratch) = Scratch::sqlite().await;
        Backend {
            feed: Arc::new(SqliteFeedStore::new(pool.clone())),
            raw: Raw::Sqlite(pool),
            scratch,
        }
    }

    /// Forgets the compacted view (as a feed stored before it existed).
    async fn forget_items(&self) {
        let sql = "DELETE FROM feed_items";
        match &self.raw {
            Raw::Pg(pool) => sqlx::query(sql).execute(pool).await.map(|_| ()),
            Raw::Sqlite(pool) => sqlx::query(sql).execute(pool).await.map(|_| ()),
        }
        .expect("items deleted");
    }

    /// Rows of the task's view (an item, or a piece of the last one).
    async fn rows(&self) -> i64 {
        let sql = "SELECT count(*) FROM feed_items";
        match &self.raw {
            Raw::Pg(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            Raw::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
        }
        .expect("rows counted")
    }

    async fn remove(self) {
        self.scratch.remove().await;
    }
}

contract!(Backend:
    chunks_of_one_message_become_one_item_and_the_rest_items_of_their_own,
    a_long_message_goes_on_in_items_of_bounded_text,
    small_appends_and_retries_make_the_same_items_as_one_append,
    tasks_appended_together_make_the_items_each_makes_alone,
    pages_go_back_to_the_first_item_each_seq_once,
    a_page_and_the_frames_after_it_are_exactly_the_feed,
    a_feed_stored_before_the_view_is_compacted_when_read_or_appended_to,
    a_page_is_bounded_in_bytes,
);

/// A chunk event as the agent manager writes it.
fn chunk(kind: &str, role: &str, message_id: Option<&str>, text: &str) -> Value {
    let mut data = json!({"role": role, "text": text, "content_type": "text"});
    if let Some(id) = message_id {
        data["message_id"] = id.into();
    }
    json!({"seq": 1, "timestamp": "2026-01-10T12:00:00.000Z", "direction": "from_agent",
           "kind": kind, "data": data,
           "raw": {"jsonrpc": "2.0", "method": "session/update", "params": {"n": text}}})
}

fn message(text: &str) -> Value {
    chunk("message_chunk", "agent", Some("m1"), text)
}

fn event(kind: &str, data: Value) -> Value {
    json!({"seq": 1, "timestamp": "2026-01-10T12:00:01.000Z", "direction": "from_agent",
           "kind": kind, "data": data, "raw": null})
}

/// A feed of `events`, numbered from 1; instances as given.
fn feed(task: Uuid, events: &[(Uuid, Value)]) -> Vec<Arc<Frame>> {
    let mut instance_seqs = std::collections::HashMap::new();
    events
        .iter()
        .enumerate()
        .map(|(i, (instance, event))| {
            let n = instance_seqs.entry(*instance).or_insert(0);
            *n += 1;
            Arc::new(Frame::new(
                task,
                i as i64 + 1,
                *instance,
                *n,
                &event.to_string(),
            ))
        })
        .collect()
}

/// Every page from the newest back to the first, items in seq order.
async fn all_items(store: &dyn FeedStore, task: Uuid, limit: i64) -> (Vec<FeedItem>, i64) {
    let newest = store.page(task, None, limit).await.unwrap();
    let covers_to = newest.covers_to;
    let mut pages = vec![newest];
    while pages.last().unwrap().has_more {
        let before = pages.last().unwrap().earliest.expect("a page with items");
        let page = store.page(task, Some(before), limit).await.unwrap();
        assert!(!page.items.is_empty(), "has_more, then a page");
        assert_eq!(page.covers_to, before - 1, "pages meet");
        pages.push(page);
    }
    let items = pages.into_iter().rev().flat_map(|p| p.items).collect();
    (items, covers_to)
}

/// Checks that `items` are exactly `frames` (from seq 1), compacted.
fn assert_exact(items: &[FeedItem], frames: &[Arc<Frame>]) {
    let mut next = 1;
    for item in items {
        assert_eq!(item.first_seq(), next, "no gap, no repeat: {item:?}");
        let covered = &frames[(item.first_seq() - 1) as usize..item.last_seq() as usize];
        match item {
            FeedItem::Message(t) | FeedItem::Thought(t) => {
                let mut text = String::new();
                for (i, f) in covered.iter().enumerate() {
                    let ev: Value = serde_json::from_str(f.event()).unwrap();
                    let kind = if matches!(item, FeedItem::Message(_)) {
                        "message_chunk"
                    } else {
                        "thought_chunk"
                    };
                    assert_eq!(ev["kind"], kind);
                    assert_eq!(ev["data"]["role"], t.role.as_str());
                    assert_eq!(ev["data"]["message_id"].as_str(), t.message_id.as_deref());
                    assert_eq!(f.instance_id, t.instance_id);
                    assert_eq!(f.instance_seq, t.first_instance_seq + i as i64);
                    text.push_str(ev["data"]["text"].as_str().unwrap());
                }
                assert_eq!(t.text, text, "items {}..={}", t.first_seq, t.last_seq);
                assert!(
                    t.text.len() <= ITEM_TEXT_BYTES || t.first_seq == t.last_seq,
                    "bounded unless one chunk alone is larger"
                );
            }
            FeedItem::Event(e) => {
                assert_eq!((e.first_seq, e.last_seq), (e.first_seq, e.first_seq));
                assert_eq!(e.event.get(), covered[0].event());
                assert_eq!(
                    (e.instance_id, e.first_instance_seq),
                    (covered[0].instance_id, covered[0].instance_seq)
                );
            }
        }
        next = item.last_seq() + 1;
    }
    assert_eq!(next - 1, frames.len() as i64, "the whole feed");
}

/// `kind` of each item and its seqs.
fn shape(page: &FeedPage) -> Vec<(String, i64, i64)> {
    page.items
        .iter()
        .map(|i| {
            let kind = match i {
                FeedItem::Message(_) => "message".to_string(),
                FeedItem::Thought(_) => "thought".to_string(),
                FeedItem::Event(e) => {
                    let event: Value = serde_json::from_str(e.event.get()).unwrap();
                    event["kind"].as_str().unwrap_or("?").to_string()
                }
            };
            (kind, i.first_seq(), i.last_seq())
        })
        .collect()
}

async fn chunks_of_one_message_become_one_item_and_the_rest_items_of_their_own(b: &Backend) {
    let store = b.feed.as_ref();
    let (task, run1, run2) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let events = vec![
        (run1, event("other", json!({"method": "session/prompt"}))),
        (run1, message("Let me ")),
        (run1, message("look.")),
        (
            run1,
            event("tool_call", json!({"tool_call_id": "t1", "title": "read"})),
        ),
        (
            run1,
            event(
                "tool_call_update",
                json!({"tool_call_id": "t1", "status": "completed"}),
            ),
        ),
        (run1, message("Found ")),
        (run1, message("it.")),
        // Another message id, a thought, a user's message: new items.
        (run1, chunk("message_chunk", "agent", Some("m2"), "Next.")),
        (run1, chunk("thought_chunk", "agent", Some("m2"), "hmm ")),
        (run1, chunk("thought_chunk", "agent", Some("m2"), "ok")),
        (
            run1,
            chunk("message_chunk", "user", Some("m2"), "user says"),
        ),
        // A chunk without text (an image) is an event.
        (
            run1,
            json!({"kind": "message_chunk", "data": {"role": "agent", "content_type": "image"}}),
        ),
        (run1, chunk("message_chunk", "agent", None, "no ")),
        (run1, chunk("message_chunk", "agent", None, "id")),
        // The same message in a new instance (a rerun): a new item.
        (run2, chunk("message_chunk", "agent", None, "again")),
        (run2, event("turn_end", json!({"stop_reason": "end_turn"}))),
    ];
    let frames = feed(task, &events);
    store.append(&frames).await.unwrap();
    let page = store.page(task, None, 50).await.unwrap();
    assert_eq!(
        shape(&page),
        [
            ("other", 1, 1),
            ("message", 2, 3),
            ("tool_call", 4, 4),
            ("tool_call_update", 5, 5),
            ("message", 6, 7),
            ("message", 8, 8),
            ("thought", 9, 10),
            ("message", 11, 11),
            ("message_chunk", 12, 12),
            ("message", 13, 14),
            ("message", 15, 15),
            ("turn_end", 16, 16),
        ]
        .map(|(k, a, z)| (k.to_string(), a, z))
    );
    let FeedItem::Message(first) = &page.items[1] else {
        panic!("a message: {:?}", page.items[1]);
    };
    assert_eq!(
        (
            first.text.as_str(),
            first.role.as_str(),
            first.message_id.as_deref()
        ),
        ("Let me look.", "agent", Some("m1"))
    );
    assert_eq!(first.timestamp.as_deref(), Some("2026-01-10T12:00:00.000Z"));
    assert_eq!(
        (page.covers_to, page.earliest, page.has_more),
        (16, Some(1), false)
    );
    assert_exact(&page.items, &frames);
    // The API's JSON: a tagged item, the event as it was.
    let json = serde_json::to_value(&page).unwrap();
    assert_eq!(json["items"][1]["kind"], "message");
    assert_eq!(json["items"][1]["text"], "Let me look.");
    assert_eq!(json["items"][3]["kind"], "event");
    assert_eq!(json["items"][3]["event"]["data"]["tool_call_id"], "t1");
    // Another task has none.
    let none = store.page(Uuid::now_v7(), None, 50).await.unwrap();
    assert_eq!(
        (
            none.items.len(),
            none.covers_to,
            none.earliest,
            none.has_more
        ),
        (0, 0, None, false)
    );
}

async fn a_long_message_goes_on_in_items_of_bounded_text(b: &Backend) {
    let store = b.feed.as_ref();
    let (task, run) = (Uuid::now_v7(), Uuid::now_v7());
    // 300 chunks of 1,000 bytes (several items), a chunk larger than the
    // bound alone (an item of its own), then more of the message.
    let mut events: Vec<(Uuid, Value)> = (0..300)
        .map(|i| (run, message(&format!("{:0>1000}", i))))
        .collect();
    events.push((run, message(&"é".repeat(ITEM_TEXT_BYTES / 2 + 10))));
    events.extend((0..5).map(|i| (run, message(&format!("tail {i} ")))));
    let frames = feed(task, &events);
    for batch in frames.chunks(70) {
        store.append(batch).await.unwrap();
    }
    let (items, covers_to) = all_items(store, task, 3).await;
    assert_eq!(covers_to, 306);
    assert_exact(&items, &frames);
    let sizes: Vec<usize> = items
        .iter()
        .map(|i| match i {
            FeedItem::Message(t) => t.text.len(),
            other => panic!("only messages: {other:?}"),
        })
        .collect();
    // 65 chunks of 1,000 bytes fill an item; the big chunk alone.
    assert_eq!(sizes[..4], [65_000; 4]);
    assert_eq!(sizes[4], 40_000);
    assert_eq!(sizes[5], ITEM_TEXT_BYTES + 20);
    assert_eq!(sizes.len(), 7);
}

async fn small_appends_and_retries_make_the_same_items_as_one_append(b: &Backend) {
    let store = b.feed.as_ref();
    let run = Uuid::now_v7();
    let mut events: Vec<(Uuid, Value)> = Vec::new();
    for turn in 0..3 {
        events.extend((0..100).map(|i| (run, message(&format!("w{turn}.{i} ")))));
        events.push((
            run,
            event("tool_call", json!({"tool_call_id": format!("t{turn}")})),
        ));
        events.extend((0..40).map(|i| {
            (
                run,
                chunk("thought_chunk", "agent", None, &format!("t{i} ")),
            )
        }));
    }
    events.push((run, event("turn_end", json!({"stop_reason": "end_turn"}))));
    let (whole, one_by_one) = (Uuid::now_v7(), Uuid::now_v7());
    let frames_whole = feed(whole, &events);
    store.append(&frames_whole).await.unwrap();
    let frames = feed(one_by_one, &events);
    for (i, frame) in frames.iter().enumerate() {
        let batch = std::slice::from_ref(frame);
        store.append(batch).await.unwrap();
        if i % 7 == 0 {
            // A commit whose answer was lost: the same frames again,
            // with the one before.
            store
                .append(&frames[i.saturating_sub(1)..=i])
                .await
                .unwrap();
        }
        if i % 50 == 0 {
            let page = store.page(one_by_one, None, 500).await.unwrap();
            assert_eq!(page.covers_to, i as i64 + 1);
            assert_exact(&page.items, &frames[..=i]);
        }
    }
    let a = serde_json::to_value(store.page(whole, None, 500).await.unwrap()).unwrap();
    let z = serde_json::to_value(store.page(one_by_one, None, 500).await.unwrap()).unwrap();
    assert_eq!(a["items"].as_array().unwrap().len(), 10);
    assert_eq!(a["covers_to"], 424);
    assert_eq!(a, z);
    // Each closed item is one row, however it grew.
    assert_eq!(b.rows().await, 20);
}

async fn tasks_appended_together_make_the_items_each_makes_alone(b: &Backend) {
    let store = b.feed.as_ref();
    let run = Uuid::now_v7();
    // Long enough for every task's message to be joined into one row more
    // than once, in the same appends as the other tasks'.
    let mut events: Vec<(Uuid, Value)> = (0..150)
        .map(|i| (run, message(&format!("m{i} "))))
        .collect();
    events.push((run, event("turn_end", json!({"stop_reason": "end_turn"}))));
    let alone = Uuid::now_v7();
    store.append(&feed(alone, &events)).await.unwrap();
    let together: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let feeds: Vec<Vec<Arc<Frame>>> = together.iter().map(|t| feed(*t, &events)).collect();
    for i in 0..events.len() {
        // One frame of each task per append, as a flush of many agents.
        let batch: Vec<Arc<Frame>> = feeds.iter().map(|f| f[i].clone()).collect();
        store.append(&batch).await.unwrap();
    }
    let want = serde_json::to_value(store.page(alone, None, 500).await.unwrap()).unwrap();
    assert_eq!(want["covers_to"], 151);
    for (task, frames) in together.iter().zip(&feeds) {
        let page = store.page(*task, None, 500).await.unwrap();
        assert_exact(&page.items, frames);
        assert_eq!(serde_json::to_value(page).unwrap(), want);
    }
}

async fn pages_go_back_to_the_first_item_each_seq_once(b: &Backend) {
    let store = b.feed.as_ref();
    let (task, run) = (Uuid::now_v7(), Uuid::now_v7());
    let events: Vec<(Uuid, Value)> = (0..1000)
        .map(|i| {
            if i % 4 == 3 {
                (run, event("tool_call_update", json!({"tool_call_id": i})))
            } else {
                (run, message(&format!("{i} ")))
            }
        })
        .collect();
    let frames = feed(task, &events);
    store.append(&frames[..600]).await.unwrap();
    store.append(&frames[600..]).await.unwrap();
    for limit in [1, 7, 500] {
        let (items, covers_to) = all_items(store, task, limit).await;
        assert_eq!(items.len(), 500);
        assert_eq!(covers_to, 1000);
        assert_exact(&items, &frames);
    }
    let page = store.page(task, None, 10).await.unwrap();
    assert_eq!(
        (page.earliest, page.has_more, page.covers_to),
        (Some(981), true, 1000)
    );
    let before = store.page(task, Some(981), 10).await.unwrap();
    assert_eq!((before.earliest, before.covers_to), (Some(961), 980));
    // `before` inside an item: the items that start before it.
    let inside = store.page(task, Some(982), 1).await.unwrap();
    assert_eq!(shape(&inside), [("message".to_string(), 981, 983)]);
    let first = store.page(task, Some(2), 10).await.unwrap();
    assert_eq!(
        (first.earliest, first.has_more, first.items.len()),
        (Some(1), false, 1)
    );
    let empty = store.page(task, Some(1), 10).await.unwrap();
    assert_eq!(
        (empty.items.len(), empty.earliest, empty.has_more),
        (0, None, false)
    );
}

async fn a_page_and_the_frames_after_it_are_exactly_the_feed(b: &Backend) {
    let store = b.feed.as_ref();
    let (task, run) = (Uuid::now_v7(), Uuid::now_v7());
    let events: Vec<(Uuid, Value)> = (0..400)
        .map(|i| {
            if i % 50 == 49 {
                (run, event("turn_end", json!({"stop_reason": "end_turn"})))
            } else {
                (run, message(&format!("{i} ")))
            }
        })
        .collect();
    let frames = feed(task, &events);
    // A reader opens the task at any point of the feed: the newest page,
    // then every stored frame after `covers_to`, then the rest as it comes.
    let mut stored = 0;
    for step in [1, 13, 36, 50, 100, 200] {
        store.append(&frames[stored..stored + step]).await.unwrap();
        stored += step;
        let page = store.page(task, None, 5).await.unwrap();
        let after = store.history(task, page.covers_to, 10_000).await.unwrap();
        assert_eq!(page.covers_to, stored as i64, "the view is up to date");
        assert!(after.is_empty());
        let (items, _) = all_items(store, task, 5).await;
        assert_exact(&items, &frames[..stored]);
        // Frames the page does not cover follow it without a gap.
        let older = store.page(task, page.earliest, 5).await.unwrap();
        let rest = store.history(task, older.covers_to, 10_000).await.unwrap();
        assert_eq!(rest.first().map(|f| f.seq), Some(older.covers_to + 1));
        assert_eq!(rest.len() as i64, stored as i64 - older.covers_to);
    }
}

async fn a_feed_stored_before_the_view_is_compacted_when_read_or_appended_to(b: &Backend) {
    let store = b.feed.as_ref();
    let (read, appended, run) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let events: Vec<(Uuid, Value)> = (0..40_000)
        .map(|i| {
            if i % 997 == 0 {
                (run, event("tool_call", json!({"tool_call_id": i})))
            } else {
                (run, message(&format!("{i} ")))
            }
        })
        .collect();
    let frames_read = feed(read, &events);
    let frames_appended = feed(appended, &events);
    store.append(&frames_read).await.unwrap();
    store.append(&frames_appended[..30_000]).await.unwrap();
    let want = serde_json::to_value(store.page(read, None, 500).await.unwrap()).unwrap();
    b.forget_items().await;
    assert_eq!(b.rows().await, 0);
    // Without items the page is empty until it is read: the newest page
    // catches up (in steps) and is the same as before.
    assert!(
        store
            .page(read, Some(40_001), 10)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let again = serde_json::to_value(store.page(read, None, 500).await.unwrap()).unwrap();
    assert_eq!(again, want);
    let (items, _) = all_items(store, read, 500).await;
    assert_exact(&items, &frames_read);
    // An append catches up first, then adds its frames.
    store.append(&frames_appended[30_000..]).await.unwrap();
    let (items, covers_to) = all_items(store, appended, 500).await;
    assert_eq!(covers_to, 40_000);
    assert_exact(&items, &frames_appended);
}

async fn a_page_is_bounded_in_bytes(b: &Backend) {
    let store = b.feed.as_ref();
    let (task, run) = (Uuid::now_v7(), Uuid::now_v7());
    // 40 messages of 60,000 bytes (2.4 MB), each followed by a turn end.
    let mut events = Vec::new();
    for i in 0..40 {
        events.push((
            run,
            chunk(
                "message_chunk",
                "agent",
                Some(&format!("m{i}")),
                &"x".repeat(60_000),
            ),
        ));
        events.push((run, event("turn_end", json!({"stop_reason": "end_turn"}))));
    }
    let frames = feed(task, &events);
    store.append(&frames).await.unwrap();
    let page = store.page(task, None, 500).await.unwrap();
    let bytes = serde_json::to_string(&page).unwrap().len();
    assert!(
        bytes <= kandev_orchestrator::feed::store::PAGE_BYTES + 10_000,
        "{bytes}"
    );
    assert!(page.has_more);
    assert_eq!(page.covers_to, 80);
    assert!(page.items.len() >= 10, "{}", page.items.len());
    let (items, _) = all_items(store, task, 500).await;
    assert_exact(&items, &frames);
}
