//! The path under test: tasks created through the gateway's REST API, their
//! feeds read through the gateway's WebSocket, as a browser reads them.

use std::{
    net::SocketAddr,
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
    time::Duration,
};

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use kandev_e2e::Api;
use serde_json::json;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{self as tg, client::IntoClientRequest};

use crate::{
    stats::Stats,
    wire::{frame_seq, is_turn_end, now_nanos, sent_at},
};

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a task's stream through the gateway from `?after=`.
pub async fn connect(addr: SocketAddr, token: &str, task_id: &str, after: u64) -> Result<Ws> {
    let url = format!("ws://{addr}/api/v1/orchestrator/tasks/{task_id}/stream?after={after}");
    let mut req = url.into_client_request()?;
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("kandev.bearer, {token}").parse()?,
    );
    // Tungstenite zeroes its whole read buffer before each read (128 KiB by
    // default): 500 readers of small frames would spend a core on it, on
    // the machine under test. 16 KiB is a dozen frames per read.
    let config = tg::protocol::WebSocketConfig::default().read_buffer_size(16 * 1024);
    let (ws, _) = tokio::time::timeout(
        Duration::from_secs(30),
        tokio_tungstenite::connect_async_with_config(req, Some(config), true),
    )
    .await
    .map_err(|_| anyhow!("connecting the stream timed out"))??;
    Ok(ws)
}

/// What one reader of a task's feed saw.
#[derive(Debug, Default)]
pub struct Watch {
    /// Flood chunks received, with their latencies.
    pub stats: Stats,
    /// Feed frames received.
    pub frames: u64,
    /// Seq errors: a frame whose seq was not the previous one + 1.
    pub disorder: u64,
    pub last_seq: u64,
    /// When the first feed frame came.
    pub first_frame: Option<Instant>,
    /// Why the stream ended early, if it did.
    pub error: Option<String>,
}

impl Watch {
    /// Every frame arrived once, in order, and the flood was whole.
    pub fn exact(&self, flood: u64) -> bool {
        self.disorder == 0 && self.stats.count() == flood && self.error.is_none()
    }
}

/// What many readers saw so far, for a load that measures a window of
/// their steady state: chunks received, readers that had their first
/// chunk, readers that finished.
#[derive(Debug, Default)]
pub struct Tally {
    pub chunks: AtomicU64,
    pub streaming: AtomicUsize,
    pub done: AtomicUsize,
}

impl Tally {
    pub fn chunks(&self) -> u64 {
        self.chunks.load(Ordering::Relaxed)
    }
}

/// Reads a feed until `turns` turn ends were seen after `after`, or the
/// deadline. Seqs must run `after+1, after+2, …` without a gap or repeat.
pub async fn watch(ws: Ws, after: u64, turns: usize, deadline: Instant) -> Watch {
    watch_tallied(ws, after, turns, deadline, &Tally::default()).await
}

/// [`watch`], counting into `tally` as it reads.
pub async fn watch_tallied(
    mut ws: Ws,
    after: u64,
    turns: usize,
    deadline: Instant,
    tally: &Tally,
) -> Watch {
    let mut w = Watch {
        last_seq: after,
        ..Watch::default()
    };
    let mut ends = 0;
    while ends < turns {
        let next = match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => {
                w.error = Some(format!("timed out at seq {}", w.last_seq));
                break;
            }
            Ok(None) => {
                w.error = Some(format!("the stream ended at seq {}", w.last_seq));
                break;
            }
            Ok(Some(Err(e))) => {
                w.error = Some(format!("the stream failed at seq {}: {e}", w.last_seq));
                break;
            }
            Ok(Some(Ok(msg))) => msg,
        };
        let now = now_nanos();
        let tg::Message::Text(text) = next else {
            if let tg::Message::Close(frame) = next {
                w.error = Some(format!("closed at seq {}: {frame:?}", w.last_seq));
                break;
            }
            continue;
        };
        let bytes = text.as_bytes();
        let Some(seq) = frame_seq(bytes) else {
            continue;
        };
        w.first_frame.get_or_insert_with(Instant::now);
        w.frames += 1;
        if seq != w.last_seq + 1 {
            w.disorder += 1;
        }
        w.last_seq = seq;
        if let Some(sent) = sent_at(bytes) {
            if w.stats.count() == 0 {
                tally.streaming.fetch_add(1, Ordering::Relaxed);
            }
            tally.chunks.fetch_add(1, Ordering::Relaxed);
            w.stats.record(sent, now);
        } else if is_turn_end(bytes) {
            ends += 1;
        }
    }
    tally.done.fetch_add(1, Ordering::Relaxed);
    let _ = ws.close(None).await;
    w
}

/// Creates a mock-agent task whose description is `prompt`; its id.
pub async fn create_task(api: &Api, board: &str, prompt: &str) -> Result<String> {
    let r = api
        .post(
            &format!("/api/v1/boards/{board}/tasks"),
            json!({"title": "bench", "description": prompt, "agent_type": "mock-agent"}),
        )
        .await;
    if r.status != 201 {
        bail!("create task: {} {}", r.status, r.body);
    }
    Ok(r.body["id"].as_str().context("task id")?.to_string())
}

/// Creates a task and reads its feed until its first turn ends; the task
/// id and what was read.
pub async fn run_task(
    api: &Api,
    board: &str,
    prompt: &str,
    timeout: Duration,
) -> Result<(String, Watch)> {
    run_task_tallied(api, board, prompt, timeout, &Tally::default()).await
}

/// [`run_task`], counting into `tally`.
pub async fn run_task_tallied(
    api: &Api,
    board: &str,
    prompt: &str,
    timeout: Duration,
    tally: &Tally,
) -> Result<(String, Watch)> {
    let task = create_task(api, board, prompt).await?;
    let token = api.token.clone().context("a logged-in client")?;
    let ws = connect(api.addr, &token, &task, 0).await?;
    let deadline = Instant::now() + timeout;
    Ok((task, watch_tallied(ws, 0, 1, deadline, tally).await))
}
