//! `kandev-bench stream`: the agent stream through the whole stack (agent →
//! agent manager → NATS → orchestrator → gateway → WebSocket), measured
//! against a bare `docker run -i` attach of the same agent in the same run.
//!
//! It starts its own stack of the four service binaries found beside it
//! (`target/release` when run with `cargo run --release`), a private NATS
//! and a fresh database, like the end-to-end suite (or, with `--single`,
//! the `kandev` binary on a fresh data directory), and the mock agent's
//! `flood` scenario, whose chunks carry their send time. Readers are Rust
//! and scan bytes instead of parsing JSON, so they are never the
//! bottleneck. See `docs/performance.md` for the method and the figures.
//!
//! # Layout
//! - `bare`: the baseline agent under `docker run -i`.
//! - `loads`: each load, the bare baseline and the same agent through
//!   Kandev side by side.
//! - `reopen`: a long stored session opened again, page by page; `chromium`:
//!   the same in headless Chromium over WebDriver.
//! - `kandev`: tasks through REST, feeds through the gateway's WebSocket.
//! - `procs`: CPU seconds, RSS and fds from /proc.
//! - `realistic`: many agents at modest rates, in their steady state, and
//!   the same agents bare; `bus`: JetStream alone at those rates.
//! - `stats`: rates and latency percentiles; `wire`: byte scanners.

mod bare;
mod bus;
mod chromium;
mod kandev;
mod loads;
mod procs;
mod realistic;
mod reopen;
mod stats;
mod wire;

use std::{collections::BTreeMap, fmt::Write as _, path::PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use kandev_e2e::{Api, Options, Stack, Svc};
use procs::Watched;

const IMAGE: &str = "kandev/mock-agent:latest";

#[derive(Parser)]
#[command(version, about = "Kandev's benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The agent stream against a bare `docker run -i` of the same agent.
    Stream(StreamArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Load {
    /// One agent as fast as it can.
    Full,
    /// One agent at a fixed rate: latency.
    Paced,
    /// Many agents at once.
    Many,
    /// Many agents, each at a modest rate: CPU per message of every
    /// process in the steady state.
    Realistic,
    /// JetStream alone at the realistic load's rates, one message per
    /// chunk (four services only): the floor under their figure.
    Bus,
    /// Many subscribers on one task.
    Fanout,
    /// Create task → first frame.
    Startup,
    /// The bare attach alone under each Docker log driver: what the
    /// engine's log costs per line (Kandev is not run).
    Logs,
    /// A long stored session opened again: its compacted pages against
    /// the replay of every frame.
    Reopen,
}

#[derive(Debug, clap::Args)]
struct StreamArgs {
    /// Loads to run, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "startup,full,paced,many,realistic,bus,fanout"
    )]
    loads: Vec<Load>,
    /// Text bytes per chunk.
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Chunks of the full-speed load: enough for a few seconds on each
    /// side, so the rate is the steady one rather than the start-up's
    /// (with 100,000 the bare attach is over in well under half a second).
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Chunks per second of the paced load, and its length in seconds.
    #[arg(long, default_value_t = 1000)]
    paced_rate: u64,
    #[arg(long, default_value_t = 10)]
    paced_secs: u64,
    /// Agents of the many-agents load, and chunks each sends at full speed.
    #[arg(long, default_value_t = 20)]
    agents: usize,
    #[arg(long, default_value_t = 20_000)]
    agent_messages: u64,
    /// Agents of the realistic load, chunks per second each, and seconds.
    #[arg(long, default_value_t = 50)]
    realistic_agents: usize,
    #[arg(long, default_value_t = 20)]
    realistic_rate: u64,
    #[arg(long, default_value_t = 30)]
    realistic_secs: u64,
    /// Subscribers of the fan-out load, the rate of its agent, and seconds.
    #[arg(long, default_value_t = 500)]
    subscribers: usize,
    #[arg(long, default_value_t = 200)]
    fanout_rate: u64,
    #[arg(long, default_value_t = 10)]
    fanout_secs: u64,
    /// Runs of the startup load.
    #[arg(long, default_value_t = 5)]
    startups: usize,
    /// Chunks of the session the reopen load stores, then opens again.
    #[arg(long, default_value_t = 1_000_000)]
    reopen_messages: u64,
    /// Also write the figures table (the key rows of each load, Markdown)
    /// into this file, in place of the last one of the same deployment
    /// (see `splice_report`).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Measure the `kandev` binary (the four services in one process, with
    /// SQLite and in-process streams: what `scripts/kandev` runs) instead
    /// of the four services with Postgres and NATS.
    #[arg(long)]
    single: bool,
}

