//! Reopening a task as a client that shows the feed does: the compacted
//! page over HTTP (`GET …/feed`), pages back to the first item, then the
//! stream from `?after=<covers_to>`: exactly the feed, every seq once,
//! across an orchestrator that crashes mid-stream.

use std::time::Duration;

use kandev_events::agent::AcpBatch;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::*;

/// Event `i` of the instance: a tool call every 50th, else a chunk.
fn event(i: u64) -> Value {
    if i.is_multiple_of(50) {
        json!({"seq": i, "timestamp": "2026-01-10T12:00:00.000Z", "direction": "from_agent",
               "kind": "tool_call", "data": {"tool_call_id": format!("t{i}"), "title": "read"},
               "raw": null})
    } else {
        acp_event(i)
    }
}

/// Batches of ten events of `range`.
fn batches(task: Uuid, instance: Uuid, range: std::ops::RangeInclusive<u64>) -> Vec<AcpBatch> {
    let all: Vec<u64> = range.collect();
    all.chunks(10)
        .map(|seqs| AcpBatch {
            task_id: task,
            instance_id: instance,
            first_seq: seqs[0],
            cursor: Default::default(),
            events: seqs.iter().map(|&i| event(i)).collect(),
        })
        .collect()
}

fn feed_url(app: &TestApp, task: Uuid, query: &str) -> String {
    app.url(&format!("/api/v1/orchestrator/tasks/{task}/feed{query}"))
}

/// The newest page and every page before it: items in seq order, and the
/// newest page's `covers_to`.
async fn read_pages(app: &TestApp, task: Uuid, limit: u32) -> (Vec<Value>, i64) {
    let (status, newest) = http(
        "GET",
        &feed_url(app, task, &format!("?limit={limit}")),
        None,
    )
    .await;
    assert_eq!(status, 200, "{newest}");
    let covers_to = newest["covers_to"].as_i64().unwrap();
    let mut pages = vec![newest];
    while pages.last().unwrap()["has_more"] == true {
        let before = pages.last().unwrap()["earliest"].as_i64().unwrap();
        let url = feed_url(app, task, &format!("?before={before}&limit={limit}"));
        let (status, page) = http("GET", &url, None).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["covers_to"], before - 1, "pages meet");
        pages.push(page);
    }
    let items = pages
        .into_iter()
        .rev()
        .flat_map(|p| p["items"].as_array().unwrap().clone())
        .collect();
    (items, covers_to)
}

/// Checks that `items`, then `frames`, are the feed of events `1..=n`.
fn assert_feed(items: &[Value], frames: &[Value], n: u64) {
    let mut next = 1;
    for item in items {
        let (first, last) = (
            item["first_seq"].as_u64().unwrap(),
            item["last_seq"].as_u64().unwrap(),
        );
        assert_eq!(first, next, "no gap, no repeat: {item}");
        match item["kind"].as_str().unwrap() {
            "message" => {
                let text: String = (first..=last)
                    .map(|i| event(i)["data"]["text"].as_str().unwrap().to_string())
                    .collect();
                assert_eq!(item["text"], text);
                assert!((first..=last).all(|i| i % 50 != 0));
            }
            "event" => {
                assert_eq!(first, last);
                assert_eq!(item["event"], event(first));
            }
            other => panic!("an item of kind {other}"),
        }
        next = last + 1;
    }
    for frame in frames {
        assert_eq!(frame["seq"], next, "the stream goes on after the page");
        assert_eq!(frame["event"], event(next));
        next += 1;
    }
    assert_eq!(next - 1, n, "the whole feed");
}

#[tokio::test]
async fn a_page_then_the_stream_after_it_is_exactly_the_feed_across_a_crash() {
    let mut app = spawn_app_with(Options {
        tweak: Box::new(|s| s.ws_client_buffer = 8192),
        ..Options::default()
    })
    .await;
    let (task, instance) = (Uuid::new_v4(), Uuid::new_v4());
    const N: u64 = 3000;

    // A task with a stored feed; a reader opens it.
    publish_acp_fast(&app.nats.url(), &batches(task, instance, 1..=1000)).await;
    eventually(20, "the first third compacted", || async {
        let (_, page) = http("GET", &feed_url(&app, task, ""), None).await;
        (page["covers_to"] == 1000).then_some(())
    })
    .await;
    let (items, covers_to) = read_pages(&app, task, 7).await;
    assert_eq!(covers_to, 1000);
    assert!(items.len() < 100, "items, not chunks: {}", items.len());
    let mut ws = ws_connect(&app.ws_url(task, Some(covers_to))).await;

    // More comes while it reads; the orchestrator crashes mid-stream.
    publish_acp_fast(&app.nats.url(), &batches(task, instance, 1001..=2000)).await;
    let mut frames = ws_frames(&mut ws, 300).await;
    app.crash().await;
    drop(ws);
    app.restart().await;
    publish_acp_fast(&app.nats.url(), &batches(task, instance, 2001..=N)).await;
    let seen = frames.last().unwrap()["seq"].as_i64().unwrap();
    let mut ws = ws_connect(&app.ws_url(task, Some(seen))).await;
    frames.extend(ws_frames(&mut ws, (N as i64 - seen) as usize).await);
    assert!(
        ws_read(&mut ws, Duration::from_millis(300)).await.is_none(),
        "no frame after the last"
    );
    assert_feed(&items, &frames, N);

    // A reader that opens the task now reads it all compacted, pages back
    // to the first item, and the stream after the newest page has nothing
    // more (or the frames not compacted yet).
    let (items, covers_to) = eventually(20, "all compacted", || async {
        let (items, covers_to) = read_pages(&app, task, 50).await;
        (covers_to == N as i64).then_some((items, covers_to))
    })
    .await;
    assert_feed(&items, &[], N);
    let mut ws = ws_connect(&app.ws_url(task, Some(covers_to))).await;
    assert!(ws_read(&mut ws, Duration::from_millis(300)).await.is_none());
    app.stop().await;
}

#[tokio::test]
async fn a_page_request_is_checked() {
    let app = spawn_app().await;
    let task = Uuid::new_v4();
    for (query, code) in [
        ("?limit=0", "validation_error"),
        ("?limit=501", "validation_error"),
        ("?before=0", "validation_error"),
        ("?before=x", "bad_request"),
    ] {
        let (status, body) = http("GET", &feed_url(&app, task, query), None).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"], code, "{query}: {body}");
        assert_eq!(body["http_status"], 400);
    }
    let (status, body) = http(
        "GET",
        &app.url("/api/v1/orchestrator/tasks/nope/feed"),
        None,
    )
    .await;
    assert_eq!((status, &body["error"]), (400, &json!("bad_request")));
    // A task without a feed: an empty page, the stream from 0.
    let (status, body) = http("GET", &feed_url(&app, task, "?limit=500"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"items": [], "covers_to": 0, "earliest": null, "has_more": false})
    );
    app.stop().await;
}
