//! One prompt turn of one agent instance in its own container: create,
//! attach, start, drive ACP, publish every event, end the instance.
//!
//! Events leave the ACP client's stream through a drain task that only
//! updates in-memory state and pushes into a bounded queue; a publisher
//! task sends them to the bus in order, a flusher stores the last published
//! `seq` and the progress periodically, and a log writer batches stderr
//! lines into `agent_logs`. Nothing on the read path waits for Postgres.

use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use kandev_acp::{
    AcpClient, AcpError, AcpEvent, AskDecider, AutoApprove, ClientOptions, Deny, Direction,
    EventKind, EventStream, PermissionAsk, PermissionDecision, PermissionPolicy, Workspace,
    event::{ChunkRole, LogSource},
};
use kandev_events::{
    Envelope, EventBus,
    agent::{AcpMessage, AgentEventKind, AgentLifecycle},
    subjects,
};
use tokio::sync::{mpsc, watch};
use tokio_util::{io::StreamReader, sync::CancellationToken};
use uuid::Uuid;

use crate::{
    config::Settings,
    docker::{ContainerSpec, ContainerState, Docker, LogStream},
    domain::{AgentInstance, AgentType, InstanceStatus, LogCursors, LogLine, PermissionPolicyKind},
    exec::DockerExec,
    store::{Outcome, Store},
};

/// Where the workspace appears in every agent container.
pub const CONTAINER_WORKSPACE: &str = "/workspace";

/// What every run needs.
#[derive(Clone)]
pub struct Shared {
    pub docker: Docker,
    pub store: Store,
    pub bus: Arc<dyn EventBus>,
    pub settings: Arc<Settings>,
}

/// One turn to run.
pub struct TurnSpec {
    /// The instance after `begin_turn`.
    pub instance: AgentInstance,
    pub agent_type: AgentType,
    pub container: ContainerSpec,
    pub workspace: PathBuf,
    pub prompt: String,
    /// `session/load` this session instead of `session/new`.
    pub resume_session: Option<String>,
    /// Re-attach to this running container of an earlier manager instead
    /// of creating one; its output is re-read from the stored log cursors
    /// and numbered from `last_seq + 1`.
    pub reattach: Option<String>,
}

/// The manager's handle on a running turn.
pub struct RunHandle {
    client: Mutex<Option<AcpClient>>,
    /// The ACP session of a re-attached turn, for `session/cancel`.
    session: Mutex<String>,
    stop: CancellationToken,
    stop_reason: Mutex<String>,
    asks: Mutex<HashMap<String, PermissionAsk>>,
    done: watch::Sender<bool>,
}

