//! One client of a task's stream: the stored feed from `?after=`, then
//! the live feed, every `seq` exactly once and in order; the client's
//! commands; a notice and close code 1008 when it falls behind.
//!
//! Frames sent are the orchestrator's feed frames (a JSON object with a
//! top-level `seq`) and the gateway's own frames (no `seq`, a `type`:
//! `ack`, `error`, `lagging`).

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes};
use futures::{Sink, SinkExt, Stream, StreamExt};
use kandev_common::{
    CancellationToken,
    stream_command::{self, Unreadable},
};
use serde_json::{Value, json};

use super::live::{LiveBatch, LiveSub};
use crate::error::ApiError;

/// Close codes (RFC 6455).
pub const CLOSE_AWAY: u16 = 1001;
pub const CLOSE_POLICY: u16 = 1008;
pub const CLOSE_TOO_BIG: u16 = 1009;
pub const CLOSE_INTERNAL: u16 = 1011;

/// How long a client closing, or being closed, gets to finish.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long a gap in the live feed may take to become readable (the
/// orchestrator stores within its flush interval; a restarted one within
/// seconds) before the client is told to reconnect.
const GAP_PATIENCE: Duration = Duration::from_secs(30);
/// The most live frames one write takes when a client's queue has several
/// batches: one send per burst instead of one per batch, so a client that
/// fell behind (the machine busy) catches up at a fraction of the cost.
const BURST_FRAMES: usize = 4096;

/// Where the stored feed is read, and where commands go: the orchestrator,
/// or a stand-in in tests.
#[async_trait]
pub trait Upstream: Send + Sync {
    /// Frames with `seq > after`, in order, without a gap; empty when there
    /// are none yet.
    async fn read(&self, after: i64) -> Result<Vec<Utf8Bytes>, ApiError>;
    /// Runs a client command.
    async fn command(&self, command: Command) -> Result<(), ApiError>;
}

pub use kandev_common::stream_command::Command;

/// Limits of one session.
#[derive(Clone)]
pub struct Limits {
    /// Frames a client may have queued before it counts as lagging.
    pub buffer: usize,
    /// Commands: checked against the user's rate limit; `Err` says how
    /// long to wait.
    pub rate: Arc<dyn Fn() -> Result<(), Duration> + Send + Sync>,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits")
            .field("buffer", &self.buffer)
            .finish_non_exhaustive()
    }
}

/// Why a session ended.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Closed,
    Lagged,
    Stopped,
    /// The feed could not be read (the orchestrator is down or a gap never
    /// became readable); the client reconnects with `?after=`.
    Broken(String),
    TooBig,
}

