//! The realistic load: many agents, each at a modest rate, as a team's
//! board runs them. What matters is the CPU every process spends per
//! message in the steady state (from the moment every agent streams until
//! the first one finishes, so that starting 50 containers is not counted
//! as streaming), the latency, and that every feed is exact.
//!
//! The bare baseline runs the same agents under `docker run -i` at once,
//! read by the benchmark over their attached stdout, and measures the same
//! steady window: its "processes" are the `docker` clients that relay each
//! agent's output, beside dockerd.

use std::time::Duration;

use anyhow::Result;
use futures::future::join_all;
use tokio::time::Instant;

use crate::{
    Bench, Cost, IMAGE, Row, Section, StreamArgs, VERSUS, bare,
    kandev::{self, Tally},
    loads::{error_notes, exact_and_merged, finished},
    pct,
    procs::{self, Watched},
    row,
    stats::{Stats, ms},
};

/// How often the window's edges are looked for.
const POLL: Duration = Duration::from_millis(20);

/// CPU seconds of every watched process, chunks read and the time between
/// the window's two edges.
pub(crate) struct Window {
    pub(crate) cpu: std::collections::BTreeMap<String, f64>,
    pub(crate) chunks: u64,
    pub(crate) span: Duration,
}

impl Window {
    /// The window's chunks, length and rate.
    pub(crate) fn rate(&self) -> String {
        let rate = self.chunks as f64 / self.span.as_secs_f64().max(1e-9);
        format!(
            "{} in {:.1} s, {rate:.0}/s",
            self.chunks,
            self.span.as_secs_f64()
        )
    }

    /// CPU µs per message of the processes named `name`.
    pub(crate) fn per_message(&self, name: &str) -> f64 {
        self.cpu.get(name).copied().unwrap_or(0.0) * 1e6 / self.chunks.max(1) as f64
    }

    /// CPU µs per message of every process on the path, dockerd aside.
    fn relays_per_message(&self) -> f64 {
        let relays: f64 = self
            .cpu
            .iter()
            .filter(|(name, _)| name.as_str() != "dockerd")
            .map(|(_, secs)| secs)
            .sum();
        relays * 1e6 / self.chunks.max(1) as f64
    }
}

/// What the bare baseline of the load measured.
struct BareRealistic {
    stats: Stats,
    window: Window,
    /// Agents whose every chunk was read.
    complete: usize,
}

/// Waits until every reader counting into `tally` streams (or one is done),
/// then measures the processes `watched` names (looked up then, once they
/// all run) until the first reader is done.
async fn steady_window(tally: &Tally, agents: usize, watched: impl Fn() -> Vec<Watched>) -> Window {
    let edge = |all: bool| {
        let streaming = tally.streaming.load(std::sync::atomic::Ordering::Relaxed);
        let done = tally.done.load(std::sync::atomic::Ordering::Relaxed);
        done > 0 || (all && streaming >= agents)
    };
    while !edge(true) {
        tokio::time::sleep(POLL).await;
    }
    let watched = watched();
    let (before, chunks, t0) = (procs::snapshot(&watched), tally.chunks(), Instant::now());
    while !edge(false) {
        tokio::time::sleep(POLL).await;
    }
    Window {
        cpu: procs::snapshot(&watched).since(&before),
        chunks: tally.chunks() - chunks,
        span: t0.elapsed(),
    }
}

/// The bare path's processes: dockerd and the `docker` clients.
fn bare_watched() -> Vec<Watched> {
    ["dockerd", "docker"]
        .into_iter()
        .map(|name| Watched {
            name: name.into(),
            pids: procs::pids_named(name),
        })
        .collect()
}