impl Default for RunHandle {
    fn default() -> Self {
        RunHandle {
            client: Mutex::new(None),
            session: Mutex::new(String::new()),
            stop: CancellationToken::new(),
            stop_reason: Mutex::new(String::new()),
            asks: Mutex::new(HashMap::new()),
            done: watch::channel(false).0,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The key of a permission request id (JSON text, normalized).
pub fn ask_key(request_id: &serde_json::Value) -> String {
    request_id.to_string()
}

impl RunHandle {
    /// Sends `session/cancel`; false when no session is up yet.
    pub async fn cancel(&self) -> Result<bool, AcpError> {
        let client = lock(&self.client).clone();
        let Some(client) = client else {
            return Ok(false);
        };
        let session = lock(&self.session).clone();
        if client.dialect().is_none() && !session.is_empty() {
            // A re-attached client never saw the handshake: send the v1
            // notification for the stored session itself.
            return client
                .notify(
                    "session/cancel",
                    serde_json::json!({ "sessionId": session }),
                )
                .await
                .map(|()| true);
        }
        if client.dialect().is_none() {
            // Still in the handshake: there is no turn to cancel yet.
            return Ok(false);
        }
        client.cancel().await.map(|()| true)
    }

    /// Kills the turn; the run ends the instance `stopped`.
    pub fn stop(&self, reason: &str) {
        *lock(&self.stop_reason) = reason.to_string();
        self.stop.cancel();
    }

    /// Answers an open permission request. `None` when there is none with
    /// this id, `Some(false)` when it came too late.
    pub fn respond(&self, key: &str, decision: PermissionDecision) -> Option<bool> {
        let ask = lock(&self.asks).remove(key)?;
        Some(ask.respond(decision))
    }

    /// Waits until the run has ended the instance.
    pub async fn wait_done(&self) {
        let mut rx = self.done.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }
}

/// Docker log timestamps of the lines fed to the client, in order, one
/// queue per stream: every non-blank stdout line becomes exactly one
/// `from_agent` event, every stderr line one `log` event, so the drain can
/// pair each event with the line it came from.
#[derive(Debug, Default)]
struct LineStamps {
    stdout: VecDeque<String>,
    stderr: VecDeque<String>,
}

type Stamps = Arc<Mutex<LineStamps>>;

/// An event and, when it came from a log line, (is_stderr, timestamp).
type Stamped = (AcpEvent, Option<(bool, String)>);

fn parse_ts(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Splits a `timestamps=true` log frame into its timestamp and payload.
fn split_stamp(frame: &[u8]) -> Option<(String, &[u8])> {
    let space = frame.iter().position(|b| *b == b' ')?;
    let stamp = std::str::from_utf8(&frame[..space]).ok()?;
    parse_ts(stamp)?;
    Some((stamp.to_string(), &frame[space + 1..]))
}

/// Live state of the turn, updated by the drain task.
#[derive(Debug, Default)]
struct TurnState {
    /// The agent's current (last) message.
    summary: String,
    summary_id: Option<String>,
    in_message: bool,
    progress: f64,
    /// The last seq handed to the bus.
    published_seq: u64,
    /// The Docker log position of the last published line of each stream.
    cursors: LogCursors,
    /// The last seq queued for publishing, and the log position of the
    /// last line queued: where a client re-attached in the same run goes on.
    queued_seq: u64,
    queued_cursors: LogCursors,
    /// The ACP session of the turn, once set up.
    session_id: String,
}

impl TurnState {
    fn observe(&mut self, event: &AcpEvent) {
        match &event.kind {
            EventKind::MessageChunk(chunk) if chunk.role == ChunkRole::Agent => {
                if !self.in_message || chunk.message_id != self.summary_id {
                    self.summary.clear();
                    self.summary_id = chunk.message_id.clone();
                    self.in_message = true;
                }
                if let Some(text) = &chunk.text {
                    self.summary.push_str(text);
                }
            }
            EventKind::Plan(plan) => {
                self.in_message = false;
                let total = plan.entries.len();
                if total > 0 {
                    let done = plan
                        .entries
                        .iter()
                        .filter(|e| e.status == "completed")
                        .count();
                    self.progress = done as f64 / total as f64;
                }
            }
            EventKind::ThoughtChunk(_)
            | EventKind::ToolCall(_)
            | EventKind::ToolCallUpdate(_)
            | EventKind::PermissionRequest(_) => self.in_message = false,
            _ => {}
        }
    }
}

/// Why a turn did not complete.
#[derive(Debug)]
enum Failure {
    Failed {
        error: String,
        exit_code: Option<i64>,
    },
    Stopped,
}

fn failed(error: impl Into<String>) -> Failure {
    Failure::Failed {
        error: error.into(),
        exit_code: None,
    }
}

/// How one attempt at a turn ended without completing it.
#[derive(Debug)]
enum Interruption {
    Failure(Failure),
    /// The Docker engine stopped answering (or broke off the agent's log)
    /// during `during`; the turn may survive it.
    EngineLost {
        during: String,
        error: String,
    },
}

impl From<Failure> for Interruption {
    fn from(failure: Failure) -> Self {
        Interruption::Failure(failure)
    }
}

struct TurnResult {
    session_id: String,
    stop_reason: String,
}

/// Publishes with retries; the envelope id stays the same, so the bus drops
/// duplicates.
async fn publish_retrying(bus: &dyn EventBus, subject: &str, id: Uuid, payload: Bytes) {
    let mut delay = Duration::from_millis(100);
    for attempt in 1..=10 {
        match bus.publish(subject, id, payload.clone()).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(subject, attempt, error = %e, "publish failed, retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
    tracing::error!(subject, %id, "event dropped after 10 attempts");
}

/// Publishes an `agent.*` lifecycle event of an instance.
pub async fn publish_lifecycle(
    bus: &dyn EventBus,
    instance: &AgentInstance,
    kind: AgentEventKind,
    fill: impl FnOnce(&mut AgentLifecycle),
) {
    let mut payload = AgentLifecycle {
        kind,
        task_id: instance.task_id,
        instance_id: instance.id,
        agent_type: instance.agent_type.clone(),
        container_id: (!instance.container_id.is_empty()).then(|| instance.container_id.clone()),
        acp_session_id: (!instance.acp_session_id.is_empty())
            .then(|| instance.acp_session_id.clone()),
        stop_reason: None,
        summary: None,
        error: None,
        exit_code: None,
        last_seq: u64::try_from(instance.last_seq).unwrap_or(0),
        at: Utc::now(),
    };
    fill(&mut payload);
    let turn = u64::try_from(instance.turns).unwrap_or(0);
    let mut envelope = Envelope::new(kind.subject(), payload);
    envelope.id = envelope.data.event_id(turn);
    match envelope.to_bytes() {
        Ok(bytes) => publish_retrying(bus, kind.subject(), envelope.id, bytes.into()).await,
        Err(e) => tracing::error!(error = %e, "cannot serialize lifecycle event"),
    }
}

/// Sends every event of the queue to `acp.message.<task_id>`, in order.
async fn publisher(
    bus: Arc<dyn EventBus>,
    store: Store,
    instance: AgentInstance,
    mut rx: mpsc::Receiver<Stamped>,
    state: Arc<Mutex<TurnState>>,
) {
    let subject = subjects::acp_message(&instance.task_id);
    while let Some((event, stamp)) = rx.recv().await {
        let seq = event.seq;
        let occurred_at = event.timestamp;
        let event = match serde_json::to_value(&event) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "cannot serialize acp event");
                continue;
            }
        };
        let message = AcpMessage {
            task_id: instance.task_id,
            instance_id: instance.id,
            instance_seq: seq,
            event,
        };
        let envelope = Envelope {
            id: message.event_id(),
            event_type: subject.clone(),
            occurred_at,
            data: message,
        };
        let bytes = match envelope.to_bytes() {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(error = %e, "cannot serialize acp message");
                continue;
            }
        };
        if stamp.is_none() {
            // An event that no log line can reproduce (sent to the agent, or
            // the client's own) is a sync point, stored with its envelope
            // before it is published: a replay after a restart then numbers
            // the following lines exactly as before, and publishes this
            // event again (same id) in case it never left.
            let (progress, cursors) = {
                let s = lock(&state);
                (s.progress, s.cursors.clone())
            };
            let stored: serde_json::Value =
                serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            let seq = i64::try_from(seq).unwrap_or(i64::MAX);
            if let Err(e) = store
                .save_sync(instance.id, seq, progress, &cursors, &stored)
                .await
            {
                tracing::warn!(error = %e, "cannot store a sync point");
            }
        }
        publish_retrying(bus.as_ref(), &subject, envelope.id, bytes.into()).await;
        let mut s = lock(&state);
        s.published_seq = seq;
        match stamp {
            Some((true, ts)) => s.cursors.stderr = ts,
            Some((false, ts)) => s.cursors.stdout = ts,
            None => {}
        }
    }
}

/// Stores the last published seq and the progress every `every` until
/// `stop` fires.
async fn flusher(
    store: Store,
    id: Uuid,
    state: Arc<Mutex<TurnState>>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut saved = (0u64, -1.0f64);
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let (now, cursors) = {
            let s = lock(&state);
            ((s.published_seq, s.progress), s.cursors.clone())
        };
        if now != saved && now.0 > 0 {
            let seq = i64::try_from(now.0).unwrap_or(i64::MAX);
            match store.save_progress(id, seq, now.1, &cursors).await {
                Ok(()) => saved = now,
                Err(e) => tracing::warn!(error = %e, "cannot store last_seq"),
            }
        }
    }
}

/// Batches log lines into `agent_logs`.
async fn log_writer(store: Store, id: Uuid, keep: i64, mut rx: mpsc::Receiver<LogLine>) {
    let mut batch = Vec::with_capacity(128);
    while rx.recv_many(&mut batch, 128).await > 0 {
        if let Err(e) = store.append_logs(id, &batch, keep).await {
            tracing::warn!(error = %e, "cannot store agent logs");
        }
        batch.clear();
    }
}

/// Reads the client's events: pairs each with its log line, updates the
/// turn state, queues stderr lines for storage (dropping them when the
/// writer lags) and queues every event for publishing. In resume mode the
/// agent's answer to the earlier manager's `session/prompt` ends the turn.
async fn drain(
    mut events: EventStream,
    out: mpsc::Sender<Stamped>,
    logs: mpsc::Sender<LogLine>,
    state: Arc<Mutex<TurnState>>,
    stamps: Stamps,
    turn_end: Option<watch::Sender<Option<String>>>,
) {
    while let Some(event) = events.recv().await {
        let is_stderr =
            matches!(&event.kind, EventKind::Log(log) if log.source == LogSource::Stderr);
        let stamp = if event.direction == Direction::FromAgent {
            let mut q = lock(&stamps);
            if is_stderr {
                q.stderr.pop_front().map(|t| (true, t))
            } else {
                q.stdout.pop_front().map(|t| (false, t))
            }
        } else {
            None
        };
        {
            let mut s = lock(&state);
            s.observe(&event);
            s.queued_seq = event.seq;
            match &stamp {
                Some((true, ts)) => s.queued_cursors.stderr.clone_from(ts),
                Some((false, ts)) => s.queued_cursors.stdout.clone_from(ts),
                None => {}
            }
        }
        if is_stderr && let EventKind::Log(log) = &event.kind {
            let _ = logs.try_send(LogLine {
                at: event.timestamp,
                stream: "stderr".into(),
                line: log.line.clone(),
            });
        }
        if let Some(tx) = &turn_end
            && event.direction == Direction::FromAgent
            && event.raw.get("method").is_none()
            && event.raw.get("id").is_some_and(|id| !id.is_null())
        {
            let stop = if let Some(result) = event.raw.get("result") {
                result
                    .get("stopReason")
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
            } else {
                event.raw.get("error").map(|_| "error".to_string())
            };
            if let Some(stop) = stop {
                let _ = tx.send(Some(stop));
            }
        }
        if out.send((event, stamp)).await.is_err() {
            break;
        }
    }
}

/// What the attempts of one turn share with its end: the container, the
/// task copying its Docker log, and why that log broke off.
#[derive(Default)]
struct Slots {
    container: Mutex<Option<String>>,
    demux: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Set when the log stream failed because the engine stopped answering
    /// (rather than ending with the container's output).
    log_error: Mutex<Option<String>>,
}

/// Splits the followed Docker log: stdout bytes to the ACP reader, stderr
/// lines to the client's log events, recording each line's timestamp.
/// Lines at or before `skip` (already published before a restart) are
/// skipped.
async fn demux(
    mut output: LogStream,
    stdout: mpsc::Sender<std::io::Result<Bytes>>,
    client: AcpClient,
    stamps: Stamps,
    skip: LogCursors,
    slots: Arc<Slots>,
) {
    use bollard::container::LogOutput;
    const MAX_STDERR_LINE: usize = 64 * 1024;
    let skip_out = parse_ts(&skip.stdout);
    let skip_err = parse_ts(&skip.stderr);
    let mut err_buf: Vec<u8> = Vec::new();
    let mut out_blank = true;
    while let Some(item) = output.next().await {
        let (is_err, frame) = match item {
            Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => (false, message),
            Ok(LogOutput::StdErr { message }) => (true, message),
            Ok(LogOutput::StdIn { .. }) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "log stream ended");
                if crate::docker::unreachable(&e) {
                    *lock(&slots.log_error) = Some(e.to_string());
                }
                break;
            }
        };
        let Some((stamp, payload)) = split_stamp(&frame) else {
            tracing::warn!("log frame without a timestamp skipped");
            continue;
        };
        let skip = if is_err { skip_err } else { skip_out };
        if let (Some(skip), Some(ts)) = (skip, parse_ts(&stamp))
            && ts <= skip
        {
            continue;
        }
        let complete = payload.ends_with(b"\n");
        if is_err {
            err_buf.extend_from_slice(payload);
            if complete || err_buf.len() > MAX_STDERR_LINE {
                let text = String::from_utf8_lossy(&err_buf).into_owned();
                err_buf.clear();
                lock(&stamps).stderr.push_back(stamp);
                client.log_line(text.trim_end_matches(['\n', '\r'])).await;
            }
        } else {
            out_blank &= payload.iter().all(u8::is_ascii_whitespace);
            if complete {
                if !out_blank {
                    lock(&stamps).stdout.push_back(stamp);
                }
                out_blank = true;
            }
            if stdout
                .send(Ok(Bytes::copy_from_slice(payload)))
                .await
                .is_err()
            {
                break;
            }
        }
    }
    if !err_buf.is_empty() {
        client
            .log_line(String::from_utf8_lossy(&err_buf).into_owned())
            .await;
    }
}

