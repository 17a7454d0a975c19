//! The real binary, SIGKILLed mid-stream and restarted: no ACP message is
//! lost or duplicated, in storage or at a reconnecting WebSocket client,
//! and the same messages keep the same seq.

use std::{
    collections::BTreeMap,
    process::{Child, Command, Stdio},
    time::Duration,
};

use kandev_testkit::{OwnNats, TestDb, free_port};
use uuid::Uuid;

use crate::helpers::*;

struct Proc(Option<Child>);

impl Proc {
    fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn start(port: u16, db: &TestDb, nats: &OwnNats) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_kandev-orchestrator"))
        .env("KANDEV_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("KANDEV_DATABASE_URL", &db.url)
        .env("KANDEV_NATS_URL", nats.url())
        .env("KANDEV_SERVICE_TOKEN", kandev_testkit::SERVICE_TOKEN)
        .env(
            "KANDEV_TASK_SERVICE_URL",
            format!("http://127.0.0.1:{}", free_port()),
        )
        .env(
            "KANDEV_AGENT_MANAGER_URL",
            format!("http://127.0.0.1:{}", free_port()),
        )
        // A slow flush, so the kill lands with numbered but unstored messages.
        .env("KANDEV_FEED_FLUSH_MS", "400")
        .env("KANDEV_LOG__FILTER", "warn")
        .stdout(Stdio::null())
        .stderr(if std::env::var("TEST_LOG").is_ok() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("orchestrator binary runs");
    let proc = Proc(Some(child));
    let url = format!("http://127.0.0.1:{port}/healthz");
    eventually(30, "orchestrator up", || async {
        let up = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok();
        if !up {
            return None;
        }
        (http("GET", &url, None).await.0 == 200).then_some(())
    })
    .await;
    proc
}

#[tokio::test]
async fn killed_mid_stream_and_restarted_the_feed_stays_exact() {
    init_tracing();
    let nats = OwnNats::start().await;
    let db = TestDb::create().await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut proc = start(port, &db, &nats).await;

    let task = Uuid::new_v4();
    let (run_a, run_b) = (Uuid::new_v4(), Uuid::new_v4());
    const N: u64 = 600;
    let mut ws = ws_connect(&ws_url(addr, task, None)).await;

    // Two runs' messages interleaved, published steadily over a few seconds.
    let nats_url = nats.url();
    let publisher = tokio::spawn(async move {
        for i in (1..=N).step_by(20) {
            let batch: Vec<_> = (i..i + 20)
                .flat_map(|k| [acp(task, run_a, k), acp(task, run_b, k)])
                .collect();
            publish_acp_fast(&nats_url, &batch).await;
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    });

    let mut seen: BTreeMap<i64, (String, i64)> = BTreeMap::new();
    let before = ws_frames(&mut ws, 300).await;
    proc.kill();
    let stored_at_kill = stored(&db, task).await.len();
    for f in &before {
        seen.insert(
            f["seq"].as_i64().unwrap(),
            (
                f["instance_id"].as_str().unwrap().to_string(),
                f["instance_seq"].as_i64().unwrap(),
            ),
        );
    }
    let last = *seen.keys().last().unwrap();
    assert_eq!(seqs(&before), (1..=300).collect::<Vec<_>>());
    eprintln!("killed after {last} frames seen, {stored_at_kill} stored");

    // Messages keep coming while it is down; then it comes back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _proc = start(port, &db, &nats).await;
    let mut ws = ws_connect(&ws_url(addr, task, Some(last))).await;
    let after = ws_frames(&mut ws, (2 * N) as usize - before.len()).await;
    publisher.await.unwrap();
    assert_eq!(
        seqs(&after),
        (last + 1..=2 * N as i64).collect::<Vec<_>>(),
        "no gap, no duplicate at the reconnecting client"
    );
    for f in &after {
        seen.insert(
            f["seq"].as_i64().unwrap(),
            (
                f["instance_id"].as_str().unwrap().to_string(),
                f["instance_seq"].as_i64().unwrap(),
            ),
        );
    }
    assert!(ws_read(&mut ws, Duration::from_millis(500)).await.is_none());

    // Storage holds each message once, under the seq the client saw.
    let rows = eventually(15, "all stored", || async {
        let rows = stored(&db, task).await;
        (rows.len() == (2 * N) as usize).then_some(rows)
    })
    .await;
    for (seq, instance, instance_seq) in &rows {
        assert_eq!(
            seen.get(seq),
            Some(&(instance.to_string(), *instance_seq)),
            "seq {seq} kept its message"
        );
    }
    let mut per_run: BTreeMap<Uuid, Vec<i64>> = BTreeMap::new();
    for (_, instance, instance_seq) in &rows {
        per_run.entry(*instance).or_default().push(*instance_seq);
    }
    for run in [run_a, run_b] {
        assert_eq!(per_run[&run], (1..=N as i64).collect::<Vec<_>>());
    }
    drop(_proc);
    db.drop_db().await;
}
