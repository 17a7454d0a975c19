//! The bus alone at the realistic load's rates: what JetStream costs when
//! every agent message is a message of its own, as the seed's per-task
//! `acp.message.<task_id>` subjects make it at modest rates (an agent that
//! writes every 50 ms fills one message per publish under a 10 ms latency
//! target). No Kandev code runs: publishers on the benchmark's connection
//! publish a stamped payload per chunk on a subject per agent, awaiting
//! each ack, and one pull consumer reads and acknowledges every message,
//! into a file-backed stream on the stack's own `nats-server`. What
//! nats-server spends per message here is a floor under Kandev's
//! `realistic` figure for the four services.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result};
use async_nats::jetstream::{self, consumer::pull, stream};
use futures::{StreamExt, future::try_join_all};
use tokio::time::Instant;

use crate::{
    Bench, Row, Section, StreamArgs,
    procs::{self, Watched},
    realistic::Window,
    row,
    stats::{Stats, ms},
    wire::now_nanos,
};

const STREAM: &str = "KANDEV_BENCH_BUS";
/// The window starts once every publisher has run this long.
const WARM_UP: Duration = Duration::from_secs(2);

/// What one run of the bus load measured.
struct BusRun {
    /// Messages read and nats-server's CPU in the window.
    window: Window,
    /// Messages published, and read by the end.
    sent: u64,
    read: u64,
    stats: Stats,
}

impl BusRun {
    fn rows(mut self) -> Vec<Row> {
        let per = self.window.per_message("nats-server");
        let read = format!("{} of {}", self.read, self.sent);
        vec![
            row(
                "window: messages, seconds, messages/s",
                "—",
                self.window.rate(),
                "",
            ),
            row(
                "p50 latency (publish → consumer)",
                "—",
                ms(self.stats.percentile(50.0)),
                "",
            ),
            row("p99 latency", "—", ms(self.stats.percentile(99.0)), "").key(),
            row("messages read of sent", "—", read, ""),
            row(
                "CPU per message: nats-server",
                "—",
                format!("{per:.1} µs"),
                "",
            )
            .key(),
        ]
    }
}

/// What the consumer has read.
#[derive(Default)]
struct Received {
    count: AtomicU64,
    stats: Mutex<Stats>,
}

impl Bench {
    pub(crate) async fn bus(&self, args: &StreamArgs) -> Result<Section> {
        let nats = self
            .stack_nats()
            .context("the stack runs no nats-server (the `kandev` binary has no NATS)")?;
        let (agents, rate, secs) = (
            args.realistic_agents,
            args.realistic_rate,
            args.realistic_secs,
        );
        let js = self.stack.jetstream().await;
        let consumer = fresh_stream(&js).await?;
        let received = Arc::new(Received::default());
        let reader = tokio::spawn(consume(consumer, received.clone()));
        let size = args.size;
        let publishers = try_join_all((0..agents).map(|agent| {
            let js = js.clone();
            async move { publish(&js, agent, rate, secs, size).await }
        }));
        let window = async {
            tokio::time::sleep(WARM_UP).await;
            let before = (
                procs::snapshot(&nats),
                received.count.load(Ordering::Relaxed),
            );
            (before, Instant::now())
        };
        let (sent, ((before, count0), t0)) = tokio::join!(publishers, window);
        let sent: u64 = sent?.into_iter().sum();
        let window = Window {
            cpu: procs::snapshot(&nats).since(&before),
            chunks: received.count.load(Ordering::Relaxed) - count0,
            span: t0.elapsed(),
        };
        let read = wait_for(&received, sent).await;
        reader.abort();
        let _ = js.delete_stream(STREAM).await;
        let run = BusRun {
            window,
            sent,
            read,
            stats: std::mem::take(&mut *received.stats.lock().expect("stats")),
        };
        Ok(Section {
            columns: ["—", "JetStream alone", "—"],
            title: format!(
                "The bus alone: {agents} subjects at {rate} messages/s each for {secs} s, one JetStream message per chunk (no Kandev code)"
            ),
            rows: run.rows(),
            notes: vec![],
        })
    }

    /// The stack's nats-server, when it runs one.
    fn stack_nats(&self) -> Option<Vec<Watched>> {
        let nats: Vec<Watched> = self
            .watched_now()
            .into_iter()
            .filter(|w| w.name == "nats-server")
            .collect();
        (!self.single && !nats.is_empty()).then_some(nats)
    }
}

/// A new file-backed stream on `bench.bus.>` and a pull consumer that
/// acknowledges each message, as Kandev's feed consumer does.
async fn fresh_stream(js: &jetstream::Context) -> Result<jetstream::consumer::PullConsumer> {
    let _ = js.delete_stream(STREAM).await;
    let stream = js
        .create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["bench.bus.>".into()],
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .context("creating the benchmark's stream")?;
    stream
        .create_consumer(pull::Config {
            durable_name: Some("bench".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .context("creating the benchmark's consumer")
}

/// Reads every message, records its latency and acknowledges it.
async fn consume(consumer: jetstream::consumer::PullConsumer, into: Arc<Received>) -> Result<()> {
    let mut messages = consumer.messages().await?;
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| anyhow::anyhow!("{e}"))?;
        let now = now_nanos();
        if let Some(sent) = message.payload.get(..8) {
            let sent = u64::from_le_bytes(sent.try_into().expect("eight bytes"));
            into.stats.lock().expect("stats").record(sent, now);
        }
        into.count.fetch_add(1, Ordering::Relaxed);
        message.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// `rate` stamped payloads of `size` bytes a second for `secs` on the
/// agent's own subject, each ack awaited; how many were sent.
async fn publish(
    js: &jetstream::Context,
    agent: usize,
    rate: u64,
    secs: u64,
    size: usize,
) -> Result<u64> {
    let subject = format!("bench.bus.{agent}");
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let n = rate * secs;
    for _ in 0..n {
        tick.tick().await;
        let mut payload = vec![b'x'; size.max(8)];
        payload[..8].copy_from_slice(&now_nanos().to_le_bytes());
        js.publish(subject.clone(), payload.into())
            .await
            .context("publish")?
            .await
            .context("publish ack")?;
    }
    Ok(n)
}

/// Waits (up to 30 s) until the consumer has read `sent`; what it read.
async fn wait_for(received: &Received, sent: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.count.load(Ordering::Relaxed) < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    received.count.load(Ordering::Relaxed)
}