/// One line of a report table.
#[derive(Clone)]
struct Row {
    metric: String,
    bare: String,
    kandev: String,
    ratio: String,
    /// Also a line of the figures table that `--report` writes.
    key: bool,
}

fn row(
    metric: &str,
    bare: impl Into<String>,
    kandev: impl Into<String>,
    ratio: impl Into<String>,
) -> Row {
    Row {
        metric: metric.into(),
        bare: bare.into(),
        kandev: kandev.into(),
        ratio: ratio.into(),
        key: false,
    }
}

impl Row {
    /// Marks a row for the figures table.
    fn key(self) -> Row {
        Row { key: true, ..self }
    }
}

fn pct(kandev: f64, bare: f64) -> String {
    if bare > 0.0 {
        format!("{:.0} %", 100.0 * kandev / bare)
    } else {
        "—".into()
    }
}

struct Section {
    title: String,
    /// The headers of the three value columns.
    columns: [&'static str; 3],
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Section {
    /// A section of `title` that says only `note`.
    fn note(title: &str, note: &str) -> Section {
        Section {
            title: title.into(),
            columns: VERSUS,
            rows: vec![],
            notes: vec![note.into()],
        }
    }

    fn markdown(&self) -> String {
        let mut out = format!("### {}\n\n", self.title);
        if !self.rows.is_empty() {
            let _ = writeln!(
                out,
                "| metric | {} | {} | {} |\n|---|---|---|---|",
                self.columns[0], self.columns[1], self.columns[2]
            );
        }
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                r.metric, r.bare, r.kandev, r.ratio
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "\n{n}");
        }
        out
    }

    /// Adds the key rows and the notes of `load`'s section, each named
    /// after the load.
    fn add_figures(&mut self, load: Load, section: &Section) {
        let name = format!("{load:?}").to_lowercase();
        self.rows
            .extend(section.rows.iter().filter(|r| r.key).map(|r| Row {
                metric: format!("`{name}`: {}", r.metric),
                ..r.clone()
            }));
        self.notes
            .extend(section.notes.iter().map(|n| format!("`{name}`: {n}")));
    }
}

/// The columns of a load that compares Kandev with the bare attach.
const VERSUS: [&str; 3] = ["bare `docker run -i`", "through Kandev", "Kandev / bare"];

/// The stack and everything the loads share.
struct Bench {
    stack: Stack,
    api: Api,
    board: String,
    /// The four services (or `kandev`), then NATS, Postgres and dockerd.
    watched: Vec<Watched>,
    services: Vec<String>,
    /// The stack is the `kandev` binary.
    single: bool,
}

/// CPU seconds and peak RSS of every watched process over `f`.
struct Cost {
    cpu: BTreeMap<String, f64>,
    peak_mib: BTreeMap<String, f64>,
}

impl Bench {
    async fn start(single: bool) -> Result<Bench> {
        let options = Options {
            max_concurrent: 64,
            env: vec![
                (
                    Svc::AgentManager,
                    "KANDEV_DATABASE_MAX_CONNECTIONS".into(),
                    "10".into(),
                ),
                (
                    Svc::Orchestrator,
                    "KANDEV_DATABASE_MAX_CONNECTIONS".into(),
                    "10".into(),
                ),
                (
                    Svc::Orchestrator,
                    "KANDEV_FEED_FLUSH_MS".into(),
                    "50".into(),
                ),
                // The defaults, where the test stack sets its own.
                (
                    Svc::AgentManager,
                    "KANDEV_SEQ_FLUSH_MS".into(),
                    "500".into(),
                ),
            ],
            sqlite: single,
            single,
            ..Options::default()
        };
        let stack = Stack::start("bench", options).await;
        let api = stack.admin().await;
        let board = api.board("bench").await;
        let mut watched: Vec<Watched> = if single {
            vec![Watched {
                name: "kandev".into(),
                pids: stack.pid(Svc::Gateway).into_iter().collect(),
            }]
        } else {
            Svc::ALL
                .iter()
                .map(|s| Watched {
                    name: s.bin().trim_start_matches("kandev-").to_string(),
                    pids: stack.pid(*s).into_iter().collect(),
                })
                .collect()
        };
        let services = watched.iter().map(|w| w.name.clone()).collect();
        if !single {
            watched.push(Watched {
                name: "nats-server".into(),
                pids: stack.nats.pid().into_iter().collect(),
            });
        }
        Ok(Bench {
            stack,
            api,
            board,
            watched,
            services,
            single,
        })
    }