/// Runs one turn to its end and records the outcome. Never panics on agent
/// misbehaviour; every failure ends the instance `failed` with a message.
pub async fn run_turn(
    shared: Shared,
    spec: TurnSpec,
    handle: Arc<RunHandle>,
    on_end: impl FnOnce() + Send,
) {
    let instance = spec.instance.clone();
    let settings = shared.settings.clone();
    let start_seq = u64::try_from(instance.last_seq).unwrap_or(0);
    let state = Arc::new(Mutex::new(TurnState {
        cursors: instance.cursors.clone(),
        progress: instance.progress,
        queued_seq: start_seq,
        queued_cursors: instance.cursors.clone(),
        session_id: instance.acp_session_id.clone(),
        ..TurnState::default()
    }));
    let (events_tx, events_rx) = mpsc::channel(settings.publish_queue);
    let (logs_tx, logs_rx) = mpsc::channel(1024);
    let publisher_task = tokio::spawn(publisher(
        shared.bus.clone(),
        shared.store.clone(),
        instance.clone(),
        events_rx,
        state.clone(),
    ));
    let flush_stop = CancellationToken::new();
    let flusher_task = tokio::spawn(flusher(
        shared.store.clone(),
        instance.id,
        state.clone(),
        Duration::from_millis(settings.seq_flush_ms),
        flush_stop.clone(),
    ));
    let log_task = tokio::spawn(log_writer(
        shared.store.clone(),
        instance.id,
        settings.max_log_lines,
        logs_rx,
    ));

    let slots = Arc::new(Slots::default());
    let timeout = Duration::from_secs(u64::try_from(spec.agent_type.timeout_seconds).unwrap_or(1));
    let result = tokio::select! {
        r = tokio::time::timeout(
            timeout,
            drive_until_done(
                &shared,
                spec,
                &handle,
                &slots,
                events_tx,
                logs_tx.clone(),
                state.clone(),
            ),
        ) => match r {
            Ok(r) => r,
            Err(_) => Err(failed(format!("timed out after {} s", timeout.as_secs()))),
        },
        () = handle.stop.cancelled() => Err(Failure::Stopped),
    };

    // The container goes whatever happened; that also ends the attach
    // stream, the client and so the event pipeline.
    let container = lock(&slots.container).clone();
    let mut exit_code = None;
    if let Some(id) = &container {
        if result.is_ok() {
            // The mock and real agents exit on SIGTERM; give them a moment.
            shared.docker.stop(id, 5).await;
        } else {
            shared.docker.kill(id).await;
        }
        // The attach stream ends once the container's output is fully
        // copied, so no late stderr line is lost.
        let demux = lock(&slots.demux).take();
        if let Some(demux) = demux
            && tokio::time::timeout(Duration::from_secs(10), demux)
                .await
                .is_err()
        {
            tracing::warn!(container = %id, "attach stream did not end after the container stopped");
        }
        exit_code = shared.docker.exit_code(id).await;
        // An engine that is still away keeps the container; the manager
        // removes it when the engine is back (see `AgentManager::reconcile`).
        shared.docker.remove(id).await;
    }
    *lock(&handle.client) = None;
    lock(&handle.asks).clear();
    drop(logs_tx);
    if tokio::time::timeout(Duration::from_secs(30), publisher_task)
        .await
        .is_err()
    {
        tracing::warn!(instance = %instance.id, "event publishing did not drain in 30 s");
    }
    flush_stop.cancel();
    let _ = flusher_task.await;
    let _ = tokio::time::timeout(Duration::from_secs(10), log_task).await;

    let (last_seq, progress, summary, cursors) = {
        let s = lock(&state);
        (
            s.published_seq,
            s.progress,
            s.summary.clone(),
            s.cursors.clone(),
        )
    };
    if last_seq > 0
        && let Err(e) = shared
            .store
            .save_progress(
                instance.id,
                i64::try_from(last_seq).unwrap_or(i64::MAX),
                progress,
                &cursors,
            )
            .await
    {
        tracing::warn!(error = %e, "cannot store last_seq");
    }

    let (status, outcome) = match &result {
        Ok(turn) => (
            InstanceStatus::Completed,
            Outcome {
                stop_reason: turn.stop_reason.clone(),
                exit_code,
                ..Outcome::default()
            },
        ),
        Err(Failure::Failed {
            error,
            exit_code: code,
        }) => (
            InstanceStatus::Failed,
            Outcome {
                error: error.clone(),
                exit_code: code.or(exit_code),
                ..Outcome::default()
            },
        ),
        Err(Failure::Stopped) => (
            InstanceStatus::Stopped,
            Outcome {
                error: String::new(),
                exit_code,
                stop_reason: "stopped".into(),
            },
        ),
    };
    if let Err(e) = shared.store.finish(instance.id, status, &outcome).await {
        tracing::error!(instance = %instance.id, error = %e, "cannot store the outcome");
    }
    let final_instance = shared
        .store
        .get_instance(instance.id)
        .await
        .unwrap_or(instance.clone());
    // Unregistered before the final event, so a follow-up can start at once.
    on_end();
    let _ = handle.done.send(true);
    let bus = shared.bus.as_ref();
    match result {
        Ok(turn) => {
            tracing::info!(instance = %instance.id, stop_reason = %turn.stop_reason, "turn completed");
            publish_lifecycle(bus, &final_instance, AgentEventKind::Completed, |e| {
                e.stop_reason = Some(turn.stop_reason);
                e.acp_session_id = Some(turn.session_id);
                e.summary = Some(summary);
            })
            .await;
        }
        Err(Failure::Failed { error, .. }) => {
            tracing::warn!(instance = %instance.id, %error, "agent failed");
            publish_lifecycle(bus, &final_instance, AgentEventKind::Failed, |e| {
                e.error = Some(error);
                e.exit_code = outcome.exit_code;
            })
            .await;
        }
        Err(Failure::Stopped) => {
            let reason = lock(&handle.stop_reason).clone();
            publish_lifecycle(bus, &final_instance, AgentEventKind::Stopped, |e| {
                e.error = (!reason.is_empty()).then_some(reason);
            })
            .await;
        }
    }
}

