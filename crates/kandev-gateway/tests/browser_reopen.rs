//! Issue 39, in headless Chromium on the real stack (see `support`): a long
//! session opens on the newest page of its compacted feed, with its end
//! (the turn's end) on screen and only that page in the page; scrolling up
//! (or "Show earlier messages") loads earlier pages until the first message, and then every seq is
//! applied exactly once, the flood's chunks as one message. Waits on
//! conditions, never on time.
//!
//! Screenshots go to `<workspace>/target/screenshots/reopen-*.png`.

mod support;

use serde_json::{Value, json};
use support::*;

/// Chunks of the flood, and their bytes: 4 MB of one message, cut by the
/// store into items of 64 KiB, several pages of them.
const CHUNKS: u64 = 20_000;
const SIZE: u64 = 200;

/// What the page holds of the feed.
const FEED_STATE: &str = "
    const d = window.kandevDebug;
    const items = [...document.querySelectorAll('[data-testid=feed-item]')];
    const messages = d.feed.items.filter(i => i.kind === 'message' && i.role === 'agent');
    const seqs = items.filter(e => e.dataset.seq).map(e => Number(e.dataset.seq));
    return { items: items.length, model: d.feed.items.length, applied: d.eventsApplied, last: d.lastSeq,
             older: d.olderPages, loading: d.loadingPage,
             turnEnd: !!document.querySelector('[data-kind=turn_end]'),
             firstKind: items.length ? items[0].dataset.kind : null,
             chunks: messages.reduce((n, m) => n + m.nseq, 0),
             bytes: messages.reduce((n, m) => n + m.text.length + (m.elided || 0), 0),
             kept: messages.reduce((n, m) => n + m.text.length, 0),
             sorted: seqs.every((s, i) => i === 0 || s > seqs[i - 1]) };";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_session_opens_at_its_end_and_scrolls_back_to_its_start() {
    let Some((browser, stack)) = start_ui(false).await else {
        return;
    };
    let c = &browser.client;
    register_mock_type(c, "mock-agent-auto", "Mock agent", json!({})).await;
    let board = api(c, "POST", "/boards", json!({ "name": "Long" })).await;
    let board = board["body"]["id"].as_str().unwrap().to_string();
    let task = api(
        c,
        "POST",
        &format!("/boards/{board}/tasks"),
        json!({"title": "A long session", "agent_type": "mock-agent-auto",
               "description": format!("scenario: flood {CHUNKS} {SIZE}")}),
    )
    .await;
    assert_eq!(task["status"], 201, "{task}");
    let task = task["body"]["id"].as_str().unwrap().to_string();
    // Stored with nobody watching: the run ends, and the feed holds every
    // chunk.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let state = api(c, "GET", &format!("/tasks/{task}"), Value::Null).await;
        let status = api(
            c,
            "GET",
            &format!("/orchestrator/tasks/{task}/status"),
            Value::Null,
        )
        .await;
        let stored = status["body"]["last_seq"].as_u64().unwrap_or(0);
        if state["body"]["state"] == "COMPLETED" && stored > CHUNKS {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the session was not stored in time: {state} {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    // Opened: the newest page, its end on screen, the rest not loaded.
    go(c, &format!("#/tasks/{task}")).await;
    let opened = wait_js(
        c,
        "the end of the feed on screen",
        60,
        &format!(
            "const s = (() => {{ {FEED_STATE} }})(); return s.turnEnd && s.applied > 0 ? s : null;"
        ),
        vec![],
    )
    .await;
    assert_eq!(opened["older"], true, "earlier pages wait: {opened}");
    assert!(
        opened["chunks"].as_u64().unwrap() < CHUNKS,
        "only the newest page is loaded: {opened}"
    );
    assert!(
        opened["items"].as_u64().unwrap() < 40,
        "a page of items, not a frame each: {opened}"
    );
    screenshot(c, "reopen-end.png").await;

    // Scrolled up to the top (and "Show earlier messages"), again and
    // again: every page back to the first message.
    let all = wait_js(
        c,
        "every earlier page loaded by scrolling up",
        120,
        &format!(
            "const box = document.querySelector('[data-testid=feed]');
             box.scrollTop = 0;
             // The reader at the top, or asking with the button above the feed.
             const more = document.querySelector('[data-testid=feed-show-earlier]');
             if (more && !more.hidden && !window.kandevDebug.loadingPage) more.click();
             const s = (() => {{ {FEED_STATE} }})();
             return !s.older && !s.loading ? s : null;"
        ),
        vec![],
    )
    .await;
    let (chunks, bytes) = agent_text(c, &task).await;
    assert!(
        chunks > CHUNKS && bytes > CHUNKS * SIZE,
        "the flood is stored: {chunks} {bytes}"
    );
    assert_eq!(all["chunks"], json!(chunks), "every chunk once: {all}");
    assert_eq!(all["bytes"], json!(bytes), "their text: {all}");
    assert_eq!(all["applied"], all["last"], "every seq once: {all}");
    assert_eq!(all["sorted"], true, "in order: {all}");
    assert_eq!(
        all["firstKind"], "prompt",
        "back to the first message: {all}"
    );
    screenshot(c, "reopen-start.png").await;
    finish_clean(browser, stack).await;
}

/// The agent's message chunks and their text bytes, as the compacted
/// pages read through the API hold them.
async fn agent_text(c: &fantoccini::Client, task: &str) -> (u64, u64) {
    let (mut chunks, mut bytes) = (0, 0);
    let mut before = String::new();
    loop {
        let page = api(
            c,
            "GET",
            &format!("/orchestrator/tasks/{task}/feed?limit=500{before}"),
            Value::Null,
        )
        .await;
        assert_eq!(page["status"], 200, "{page}");
        for item in page["body"]["items"].as_array().unwrap() {
            if item["kind"] == "message" && item["role"] == "agent" {
                chunks +=
                    item["last_seq"].as_u64().unwrap() - item["first_seq"].as_u64().unwrap() + 1;
                bytes += item["text"].as_str().unwrap().len() as u64;
            }
        }
        if page["body"]["has_more"] != true {
            return (chunks, bytes);
        }
        before = format!("&before={}", page["body"]["earliest"]);
    }
}
