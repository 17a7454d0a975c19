//! The ACP feed through its real input: AcpBatch envelopes on a private
//! NATS JetStream, numbered, stored in Postgres and served over WebSocket.

use std::time::Duration;

use uuid::Uuid;

use crate::helpers::*;

#[tokio::test]
async fn messages_are_numbered_per_task_across_runs_stored_and_replayed_then_live() {
    let app = spawn_app().await;
    let task = Uuid::new_v4();
    let other = Uuid::new_v4();
    let run1 = Uuid::new_v4();
    let run2 = Uuid::new_v4();
    let other_run = Uuid::new_v4();

    // Run 1 of the task, interleaved with another task's messages.
    let mut first = vec![];
    for i in 1..=5 {
        first.push(acp(task, run1, i));
        first.push(acp(other, other_run, i));
    }
    publish_acp(&app.bus, &first).await;
    wait_stored(&app.db, task, 5, 10).await;

    // A client connects: it gets the history, then live frames.
    let mut ws = ws_connect(&app.ws_url(task, None)).await;
    let history = ws_frames(&mut ws, 5).await;
    assert_eq!(seqs(&history), vec![1, 2, 3, 4, 5]);
    assert_eq!(history[0]["task_id"], task.to_string());
    assert_eq!(history[0]["instance_id"], run1.to_string());
    assert_eq!(history[0]["instance_seq"], 1);
    assert_eq!(history[0]["event"]["kind"], "message_chunk");
    assert_eq!(history[4]["event"]["data"]["text"], "chunk 5");

    // Run 2 (a retry or follow-up) continues the numbering; a redelivered
    // message (same instance and instance_seq, even under a new envelope
    // id) is dropped.
    publish_acp(&app.bus, &[acp(task, run2, 1), acp(task, run2, 2)]).await;
    publish_acp_with_id(&app.bus, &acp(task, run2, 2), Uuid::new_v4()).await;
    publish_acp_with_id(&app.bus, &acp(task, run1, 3), Uuid::new_v4()).await;
    publish_acp(&app.bus, &[acp(task, run2, 3)]).await;
    let live = ws_frames(&mut ws, 3).await;
    assert_eq!(seqs(&live), vec![6, 7, 8]);
    assert_eq!(live[0]["instance_id"], run2.to_string());
    assert_eq!(live[2]["instance_seq"], 3);
    assert!(
        ws_read(&mut ws, Duration::from_millis(500)).await.is_none(),
        "no duplicate frame"
    );

    let rows = wait_stored(&app.db, task, 8, 10).await;
    let expected: Vec<(i64, Uuid, i64)> = (1..=5)
        .map(|i| (i, run1, i))
        .chain((1..=3).map(|i| (5 + i, run2, i)))
        .collect();
    assert_eq!(rows, expected);
    let other_rows = stored(&app.db, other).await;
    assert_eq!(
        other_rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5],
        "each task has its own numbering"
    );

    // Reconnecting with ?after= gets exactly the rest, then live.
    let mut again = ws_connect(&app.ws_url(task, Some(6))).await;
    assert_eq!(seqs(&ws_frames(&mut again, 2).await), vec![7, 8]);
    publish_acp(&app.bus, &[acp(task, run2, 4)]).await;
    assert_eq!(seqs(&ws_frames(&mut again, 1).await), vec![9]);
    assert_eq!(seqs(&ws_frames(&mut ws, 1).await), vec![9]);

    // The status reports the last seq.
    let (status, body) = http(
        "GET",
        &app.url(&format!("/api/v1/orchestrator/tasks/{task}/status")),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["last_seq"], 9);
    assert_eq!(body["state"], "idle");
    app.stop().await;
}

#[tokio::test]
async fn replay_plus_live_is_exact_across_a_reconnect_during_a_flood() {
    // A buffer above the flood: this test is about exactness, not lag.
    let app = spawn_app_with(Options {
        tweak: Box::new(|s| s.ws_client_buffer = 8192),
        ..Options::default()
    })
    .await;
    let task = Uuid::new_v4();
    let instance = Uuid::new_v4();
    const N: u64 = 3000;
    let messages: Vec<_> = (1..=N).map(|i| acp(task, instance, i)).collect();

    let mut ws = ws_connect(&app.ws_url(task, None)).await;
    let nats_url = app.nats.url();
    let publisher = tokio::spawn(async move { publish_acp_fast(&nats_url, &messages).await });

    // Read part of the flood, leave mid-stream, come back with ?after=.
    let mut got = ws_frames(&mut ws, 1000).await;
    drop(ws);
    let last = got.last().unwrap()["seq"].as_i64().unwrap();
    let mut ws = ws_connect(&app.ws_url(task, Some(last))).await;
    got.extend(ws_frames(&mut ws, (N as usize) - got.len()).await);
    publisher.await.unwrap();
    assert_eq!(seqs(&got), (1..=N as i64).collect::<Vec<_>>());
    for f in &got {
        assert_eq!(
            f["seq"], f["instance_seq"],
            "seq {} maps to its message",
            f["seq"]
        );
    }
    assert!(ws_read(&mut ws, Duration::from_millis(500)).await.is_none());

    // A client that connects now replays everything from storage.
    wait_stored(&app.db, task, N as usize, 10).await;
    let mut late = ws_connect(&app.ws_url(task, Some(2500))).await;
    assert_eq!(
        seqs(&ws_frames(&mut late, 500).await),
        (2501..=N as i64).collect::<Vec<_>>()
    );
    app.stop().await;
}

