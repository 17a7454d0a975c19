//! The baseline: the same mock agent under `docker run -i`, driven over
//! its attached stdin/stdout by a minimal ACP client (three requests, then
//! read lines), with no service in between.

use std::{process::Stdio, sync::atomic::Ordering, time::Duration};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, ChildStdin, ChildStdout, Command},
    time::Instant,
};

use crate::{
    kandev::Tally,
    procs,
    stats::Stats,
    wire::{now_nanos, sent_at},
};

/// The label of the benchmark's own bare containers, for cleanup.
pub const LABEL: &str = "kandev.bench=bare";

/// What one bare run measured.
#[derive(Debug, Default)]
pub struct BareRun {
    pub stats: Stats,
    /// `docker run` → the agent's first line (its `initialize` answer).
    pub first_line: Duration,
    /// CPU seconds of the `docker` client, which relays the agent's output
    /// from dockerd to the reader (its whole life, read as the turn ends).
    pub client_cpu: f64,
}

/// The bare path's CPU in µs per message: the `docker` client's and
/// dockerd's.
#[derive(Debug, Clone, Copy)]
pub struct BareCpu {
    pub client: f64,
    pub dockerd: f64,
}

impl BareCpu {
    /// `run`'s client and `dockerd_secs` of dockerd over its `messages`.
    pub fn per_message(run: &BareRun, dockerd_secs: f64, messages: u64) -> BareCpu {
        let per = |secs: f64| secs * 1e6 / messages.max(1) as f64;
        BareCpu {
            client: per(run.client_cpu),
            dockerd: per(dockerd_secs),
        }
    }
}

/// Runs one agent with `prompt` and reads its output until the turn ends.
/// `log_driver` replaces the engine's default log driver.
pub async fn run(image: &str, prompt: &str, log_driver: Option<&str>) -> Result<BareRun> {
    run_tallied(image, prompt, log_driver, &Tally::default()).await
}

/// [`run`], counting into `tally` as it reads (as Kandev's readers do).
pub async fn run_tallied(
    image: &str,
    prompt: &str,
    log_driver: Option<&str>,
    tally: &Tally,
) -> Result<BareRun> {
    let started = Instant::now();
    let mut child = spawn(image, log_driver)?;
    let client = child.id();
    let mut stdin = child.stdin.take().context("stdin")?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::with_capacity(256 * 1024, stdout);
    send(
        &mut stdin,
        json!({"jsonrpc":"2.0","id":1,"method":"initialize",
            "params":{"protocolVersion":1,"clientCapabilities":{}}}),
    )
    .await?;
    send(
        &mut stdin,
        json!({"jsonrpc":"2.0","id":2,"method":"session/new",
            "params":{"cwd":"/workspace","mcpServers":[]}}),
    )
    .await?;
    stdin.flush().await?;
    let run = read_turn(&mut lines, &mut stdin, prompt, started, tally).await;
    tally.done.fetch_add(1, Ordering::Relaxed);
    let mut run = run?;
    run.client_cpu = client.map_or(0.0, procs::cpu_seconds);
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    Ok(run)
}

/// `docker run -i` of `image`, its stdin and stdout piped.
fn spawn(image: &str, log_driver: Option<&str>) -> Result<Child> {
    let mut docker = Command::new("docker");
    docker.args(["run", "-i", "--rm", "--network", "none", "--label", LABEL]);
    if let Some(driver) = log_driver {
        docker.args(["--log-driver", driver]);
    }
    docker
        .arg(image)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("docker run")
}

/// Writes `message` as a line (not flushed).
async fn send(stdin: &mut ChildStdin, message: Value) -> Result<()> {
    let mut line = message.to_string();
    line.push('\n');
    stdin.write_all(line.as_bytes()).await?;
    Ok(())
}

/// Reads the agent's lines: each flood chunk's latency, the prompt sent
/// once the session is there, until the prompt is answered.
async fn read_turn(
    lines: &mut BufReader<ChildStdout>,
    stdin: &mut ChildStdin,
    prompt: &str,
    started: Instant,
    tally: &Tally,
) -> Result<BareRun> {
    let mut run = BareRun::default();
    let mut line = Vec::with_capacity(4096);
    let mut first = true;
    loop {
        line.clear();
        if lines.read_until(b'\n', &mut line).await? == 0 {
            bail!("the agent's output ended before its turn did");
        }
        let now = now_nanos();
        if first {
            run.first_line = started.elapsed();
            first = false;
        }
        if let Some(sent) = sent_at(&line) {
            if run.stats.count() == 0 {
                tally.streaming.fetch_add(1, Ordering::Relaxed);
            }
            tally.chunks.fetch_add(1, Ordering::Relaxed);
            run.stats.record(sent, now);
            continue;
        }
        // Only the few control lines are parsed.
        let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if msg["id"] == 2 {
            let session = msg["result"]["sessionId"]
                .as_str()
                .context("session/new answered without a sessionId")?
                .to_string();
            send(
                stdin,
                json!({"jsonrpc":"2.0","id":3,"method":"session/prompt",
                    "params":{"sessionId":session,"prompt":[{"type":"text","text":prompt}]}}),
            )
            .await?;
            stdin.flush().await?;
        } else if msg["id"] == 3 {
            return Ok(run);
        }
    }
}

/// Removes bare containers a failed run left behind.
pub async fn cleanup() {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={LABEL}")])
        .output()
        .await;
    if let Ok(out) = out {
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect();
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "-f"])
                .args(&ids)
                .output()
                .await;
        }
    }
}