/// `agents` bare agents streaming `prompt` at once, `n` chunks each.
async fn bare_realistic(prompt: &str, agents: usize, n: u64) -> Result<BareRealistic> {
    let tally = Tally::default();
    let runs = join_all((0..agents).map(|_| bare::run_tallied(IMAGE, prompt, None, &tally)));
    let (runs, window) = tokio::join!(runs, steady_window(&tally, agents, bare_watched));
    let mut stats = Stats::default();
    let mut complete = 0;
    for run in runs {
        let run = run?;
        complete += usize::from(run.stats.count() == n);
        stats.merge(run.stats);
    }
    Ok(BareRealistic {
        stats,
        window,
        complete,
    })
}

impl Bench {
    /// The cost rows of the steady window, then the CPU rows of the whole
    /// run (`messages` in all), starts included.
    fn window_cost_rows(
        &self,
        window: Window,
        whole: Cost,
        messages: u64,
        bare: bare::BareCpu,
    ) -> Vec<Row> {
        let chunks = window.chunks;
        let steady = Cost {
            cpu: window.cpu,
            peak_mib: whole.peak_mib.clone(),
        };
        let mut rows = self.cost_rows(&steady, chunks, Some(bare));
        let mut start_and_stop = self.cost_rows(&whole, messages, None);
        start_and_stop.truncate(2);
        for r in start_and_stop {
            rows.push(row(
                &format!("{} (whole run, starts included)", r.metric),
                "—",
                r.kandev,
                "",
            ));
        }
        rows
    }

    pub(crate) async fn realistic(&self, args: &StreamArgs) -> Result<Section> {
        let (agents, rate, secs) = (
            args.realistic_agents,
            args.realistic_rate,
            args.realistic_secs,
        );
        let n = rate * secs;
        let prompt = format!("scenario: flood {n} {} {rate}", args.size);
        let mut bare = bare_realistic(&prompt, agents, n).await?;
        let tally = Tally::default();
        let timeout = Duration::from_secs(secs * 4 + 300);
        let run_all =
            join_all((0..agents).map(|_| {
                kandev::run_task_tallied(&self.api, &self.board, &prompt, timeout, &tally)
            }));
        let steady = steady_window(&tally, agents, || self.watched_now());
        let ((watches, window), whole) =
            self.measured(async { tokio::join!(run_all, steady) }).await;
        let watches = finished(watches)?;
        let (exact, mut all) = exact_and_merged(&watches, n);
        let mut rows = vec![row(
            "steady window: chunks, seconds, messages/s",
            bare.window.rate(),
            window.rate(),
            "",
        )];
        rows.extend(latency_rows(&mut bare.stats, &mut all));
        rows.push(
            row(
                "feeds exact",
                format!("{} of {agents} complete", bare.complete),
                format!("{exact} of {agents}"),
                "",
            )
            .key(),
        );
        let (bare_relays, relays) = (
            bare.window.relays_per_message(),
            window.relays_per_message(),
        );
        rows.push(
            row(
                "CPU per message: every process Kandev runs (bare: the `docker` clients)",
                format!("{bare_relays:.1} µs"),
                format!("{relays:.1} µs"),
                pct(relays, bare_relays),
            )
            .key(),
        );
        let bare_cpu = bare::BareCpu {
            client: bare_relays,
            dockerd: bare.window.per_message("dockerd"),
        };
        rows.extend(self.window_cost_rows(window, whole, n * agents as u64, bare_cpu));
        Ok(Section {
            columns: VERSUS,
            title: format!(
                "{agents} agents at {rate} chunks/s each for {secs} s (CPU in the steady window)"
            ),
            rows,
            notes: error_notes(&watches.iter().collect::<Vec<_>>()),
        })
    }
}

/// p50, p99 and max latency, bare and through Kandev.
fn latency_rows(bare: &mut Stats, kandev: &mut Stats) -> Vec<Row> {
    [
        (50.0, "p50 latency", true),
        (99.0, "p99 latency", true),
        (100.0, "max latency", false),
    ]
    .into_iter()
    .map(|(p, metric, key)| {
        let r = row(metric, ms(bare.percentile(p)), ms(kandev.percentile(p)), "");
        if key { r.key() } else { r }
    })
    .collect()
}
