//! The live messages' contract (see `kandev_events::live`), checked on core
//! NATS (a server of the test's own) and on one process's channels.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use futures::StreamExt as _;
use kandev_events::live::{Live, LiveMessage, LocalLive, NatsLive};
use kandev_testkit::OwnNats;

async fn followers_get_what_is_published_after_they_subscribe(live: Arc<dyn Live>) {
    let headers = vec![("Kandev-First-Seq".to_string(), "4".to_string())];
    // Nobody listens: published to nobody, and no error.
    let message = |payload: &'static str| LiveMessage {
        headers: headers.clone(),
        payload: Bytes::from(payload),
    };
    live.publish("feed.t1", message("lost")).await.unwrap();
    let mut one = live.subscribe("feed.t1").await.unwrap();
    let mut two = live.subscribe("feed.t1").await.unwrap();
    let mut other = live.subscribe("feed.t2").await.unwrap();
    live.publish("feed.t1", message("frame")).await.unwrap();
    for sub in [&mut one, &mut two] {
        let got = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .expect("within 5 s")
            .expect("open");
        assert_eq!(got.payload, Bytes::from("frame"));
        assert_eq!(got.header("kandev-first-seq"), Some("4"));
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), other.next())
            .await
            .is_err(),
        "another subject's follower gets nothing"
    );
}

#[tokio::test]
async fn live_on_nats() {
    let nats = OwnNats::start().await;
    let client = async_nats::connect(nats.url()).await.unwrap();
    followers_get_what_is_published_after_they_subscribe(Arc::new(NatsLive::new(client))).await;
}

#[tokio::test]
async fn live_in_one_process() {
    followers_get_what_is_published_after_they_subscribe(Arc::new(LocalLive::new(16))).await;
}
