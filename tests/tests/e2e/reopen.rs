//! Reopening a task through the gateway as the UI does: the newest page of
//! the compacted feed, the pages before it back to the first, then the
//! stream from the newest page's `covers_to`. A reader that opened the task
//! mid-run, across the orchestrator (or `kandev`) SIGKILLed and restarted,
//! and one that opens it at the end both see exactly the stored feed.

use std::time::Duration;

use kandev_e2e::{
    Api, Feed, Options, Stack, Svc, deployments, mock_task, replay, serde_json::Value,
};

const CHUNKS: usize = 60;

/// The newest page and every page before it: items in seq order, and the
/// newest page's `covers_to`.
async fn pages(api: &Api, task: &str) -> (Vec<Value>, i64) {
    let first = api
        .get(&format!("/api/v1/orchestrator/tasks/{task}/feed?limit=7"))
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let covers_to = first.body["covers_to"].as_i64().unwrap();
    let mut pages = vec![first.body];
    while pages.last().unwrap()["has_more"] == true {
        let before = pages.last().unwrap()["earliest"].as_i64().unwrap();
        let page = api
            .get(&format!(
                "/api/v1/orchestrator/tasks/{task}/feed?before={before}&limit=7"
            ))
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        pages.push(page.body);
    }
    let items = pages
        .into_iter()
        .rev()
        .flat_map(|p| p["items"].as_array().unwrap().clone())
        .collect();
    (items, covers_to)
}

/// Checks that `items`, then `frames`, are exactly `stored` (the feed
/// replayed frame by frame from `?after=0`).
fn assert_same_feed(items: &[Value], frames: &[Value], stored: &[Value]) {
    let mut next = 1usize;
    for item in items {
        let (first, last) = (
            item["first_seq"].as_u64().unwrap() as usize,
            item["last_seq"].as_u64().unwrap() as usize,
        );
        assert_eq!(first, next, "no gap, no repeat: {item}");
        let covered = &stored[first - 1..last];
        match item["kind"].as_str().unwrap() {
            "message" | "thought" => {
                let text: String = covered
                    .iter()
                    .map(|f| f["event"]["data"]["text"].as_str().unwrap())
                    .collect();
                assert_eq!(item["text"].as_str().unwrap(), text);
                for f in covered {
                    assert_eq!(f["instance_id"], item["instance_id"]);
                    assert_eq!(f["event"]["data"]["role"], item["role"]);
                }
            }
            "event" => assert_eq!(item["event"], covered[0]["event"], "{item}"),
            other => panic!("an item of kind {other}"),
        }
        next = last + 1;
    }
    for frame in frames {
        assert_eq!(
            frame,
            &stored[next - 1],
            "the stream goes on after the page"
        );
        next += 1;
    }
    assert_eq!(next - 1, stored.len(), "the whole feed");
}

/// A slow task read live, by a reader that opened it mid-run (across the
/// kill) and by one that opens it at the end.
async fn reopen_on(test: &str, options: Options) {
    // The `kandev` binary is the whole stack: killing it kills everything.
    let svc = if options.single {
        Svc::Gateway
    } else {
        Svc::Orchestrator
    };
    let (mut stack, api, board) = Stack::start_with_board(test, options, test).await;
    let slow = mock_task("Slow", &format!("scenario: slow {CHUNKS} 150"));
    let task = api.task(&board, slow).await;
    let mut live = Feed::open(&api, &task).await;
    live.wait_for_chunk(120, &format!("chunk 10/{CHUNKS}"))
        .await;

    // A reader opens the task mid-run: pages, then the stream after them.
    let (early_items, covers_to) = pages(&api, &task).await;
    assert!(covers_to > 0);
    let mut reader = Feed::open_after(&api, &task, covers_to).await;
    stack.kill(svc);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.spawn(svc).await;
    api.wait_state(&task, &["COMPLETED", "REVIEW"], 240).await;
    reader.drain(Duration::from_millis(2000)).await;
    live.drain(Duration::from_millis(500)).await;
    let stored = replay(&api, &task).await;
    assert!(
        stored
            .iter()
            .filter(|f| f["event"]["kind"] == "message_chunk")
            .count()
            >= CHUNKS
    );
    assert_same_feed(&early_items, &reader.frames, &stored);

    // A reader that opens it now: every page, nothing after them.
    let (items, covers_to) = pages(&api, &task).await;
    assert_eq!(covers_to as usize, stored.len());
    assert!(
        items.len() < stored.len() / 2,
        "items, not chunks: {} for {} frames",
        items.len(),
        stored.len()
    );
    let mut after = Feed::open_after(&api, &task, covers_to).await;
    after.drain(Duration::from_millis(1000)).await;
    assert_same_feed(&items, &after.frames, &stored);
    after.close().await;
    reader.close().await;
    live.close().await;
    stack.stop().await;
}

deployments! {
    reopen_on("reopen"),
    four: reopen_pages_then_the_stream_are_the_feed_across_an_orchestrator_kill,
    single: reopen_pages_then_the_stream_are_the_feed_across_a_kandev_kill_single,
}