fn seq_of(frame: &Utf8Bytes) -> Option<i64> {
    let text = frame.as_str().strip_prefix(r#"{"seq":"#)?;
    let end = text.find(|c: char| !c.is_ascii_digit())?;
    text[..end].parse().ok()
}

/// An error's fields in the REST error shape, for an `error` frame.
fn error_body(err: &ApiError) -> Value {
    json!({
        "error": err.code.as_str(),
        "message": err.message,
        "details": err.details,
        "http_status": err.http_status().as_u16(),
    })
}

/// Runs one client command; its `ack` or `error` frame.
async fn handle_command(upstream: &dyn Upstream, limits: &Limits, text: &str) -> Value {
    // Every message counts, well-formed or not.
    let allowed = (limits.rate)();
    let (reply, command) = stream_command::read(text);
    let done = match (command, allowed) {
        (Err(unreadable @ Unreadable::Json(_)), _) => {
            Err(ApiError::bad_request(unreadable.message()))
        }
        (_, Err(wait)) => Err(ApiError::rate_limited(wait.as_secs().max(1))),
        (Err(unreadable), Ok(())) => Err(ApiError::validation(unreadable.message())),
        (Ok(command), Ok(())) => match check(&command) {
            Ok(()) => upstream.command(command).await,
            Err(err) => Err(err),
        },
    };
    match done {
        Ok(()) => reply.ack(),
        Err(err) => reply.error(error_body(&err)),
    }
}

/// What the gateway refuses of a command before it goes upstream.
fn check(command: &Command) -> Result<(), ApiError> {
    match command {
        Command::Prompt { text } if text.trim().is_empty() => {
            Err(ApiError::validation("the prompt must not be empty"))
        }
        Command::Prompt { text } if text.contains('\0') => Err(ApiError::validation(
            "the prompt must not contain NUL characters",
        )),
        Command::Permission {
            option_id,
            cancelled,
            ..
        } if option_id.is_empty() && !cancelled => Err(ApiError::validation(
            "permission needs option_id or cancelled: true",
        )),
        _ => Ok(()),
    }
}

/// Writes `msgs` and flushes once: a burst costs one write.
async fn write_all<S>(sink: &mut S, msgs: impl IntoIterator<Item = Message>) -> bool
where
    S: Sink<Message> + Unpin,
{
    for msg in msgs {
        if sink.feed(msg).await.is_err() {
            return false;
        }
    }
    sink.flush().await.is_ok()
}

/// [`write_all`], but a client found lagging meanwhile gets only
/// [`CLOSE_GRACE`] more to take the frames: one that reads nothing cannot
/// hold the session forever.
async fn send_all<S>(
    sink: &mut S,
    msgs: impl IntoIterator<Item = Message>,
    lagged: &CancellationToken,
) -> bool
where
    S: Sink<Message> + Unpin,
{
    let send = write_all(sink, msgs);
    tokio::pin!(send);
    tokio::select! {
        ok = &mut send => ok,
        () = lagged.cancelled() => tokio::time::timeout(CLOSE_GRACE, send).await.unwrap_or(false),
    }
}

/// Reads from `after` until the feed has nothing more, sending each page;
/// the last seq sent. Stops at `until` (inclusive) when given.
async fn catch_up<S>(
    sink: &mut S,
    upstream: &dyn Upstream,
    mut last: i64,
    until: Option<i64>,
    lagged: &CancellationToken,
) -> Result<Option<i64>, ApiError>
where
    S: Sink<Message> + Unpin,
{
    loop {
        let page = upstream.read(last).await?;
        let mut msgs = Vec::with_capacity(page.len());
        for frame in page {
            match seq_of(&frame) {
                Some(seq) if seq == last + 1 && until.is_none_or(|u| seq <= u) => {
                    last = seq;
                    msgs.push(Message::Text(frame));
                }
                _ => break,
            }
        }
        if msgs.is_empty() {
            return Ok(Some(last));
        }
        if !send_all(sink, msgs, lagged).await {
            return Ok(None);
        }
        if until.is_some_and(|u| last >= u) {
            return Ok(Some(last));
        }
    }
}

/// Serves one client until it leaves, lags, the feed breaks or `stop`.
pub async fn run<S, R>(
    mut sink: S,
    mut source: R,
    upstream: &dyn Upstream,
    mut live: LiveSub,
    after: i64,
    limits: &Limits,
    stop: &CancellationToken,
) -> Outcome
where
    S: Sink<Message> + Unpin,
    R: Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    let mut last = after;
    let lagged = live.lagged.clone();
    let delivered = metrics::counter!(crate::metric_names::ACP_MESSAGES, "hop" => "gateway");
    metrics::gauge!(crate::metric_names::WS_CLIENTS).increment(1.0);
    let outcome = 'run: {
        // The stored feed, then the live one.
        last = match catch_up(&mut sink, upstream, after, None, &lagged).await {
            Ok(Some(last)) => last,
            Ok(None) => break 'run Outcome::Closed,
            Err(err) => break 'run Outcome::Broken(err.message),
        };
        let mut reconnects = live.reconnects.clone();
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break 'run Outcome::Stopped,
                () = lagged.cancelled() => break 'run Outcome::Lagged,
                // Batches queued meanwhile go in the same write.
                burst = live.recv_burst(BURST_FRAMES) => {
                    let Some(burst) = burst else { break 'run Outcome::Stopped };
                    let sent = forward(&mut sink, upstream, &burst, &mut last, &lagged).await;
                    match sent {
                        Ok(frames) => delivered.increment(frames),
                        Err(outcome) => break 'run outcome,
                    }
                }
                _ = reconnects.changed() => {
                    // Live frames may have been missed meanwhile.
                    match catch_up(&mut sink, upstream, last, None, &lagged).await {
                        Ok(Some(l)) => last = l,
                        Ok(None) => break 'run Outcome::Closed,
                        Err(err) => break 'run Outcome::Broken(err.message),
                    }
                }
                msg = source.next() => {
                    if let Err(outcome) = answer(&mut sink, upstream, limits, msg, &lagged).await {
                        break 'run outcome;
                    }
                }
            }
        }
    };
    close(&mut sink, &outcome, last, limits).await;
    metrics::gauge!(crate::metric_names::WS_CLIENTS).decrement(1.0);
    if matches!(outcome, Outcome::Lagged) {
        metrics::counter!(crate::metric_names::WS_LAGGING_DISCONNECTS).increment(1);
    }
    outcome
}

