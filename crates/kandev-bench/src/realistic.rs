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
    Bench, Cost, Section, StreamArgs, VERSUS,
    kandev::{self, Tally},
    loads::error_notes,
    procs, row,
    stats::{Stats, ms},
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

impl Bench {
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
        let watches: Vec<kandev::Watch> = watches
            .into_iter()
            .map(|w| w.map(|(_, w)| w))
            .collect::<Result<_>>()?;
        let exact = watches.iter().filter(|w| w.exact(n)).count();
        let mut all = Stats::default();
        for w in &watches {
            all.merge(w.stats.clone());
        }
        let window_rate = window.chunks as f64 / window.span.as_secs_f64().max(1e-9);
        let mut rows = vec![
            row(
                "steady window: chunks, seconds, messages/s",
                "—",
                format!(
                    "{} in {:.1} s, {window_rate:.0}/s",
                    window.chunks,
                    window.span.as_secs_f64()
                ),
                "",
            ),
            row("p50 latency", "—", ms(all.percentile(50.0)), "").key(),
            row("p99 latency", "—", ms(all.percentile(99.0)), "").key(),
            row("max latency", "—", ms(all.percentile(100.0)), ""),
            row("feeds exact", "—", format!("{exact} of {agents}"), "").key(),
        ];
        let ours: f64 = window
            .cpu
            .iter()
            .filter(|(name, _)| name.as_str() != "dockerd")
            .map(|(_, secs)| secs)
            .sum();
        rows.push(
            row(
                "CPU per message: every process Kandev runs",
                "—",
                format!("{:.1} µs", ours * 1e6 / window.chunks.max(1) as f64),
                "",
            )
            .key(),
        );
        let steady = Cost {
            cpu: window.cpu,
            peak_mib: whole.peak_mib.clone(),
        };
        rows.extend(self.cost_rows(&steady, window.chunks, None));
        let mut start_and_stop = self.cost_rows(&whole, n * agents as u64, None);
        start_and_stop.truncate(2);
        for r in start_and_stop {
            rows.push(row(
                &format!("{} (whole run, starts included)", r.metric),
                "—",
                r.kandev,
                "",
            ));
        }
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
