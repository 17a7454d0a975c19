//! The loads: each runs the bare baseline and the same agent through
//! Kandev, and reports them side by side.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::future::join_all;
use kandev_e2e::Svc;
use tokio::time::Instant;

use crate::{
    Bench, Cost, IMAGE, Row, Section, StreamArgs, VERSUS,
    bare::{self, BareCpu},
    kandev, pct, procs, row,
    stats::{Stats, ms},
};

impl Bench {
    /// The bare run of `prompt` (and dockerd's CPU seconds meanwhile), then
    /// the same prompt as a task through Kandev, read as it streams, and
    /// what every watched process spent on it.
    async fn side_by_side(
        &self,
        prompt: &str,
    ) -> Result<(bare::BareRun, f64, kandev::Watch, Cost)> {
        let (bare, bare_dockerd) = self.bare_measured(prompt, None).await?;
        let (watch, cost) = self
            .measured(kandev::run_task(
                &self.api,
                &self.board,
                prompt,
                Duration::from_secs(600),
            ))
            .await;
        let (_, watch) = watch?;
        Ok((bare, bare_dockerd, watch, cost))
    }

    pub(crate) async fn full(&self, args: &StreamArgs) -> Result<Section> {
        let n = args.messages;
        let prompt = format!("scenario: flood {n} {}", args.size);
        let (mut bare, bare_dockerd, mut watch, cost) = self.side_by_side(&prompt).await?;
        let exact = watch.exact(n);
        let mut rows = vec![
            row(
                "messages/s",
                format!("{:.0}", bare.stats.rate()),
                format!("{:.0}", watch.stats.rate()),
                pct(watch.stats.rate(), bare.stats.rate()),
            )
            .key(),
            row(
                "p50 latency (send → receipt)",
                ms(bare.stats.percentile(50.0)),
                ms(watch.stats.percentile(50.0)),
                "",
            ),
            row(
                "p99 latency",
                ms(bare.stats.percentile(99.0)),
                ms(watch.stats.percentile(99.0)),
                "",
            )
            .key(),
            row(
                "feed exact (every seq once, in order)",
                "—",
                format!("{exact} ({} of {n} chunks)", watch.stats.count()),
                "",
            )
            .key(),
        ];
        let bare_cpu = BareCpu::per_message(&bare, bare_dockerd, n);
        rows.extend(self.cost_rows(&cost, n, Some(bare_cpu)));
        Ok(Section {
            columns: VERSUS,
            title: format!(
                "One agent, as fast as it can ({n} chunks of {} bytes)",
                args.size
            ),
            rows,
            notes: error_notes(&[&watch]),
        })
    }

    pub(crate) async fn paced(&self, args: &StreamArgs) -> Result<Section> {
        let n = args.paced_rate * args.paced_secs;
        let prompt = format!("scenario: flood {n} {} {}", args.size, args.paced_rate);
        let (mut bare, bare_dockerd, mut watch, cost) = self.side_by_side(&prompt).await?;
        let bare_cpu = BareCpu::per_message(&bare, bare_dockerd, n);
        let mut rows = vec![row(
            "messages/s (paced)",
            format!("{:.0}", bare.stats.rate()),
            format!("{:.0}", watch.stats.rate()),
            pct(watch.stats.rate(), bare.stats.rate()),
        )];
        for p in [50.0, 90.0, 99.0, 99.9] {
            let r = row(
                &format!("p{p} latency"),
                ms(bare.stats.percentile(p)),
                ms(watch.stats.percentile(p)),
                "",
            );
            rows.push(if p == 99.0 { r.key() } else { r });
        }
        rows.push(row(
            "max latency",
            ms(bare.stats.percentile(100.0)),
            ms(watch.stats.percentile(100.0)),
            "",
        ));
        rows.push(
            row(
                "feed exact",
                "—",
                format!("{} ({} of {n})", watch.exact(n), watch.stats.count()),
                "",
            )
            .key(),
        );
        rows.extend(self.cost_rows(&cost, n, Some(bare_cpu)));
        Ok(Section {
            columns: VERSUS,
            title: format!(
                "One agent at {} chunks/s for {} s",
                args.paced_rate, args.paced_secs
            ),
            rows,
            notes: error_notes(&[&watch]),
        })
    }

