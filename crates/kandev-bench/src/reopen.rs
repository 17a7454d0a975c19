//! The `reopen` load: a task whose agent streamed a long session (a
//! million chunks by default), opened again by a client that does not
//! render: the compacted feed's newest page (what a page shows first),
//! every page back to the first, then the stream after the newest page;
//! against the replay of every frame from `?after=0` that a client made
//! before pages existed.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use kandev_e2e::Api;
use serde_json::Value;
use tokio::time::Instant;

use crate::{Bench, Section, StreamArgs, chromium, kandev, row, stats::ms};

/// The columns of the load: the replay against the pages.
const COLUMNS: [&str; 3] = [
    "replay of every frame (`?after=0`)",
    "compacted pages",
    "pages / replay",
];

/// What reading the pages back found.
#[derive(Debug, Default)]
struct Pages {
    pages: u64,
    items: u64,
    bytes: u64,
    /// Chunks of `message_id`'s message the items cover, and their text.
    chunks: u64,
    text_bytes: u64,
    /// Items cover `1..=covers_to` without a gap or a repeat.
    contiguous: bool,
}

/// The newest page: its items and `covers_to`, and when it came.
async fn newest_page(api: &Api, task: &str) -> Result<(Value, Duration)> {
    let t0 = Instant::now();
    let r = api
        .get(&format!("/api/v1/orchestrator/tasks/{task}/feed"))
        .await;
    let took = t0.elapsed();
    if r.status != 200 {
        bail!("newest page: {} {}", r.status, r.body);
    }
    Ok((r.body, took))
}

/// Every page from the newest back to the first, 500 items at most each.
async fn read_all(api: &Api, task: &str, message_id: &str) -> Result<Pages> {
    let mut out = Pages {
        contiguous: true,
        ..Pages::default()
    };
    let mut query = String::from("?limit=500");
    let mut next_last: Option<i64> = None;
    loop {
        let r = api
            .get(&format!("/api/v1/orchestrator/tasks/{task}/feed{query}"))
            .await;
        if r.status != 200 {
            bail!("page {query}: {} {}", r.status, r.body);
        }
        out.pages += 1;
        out.bytes += r.body.to_string().len() as u64;
        let items = r.body["items"].as_array().context("items")?;
        // Pages come newest first; items in seq order within a page.
        for item in items.iter().rev() {
            let (first, last) = (
                item["first_seq"].as_i64().unwrap_or(0),
                item["last_seq"].as_i64().unwrap_or(0),
            );
            if next_last.is_some_and(|n| n != last) {
                out.contiguous = false;
            }
            next_last = Some(first - 1);
            out.items += 1;
            if item["kind"] == "message" && item["message_id"] == message_id {
                out.chunks += (last - first + 1) as u64;
                out.text_bytes += item["text"].as_str().map_or(0, str::len) as u64;
            }
        }
        if r.body["has_more"] != true {
            break;
        }
        let before = r.body["earliest"].as_i64().context("earliest")?;
        query = format!("?before={before}&limit=500");
    }
    out.contiguous &= next_last == Some(0);
    Ok(out)
}