/// Sends the frames of a live burst that come after `last`, reading any
/// gap from `upstream` first; `last` follows what was sent. How many
/// frames of the burst went out, or how the session ends.
async fn forward<S>(
    sink: &mut S,
    upstream: &dyn Upstream,
    burst: &[Arc<LiveBatch>],
    last: &mut i64,
    lagged: &CancellationToken,
) -> Result<u64, Outcome>
where
    S: Sink<Message> + Unpin,
{
    let mut msgs = Vec::with_capacity(burst.iter().map(|b| b.frames.len()).sum());
    let numbered = burst
        .iter()
        .flat_map(|batch| (batch.first_seq..).zip(batch.frames.iter()));
    for (seq, frame) in numbered {
        if seq <= *last {
            continue;
        }
        if seq > *last + 1 {
            // Missed frames: send what is queued, read the gap.
            if !send_all(sink, std::mem::take(&mut msgs), lagged).await {
                return Err(Outcome::Closed);
            }
            match fill_gap(sink, upstream, *last, seq - 1, lagged).await {
                // Filled up to `seq - 1`, which comes next.
                Ok(Some(_)) => {}
                Ok(None) => return Err(Outcome::Closed),
                Err(why) => return Err(Outcome::Broken(why)),
            }
        }
        *last = seq;
        msgs.push(Message::Text(frame.clone()));
    }
    let frames = msgs.len() as u64;
    if !msgs.is_empty() && !send_all(sink, msgs, lagged).await {
        return Err(if lagged.is_cancelled() {
            Outcome::Lagged
        } else {
            Outcome::Closed
        });
    }
    Ok(frames)
}

/// Answers one message from the client: a command gets its reply; a
/// close, an error or the end of its messages ends the session.
async fn answer<S>(
    sink: &mut S,
    upstream: &dyn Upstream,
    limits: &Limits,
    msg: Option<Result<Message, axum::Error>>,
    lagged: &CancellationToken,
) -> Result<(), Outcome>
where
    S: Sink<Message> + Unpin,
{
    match msg {
        Some(Ok(Message::Text(text))) => {
            let reply = handle_command(upstream, limits, text.as_str()).await;
            let reply = [Message::Text(reply.to_string().into())];
            if send_all(sink, reply, lagged).await {
                Ok(())
            } else {
                Err(Outcome::Closed)
            }
        }
        Some(Ok(Message::Close(_))) | None => Err(Outcome::Closed),
        Some(Ok(_)) => Ok(()),
        Some(Err(err)) if is_too_big(&err) => Err(Outcome::TooBig),
        Some(Err(_)) => Err(Outcome::Closed),
    }
}

fn is_too_big(err: &axum::Error) -> bool {
    let text = err.to_string();
    text.contains("too long") || text.contains("too big") || text.contains("Space limit")
}

