//! One WebSocket client of a task's feed.
//!
//! Frames sent: every feed frame is a JSON text object with a top-level
//! `seq` (`{"seq","task_id","instance_id","instance_seq","event"}`); other
//! frames have no `seq` and a `type` (`ack`, `error`).
//!
//! Order of work: subscribe to live frames (taking the unstored tail), read
//! the stored history after `?after=`, send it, send the tail, then live
//! frames, skipping every `seq` already sent: no gap, no duplicate.
//!
//! Commands the client may send: `{"type":"prompt","text"}`,
//! `{"type":"cancel"}`, `{"type":"permission","request_id","option_id"}` or
//! with `"cancelled":true`; each is answered with `{"type":"ack",...}` or
//! `{"type":"error",...}`. An optional `id` is echoed back.
//!
//! A client whose bounded queue overflows gets a notice
//! `{"type":"lagging","message","last_seq"}`, then a close frame (code 1008,
//! reason `lagging: ...`) and is disconnected; the others never wait for it.

use std::{borrow::Borrow, sync::Arc, time::Duration};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::{Sink, SinkExt, StreamExt};
use kandev_common::{
    CancellationToken,
    stream_command::{self, Command, request_id_text},
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::{
    domain::{OrchestratorError, merge_fields},
    feed,
    http::state::{AppState, error_body},
    orchestration::{Orchestration, PermissionAnswer},
};

/// Stored frames read per query while replaying.
const HISTORY_PAGE: i64 = 1000;
/// The close code of a lagging client (policy violation).
pub const LAGGING_CLOSE_CODE: u16 = 1008;

/// Serves one client until it leaves or lags.
pub async fn session(state: AppState, task_id: Uuid, after: i64, socket: WebSocket) {
    let subscription = state.hub.subscribe(task_id);
    let (sink, stream) = socket.split();
    let (reply_tx, reply_rx) = mpsc::channel::<String>(16);
    let done = CancellationToken::new();
    let reader = tokio::spawn(read_commands(
        stream,
        state.orchestration.clone(),
        task_id,
        reply_tx,
        done.clone(),
    ));
    let buffer = state.hub.buffer();
    let outcome = write_frames(
        sink,
        subscription,
        &state,
        task_id,
        after,
        reply_rx,
        done.clone(),
    )
    .await;
    match outcome {
        Outcome::Lagged => {
            tracing::warn!(%task_id, buffer, "websocket client lagging, disconnected");
        }
        Outcome::Closed => tracing::debug!(%task_id, "websocket client left"),
    }
    done.cancel();
    reader.abort();
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Closed,
    Lagged,
}

/// The most frames written before one flush.
const WRITE_BATCH: usize = 256;

async fn send_or_lag<S>(
    sink: &mut S,
    msg: Message,
    lagged: &CancellationToken,
    grace: Duration,
) -> bool
where
    S: Sink<Message> + Unpin,
{
    send_all_or_lag(sink, vec![msg], lagged, grace).await
}

/// Writes `msgs` and flushes once: a burst costs one write, not one per
/// frame. A client that is lagging gets `grace` to take them.
async fn send_all_or_lag<S>(
    sink: &mut S,
    msgs: Vec<Message>,
    lagged: &CancellationToken,
    grace: Duration,
) -> bool
where
    S: Sink<Message> + Unpin,
{
    let send = async {
        for msg in msgs {
            sink.feed(msg).await?;
        }
        sink.flush().await
    };
    tokio::pin!(send);
    tokio::select! {
        r = &mut send => r.is_ok(),
        () = lagged.cancelled() => matches!(tokio::time::timeout(grace, send).await, Ok(Ok(()))),
    }
}

async fn write_frames<S>(
    sink: S,
    mut sub: feed::Subscription,
    state: &AppState,
    task_id: Uuid,
    after: i64,
    mut replies: mpsc::Receiver<String>,
    done: CancellationToken,
) -> Outcome
where
    S: Sink<Message> + Unpin,
{
    let mut out = FrameWriter {
        sink,
        lagged: sub.lagged.clone(),
        grace: state.close_grace,
        last: after,
    };
    let replayed = match out.history(state, task_id).await {
        // The tail that was not yet stored when we subscribed.
        Ok(()) => out.frames(&std::mem::take(&mut sub.tail)).await,
        Err(outcome) => Err(outcome),
    };
    let outcome = match replayed {
        Ok(()) => out.live(&mut sub, &mut replies, &done).await,
        Err(outcome) => outcome,
    };
    out.finish(outcome, state.hub.buffer()).await;
    outcome
}

/// One client's socket: where its feed is (`last`), and how long a lagging
/// client is given to take what was already sent. Each step ends the feed
/// with an `Err(outcome)`.
struct FrameWriter<S> {
    sink: S,
    lagged: CancellationToken,
    grace: Duration,
    last: i64,
}

impl<S: Sink<Message> + Unpin> FrameWriter<S> {
    /// The stored history after `last`, a page at a time.
    async fn history(&mut self, state: &AppState, task_id: Uuid) -> Result<(), Outcome> {
        loop {
            let page = match state.feed.history(task_id, self.last, HISTORY_PAGE).await {
                Ok(page) => page,
                Err(err) => {
                    let mut frame = json!({"type": "error"});
                    merge_fields(&mut frame, error_body(&OrchestratorError::Database(err)));
                    let _ = self
                        .sink
                        .send(Message::Text(frame.to_string().into()))
                        .await;
                    return Err(Outcome::Closed);
                }
            };
            self.frames(&page).await?;
            if (page.len() as i64) < HISTORY_PAGE {
                return Ok(());
            }
        }
    }

    /// Frames after `last`, in batches of writes; a frame not after the one
    /// before it (a repeat, or one the client already has) is skipped.
    async fn frames<F: Borrow<feed::Frame>>(&mut self, frames: &[F]) -> Result<(), Outcome> {
        let mut newest = self.last;
        let fresh: Vec<&feed::Frame> = frames
            .iter()
            .map(Borrow::borrow)
            .filter(|f| {
                let after = f.seq > newest;
                newest = newest.max(f.seq);
                after
            })
            .collect();
        for chunk in fresh.chunks(WRITE_BATCH) {
            if self.lagged.is_cancelled() {
                return Err(Outcome::Lagged);
            }
            let msgs = chunk
                .iter()
                .map(|f| Message::Text(f.text.clone()))
                .collect();
            if !send_all_or_lag(&mut self.sink, msgs, &self.lagged, self.grace).await {
                return Err(Outcome::Closed);
            }
            self.last = chunk.last().map_or(self.last, |f| f.seq);
        }
        Ok(())
    }

    /// Live frames and the answers to the client's commands, until the
    /// client lags, goes or the feed ends.
    async fn live(
        &mut self,
        sub: &mut feed::Subscription,
        replies: &mut mpsc::Receiver<String>,
        done: &CancellationToken,
    ) -> Outcome {
        loop {
            tokio::select! {
                biased;
                () = self.lagged.cancelled() => return Outcome::Lagged,
                () = done.cancelled() => return Outcome::Closed,
                Some(reply) = replies.recv() => {
                    let msg = Message::Text(reply.into());
                    if !send_or_lag(&mut self.sink, msg, &self.lagged, self.grace).await {
                        return Outcome::Closed;
                    }
                }
                frame = sub.rx.recv() => {
                    let Some(frame) = frame else { return Outcome::Closed };
                    // Whatever else is queued goes out with it, in one write.
                    let mut batch = vec![frame];
                    while batch.len() < WRITE_BATCH
                        && let Ok(frame) = sub.rx.try_recv()
                    {
                        batch.push(frame);
                    }
                    if let Err(outcome) = self.frames(&batch).await {
                        return outcome;
                    }
                }
            }
        }
    }

    /// Tells a lagging client where to reconnect from, then closes.
    async fn finish(&mut self, outcome: Outcome, buffer: usize) {
        let Outcome::Lagged = outcome else {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.sink.close()).await;
            return;
        };
        let last = self.last;
        let reason =
            format!("lagging: more than {buffer} frames behind; reconnect with ?after={last}");
        let notice = json!({"type": "lagging", "message": reason, "last_seq": last});
        let close = Message::Close(Some(CloseFrame {
            code: LAGGING_CLOSE_CODE,
            reason: reason.into(),
        }));
        let _ = tokio::time::timeout(self.grace, async {
            self.sink
                .send(Message::Text(notice.to_string().into()))
                .await?;
            self.sink.send(close).await
        })
        .await;
    }
}