/// Polls the task's execution until its turn is over and its stored feed
/// stops growing; the last stored seq.
async fn wait_stored(api: &Api, task: &str, at_least: i64, deadline: Instant) -> Result<i64> {
    api.wait_state(
        task,
        &["COMPLETED", "REVIEW"],
        deadline.saturating_duration_since(Instant::now()).as_secs(),
    )
    .await;
    let mut last = -1;
    loop {
        let r = api
            .get(&format!("/api/v1/orchestrator/tasks/{task}/status"))
            .await;
        let seq = r.body["last_seq"].as_i64().unwrap_or(0);
        if seq >= at_least && seq == last {
            return Ok(seq);
        }
        if Instant::now() > deadline {
            bail!("the feed was not stored in time (last seq {seq})");
        }
        last = seq;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl Bench {
    pub(crate) async fn reopen(&self, args: &StreamArgs) -> Result<Section> {
        let n = args.reopen_messages;
        let size = args.size;
        let prompt = format!("scenario: flood {n} {size}");
        // The session, stored with nobody watching.
        let t0 = Instant::now();
        let task = kandev::create_task(&self.api, &self.board, &prompt).await?;
        let deadline = Instant::now() + Duration::from_secs(1800);
        let last_seq = wait_stored(&self.api, &task, n as i64, deadline).await?;
        let stored_in = t0.elapsed();

        // Opening it: the newest page, first read and again.
        let (first, first_cost) = self.measured(newest_page(&self.api, &task)).await;
        let (newest, cold) = first?;
        let mut warm = Vec::new();
        for _ in 0..5 {
            warm.push(newest_page(&self.api, &task).await?.1);
        }
        warm.sort();
        let covers_to = newest["covers_to"].as_i64().unwrap_or(0);
        let items = newest["items"].as_array().context("items")?;
        // The end of the feed: the turn's end (then what the agent
        // manager reports after it, such as the run's lifecycle).
        let has_turn_end = items.iter().any(|i| i["event"]["kind"] == "turn_end");
        let message_id = items
            .iter()
            .find(|i| i["kind"] == "message")
            .and_then(|i| i["message_id"].as_str())
            .unwrap_or_default()
            .to_string();

        // Then the whole history, page by page.
        let t1 = Instant::now();
        let (pages, pages_cost) = self.measured(read_all(&self.api, &task, &message_id)).await;
        let all_pages = t1.elapsed();
        let pages = pages?;
        // The stream after the newest page: nothing more is stored.
        let token = self.api.token.clone().context("token")?;
        let ws = kandev::connect(self.api.addr, &token, &task, covers_to as u64).await?;
        let after = kandev::watch(
            ws,
            covers_to as u64,
            1,
            Instant::now() + Duration::from_secs(2),
        )
        .await;

        // A person: Chromium opens the task's page, then scrolls back.
        let base = format!("http://{}", self.api.addr);
        let browser = chromium::open(&base, &token, kandev_e2e::ADMIN, &task).await?;

        // Before pages: every frame from 0 until the turn's end.
        let t2 = Instant::now();
        let ws = kandev::connect(self.api.addr, &token, &task, 0).await?;
        let (mut replay, replay_cost) = self
            .measured(kandev::watch(
                ws,
                0,
                1,
                Instant::now() + Duration::from_secs(1800),
            ))
            .await;
        let replayed = t2.elapsed();
        let replay_to_end = replay.first_frame.map(|_| replayed);

        let exact = pages.contiguous
            && covers_to == last_seq
            && pages.chunks == n
            && pages.text_bytes == n * size as u64
            && after.frames == 0;
        let cpu = |c: &crate::Cost| -> String {
            self.services
                .iter()
                .map(|s| format!("{s} {:.2}", c.cpu.get(s).copied().unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let peak = |c: &crate::Cost| -> String {
            self.services
                .iter()
                .map(|s| format!("{s} {:.0}", c.peak_mib.get(s).copied().unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let ratio = |a: Duration, b: Duration| {
            if b.is_zero() {
                "—".into()
            } else {
                format!("{:.4}", a.as_secs_f64() / b.as_secs_f64())
            }
        };
        let mut rows = vec![
            row(
                "time to the end of the feed (the newest page; the replay until its turn's end)",
                replay_to_end.map_or("—".into(), ms),
                ms(cold),
                replay_to_end.map_or("—".into(), |r| ratio(cold, r)),
            )
            .key(),
            row("newest page again (median of 5)", "—", ms(warm[2]), ""),
            row(
                "time to read the whole history",
                ms(replayed),
                ms(all_pages),
                ratio(all_pages, replayed),
            )
            .key(),
            row(
                "frames / items read",
                format!("{}", replay.frames),
                format!("{} items in {} pages", pages.items, pages.pages),
                "",
            ),
            row(
                "bytes received",
                "—",
                format!("{:.1} MB", pages.bytes as f64 / 1e6),
                "",
            ),
            row(
                "exact (every seq once; the pages' text is the chunks')",
                format!("{}", replay.exact(n)),
                format!("{exact}"),
                "",
            )
            .key(),
            row("CPU seconds: newest page", "—", cpu(&first_cost), ""),
            row(
                "CPU seconds: whole history",
                cpu(&replay_cost),
                cpu(&pages_cost),
                "",
            ),
            row("peak RSS (MiB)", peak(&replay_cost), peak(&pages_cost), "").key(),
        ];
        rows.extend(browser_rows(browser.as_ref()));
        Ok(Section {
            title: format!("Reopening a session of {n} chunks of {size} bytes"),
            columns: COLUMNS,
            rows,
            notes: vec![
                format!(
                    "Stored through the stack in {:.1} s ({:.0} chunks/s, nobody watching); \
                     the newest page {} the turn's end; {} items on it ({:.1} MB), covering up to seq {covers_to} of {last_seq}.",
                    stored_in.as_secs_f64(),
                    n as f64 / stored_in.as_secs_f64(),
                    if has_turn_end { "has" } else { "does not have" },
                    items.len(),
                    newest.to_string().len() as f64 / 1e6,
                ),
                format!(
                    "Replay: {:.0} frames/s read by a client that scans bytes.{}",
                    replay.frames as f64 / replayed.as_secs_f64(),
                    replay
                        .error
                        .take()
                        .map_or(String::new(), |e| format!(" Reader error: {e}"))
                ),
            ],
        })
    }
}

/// What Chromium saw opening the task's page (pages only: the replay is
/// the API client's above).
fn browser_rows(opened: Option<&chromium::Opened>) -> Vec<crate::Row> {
    let Some(o) = opened else {
        return vec![row("Chromium", "—", "not installed", "")];
    };
    vec![
        row(
            "Chromium: the end of the feed on screen after opening the page",
            "—",
            ms(o.to_end),
            "",
        )
        .key(),
        row(
            "Chromium: JS heap then (MiB)",
            "—",
            format!("{:.1}", o.heap_open_mib),
            "",
        )
        .key(),
        row(
            "Chromium: scrolled back to the first message",
            "—",
            ms(o.to_start),
            "",
        ),
        row(
            "Chromium: JS heap then (MiB)",
            "—",
            format!("{:.1}", o.heap_start_mib),
            "",
        )
        .key(),
        row(
            "Chromium: back to the prompt, every seq applied once",
            "—",
            format!("{}", o.exact),
            "",
        )
        .key(),
    ]
}