/// Drives the turn to its end. When the Docker engine goes away mid-turn
/// (a restart, a crash), waits up to `engine_grace_secs` for it to answer
/// again: an agent that survived (the engine's live restore) is
/// re-attached and its stream goes on from the last queued event; one the
/// restart stopped or removed ends the turn `failed`, saying so.
async fn drive_until_done(
    shared: &Shared,
    mut spec: TurnSpec,
    handle: &Arc<RunHandle>,
    slots: &Arc<Slots>,
    events_tx: mpsc::Sender<Stamped>,
    logs_tx: mpsc::Sender<LogLine>,
    state: Arc<Mutex<TurnState>>,
) -> Result<TurnResult, Failure> {
    loop {
        *lock(&slots.log_error) = None;
        let attempt = drive(
            shared,
            &spec,
            handle,
            slots,
            events_tx.clone(),
            logs_tx.clone(),
            state.clone(),
        )
        .await;
        let (during, error) = match attempt {
            Ok(turn) => return Ok(turn),
            Err(Interruption::Failure(failure)) => return Err(failure),
            Err(Interruption::EngineLost { during, error }) => (during, error),
        };
        let Some(id) = lock(&slots.container).clone() else {
            return Err(failed(format!("{during}: {error}")));
        };
        let grace = Duration::from_secs(shared.settings.engine_grace_secs);
        tracing::warn!(instance = %spec.instance.id, container = %id, %error, "lost the Docker engine during {during}; waiting {} s for it", grace.as_secs());
        if let Err(last) = shared.docker.wait_reachable(grace).await {
            return Err(failed(format!(
                "the Docker engine went away during {during} and did not answer again within {} s ({last})",
                grace.as_secs()
            )));
        }
        let session = lock(&state).session_id.clone();
        let restarted = format!("the Docker engine restarted during {during}");
        match shared.docker.state(&id).await {
            Ok(ContainerState::Running) if !session.is_empty() => {}
            Ok(ContainerState::Running) => {
                return Err(failed(format!(
                    "{restarted}, before the ACP session was set up"
                )));
            }
            Ok(ContainerState::Exited(code)) => {
                let code_text = code
                    .map(|c| format!(" (exit code {c})"))
                    .unwrap_or_default();
                return Err(Failure::Failed {
                    error: format!("{restarted} and stopped the agent{code_text}"),
                    exit_code: code,
                });
            }
            Ok(ContainerState::Missing) => {
                return Err(failed(format!(
                    "{restarted} and the agent's container is gone"
                )));
            }
            Err(e) => return Err(failed(format!("{restarted}: {e}"))),
        }
        // The agent survived the restart: re-attach and read its log from
        // the last line the earlier client consumed, numbering on.
        let (queued_seq, queued_cursors) = {
            let s = lock(&state);
            (s.queued_seq, s.queued_cursors.clone())
        };
        tracing::info!(instance = %spec.instance.id, container = %id, "the Docker engine is back and the agent still runs; re-attaching");
        spec.instance.last_seq = i64::try_from(queued_seq).unwrap_or(i64::MAX);
        spec.instance.cursors = queued_cursors;
        spec.instance.sync_event = None;
        spec.instance.acp_session_id = session;
        spec.instance.container_id.clone_from(&id);
        spec.reattach = Some(id);
    }
}

