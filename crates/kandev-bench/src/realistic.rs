//! The realistic load: many agents, each at a modest rate, as a team's
//! board runs them. What matters is the CPU every process spends per
//! message in the steady state (from the moment every agent streams until
//! the first one finishes, so that starting 50 containers is not counted
//! as streaming), the latency, and that every feed is exact.

use std::time::Duration;

use anyhow::Result;
use futures::future::join_all;
use tokio::time::Instant;

use crate::{
    Bench, Cost, Row, Section, StreamArgs, VERSUS,
    kandev::{self, Tally},
    loads::{error_notes, exact_and_merged, finished},
    procs, row,
    stats::ms,
};

/// How often the window's edges are looked for.
const POLL: Duration = Duration::from_millis(20);

/// CPU seconds of every watched process, chunks read and the time between
/// the window's two edges.
struct Window {
    cpu: std::collections::BTreeMap<String, f64>,
    chunks: u64,
    span: Duration,
}

impl Window {
    /// The window's chunks, length and rate.
    fn rate_row(&self) -> Row {
        let rate = self.chunks as f64 / self.span.as_secs_f64().max(1e-9);
        row(
            "steady window: chunks, seconds, messages/s",
            "—",
            format!(
                "{} in {:.1} s, {rate:.0}/s",
                self.chunks,
                self.span.as_secs_f64()
            ),
            "",
        )
    }

    /// CPU per message of every process Kandev runs (dockerd aside).
    fn cpu_row(&self) -> Row {
        let ours: f64 = self
            .cpu
            .iter()
            .filter(|(name, _)| name.as_str() != "dockerd")
            .map(|(_, secs)| secs)
            .sum();
        row(
            "CPU per message: every process Kandev runs",
            "—",
            format!("{:.1} µs", ours * 1e6 / self.chunks.max(1) as f64),
            "",
        )
        .key()
    }
}

impl Bench {
    /// The cost rows of the steady window, then the CPU rows of the whole
    /// run (`messages` in all), starts included.
    fn window_cost_rows(&self, window: Window, whole: Cost, messages: u64) -> Vec<Row> {
        let chunks = window.chunks;
        let steady = Cost {
            cpu: window.cpu,
            peak_mib: whole.peak_mib.clone(),
        };
        let mut rows = self.cost_rows(&steady, chunks, None);
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

    /// Waits until every reader streams (or one is done), then measures
    /// until the first reader is done.
    async fn steady_window(&self, tally: &Tally, agents: usize) -> Window {
        let watched = self.watched_now();
        let edge = |all: bool| {
            let streaming = tally.streaming.load(std::sync::atomic::Ordering::Relaxed);
            let done = tally.done.load(std::sync::atomic::Ordering::Relaxed);
            done > 0 || (all && streaming >= agents)
        };
        while !edge(true) {
            tokio::time::sleep(POLL).await;
        }
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

    pub(crate) async fn realistic(&self, args: &StreamArgs) -> Result<Section> {
        let (agents, rate, secs) = (
            args.realistic_agents,
            args.realistic_rate,
            args.realistic_secs,
        );
        let n = rate * secs;
        let prompt = format!("scenario: flood {n} {} {rate}", args.size);
        let tally = Tally::default();
        let timeout = Duration::from_secs(secs * 4 + 300);
        let run_all =
            join_all((0..agents).map(|_| {
                kandev::run_task_tallied(&self.api, &self.board, &prompt, timeout, &tally)
            }));
        let ((watches, window), whole) = self
            .measured(async { tokio::join!(run_all, self.steady_window(&tally, agents)) })
            .await;
        let watches = finished(watches)?;
        let (exact, mut all) = exact_and_merged(&watches, n);
        let mut rows = vec![
            window.rate_row(),
            row("p50 latency", "—", ms(all.percentile(50.0)), "").key(),
            row("p99 latency", "—", ms(all.percentile(99.0)), "").key(),
            row("max latency", "—", ms(all.percentile(100.0)), ""),
            row("feeds exact", "—", format!("{exact} of {agents}"), "").key(),
            window.cpu_row(),
        ];
        rows.extend(self.window_cost_rows(window, whole, n * agents as u64));
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