/// Reads the frames `last+1..=until` that the live feed missed, waiting
/// for them to become readable.
async fn fill_gap<S>(
    sink: &mut S,
    upstream: &dyn Upstream,
    mut last: i64,
    until: i64,
    lagged: &CancellationToken,
) -> Result<Option<i64>, String>
where
    S: Sink<Message> + Unpin,
{
    let deadline = tokio::time::Instant::now() + GAP_PATIENCE;
    let mut delay = Duration::from_millis(20);
    while last < until {
        // An orchestrator that is down (restarting) is waited for too.
        let mut failure = None;
        match catch_up(sink, upstream, last, Some(until), lagged).await {
            Ok(Some(l)) => last = l,
            Ok(None) => return Ok(None),
            Err(err) => failure = Some(err.message),
        }
        if last >= until {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(failure.unwrap_or_else(|| {
                format!(
                    "frames {}..={until} did not become readable within {} s",
                    last + 1,
                    GAP_PATIENCE.as_secs()
                )
            }));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    }
    Ok(Some(last))
}

/// Says goodbye: a lagging client first gets a notice with the last seq it
/// was sent, then a close frame with the reason (RFC 6455 codes).
async fn close<S>(sink: &mut S, outcome: &Outcome, last: i64, limits: &Limits)
where
    S: Sink<Message> + Unpin,
{
    let (code, reason) = match outcome {
        Outcome::Closed => {
            let _ = tokio::time::timeout(CLOSE_GRACE, sink.close()).await;
            return;
        }
        Outcome::Lagged => (
            CLOSE_POLICY,
            format!(
                "lagging: more than {} frames behind; reconnect with ?after={last}",
                limits.buffer
            ),
        ),
        Outcome::Stopped => (CLOSE_AWAY, "the gateway is shutting down".to_string()),
        Outcome::Broken(why) => (
            CLOSE_INTERNAL,
            format!("the feed cannot be read; reconnect with ?after={last} ({why})"),
        ),
        Outcome::TooBig => (CLOSE_TOO_BIG, "message too big".to_string()),
    };
    let mut msgs = Vec::new();
    if *outcome == Outcome::Lagged {
        let notice = json!({"type": "lagging", "message": reason, "last_seq": last});
        msgs.push(Message::Text(notice.to_string().into()));
    }
    // A close reason is at most 123 bytes.
    let mut reason = reason;
    if reason.len() > 123 {
        let mut cut = 120;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
    }
    msgs.push(Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    })));
    let _ = tokio::time::timeout(CLOSE_GRACE, write_all(sink, msgs)).await;
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use futures::channel::mpsc;
    use kandev_testkit::OwnNats;
    use uuid::Uuid;

    use kandev_events::live::NatsLive;

    use super::*;
    use crate::stream::live::LiveFeeds;

    fn frame(seq: i64) -> String {
        format!(r#"{{"seq":{seq},"task_id":"t","event":{{"kind":"message_chunk"}}}}"#)
    }

    /// The stored feed and a record of commands.
    #[derive(Default)]
    struct FakeUpstream {
        stored: Mutex<i64>,
        commands: Mutex<Vec<Command>>,
        broken: bool,
    }

    #[async_trait]
    impl Upstream for FakeUpstream {
        async fn read(&self, after: i64) -> Result<Vec<Utf8Bytes>, ApiError> {
            if self.broken {
                return Err(ApiError::new(
                    kandev_common::ErrorCode::Unavailable,
                    "the orchestrator is unavailable",
                ));
            }
            let stored = *self.stored.lock().unwrap();
            Ok((after + 1..=stored.min(after + 3))
                .map(|s| frame(s).into())
                .collect())
        }

        async fn command(&self, command: Command) -> Result<(), ApiError> {
            if let Command::Permission { request_id, .. } = &command
                && request_id == "gone"
            {
                return Err(ApiError::not_found("open permission request gone"));
            }
            self.commands.lock().unwrap().push(command);
            Ok(())
        }
    }

    struct Harness {
        _nats: OwnNats,
        client: async_nats::Client,
        feeds: Arc<LiveFeeds>,
        task: Uuid,
        /// Stops the sessions [`start`] runs.
        stop: CancellationToken,
    }

    impl Harness {
        async fn new(buffer: usize) -> Harness {
            let nats = OwnNats::start().await;
            let client = async_nats::connect(nats.url()).await.unwrap();
            let feeds = LiveFeeds::new(Arc::new(NatsLive::new(client.clone())), buffer);
            Harness {
                _nats: nats,
                client,
                feeds,
                task: Uuid::new_v4(),
                stop: CancellationToken::new(),
            }
        }

        async fn publish(&self, first: i64, last: i64) {
            let payload: Vec<String> = (first..=last).map(frame).collect();
            let mut h = async_nats::HeaderMap::new();
            h.insert(
                kandev_events::subjects::LIVE_FIRST_SEQ,
                first.to_string().as_str(),
            );
            h.insert(
                kandev_events::subjects::LIVE_LAST_SEQ,
                last.to_string().as_str(),
            );
            self.client
                .publish_with_headers(
                    kandev_events::subjects::feed_live(&self.task),
                    h,
                    payload.join("\n").into(),
                )
                .await
                .unwrap();
            self.client.flush().await.unwrap();
        }
    }

    fn limits(buffer: usize, commands: u32) -> Limits {
        let left = Arc::new(Mutex::new(commands));
        Limits {
            buffer,
            rate: Arc::new(move || {
                let mut left = left.lock().unwrap();
                if *left == 0 {
                    return Err(Duration::from_secs(3));
                }
                *left -= 1;
                Ok(())
            }),
        }
    }

    type ClientIn = mpsc::Receiver<Message>;
    type ClientOut = mpsc::UnboundedSender<Result<Message, axum::Error>>;

    /// Runs a session of a client subscribed now in the background (until
    /// `h.stop`): what the client receives, what it sends, and the session's
    /// outcome.
    async fn start(
        h: &Harness,
        upstream: Arc<FakeUpstream>,
        after: i64,
        limits: Limits,
    ) -> (ClientIn, ClientOut, tokio::task::JoinHandle<Outcome>) {
        let live = h.feeds.subscribe(h.task).await;
        let (sink, rx) = mpsc::channel::<Message>(1024);
        let (tx, source) = mpsc::unbounded::<Result<Message, axum::Error>>();
        let stop = h.stop.clone();
        let handle = tokio::spawn(async move {
            run(sink, source, upstream.as_ref(), live, after, &limits, &stop).await
        });
        (rx, tx, handle)
    }

    async fn next(rx: &mut ClientIn) -> Message {
        tokio::time::timeout(Duration::from_secs(10), rx.next())
            .await
            .expect("a message within 10 s")
            .expect("the session is still sending")
    }

    async fn seqs(rx: &mut ClientIn, n: usize) -> Vec<i64> {
        let mut out = Vec::new();
        while out.len() < n {
            match next(rx).await {
                Message::Text(t) => out.push(seq_of(&t).unwrap()),
                other => panic!("{other:?}"),
            }
        }
        out
    }

    async fn json_frame(rx: &mut ClientIn) -> Value {
        match next(rx).await {
            Message::Text(t) => serde_json::from_str(t.as_str()).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn history_then_live_once_each_with_gaps_read_from_the_feed() {
        let h = Harness::new(1000).await;
        let upstream = Arc::new(FakeUpstream::default());
        *upstream.stored.lock().unwrap() = 5;
        let (mut rx, _tx, handle) = start(&h, upstream.clone(), 2, limits(100, 10)).await;
        assert_eq!(seqs(&mut rx, 3).await, vec![3, 4, 5], "history after 2");
        // Live repeats 4 and 5 (already sent) and goes on.
        h.publish(4, 7).await;
        assert_eq!(seqs(&mut rx, 2).await, vec![6, 7]);
        // 8..=10 were missed live; they are read from the stored feed.
        *upstream.stored.lock().unwrap() = 10;
        h.publish(11, 12).await;
        assert_eq!(seqs(&mut rx, 5).await, vec![8, 9, 10, 11, 12]);
        h.stop.cancel();
        match next(&mut rx).await {
            Message::Close(Some(f)) => assert_eq!(f.code, CLOSE_AWAY),
            other => panic!("{other:?}"),
        }
        assert_eq!(handle.await.unwrap(), Outcome::Stopped);
        assert_eq!(h.feeds.tasks(), 0, "the last client unsubscribed");
    }

    #[tokio::test]
    async fn a_client_that_falls_behind_gets_a_notice_and_1008() {
        let h = Harness::new(4).await;
        let upstream = Arc::new(FakeUpstream::default());
        let (mut rx, _tx, handle) = start(&h, upstream, 0, limits(4, 10)).await;
        h.publish(1, 2).await;
        assert_eq!(seqs(&mut rx, 2).await, vec![1, 2]);
        // More than its buffer at once.
        h.publish(3, 10).await;
        let notice = json_frame(&mut rx).await;
        assert_eq!(notice["type"], "lagging");
        assert_eq!(notice["last_seq"], 2);
        assert!(notice["message"].as_str().unwrap().contains("?after=2"));
        match next(&mut rx).await {
            Message::Close(Some(f)) => {
                assert_eq!(f.code, CLOSE_POLICY);
                assert!(f.reason.as_str().starts_with("lagging: "), "{}", f.reason);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(handle.await.unwrap(), Outcome::Lagged);
    }

    #[tokio::test]
    async fn a_client_that_reads_nothing_is_let_go() {
        let h = Harness::new(4).await;
        let upstream = Arc::new(FakeUpstream::default());
        let live = h.feeds.subscribe(h.task).await;
        // A client whose socket accepts one frame and then nothing.
        let (sink, _rx) = mpsc::channel::<Message>(0);
        let (_tx, source) = mpsc::unbounded::<Result<Message, axum::Error>>();
        let stop = CancellationToken::new();
        let limits = limits(4, 10);
        let session = tokio::spawn(async move {
            run(sink, source, upstream.as_ref(), live, 0, &limits, &stop).await
        });
        for first in (1..=40).step_by(2) {
            h.publish(first, first + 1).await;
        }
        let outcome = tokio::time::timeout(Duration::from_secs(30), session)
            .await
            .expect("the session ends")
            .unwrap();
        assert_eq!(outcome, Outcome::Lagged);
    }

    #[tokio::test]
    async fn commands_are_answered_checked_and_rate_limited() {
        let h = Harness::new(100).await;
        let upstream = Arc::new(FakeUpstream::default());
        let (mut rx, tx, _handle) = start(&h, upstream.clone(), 0, limits(100, 5)).await;
        let send = |v: &str| {
            tx.unbounded_send(Ok(Message::Text(v.to_string().into())))
                .unwrap()
        };
        send(r#"{"type":"prompt","text":"more tests","id":"c1"}"#);
        let ack = json_frame(&mut rx).await;
        assert_eq!(ack, json!({"type":"ack","command":"prompt","id":"c1"}));
        send("not json");
        let err = json_frame(&mut rx).await;
        assert_eq!(
            (err["type"].as_str(), err["error"].as_str()),
            (Some("error"), Some("bad_request"))
        );
        send(r#"{"type":"prompt","text":"  ","id":2}"#);
        let err = json_frame(&mut rx).await;
        assert_eq!(err["error"], "validation_error");
        assert_eq!(err["id"], 2);
        send(r#"{"type":"permission","request_id":7}"#);
        assert_eq!(json_frame(&mut rx).await["error"], "validation_error");
        send(r#"{"type":"permission","request_id":"gone","option_id":"allow"}"#);
        let err = json_frame(&mut rx).await;
        assert_eq!(
            (err["error"].as_str(), err["http_status"].as_u64()),
            (Some("not_found"), Some(404))
        );
        // The sixth command is over the rate limit.
        send(r#"{"type":"cancel"}"#);
        let err = json_frame(&mut rx).await;
        assert_eq!(err["error"], "rate_limited");
        assert_eq!(
            *upstream.commands.lock().unwrap(),
            vec![Command::Prompt {
                text: "more tests".into()
            }]
        );
    }

    #[tokio::test]
    async fn an_oversized_message_closes_with_1009_and_a_broken_feed_with_1011() {
        let h = Harness::new(100).await;
        let upstream = Arc::new(FakeUpstream::default());
        let (mut rx, tx, handle) = start(&h, upstream, 0, limits(100, 5)).await;
        let too_long = tokio_tungstenite::tungstenite::Error::Capacity(
            tokio_tungstenite::tungstenite::error::CapacityError::MessageTooLong {
                size: 17_000_000,
                max_size: 1_048_576,
            },
        );
        tx.unbounded_send(Err(axum::Error::new(too_long))).unwrap();
        match next(&mut rx).await {
            Message::Close(Some(f)) => assert_eq!(f.code, CLOSE_TOO_BIG),
            other => panic!("{other:?}"),
        }
        assert_eq!(handle.await.unwrap(), Outcome::TooBig);

        let broken = Arc::new(FakeUpstream {
            broken: true,
            ..FakeUpstream::default()
        });
        let (mut rx, _tx, handle) = start(&h, broken, 0, limits(100, 5)).await;
        match next(&mut rx).await {
            Message::Close(Some(f)) => {
                assert_eq!(f.code, CLOSE_INTERNAL);
                assert!(f.reason.as_str().contains("?after=0"), "{}", f.reason);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(handle.await.unwrap(), Outcome::Broken(_)));
    }
}