fn policy(
    kind: PermissionPolicyKind,
    settings: &Settings,
    handle: &Arc<RunHandle>,
) -> Arc<dyn PermissionPolicy> {
    match kind {
        PermissionPolicyKind::AutoApprove => Arc::new(AutoApprove),
        PermissionPolicyKind::Deny => Arc::new(Deny),
        PermissionPolicyKind::Ask => {
            let (decider, mut asks) = AskDecider::new(
                Duration::from_secs(settings.permission_timeout_secs.max(1)),
                PermissionDecision::Cancel,
                64,
            );
            let handle = handle.clone();
            tokio::spawn(async move {
                while let Some(ask) = asks.recv().await {
                    let key = ask_key(&ask.request_id);
                    lock(&handle.asks).insert(key, ask);
                }
            });
            Arc::new(decider)
        }
    }
}

/// How long an engine that stopped an agent's container may take to go
/// away before the stop counts as someone else's: an engine shutting down
/// stops its containers first (each within its stop timeout), then exits.
const ENGINE_SHUTDOWN_WINDOW: Duration = Duration::from_secs(15);

/// Why the agent's output ended before the turn did: an engine that went
/// away, broke off the log or stopped the container on its way down is not
/// the agent's fault and may be survived; a container stopped by someone
/// else is said so; otherwise the agent exited or closed its output.
/// `since` (unix seconds) bounds the search for who stopped it.
/// `exited_before`: the container had exited before this run attached (the
/// manager was down), so who stopped it is not known beyond the signal.
async fn output_ended(
    docker: &Docker,
    id: &str,
    slots: &Slots,
    during: &str,
    since: i64,
    exited_before: bool,
) -> Interruption {
    let engine_lost = |error: String| Interruption::EngineLost {
        during: during.to_string(),
        error,
    };
    if let Some(error) = lock(&slots.log_error).clone() {
        return engine_lost(error);
    }
    let code = tokio::time::timeout(Duration::from_secs(10), docker.wait_exit(id))
        .await
        .ok()
        .flatten();
    if code.is_none()
        && let Err(e) = docker.state(id).await
        && e.is_unreachable()
    {
        return engine_lost(e.to_string());
    }
    match docker.last_kill_signal(id, since).await {
        Err(e) if e.is_unreachable() => return engine_lost(e.to_string()),
        Ok(Some(signal)) if exited_before => {
            return Failure::Failed {
                error: format!(
                    "the agent's container was stopped (signal {signal}) during {during}"
                ),
                exit_code: code,
            }
            .into();
        }
        Ok(Some(signal)) => {
            if docker.goes_away(ENGINE_SHUTDOWN_WINDOW).await {
                return engine_lost(format!(
                    "the engine stopped the agent (signal {signal}) and went away"
                ));
            }
            return Failure::Failed {
                error: format!(
                    "the agent's container was stopped from outside Kandev (signal {signal}) during {during}"
                ),
                exit_code: code,
            }
            .into();
        }
        Ok(None) | Err(_) => {}
    }
    Failure::Failed {
        error: match code {
            Some(code) => format!("the agent exited with code {code} during {during}"),
            None => format!("the agent closed its output during {during}"),
        },
        exit_code: code,
    }
    .into()
}