    pub(crate) async fn many(&self, args: &StreamArgs) -> Result<Section> {
        let (agents, n) = (args.agents, args.agent_messages);
        let prompt = format!("scenario: flood {n} {}", args.size);
        let bare_runs = join_all((0..agents).map(|_| bare::run(IMAGE, &prompt, None))).await;
        let mut bare = Stats::default();
        for r in bare_runs {
            bare.merge(r?.stats);
        }
        let run_all = async {
            join_all((0..agents).map(|_| {
                kandev::run_task(&self.api, &self.board, &prompt, Duration::from_secs(900))
            }))
            .await
        };
        let (watches, cost) = self.measured(run_all).await;
        let watches = finished(watches)?;
        let (exact, mut all) = exact_and_merged(&watches, n);
        let mut rows = vec![
            row(
                "aggregate messages/s",
                format!("{:.0}", bare.rate()),
                format!("{:.0}", all.rate()),
                pct(all.rate(), bare.rate()),
            )
            .key(),
            row(
                "p50 latency",
                ms(bare.percentile(50.0)),
                ms(all.percentile(50.0)),
                "",
            ),
            row(
                "p99 latency",
                ms(bare.percentile(99.0)),
                ms(all.percentile(99.0)),
                "",
            )
            .key(),
            row("feeds exact", "—", format!("{exact} of {agents}"), "").key(),
        ];
        rows.extend(self.cost_rows(&cost, n * agents as u64, None));
        Ok(Section {
            columns: VERSUS,
            title: format!("{agents} agents at once, {n} chunks each at full speed"),
            rows,
            notes: error_notes(&watches.iter().collect::<Vec<_>>()),
        })
    }

    pub(crate) async fn fanout(&self, args: &StreamArgs) -> Result<Section> {
        let subs = args.subscribers;
        let n = args.fanout_rate * args.fanout_secs;
        let (task, after, sockets) = self.subscribed(subs).await?;
        let gateway_pid = self.pid(Svc::Gateway).context("gateway pid")?;
        let orchestrator_pid = self.pid(Svc::Orchestrator).context("orchestrator pid")?;
        let rss_idle = procs::rss_kb(gateway_pid);
        let deadline = Instant::now() + Duration::from_secs(args.fanout_secs * 3 + 120);
        let readers: Vec<_> = sockets
            .into_iter()
            .map(|ws| tokio::spawn(kandev::watch(ws, after, 1, deadline)))
            .collect();
        let prompt = format!("scenario: flood {n} {} {}", args.size, args.fanout_rate);
        let (result, cost) = self
            .measured(self.follow_up_sampled(&task, &prompt, readers, gateway_pid))
            .await;
        let (watches, peak) = result?;
        let (exact, mut all) = exact_and_merged(&watches, n);
        let frames: u64 = watches.iter().map(|w| w.frames).sum();
        let mut rows = vec![
            row(
                "subscribers with every seq exactly once",
                "—",
                format!("{exact} of {subs}"),
                "",
            )
            .key(),
            row("frames delivered", "—", format!("{frames}"), ""),
            row("p50 latency", "—", ms(all.percentile(50.0)), ""),
            row("p99 latency", "—", ms(all.percentile(99.0)), "").key(),
            row("max latency", "—", ms(all.percentile(100.0)), ""),
        ];
        rows.extend(self.front_rows(rss_idle, peak, orchestrator_pid));
        rows.extend(self.cost_rows(&cost, frames, None));
        Ok(Section {
            columns: VERSUS,
            title: format!(
                "{subs} subscribers on one task at {} chunks/s for {} s",
                args.fanout_rate, args.fanout_secs
            ),
            rows,
            notes: error_notes(&watches.iter().collect::<Vec<_>>()),
        })
    }

    /// A task after a first turn (which makes it and its session), and
    /// `subs` sockets on its feed after that turn: the task, the seq they
    /// read after, and the sockets.
    async fn subscribed(&self, subs: usize) -> Result<(String, u64, Vec<kandev::Ws>)> {
        let (task, first) = kandev::run_task(
            &self.api,
            &self.board,
            "scenario: echo ready",
            Duration::from_secs(120),
        )
        .await?;
        self.api
            .wait_state(&task, &["COMPLETED", "REVIEW"], 60)
            .await;
        let after = first.last_seq;
        let token = self.api.token.clone().context("token")?;
        let mut sockets = Vec::with_capacity(subs);
        for _ in 0..subs {
            sockets.push(kandev::connect(self.api.addr, &token, &task, after).await?);
        }
        Ok((task, after, sockets))
    }