/// Batches whose bounds differ from an earlier publication of the same
/// events (a publisher that restarted) add only the events not numbered
/// yet; nothing is numbered twice and nothing is skipped.
#[tokio::test]
async fn overlapping_batches_number_each_event_once() {
    let app = spawn_app().await;
    let task = Uuid::new_v4();
    let instance = Uuid::new_v4();
    let mut ws = ws_connect(&app.ws_url(task, None)).await;
    publish_acp(
        &app.bus,
        &[
            acp_batch(task, instance, 1..=4),
            acp_batch(task, instance, 5..=9),
            // A republished tail that overlaps and extends.
            acp_batch(task, instance, 3..=12),
            acp_batch(task, instance, 13..=13),
            acp_batch(task, instance, 10..=13),
        ],
    )
    .await;
    let frames = ws_frames(&mut ws, 13).await;
    assert_eq!(seqs(&frames), (1..=13).collect::<Vec<_>>());
    let instance_seqs: Vec<i64> = frames
        .iter()
        .map(|f| f["instance_seq"].as_i64().unwrap())
        .collect();
    assert_eq!(instance_seqs, (1..=13).collect::<Vec<_>>());
    assert_eq!(frames[7]["event"]["data"]["text"], "chunk 8");
    assert!(
        ws_read(&mut ws, Duration::from_millis(500)).await.is_none(),
        "no duplicate frame"
    );
    let rows = wait_stored(&app.db, task, 13, 10).await;
    assert!(
        rows.iter()
            .enumerate()
            .all(|(i, r)| r.0 == i as i64 + 1 && r.2 == i as i64 + 1)
    );
    app.stop().await;
}

/// Large batches come compressed (`KLZ4`), small ones as JSON: both make
/// one feed; a damaged compressed batch is skipped and the feed goes on.
#[tokio::test]
async fn compressed_and_plain_batches_make_one_feed() {
    let app = spawn_app().await;
    let task = Uuid::new_v4();
    let instance = Uuid::new_v4();
    let mut ws = ws_connect(&app.ws_url(task, None)).await;
    publish_acp_packed(&app.bus, &acp_batch(task, instance, 1..=300)).await;
    publish_acp_damaged(&app.bus, task).await;
    publish_acp(&app.bus, &[acp_batch(task, instance, 301..=305)]).await;
    let frames = ws_frames(&mut ws, 305).await;
    assert_eq!(seqs(&frames), (1..=305).collect::<Vec<_>>());
    assert_eq!(frames[199]["event"]["data"]["text"], "chunk 200");
    assert_eq!(frames[304]["event"]["data"]["text"], "chunk 305");
    wait_stored(&app.db, task, 305, 10).await;
    // Read back from the store (the packed batch is kept as it came): the
    // same frames.
    let mut replay = ws_connect(&app.ws_url(task, Some(0))).await;
    assert_eq!(ws_frames(&mut replay, 305).await, frames);
    app.stop().await;
}

