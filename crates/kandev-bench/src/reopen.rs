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

use crate::{Bench, Cost, Row, Section, StreamArgs, chromium, kandev, row, stats::ms};

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

/// The newest page as the reopening client read it.
struct Newest {
    /// The first read, its cost, and the median of five more.
    cold: Duration,
    cost: Cost,
    warm: Duration,
    covers_to: i64,
    items: usize,
    bytes: usize,
    /// It has the turn's end (then what the agent manager reports after
    /// it, such as the run's lifecycle).
    has_turn_end: bool,
    /// The message whose chunks the pages are checked against.
    message_id: String,
}

/// What a client read of the whole history.
struct Read<T> {
    what: T,
    took: Duration,
    cost: Cost,
}

/// The replay's rate, and its reader's error if any.
fn replay_note(replay: &mut kandev::Watch, replayed: Duration) -> String {
    format!(
        "Replay: {:.0} frames/s read by a client that scans bytes.{}",
        replay.frames as f64 / replayed.as_secs_f64(),
        replay
            .error
            .take()
            .map_or(String::new(), |e| format!(" Reader error: {e}"))
    )
}

/// `a / b`, or a dash when `b` is zero.
fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        "—".into()
    } else {
        format!("{:.4}", a.as_secs_f64() / b.as_secs_f64())
    }
}

impl Bench {
    pub(crate) async fn reopen(&self, args: &StreamArgs) -> Result<Section> {
        let (n, size) = (args.reopen_messages, args.size);
        // The session, stored with nobody watching.
        let t0 = Instant::now();
        let prompt = format!("scenario: flood {n} {size}");
        let task = kandev::create_task(&self.api, &self.board, &prompt).await?;
        let deadline = Instant::now() + Duration::from_secs(1800);
        let last_seq = wait_stored(&self.api, &task, n as i64, deadline).await?;
        let stored_in = t0.elapsed();

        let newest = self.open_newest(&task).await?;
        // Then the whole history, page by page.
        let t1 = Instant::now();
        let (pages, cost) = self
            .measured(read_all(&self.api, &task, &newest.message_id))
            .await;
        let pages = Read {
            what: pages?,
            took: t1.elapsed(),
            cost,
        };
        // The stream after the newest page: nothing more is stored.
        let token = self.api.token.clone().context("token")?;
        let after = newest.covers_to as u64;
        let ws = kandev::connect(self.api.addr, &token, &task, after).await?;
        let after = kandev::watch(ws, after, 1, Instant::now() + Duration::from_secs(2)).await;

        // A person: Chromium opens the task's page, then scrolls back.
        let base = format!("http://{}", self.api.addr);
        let browser = chromium::open(&base, &token, kandev_e2e::ADMIN, &task).await?;
        let mut replay = self.replay(&token, &task).await?;

        let exact = pages.what.contiguous
            && newest.covers_to == last_seq
            && pages.what.chunks == n
            && pages.what.text_bytes == n * size as u64
            && after.frames == 0;
        let mut rows = self.rows(&newest, &pages, &replay, replay.what.exact(n), exact);
        rows.extend(browser_rows(browser.as_ref()));
        Ok(Section {
            title: format!("Reopening a session of {n} chunks of {size} bytes"),
            columns: COLUMNS,
            rows,
            notes: vec![
                format!(
                    "Stored through the stack in {:.1} s ({:.0} chunks/s, nobody watching); \
                     the newest page {} the turn's end; {} items on it ({:.1} MB), covering up to seq {} of {last_seq}.",
                    stored_in.as_secs_f64(),
                    n as f64 / stored_in.as_secs_f64(),
                    if newest.has_turn_end {
                        "has"
                    } else {
                        "does not have"
                    },
                    newest.items,
                    newest.bytes as f64 / 1e6,
                    newest.covers_to,
                ),
                replay_note(&mut replay.what, replay.took),
            ],
        })
    }

    /// Opening the task: the newest page, first read and five times again.
    async fn open_newest(&self, task: &str) -> Result<Newest> {
        let (first, cost) = self.measured(newest_page(&self.api, task)).await;
        let (newest, cold) = first?;
        let mut warm = Vec::new();
        for _ in 0..5 {
            warm.push(newest_page(&self.api, task).await?.1);
        }
        warm.sort();
        let items = newest["items"].as_array().context("items")?;
        let message_id = items
            .iter()
            .find(|i| i["kind"] == "message")
            .and_then(|i| i["message_id"].as_str())
            .unwrap_or_default()
            .to_string();
        Ok(Newest {
            cold,
            cost,
            warm: warm[2],
            covers_to: newest["covers_to"].as_i64().unwrap_or(0),
            items: items.len(),
            bytes: newest.to_string().len(),
            has_turn_end: items.iter().any(|i| i["event"]["kind"] == "turn_end"),
            message_id,
        })
    }

    /// Before pages: every frame from 0 until the turn's end.
    async fn replay(&self, token: &str, task: &str) -> Result<Read<kandev::Watch>> {
        let t0 = Instant::now();
        let ws = kandev::connect(self.api.addr, token, task, 0).await?;
        let deadline = Instant::now() + Duration::from_secs(1800);
        let (what, cost) = self.measured(kandev::watch(ws, 0, 1, deadline)).await;
        Ok(Read {
            what,
            took: t0.elapsed(),
            cost,
        })
    }

    /// The replay's rows against the pages'.
    fn rows(
        &self,
        newest: &Newest,
        pages: &Read<Pages>,
        replay: &Read<kandev::Watch>,
        replay_exact: bool,
        pages_exact: bool,
    ) -> Vec<Row> {
        let replay_to_end = replay.what.first_frame.map(|_| replay.took);
        let cold = newest.cold;
        vec![
            row(
                "time to the end of the feed (the newest page; the replay until its turn's end)",
                replay_to_end.map_or("—".into(), ms),
                ms(cold),
                replay_to_end.map_or("—".into(), |r| ratio(cold, r)),
            )
            .key(),
            row("newest page again (median of 5)", "—", ms(newest.warm), ""),
            row(
                "time to read the whole history",
                ms(replay.took),
                ms(pages.took),
                ratio(pages.took, replay.took),
            )
            .key(),
            row(
                "frames / items read",
                format!("{}", replay.what.frames),
                format!("{} items in {} pages", pages.what.items, pages.what.pages),
                "",
            ),
            row(
                "bytes received",
                "—",
                format!("{:.1} MB", pages.what.bytes as f64 / 1e6),
                "",
            ),
            row(
                "exact (every seq once; the pages' text is the chunks')",
                format!("{replay_exact}"),
                format!("{pages_exact}"),
                "",
            )
            .key(),
            row("CPU seconds: newest page", "—", self.cpu(&newest.cost), ""),
            row(
                "CPU seconds: whole history",
                self.cpu(&replay.cost),
                self.cpu(&pages.cost),
                "",
            ),
            row(
                "peak RSS (MiB)",
                self.peaks(&replay.cost),
                self.peaks(&pages.cost),
                "",
            )
            .key(),
        ]
    }
}

/// What Chromium saw opening the task's page (pages only: the replay is
/// the API client's above).
fn browser_rows(opened: Option<&chromium::Opened>) -> Vec<Row> {
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