    /// Sends the follow-up `prompt` and waits for every reader, sampling
    /// the gateway's RSS and fds meanwhile.
    async fn follow_up_sampled(
        &self,
        task: &str,
        prompt: &str,
        readers: Vec<tokio::task::JoinHandle<kandev::Watch>>,
        gateway_pid: u32,
    ) -> Result<(Vec<kandev::Watch>, Peak)> {
        let r = self
            .api
            .post(
                &format!("/api/v1/orchestrator/tasks/{task}/start"),
                serde_json::json!({ "prompt": prompt }),
            )
            .await;
        if r.status != 200 {
            bail!("follow-up prompt: {} {}", r.status, r.body);
        }
        let mut peak = Peak::default();
        let sample = async {
            loop {
                peak.rss_kb = peak.rss_kb.max(procs::rss_kb(gateway_pid));
                peak.fds = peak.fds.max(procs::fds(gateway_pid));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        let watches = tokio::select! {
            w = join_all(readers) => w,
            () = sample => unreachable!("sampling never ends"),
        };
        let watches = watches.into_iter().map(|w| w.unwrap_or_default()).collect();
        Ok((watches, peak))
    }

    /// The front's RSS idle and at its peak, its fds at peak, and the
    /// back's RSS after.
    fn front_rows(&self, rss_idle: u64, peak: Peak, back_pid: u32) -> Vec<Row> {
        vec![
            row(
                &format!("{} RSS idle → peak (MiB)", self.front()),
                "—",
                format!(
                    "{:.0} → {:.0}",
                    rss_idle as f64 / 1024.0,
                    peak.rss_kb as f64 / 1024.0
                ),
                "",
            )
            .key(),
            row(
                &format!("{} fds at peak", self.front()),
                "—",
                format!("{}", peak.fds),
                "",
            ),
            row(
                &format!("{} RSS after (MiB)", self.back()),
                "—",
                format!("{:.0}", procs::rss_kb(back_pid) as f64 / 1024.0),
                "",
            ),
        ]
    }

    pub(crate) async fn startup(&self, args: &StreamArgs) -> Result<Section> {
        let mut bare = Vec::new();
        let mut kandev = Vec::new();
        for _ in 0..args.startups {
            bare.push(
                bare::run(IMAGE, "scenario: echo hi", None)
                    .await?
                    .first_line,
            );
            let t0 = Instant::now();
            let task = kandev::create_task(&self.api, &self.board, "scenario: echo hi").await?;
            let token = self.api.token.clone().context("token")?;
            let ws = kandev::connect(self.api.addr, &token, &task, 0).await?;
            let w = kandev::watch(ws, 0, 1, Instant::now() + Duration::from_secs(60)).await;
            let first = w.first_frame.context("no frame came")?;
            kandev.push(first.duration_since(t0));
        }
        let med = |v: &mut Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let range = |v: &[Duration]| format!("{}–{}", ms(v[0]), ms(v[v.len() - 1]));
        let (bm, km) = (med(&mut bare), med(&mut kandev));
        Ok(Section {
            columns: VERSUS,
            title: format!(
                "Start: `docker run` → first agent line, create task → first frame ({} runs)",
                args.startups
            ),
            rows: vec![
                row(
                    "median",
                    ms(bm),
                    ms(km),
                    format!("{:+.0} ms", (km.as_secs_f64() - bm.as_secs_f64()) * 1000.0),
                )
                .key(),
                row("range", range(&bare), range(&kandev), ""),
            ],
            notes: vec![],
        })
    }

    /// The bare attach of one agent at full speed under each log driver
    /// that `docker logs` can read back, and without a log: how much of
    /// dockerd's work per line is the log Kandev recovers from.
    pub(crate) async fn logs(&self, args: &StreamArgs) -> Result<Section> {
        let n = args.messages;
        let prompt = format!("scenario: flood {n} {}", args.size);
        let mut rows = Vec::new();
        for driver in ["json-file", "local", "none"] {
            let (mut run, dockerd) = self.bare_measured(&prompt, Some(driver)).await?;
            rows.push(row(
                &format!("`--log-driver {driver}`"),
                format!("{:.0}", run.stats.rate()),
                format!("{:.2} µs", dockerd * 1e6 / n as f64),
                ms(run.stats.percentile(99.0)),
            ));
        }
        let default = std::process::Command::new("docker")
            .args(["info", "--format", "{{.LoggingDriver}}"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        Ok(Section {
            title: format!(
                "The bare attach under each Docker log driver ({n} chunks of {} bytes)",
                args.size
            ),
            columns: ["messages/s", "dockerd CPU per message", "p99 latency"],
            rows,
            notes: vec![format!(
                "The engine's default driver is `{default}` here (the bare \
                 baseline of the other loads logs with it). Kandev's agent \
                 containers log with `local` whatever the default: a restarted \
                 agent manager reads their output back from that log."
            )],
        })
    }
}

/// The gateway's peaks while the fan-out streamed.
#[derive(Debug, Default, Clone, Copy)]
struct Peak {
    rss_kb: u64,
    fds: usize,
}

/// The latencies of every reader together.
/// The watches of runs that all finished (else the first error).
pub(crate) fn finished(runs: Vec<Result<(String, kandev::Watch)>>) -> Result<Vec<kandev::Watch>> {
    runs.into_iter().map(|run| run.map(|(_, w)| w)).collect()
}

/// How many of `watches` saw each of the `n` messages exactly once, and
/// all they saw merged.
pub(crate) fn exact_and_merged(watches: &[kandev::Watch], n: u64) -> (usize, Stats) {
    (
        watches.iter().filter(|w| w.exact(n)).count(),
        merged(watches),
    )
}

pub(crate) fn merged(watches: &[kandev::Watch]) -> Stats {
    let mut all = Stats::default();
    for w in watches {
        all.merge(w.stats.clone());
    }
    all
}

pub(crate) fn error_notes(watches: &[&kandev::Watch]) -> Vec<String> {
    let mut errors: Vec<String> = watches.iter().filter_map(|w| w.error.clone()).collect();
    errors.sort();
    errors.dedup();
    errors
        .into_iter()
        .take(5)
        .map(|e| format!("Reader error: {e}"))
        .collect()
}