/// Ends a client whose agent's engine went away: once it is shut down and
/// its last events are queued, the turn state says where a re-attached
/// client goes on.
async fn abandon(
    client: &AcpClient,
    handle: &RunHandle,
    drain: tokio::task::JoinHandle<()>,
    interruption: Interruption,
) -> Interruption {
    if matches!(interruption, Interruption::EngineLost { .. }) {
        *lock(&handle.client) = None;
        lock(&handle.asks).clear();
        client.shutdown().await;
        let _ = drain.await;
    }
    interruption
}

async fn drive(
    shared: &Shared,
    spec: &TurnSpec,
    handle: &Arc<RunHandle>,
    slots: &Arc<Slots>,
    events_tx: mpsc::Sender<Stamped>,
    logs_tx: mpsc::Sender<LogLine>,
    state: Arc<Mutex<TurnState>>,
) -> Result<TurnResult, Interruption> {
    let docker = &shared.docker;
    let settings = &shared.settings;
    let instance = &spec.instance;
    let docker_failed = |e: crate::docker::DockerError| failed(e.to_string());
    // Who stopped the container is looked up from a second before the turn.
    let since = instance
        .started_at
        .unwrap_or(instance.created_at)
        .timestamp()
        - 1;

    let id = match &spec.reattach {
        Some(id) => id.clone(),
        None => docker
            .create(&spec.container)
            .await
            .map_err(docker_failed)?,
    };
    *lock(&slots.container) = Some(id.clone());
    if spec.reattach.is_none()
        && let Err(e) = shared.store.set_container(instance.id, &id).await
    {
        tracing::warn!(error = %e, "cannot store container id");
    }
    // An agent that exited while no manager ran only has its log to replay.
    let exited = spec.reattach.is_some() && docker.is_running(&id).await != Some(true);
    let input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>> = if exited {
        Box::pin(tokio::io::sink())
    } else {
        let attach = docker.attach(&id).await.map_err(docker_failed)?;
        // Only stdin is attached; hold the (silent) output half until the end.
        let mut attach_output = attach.output;
        tokio::spawn(async move { while attach_output.next().await.is_some() {} });
        attach.input
    };

    let (stdout_tx, stdout_rx) = mpsc::channel::<std::io::Result<Bytes>>(64);
    let reader = StreamReader::new(tokio_stream::wrappers::ReceiverStream::new(stdout_rx));
    let offers = |cap: &str| spec.agent_type.capabilities.iter().any(|c| c == cap);
    let workspace = if offers("fs") {
        Some(
            Workspace::new(&spec.workspace, CONTAINER_WORKSPACE)
                .map_err(|e| failed(format!("workspace {:?}: {e}", spec.workspace)))?,
        )
    } else {
        None
    };
    let terminal: Option<Arc<dyn kandev_acp::TerminalExecutor>> = if offers("terminal") {
        Some(Arc::new(DockerExec::new(docker.clone(), id.clone())))
    } else {
        None
    };
    let options = ClientOptions {
        start_seq: u64::try_from(instance.last_seq).unwrap_or(0) + 1,
        initialize_timeout: Duration::from_secs(settings.initialize_timeout_secs),
        permission: policy(spec.agent_type.permission_policy, settings, handle),
        workspace,
        terminal,
        ..ClientOptions::default()
    };
    let (client, events) = AcpClient::connect(reader, input, options);
    let stamps = Stamps::default();
    let (turn_tx, mut turn_rx) = watch::channel(None::<String>);
    let resumed = spec.reattach.is_some();
    let drain_task = tokio::spawn(drain(
        events,
        events_tx,
        logs_tx,
        state.clone(),
        stamps.clone(),
        resumed.then_some(turn_tx),
    ));
    *lock(&handle.client) = Some(client.clone());

    if resumed {
        *lock(&handle.session) = instance.acp_session_id.clone();
        // The last sync point may not have been published before the crash.
        if let Some(envelope) = &instance.sync_event
            && let (Some(subject), Some(event_id)) = (
                envelope["type"].as_str(),
                envelope["id"]
                    .as_str()
                    .and_then(|i| Uuid::parse_str(i).ok()),
            )
            && let Ok(bytes) = serde_json::to_vec(envelope)
        {
            publish_retrying(shared.bus.as_ref(), subject, event_id, bytes.into()).await;
        }
        // Re-read the log from the stored position; earlier lines are
        // skipped, so numbering continues at last_seq + 1.
        let cursors = &instance.cursors;
        let since = [&cursors.stdout, &cursors.stderr]
            .iter()
            .map(|c| parse_ts(c).map_or(0, |t| t.timestamp()))
            .min()
            .unwrap_or(0);
        let output = docker.follow_logs(&id, i32::try_from(since).unwrap_or(0));
        *lock(&slots.demux) = Some(tokio::spawn(demux(
            output,
            stdout_tx,
            client.clone(),
            stamps,
            cursors.clone(),
            slots.clone(),
        )));
        tracing::info!(instance = %instance.id, container = %id, "re-attached");
        let turn_ended = async {
            turn_rx
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|stop| stop.clone())
        };
        let ended = tokio::select! {
            biased;
            stop = turn_ended => stop,
            () = client.closed() => None,
        };
        let ended = match ended {
            Some(stop) => Some(stop),
            // The output ended; the drain may still be on the last lines.
            None => tokio::time::timeout(Duration::from_secs(5), async {
                turn_rx
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|stop| stop.clone())
            })
            .await
            .ok()
            .flatten(),
        };
        let Some(stop_reason) = ended else {
            let during = if exited {
                "the turn, while the manager was not running"
            } else {
                "the turn"
            };
            let failure = output_ended(docker, &id, slots, during, since, exited).await;
            return Err(abandon(&client, handle, drain_task, failure).await);
        };
        return Ok(TurnResult {
            session_id: instance.acp_session_id.clone(),
            stop_reason,
        });
    }

    docker.start(&id).await.map_err(docker_failed)?;
    *lock(&slots.demux) = Some(tokio::spawn(demux(
        docker.follow_logs(&id, 0),
        stdout_tx,
        client.clone(),
        stamps,
        LogCursors::default(),
        slots.clone(),
    )));
    let mut started = instance.clone();
    started.container_id = id.clone();
    publish_lifecycle(
        shared.bus.as_ref(),
        &started,
        AgentEventKind::Started,
        |_| {},
    )
    .await;

    let crashed = |what: &'static str, err: AcpError| {
        let id = id.clone();
        async move {
            if matches!(err, AcpError::Closed { .. }) {
                output_ended(docker, &id, slots, what, since, exited).await
            } else {
                failed(format!("{what} failed: {err}")).into()
            }
        }
    };

    if let Err(e) = client.initialize().await {
        let failure = match e {
            AcpError::Timeout { .. } => failed(format!(
                "the agent did not answer initialize within {} s",
                settings.initialize_timeout_secs
            ))
            .into(),
            e => crashed("initialize", e).await,
        };
        return Err(abandon(&client, handle, drain_task, failure).await);
    }
    let session = match &spec.resume_session {
        Some(session_id) => {
            client
                .load_session(session_id, CONTAINER_WORKSPACE, vec![])
                .await
        }
        None => client.new_session(CONTAINER_WORKSPACE, vec![]).await,
    };
    let session = match session {
        Ok(s) => s,
        Err(AcpError::AuthRequired { message, .. }) => {
            let needs = if spec.agent_type.required_env.is_empty() {
                "credentials for the agent".to_string()
            } else {
                spec.agent_type.required_env.join(", ")
            };
            return Err(failed(format!(
                "the agent requires authentication ({message}); provide {needs}"
            ))
            .into());
        }
        Err(e) => {
            let failure = crashed("session setup", e).await;
            return Err(abandon(&client, handle, drain_task, failure).await);
        }
    };
    lock(&state).session_id.clone_from(&session.session_id);
    if let Err(e) = shared
        .store
        .set_running(instance.id, &session.session_id)
        .await
    {
        tracing::warn!(error = %e, "cannot store session id");
    }
    let mut running = started.clone();
    running.acp_session_id = session.session_id.clone();
    publish_lifecycle(
        shared.bus.as_ref(),
        &running,
        AgentEventKind::Running,
        |_| {},
    )
    .await;

    let stop = match client.prompt(vec![spec.prompt.clone().into()]).await {
        Ok(stop) => stop,
        Err(AcpError::TurnFailed(why)) => {
            return Err(failed(format!("the turn failed: {why}")).into());
        }
        Err(e) => {
            let failure = crashed("the turn", e).await;
            return Err(abandon(&client, handle, drain_task, failure).await);
        }
    };
    let stop_reason = serde_json::to_value(stop)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{stop:?}"));
    Ok(TurnResult {
        session_id: session.session_id,
        stop_reason,
    })
}