    /// The process that serves WebSockets, and the one that numbers frames.
    fn front(&self) -> &'static str {
        if self.single { "kandev" } else { "gateway" }
    }

    fn back(&self) -> &'static str {
        if self.single {
            "kandev"
        } else {
            "orchestrator"
        }
    }

    /// The process that runs `svc`: its own, or `kandev` for all.
    fn pid(&self, svc: Svc) -> Option<u32> {
        self.stack.pid(if self.single { Svc::Gateway } else { svc })
    }

    /// The watched processes, with Postgres backends and dockerd looked up
    /// now (backends come and go).
    fn watched_now(&self) -> Vec<Watched> {
        let mut w = self.watched.clone();
        if !self.single {
            w.push(Watched {
                name: "postgres".into(),
                pids: procs::pids_named("postgres"),
            });
        }
        w.push(Watched {
            name: "dockerd".into(),
            pids: procs::pids_named("dockerd"),
        });
        w
    }

    async fn measured<T>(&self, f: impl std::future::Future<Output = T>) -> (T, Cost) {
        let watched = self.watched_now();
        procs::reset_peaks(&watched);
        let before = procs::snapshot(&watched);
        let out = f.await;
        let cost = Cost {
            cpu: procs::snapshot(&watched).since(&before),
            peak_mib: procs::peaks_mib(&watched),
        };
        (out, cost)
    }

    /// Two rows of CPU per message (the services against the bare run's
    /// `docker` client, then NATS, Postgres and dockerd against its
    /// dockerd) and one of peak RSS.
    fn cost_rows(&self, cost: &Cost, messages: u64, bare: Option<bare::BareCpu>) -> Vec<Row> {
        let per = |secs: f64| {
            if messages == 0 {
                0.0
            } else {
                secs * 1e6 / messages as f64
            }
        };
        let cpu = |name: &str| per(cost.cpu.get(name).copied().unwrap_or(0.0));
        let listed = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!("{n} {:.1}", cpu(n)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let services: Vec<&str> = self.services.iter().map(String::as_str).collect();
        let total: f64 = services.iter().map(|s| cpu(s)).sum();
        let (label, ours) = if self.single {
            ("CPU per message: kandev", format!("{total:.1} µs"))
        } else {
            (
                "CPU per message: the four services",
                format!("{total:.1} µs ({})", listed(&services)),
            )
        };
        let (others_label, others): (&str, &[&str]) = if self.single {
            ("CPU per message: dockerd (µs)", &["dockerd"])
        } else {
            (
                "CPU per message: NATS, Postgres, dockerd (µs)",
                &["nats-server", "postgres", "dockerd"],
            )
        };
        let (bare_client, bare_dockerd) = bare.map_or_else(
            || ("—".into(), "—".into()),
            |b| {
                (
                    format!("`docker` client {:.1} µs", b.client),
                    format!("dockerd {:.1}", b.dockerd),
                )
            },
        );
        vec![
            row(label, bare_client, ours, "").key(),
            row(others_label, bare_dockerd, listed(others), "").key(),
            row("peak RSS (MiB)", "—", self.peaks(cost), ""),
        ]
    }

    /// Each service's CPU seconds over `cost`: `gateway 1.23, …`.
    fn cpu(&self, cost: &Cost) -> String {
        self.per_service(&cost.cpu, 2)
    }

    /// Each service's peak RSS (MiB) over `cost`: `gateway 45, …`.
    fn peaks(&self, cost: &Cost) -> String {
        self.per_service(&cost.peak_mib, 0)
    }

    fn per_service(&self, values: &BTreeMap<String, f64>, decimals: usize) -> String {
        self.services
            .iter()
            .map(|s| format!("{s} {:.*}", decimals, values.get(s).copied().unwrap_or(0.0)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The section of `load`; a load that fails is a section saying why.
    async fn run_load(&self, load: Load, args: &StreamArgs) -> Section {
        let section = match load {
            Load::Full => self.full(args).await,
            Load::Paced => self.paced(args).await,
            Load::Many => self.many(args).await,
            Load::Realistic => self.realistic(args).await,
            Load::Bus => self.bus(args).await,
            Load::Fanout => self.fanout(args).await,
            Load::Startup => self.startup(args).await,
            Load::Logs => self.logs(args).await,
            Load::Reopen => self.reopen(args).await,
        };
        section.unwrap_or_else(|e| {
            Section::note(&format!("{load:?}"), &format!("The load failed: {e:#}"))
        })
    }

    /// The bare run of `prompt` (under `log_driver`, or the engine's
    /// default) and dockerd's CPU seconds meanwhile.
    async fn bare_measured(
        &self,
        prompt: &str,
        log_driver: Option<&str>,
    ) -> Result<(bare::BareRun, f64)> {
        let dockerd = vec![Watched {
            name: "dockerd".into(),
            pids: procs::pids_named("dockerd"),
        }];
        let before = procs::snapshot(&dockerd);
        let run = bare::run(IMAGE, prompt, log_driver).await?;
        let used = procs::snapshot(&dockerd).since(&before);
        Ok((run, used.get("dockerd").copied().unwrap_or(0.0)))
    }
}

fn git(args: &[&str]) -> String {
    std::process::Command::new("git")
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Whether the work tree differs from HEAD, the report file aside (a
/// report written into a tracked file is not a change to what it measures).
fn local_changes(report: Option<&std::path::Path>) -> bool {
    let status = ["status", "--porcelain", "--untracked-files=no"];
    if let Some(path) = report {
        let exclude = format!(":(exclude){}", path.display());
        let out = std::process::Command::new("git")
            .args(status)
            .args(["--", ":/", &exclude])
            .output();
        // A report outside the repository is no pathspec git takes.
        if let Ok(out) = out
            && out.status.success()
        {
            return !out.stdout.is_empty();
        }
    }
    !git(&status).is_empty()
}

/// Where `marker` stands on a line of its own in `doc`, from `from` on (a
/// marker quoted in the text is not one).
fn line_at(doc: &str, marker: &str, from: usize) -> Option<usize> {
    doc[from..]
        .match_indices(marker)
        .map(|(i, _)| from + i)
        .find(|&i| {
            (i == 0 || doc[..i].ends_with('\n'))
                && matches!(doc[i + marker.len()..].chars().next(), None | Some('\n'))
        })
}

/// `doc` with `report` between the markers of its deployment (`key`), in
/// place of the report there, or appended with its markers when there is
/// none: a file keeps the latest report of each deployment instead of
/// growing by one per run.
fn splice_report(doc: &str, key: &str, report: &str) -> String {
    let begin = format!("<!-- kandev-bench report: {key} -->");
    let end = format!("<!-- end of kandev-bench report: {key} -->");
    let block = format!("{begin}\n\n{}\n\n{end}\n", report.trim_end());
    if let Some(b) = line_at(doc, &begin, 0)
        && let Some(e) = line_at(doc, &end, b)
    {
        let after = &doc[e + end.len()..];
        return format!(
            "{}{block}{}",
            &doc[..b],
            after.strip_prefix('\n').unwrap_or(after)
        );
    }
    let mut out = doc.trim_end().to_string();
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(&block);
    out
}

async fn stream(args: StreamArgs) -> Result<()> {
    let bench = Bench::start(args.single).await?;
    let title = report_title(&args);
    let machine = machine_note(args.size);
    println!("## {title}\n\n{machine}\n");
    // The key rows of every load (the bare attach's `logs` aside: other
    // columns), for `--report`.
    let mut figures = Section {
        title,
        columns: VERSUS,
        rows: vec![],
        notes: vec![machine],
    };
    for load in &args.loads {
        if *load == Load::Bus && args.single {
            eprintln!("skipping Bus: the `kandev` binary runs no NATS");
            continue;
        }
        bare::cleanup().await;
        eprintln!("running {load:?}…");
        let section = bench.run_load(*load, &args).await;
        println!("{}", section.markdown());
        if *load != Load::Logs {
            figures.add_figures(*load, &section);
        }
    }
    bare::cleanup().await;
    if let Some(path) = &args.report {
        write_report(path, args.single, &figures)?;
    }
    bench.stack.stop().await;
    Ok(())
}

/// The report's heading: the deployment, the commit and whether the work
/// tree differs from it.
fn report_title(args: &StreamArgs) -> String {
    format!(
        "Stream benchmark of {}, {} (commit {}{})",
        if args.single {
            "the `kandev` binary"
        } else {
            "the four services"
        },
        git(&["log", "-1", "--format=%cd", "--date=short"]),
        git(&["rev-parse", "--short", "HEAD"]),
        if local_changes(args.report.as_deref()) {
            ", with local changes"
        } else {
            ""
        },
    )
}

/// The machine's cores and memory, and the size of a chunk and its line.
fn machine_note(size: usize) -> String {
    let mem_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().next().map(|l| {
            l.split_whitespace()
                .nth(1)
                .unwrap_or("0")
                .parse::<u64>()
                .unwrap_or(0)
        })
    });
    format!(
        "Machine: {} cores, {}. Chunks carry {} bytes of text; an agent line is about {} bytes.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        mem_kb.map_or("? GiB".into(), |kb| format!(
            "{:.0} GiB",
            kb as f64 / 1024.0 / 1024.0
        )),
        size,
        size + 230,
    )
}

/// Writes `figures` into the report file at `path`, in place of the last
/// report of the same deployment.
fn write_report(path: &std::path::Path, single: bool, figures: &Section) -> Result<()> {
    let doc = match std::fs::read_to_string(path) {
        Ok(doc) => doc,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    let key = if single { "kandev" } else { "four-services" };
    std::fs::write(path, splice_report(&doc, key, &figures.markdown()))?;
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.cmd {
        Cmd::Stream(args) => rt.block_on(stream(args)),
    }
}

#[cfg(test)]
mod tests {
    use super::splice_report;

    #[test]
    fn a_report_replaces_the_last_one_of_its_deployment() {
        let first = splice_report("# Performance\n\nText.\n", "four-services", "## Run 1\n");
        assert_eq!(
            first,
            "# Performance\n\nText.\n\n<!-- kandev-bench report: four-services -->\n\n\
             ## Run 1\n\n<!-- end of kandev-bench report: four-services -->\n"
        );
        let both = splice_report(&first, "kandev", "## Single 1\n");
        let doc = format!("{both}\n## After\n");
        let next = splice_report(&doc, "four-services", "## Run 2\n\n");
        assert!(!next.contains("Run 1"));
        assert!(next.contains("## Run 2\n\n<!-- end of kandev-bench report: four-services -->"));
        assert!(next.contains("## Single 1"));
        assert!(next.starts_with("# Performance\n\nText.\n\n"));
        assert!(next.ends_with("\n## After\n"));
        assert_eq!(next.len(), doc.len());
        assert_eq!(splice_report(&next, "four-services", "## Run 2\n"), next);
    }

    #[test]
    fn a_marker_quoted_in_the_text_is_not_one() {
        let doc = "Between `<!-- kandev-bench report: kandev -->` and its end.\n";
        let once = splice_report(doc, "kandev", "## R1\n");
        assert!(once.starts_with(doc));
        let twice = splice_report(&once, "kandev", "## R2\n");
        assert_eq!(twice, once.replace("R1", "R2"));
    }

    #[test]
    fn a_report_goes_into_an_empty_file() {
        assert_eq!(
            splice_report("", "kandev", "## R\n"),
            "<!-- kandev-bench report: kandev -->\n\n## R\n\n\
             <!-- end of kandev-bench report: kandev -->\n"
        );
    }
}