async fn read_commands<S>(
    mut stream: S,
    orchestration: Arc<dyn Orchestration>,
    task_id: Uuid,
    replies: mpsc::Sender<String>,
    done: CancellationToken,
) where
    S: futures::Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    while let Some(Ok(msg)) = stream.next().await {
        match msg {
            Message::Text(text) => {
                let reply = handle_command(orchestration.as_ref(), task_id, text.as_str()).await;
                if replies.send(reply.to_string()).await.is_err() {
                    break;
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    done.cancel();
}

/// Runs one client command and returns its `ack` or `error` frame.
pub async fn handle_command(orchestration: &dyn Orchestration, task_id: Uuid, text: &str) -> Value {
    let (reply, command) = stream_command::read(text);
    let command = match command {
        Ok(command) => command,
        Err(unreadable) => {
            let err = OrchestratorError::BadRequest(unreadable.message());
            return reply.error(error_body(&err));
        }
    };
    let result = match command {
        // The internal stream has no person (see `http::start`).
        Command::Prompt { text } => orchestration.prompt(task_id, text, "").await.map(|_| ()),
        Command::Cancel => orchestration.cancel_turn(task_id).await,
        Command::Permission {
            request_id,
            option_id,
            cancelled,
        } => {
            if option_id.is_empty() && !cancelled {
                Err(OrchestratorError::Validation(
                    "permission needs option_id or cancelled: true".into(),
                ))
            } else {
                orchestration
                    .respond_permission(
                        task_id,
                        PermissionAnswer {
                            request_id: request_id_text(request_id),
                            option_id,
                            cancelled,
                            // The internal stream has no person.
                            actor: String::new(),
                        },
                    )
                    .await
            }
        }
    };
    match result {
        Ok(()) => reply.ack(),
        Err(err) => reply.error(error_body(&err)),
    }
}