#[tokio::test]
async fn a_slow_consumer_is_dropped_while_the_others_keep_up() {
    let app = spawn_app_with(Options {
        tweak: Box::new(|s| {
            // Above the consumer's largest burst (one pull batch of 500),
            // so only a client that stops reading falls behind.
            s.ws_client_buffer = 600;
            s.ws_close_grace_ms = 20_000;
        }),
        ..Options::default()
    })
    .await;
    let task = Uuid::new_v4();
    let instance = Uuid::new_v4();
    const N: u64 = 4000;
    // Big frames, so the slow client's socket buffers fill up.
    let messages: Vec<_> = (1..=N)
        .map(|i| {
            let mut m = acp(task, instance, i);
            m.events[0]["data"]["text"] = "x".repeat(8 * 1024).into();
            m
        })
        .collect();

    let mut fast = ws_connect(&app.ws_url(task, None)).await;
    let mut slow = ws_connect(&app.ws_url(task, None)).await;
    let nats_url = app.nats.url();
    let publisher = tokio::spawn(async move { publish_acp_fast(&nats_url, &messages).await });

    // The fast client gets everything, in order, while the slow one sleeps.
    let all = ws_frames(&mut fast, N as usize).await;
    assert_eq!(seqs(&all), (1..=N as i64).collect::<Vec<_>>());
    publisher.await.unwrap();

    // The slow client finds a prefix, a notice, then a close frame saying why.
    let mut prefix = vec![];
    let mut notices = vec![];
    let close = loop {
        match ws_read(&mut slow, Duration::from_secs(20)).await {
            Some(Read::Frame(f)) if f.get("seq").is_some() => prefix.push(f),
            Some(Read::Frame(f)) => notices.push(f),
            Some(Read::Closed(frame)) => break frame,
            None => panic!("slow client neither closed nor fed"),
        }
    };
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["type"], "lagging");
    assert_eq!(notices[0]["last_seq"], prefix.len() as i64);
    let (code, reason) = close.expect("a close frame");
    assert_eq!(code, 1008);
    assert!(reason.starts_with("lagging: "), "{reason}");
    assert!((prefix.len() as u64) < N, "the slow client was cut off");
    assert_eq!(
        seqs(&prefix),
        (1..=prefix.len() as i64).collect::<Vec<_>>(),
        "what it got is exact"
    );

    // It can come back from where it was.
    let mut back = ws_connect(&app.ws_url(task, Some(prefix.len() as i64))).await;
    let rest = ws_frames(&mut back, N as usize - prefix.len()).await;
    assert_eq!(rest.first().unwrap()["seq"], prefix.len() as i64 + 1);
    assert_eq!(rest.last().unwrap()["seq"], N as i64);
    app.stop().await;
}

#[tokio::test]
async fn errors_have_the_common_shape() {
    let app = spawn_app().await;
    let (status, body) = http(
        "GET",
        &app.url("/api/v1/orchestrator/tasks/not-a-uuid/status"),
        None,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "bad_request");
    assert_eq!(body["http_status"], 400);
    assert!(body["message"].as_str().unwrap().contains("not-a-uuid"));
    assert!(body.get("details").is_some());

    // The task service is not running here: a dependency is down.
    let (status, body) = http(
        "POST",
        &app.url(&format!(
            "/api/v1/orchestrator/tasks/{}/start",
            Uuid::new_v4()
        )),
        None,
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "service_unavailable");

    let (status, body) = http(
        "POST",
        &app.url(&format!(
            "/api/v1/orchestrator/tasks/{}/start",
            Uuid::new_v4()
        )),
        Some(serde_json::json!("not an object")),
    )
    .await;
    assert_eq!(status, 400, "{body}");

    let (status, _) = http("GET", &app.url("/healthz"), None).await;
    assert_eq!(status, 200);
    let (status, body) = http("GET", &app.url("/readyz"), None).await;
    assert_eq!(status, 200, "{body}");
    app.stop().await;
}

#[tokio::test]
async fn the_feed_carries_on_exactly_after_nats_restarts() {
    let mut app = spawn_app().await;
    let task = Uuid::new_v4();
    let instance = Uuid::new_v4();
    let mut ws = ws_connect(&app.ws_url(task, None)).await;
    publish_acp(
        &app.bus,
        &(1..=50).map(|i| acp(task, instance, i)).collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(
        seqs(&ws_frames(&mut ws, 50).await),
        (1..=50).collect::<Vec<_>>()
    );

    app.nats.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    app.nats.restart().await;
    // The publisher retries until NATS is back, as the agent manager does.
    for i in 51..=100 {
        let (id, bytes) = acp(task, instance, i).encode();
        let subject = kandev_events::subjects::acp_message(&task);
        let payload = bytes::Bytes::from(bytes);
        eventually(30, "publish after the NATS restart", || {
            let (bus, subject, payload) = (app.bus.clone(), subject.clone(), payload.clone());
            async move {
                use kandev_events::EventBus;
                bus.publish(&subject, id, payload).await.ok()
            }
        })
        .await;
    }
    let rest = ws_frames(&mut ws, 50).await;
    assert_eq!(seqs(&rest), (51..=100).collect::<Vec<_>>());
    let rows = wait_stored(&app.db, task, 100, 20).await;
    assert!(
        rows.iter()
            .enumerate()
            .all(|(i, r)| r.0 == i as i64 + 1 && r.2 == i as i64 + 1)
    );
    app.stop().await;
}
