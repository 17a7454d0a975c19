//! One prompt turn of one agent instance in its own container: create,
//! attach, start, drive ACP, publish every event, end the instance.
//!
//! # Layout
//! - [`output`]: the agent's output, live from the attach stream or
//!   re-read from the Docker log after a restart, split into stdout bytes
//!   for the ACP client and stderr lines, each line numbered.
//! - [`pipeline`]: the event pipeline. A drain pairs each event with the
//!   output line it came from and keeps the turn's state; a publisher sends
//!   events to the bus in batches, as large as the agent's pace makes them;
//!   a log writer batches stderr into `agent_logs`. Nothing on the read
//!   path waits for the database.
//! - [`progress`]: the published position of every running turn, stored
//!   by one task in one statement per flush.
//! - [`turn`]: driving a turn, either from a fresh container or by
//!   resuming one that runs (or ran) without a client.
//! - [`conversation`]: each task's prompts and the agent's replies, and
//!   the summary of them that starts a new session when the agent cannot
//!   load its old one.
//! - [`recovery`]: riding out a Docker engine that goes away mid-turn, and
//!   telling why an agent's output ended.

mod conversation;
mod interrupt;
mod modes;
mod output;
mod pipeline;
mod profile;
mod progress;
mod recovery;
mod turn;

use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use kandev_acp::{
    AcpClient, AcpError, AskDecider, AutoApprove, Deny, LifecyclePhase, PermissionAsk,
    PermissionDecision, PermissionPolicy,
};
use kandev_common::sync::lock;
use kandev_events::{
    Envelope, EventBus,
    agent::{AgentEventKind, AgentLifecycle},
    subjects,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use uuid::Uuid;

use crate::{
    config::Settings,
    docker::{ContainerSpec, Docker},
    domain::{AgentInstance, AgentType, InstanceStatus, PermissionPolicyKind},
    store::{Outcome, Store},
};
use pipeline::Pipeline;
pub use progress::ProgressBook;

/// Where the workspace appears in every agent container.
pub const CONTAINER_WORKSPACE: &str = "/workspace";

/// The longest summary and error an `agent.*` event carries; the full text
/// stays in the feed.
const MAX_LIFECYCLE_TEXT: usize = 16 * 1024;

/// What every run needs.
#[derive(Clone)]
pub struct Shared {
    pub docker: Docker,
    pub store: Store,
    pub bus: Arc<dyn EventBus>,
    pub settings: Arc<Settings>,
    /// Where every running turn stands, flushed together.
    pub progress: Arc<ProgressBook>,
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
    /// of creating one; its output is re-read from the stored position and
    /// numbered from `last_seq + 1`.
    pub reattach: Option<String>,
    /// The task's agent profile, resolved for this run: its MCP servers go
    /// in `session/new` / `session/load`, its mode and model are set, its
    /// instructions prepended to a new session's first prompt.
    pub profile: Option<Arc<crate::profiles::ResolvedProfile>>,
}

/// The manager's handle on a running turn.
pub struct RunHandle {
    client: Mutex<Option<AcpClient>>,
    /// The ACP session of a re-attached turn, for `session/cancel`.
    session: Mutex<String>,
    stop: CancellationToken,
    stop_reason: Mutex<String>,
    asks: Mutex<HashMap<String, PermissionAsk>>,
    /// Follow-up prompts sent while the turn runs, prompted in the same
    /// session when it ends; `None` once the run takes no more (dropped,
    /// with the prompts, when the turn ends, is cancelled or stopped).
    queued: Mutex<Option<PromptQueue>>,
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
            queued: Mutex::new(Some(PromptQueue::default())),
            done: watch::channel(false).0,
        }
    }
}

/// The longest follow-up prompt (the gateway's default body limit).
pub const MAX_PROMPT_BYTES: usize = 1024 * 1024;
/// The most follow-ups one run holds while its turn runs.
pub const MAX_QUEUED_PROMPTS: usize = 16;
/// The most bytes of follow-ups one run holds while its turn runs.
pub const MAX_QUEUED_PROMPT_BYTES: usize = 4 * 1024 * 1024;

/// Why a follow-up was not queued behind the running turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueRefusal {
    /// The run is ending and takes no more: the prompt starts the next turn.
    Closed,
    /// The run already holds its most follow-ups ([`MAX_QUEUED_PROMPTS`]
    /// or [`MAX_QUEUED_PROMPT_BYTES`]); `waiting` of them.
    Full { waiting: usize },
}

/// The follow-ups of a run, in order, bounded in count and bytes.
#[derive(Debug, Default)]
struct PromptQueue {
    prompts: VecDeque<String>,
    bytes: usize,
}

impl PromptQueue {
    fn push(&mut self, prompt: String) -> Result<(), QueueRefusal> {
        let waiting = self.prompts.len();
        if waiting >= MAX_QUEUED_PROMPTS || self.bytes + prompt.len() > MAX_QUEUED_PROMPT_BYTES {
            return Err(QueueRefusal::Full { waiting });
        }
        self.bytes += prompt.len();
        self.prompts.push_back(prompt);
        Ok(())
    }

    fn pop(&mut self) -> Option<String> {
        let next = self.prompts.pop_front()?;
        self.bytes -= next.len();
        Some(next)
    }
}

/// At most this much of a queued prompt is repeated in its feed event.
const QUEUED_DETAIL_MAX: usize = 4096;

fn bounded_detail(text: &str) -> String {
    if text.len() <= QUEUED_DETAIL_MAX {
        return text.to_owned();
    }
    let mut end = QUEUED_DETAIL_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &text[..end], text.len() - end)
}

/// The key of a permission request id (JSON text, normalized).
pub fn ask_key(request_id: &serde_json::Value) -> String {
    request_id.to_string()
}

impl RunHandle {
    /// Sends `session/cancel`; false when no session is up yet. Once sent,
    /// the queued follow-ups are dropped (a cancelled turn sends none), and
    /// a prompt sent from then on starts the next turn.
    pub async fn cancel(&self) -> Result<bool, AcpError> {
        let client = lock(&self.client).clone();
        let Some(client) = client else {
            return Ok(false);
        };
        let session = lock(&self.session).clone();
        if client.dialect().is_none() && !session.is_empty() {
            // A re-attached client never saw the handshake: send the v1
            // notification for the stored session itself.
            client
                .notify(
                    "session/cancel",
                    serde_json::json!({ "sessionId": session }),
                )
                .await?;
        } else if client.dialect().is_none() {
            // Still in the handshake: there is no turn to cancel yet.
            return Ok(false);
        } else {
            client.cancel().await?;
        }
        self.drop_queue(Some(&client), "the turn was cancelled")
            .await;
        Ok(true)
    }

    /// Kills the turn; the run ends the instance `stopped`, its queued
    /// follow-ups dropped.
    pub fn stop(&self, reason: &str) {
        *lock(&self.stop_reason) = reason.to_string();
        let dropped = self.close_queue();
        if dropped > 0 {
            tracing::info!(dropped, "queued prompts dropped: the run is stopped");
        }
        self.stop.cancel();
    }

    /// Closes and drops the queue, saying in the feed how many prompts it
    /// held.
    async fn drop_queue(&self, client: Option<&AcpClient>, why: &str) {
        let dropped = self.close_queue();
        if dropped == 0 {
            return;
        }
        tracing::info!(dropped, why, "queued prompts dropped");
        if let Some(client) = client {
            let detail = format!("{dropped} queued prompt(s) not sent: {why}");
            client
                .lifecycle(LifecyclePhase::QueueDropped, Some(detail))
                .await;
        }
    }

    /// Answers an open permission request as `by` (a username; empty:
    /// nobody named). `None` when there is none with this id, `Some(false)`
    /// when it came too late.
    pub fn respond(&self, key: &str, decision: PermissionDecision, by: &str) -> Option<bool> {
        let ask = lock(&self.asks).remove(key)?;
        Some(ask.respond_by(decision, by))
    }

    /// Queues a follow-up prompt for the running turn: it is sent in the
    /// same ACP session once the current prompt ends (not when it is
    /// cancelled), and shows in the feed as queued meanwhile. Refused when
    /// the run is ending, or already holds its most follow-ups.
    pub async fn queue_prompt(&self, prompt: String) -> Result<(), QueueRefusal> {
        let detail = bounded_detail(&prompt);
        lock(&self.queued)
            .as_mut()
            .ok_or(QueueRefusal::Closed)?
            .push(prompt)?;
        let client = lock(&self.client).clone();
        if let Some(client) = client {
            client
                .lifecycle(LifecyclePhase::PromptQueued, Some(detail))
                .await;
        }
        Ok(())
    }

    /// The next queued prompt; when there is none the queue closes, so a
    /// prompt sent from now on starts a new turn instead.
    fn next_prompt(&self) -> Option<String> {
        let mut queued = lock(&self.queued);
        let next = queued.as_mut().and_then(PromptQueue::pop);
        if next.is_none() {
            *queued = None;
        }
        next
    }

    /// Closes the queue and drops what it held, returning how many prompts
    /// that was.
    fn close_queue(&self) -> usize {
        lock(&self.queued).take().map_or(0, |q| q.prompts.len())
    }

    /// Waits until the run has ended the instance.
    pub async fn wait_done(&self) {
        let mut rx = self.done.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }
}

/// Why a turn did not complete.
#[derive(Debug)]
enum Failure {
    Failed {
        error: String,
        exit_code: Option<i64>,
        /// Whether running it again may succeed: false for the agent's own
        /// answer (an error reply to the prompt, a session it does not
        /// know, authentication it needs), which would be the same again.
        retryable: bool,
    },
    Stopped,
}

fn failed(error: impl Into<String>) -> Failure {
    Failure::Failed {
        error: error.into(),
        exit_code: None,
        retryable: true,
    }
}

/// A failure that running the turn again would repeat (see
/// [`Failure::Failed::retryable`]).
fn refused(error: impl Into<String>) -> Failure {
    Failure::Failed {
        error: error.into(),
        exit_code: None,
        retryable: false,
    }
}

/// How one attempt at a turn ended without completing it.
#[derive(Debug)]
enum Interruption {
    Failure(Failure),
    /// The Docker engine stopped answering (or broke off the agent's
    /// output) during `during`; the turn may survive it.
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

/// What the attempts of one turn share with its end: the container, the
/// task copying its output, and why that output broke off.
#[derive(Default)]
struct Slots {
    container: Mutex<Option<String>>,
    demux: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Set when the output stream failed because the engine stopped
    /// answering (rather than ending with the container's output).
    output_error: Mutex<Option<String>>,
    /// When the agent last wrote anything (stdout or stderr).
    last_output: Mutex<Option<std::time::Instant>>,
    /// The prompts sent to the agent, in order (without a summary put
    /// before one).
    sent_prompts: Mutex<Vec<String>>,
}

/// How long an agent's output must stay quiet after its turn ended before
/// its container is stopped: lines it writes just after the prompt's
/// response (late updates) are still read and published.
const AFTER_TURN_QUIET: Duration = Duration::from_millis(250);
/// The longest an agent that keeps writing after its turn ended is waited
/// for.
const AFTER_TURN_MAX: Duration = Duration::from_secs(2);

/// After a completed turn: waits until the agent's output has been quiet
/// for [`AFTER_TURN_QUIET`] (at most [`AFTER_TURN_MAX`]) or has ended;
/// whether it ended (the agent exited by itself).
///
/// Real adapters (claude-agent-acp, codex-acp) neither exit when their
/// input ends nor on SIGTERM (Node as PID 1), so the container is then
/// killed at once rather than after a grace period: everything the agent
/// wrote before is still in the output stream, which is read to its end.
async fn settle_after_turn(slots: &Slots) -> bool {
    let started = std::time::Instant::now();
    loop {
        match lock(&slots.demux).as_ref() {
            Some(demux) if demux.is_finished() => return true,
            Some(_) => {}
            None => return false,
        }
        let quiet = lock(&slots.last_output).map_or(AFTER_TURN_QUIET, |at| at.elapsed());
        let waited = started.elapsed();
        if quiet >= AFTER_TURN_QUIET || waited >= AFTER_TURN_MAX {
            return false;
        }
        let wait = (AFTER_TURN_QUIET - quiet)
            .min(AFTER_TURN_MAX - waited)
            .min(Duration::from_millis(50));
        tokio::time::sleep(wait).await;
    }
}

/// Publishes until the bus has stored the event, retrying with backoff;
/// the envelope id stays the same, so the bus drops duplicates. Gives up
/// only when `stop` fires (the manager shuts down; a restarted one
/// publishes again from its stored position).
async fn publish_retrying(
    bus: &dyn EventBus,
    subject: &str,
    id: Uuid,
    payload: Bytes,
    stop: &CancellationToken,
) -> bool {
    let mut delay = Duration::from_millis(100);
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match bus.publish(subject, id, payload.clone()).await {
            Ok(()) => return true,
            Err(e) => {
                if attempt == 1 || attempt.is_multiple_of(10) {
                    tracing::warn!(subject, attempt, error = %e, "publish failed, retrying");
                }
                tokio::select! {
                    () = stop.cancelled() => {
                        tracing::error!(subject, %id, "not published: the manager is shutting down");
                        return false;
                    }
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// `text` cut to at most `max` bytes (at a character boundary), saying so.
pub(crate) fn bounded_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}… [truncated: {} of {} bytes shown; the whole text is in the task's feed]",
        &text[..cut],
        cut,
        text.len()
    )
}

/// Publishes an `agent.*` lifecycle event of an instance. Its summary and
/// error are bounded, so the event always fits the bus.
pub async fn publish_lifecycle(
    bus: &dyn EventBus,
    instance: &AgentInstance,
    kind: AgentEventKind,
    fill: impl FnOnce(&mut AgentLifecycle),
) {
    let mut payload =
        AgentLifecycle::new(kind, instance.task_id, instance.id, &instance.agent_type);
    payload.container_id =
        (!instance.container_id.is_empty()).then(|| instance.container_id.clone());
    payload.acp_session_id =
        (!instance.acp_session_id.is_empty()).then(|| instance.acp_session_id.clone());
    payload.last_seq = u64::try_from(instance.last_seq).unwrap_or(0);
    fill(&mut payload);
    for text in [&mut payload.summary, &mut payload.error]
        .into_iter()
        .flatten()
    {
        if text.len() > MAX_LIFECYCLE_TEXT {
            *text = bounded_text(text, MAX_LIFECYCLE_TEXT);
        }
    }
    let turn = u64::try_from(instance.turns).unwrap_or(0);
    let mut envelope = Envelope::new(kind.subject(), payload);
    envelope.id = envelope.data.event_id(turn);
    match envelope.to_bytes() {
        Ok(bytes) => {
            publish_retrying(
                bus,
                kind.subject(),
                envelope.id,
                bytes.into(),
                &CancellationToken::new(),
            )
            .await;
        }
        Err(e) => tracing::error!(error = %e, "cannot serialize lifecycle event"),
    }
}

/// Where a turn resumed by a new manager goes on: the stored position, or
/// the last batch the bus holds for the task when that is further (the
/// stored position is written periodically, the bus on every publish). The
/// stored sync event is dropped when the bus already has it.
pub async fn resume_point(bus: &dyn EventBus, instance: &mut AgentInstance) {
    let subject = subjects::acp_message(&instance.task_id);
    let last = match bus.last_message(&subject).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the last published batch; resuming from the stored position");
            return;
        }
    };
    let json = match kandev_events::pack::unpack(&last) {
        Ok(json) => json,
        Err(e) => {
            tracing::warn!(error = %e, "the last published batch is damaged; resuming from the stored position");
            return;
        }
    };
    let Ok(envelope) = kandev_events::agent::read_batch(&json) else {
        return;
    };
    let batch = envelope.data;
    if batch.instance_id != instance.id || batch.events.is_empty() {
        return;
    }
    let published = i64::try_from(batch.last_seq()).unwrap_or(i64::MAX);
    if published >= instance.last_seq {
        tracing::info!(instance = %instance.id, stored = instance.last_seq, published, "resuming after the last published batch");
        instance.last_seq = published;
        instance.cursor = batch.cursor;
        instance.sync_event = None;
    }
}

/// The permission policy of a turn. Under `ask`, each question is kept for
/// `respond_permission` and published as `agent.waiting_for_input`, so the
/// task shows that a person is needed.
fn policy(
    kind: PermissionPolicyKind,
    shared: &Shared,
    instance: &AgentInstance,
    handle: &Arc<RunHandle>,
) -> Arc<dyn PermissionPolicy> {
    let settings = &shared.settings;
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
            let bus = shared.bus.clone();
            let instance = instance.clone();
            tokio::spawn(
                async move {
                    while let Some(ask) = asks.recv().await {
                        let key = ask_key(&ask.request_id);
                        let title = ask.request.tool_call.fields.title.clone();
                        lock(&handle.asks).insert(key.clone(), ask);
                        publish_lifecycle(&*bus, &instance, AgentEventKind::WaitingForInput, |e| {
                            e.request_id = Some(key);
                            e.summary = title;
                        })
                        .await;
                    }
                }
                .in_current_span(),
            );
            Arc::new(decider)
        }
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
    let pipeline = Pipeline::start(&shared, &instance);
    let slots = Arc::new(Slots::default());
    let timeout = Duration::from_secs(u64::try_from(spec.agent_type.timeout_seconds).unwrap_or(1));
    let result = tokio::select! {
        r = tokio::time::timeout(
            timeout,
            recovery::drive_until_done(&shared, spec, &handle, &slots, &pipeline),
        ) => match r {
            Ok(r) => r,
            Err(_) => Err(failed(format!("timed out after {} s", timeout.as_secs()))),
        },
        () = handle.stop.cancelled() => Err(Failure::Stopped),
    };

    // The container goes whatever happened; that also ends the output
    // stream, the client and so the event pipeline.
    let exit_code = remove_container(&shared, &slots, result.is_ok()).await;
    // The client is taken, not cloned: the event pipeline ends only when
    // its last handle goes.
    let client = lock(&handle.client).take();
    handle
        .drop_queue(client.as_ref(), "the turn ended first")
        .await;
    drop(client);
    lock(&handle.asks).clear();
    let summary = pipeline.finish(&shared.store, instance.id).await;
    let sent = std::mem::take(&mut *lock(&slots.sent_prompts));
    if !sent.is_empty() {
        conversation::record(&shared, instance.task_id, instance.id, sent, &summary).await;
    }

    let (status, outcome) = outcome(&result, exit_code);
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
    announce_end(&shared, &handle, &final_instance, result, &outcome, summary).await;
}

/// Stops (unless a completed turn's agent exited by itself) and removes
/// the turn's container, once its output is copied: the agent's exit code,
/// when it has one of its own.
async fn remove_container(shared: &Shared, slots: &Slots, completed: bool) -> Option<i64> {
    let id = lock(&slots.container).clone()?;
    // A completed turn's agent is done once its output is quiet: it is
    // killed then, not given a grace period it would only wait out.
    let exited = completed && settle_after_turn(slots).await;
    let stopped_after_turn = completed && !exited;
    if !exited {
        shared.docker.kill(&id).await;
    }
    // The output stream ends once the container's output is fully
    // copied, so no late stderr line is lost.
    let demux = lock(&slots.demux).take();
    if let Some(demux) = demux
        && tokio::time::timeout(Duration::from_secs(10), demux)
            .await
            .is_err()
    {
        tracing::warn!(container = %id, "output stream did not end after the container stopped");
    }
    // An agent killed after its completed turn has no exit code of its own.
    let exit_code = if stopped_after_turn {
        None
    } else {
        shared.docker.exit_code(&id).await
    };
    // An engine that is still away keeps the container; the manager
    // removes it when the engine is back (see `AgentManager::reconcile`).
    shared.docker.remove(&id).await;
    exit_code
}

/// The instance's final status and outcome.
fn outcome(
    result: &Result<TurnResult, Failure>,
    exit_code: Option<i64>,
) -> (InstanceStatus, Outcome) {
    match result {
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
            ..
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
    }
}

/// Publishes how the turn ended: completed, failed or stopped.
async fn announce_end(
    shared: &Shared,
    handle: &RunHandle,
    instance: &AgentInstance,
    result: Result<TurnResult, Failure>,
    outcome: &Outcome,
    summary: String,
) {
    let bus = shared.bus.as_ref();
    match result {
        Ok(turn) => {
            tracing::info!(instance = %instance.id, stop_reason = %turn.stop_reason, "turn completed");
            publish_lifecycle(bus, instance, AgentEventKind::Completed, |e| {
                e.stop_reason = Some(turn.stop_reason);
                e.acp_session_id = Some(turn.session_id);
                e.summary = Some(summary);
            })
            .await;
        }
        Err(Failure::Failed {
            error, retryable, ..
        }) => {
            tracing::warn!(instance = %instance.id, %error, retryable, "agent failed");
            publish_lifecycle(bus, instance, AgentEventKind::Failed, |e| {
                e.error = Some(error);
                e.exit_code = outcome.exit_code;
                e.retryable = Some(retryable);
            })
            .await;
        }
        Err(Failure::Stopped) => {
            let reason = lock(&handle.stop_reason).clone();
            publish_lifecycle(bus, instance, AgentEventKind::Stopped, |e| {
                e.error = (!reason.is_empty()).then_some(reason);
            })
            .await;
        }
    }
}

/// The channel a turn's client events go into (see [`pipeline`]).
type EventSender = mpsc::Sender<pipeline::Positioned>;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_follow_up_queue_is_bounded_in_count_and_bytes_and_dropped_when_closed() {
        let run = RunHandle::default();
        for n in 0..MAX_QUEUED_PROMPTS {
            assert_eq!(run.queue_prompt(format!("prompt {n}")).await, Ok(()));
        }
        assert_eq!(
            run.queue_prompt("one too many".into()).await,
            Err(QueueRefusal::Full {
                waiting: MAX_QUEUED_PROMPTS
            })
        );
        // Taking one makes room for one.
        assert_eq!(run.next_prompt().as_deref(), Some("prompt 0"));
        assert_eq!(run.queue_prompt("room again".into()).await, Ok(()));
        assert_eq!(run.close_queue(), MAX_QUEUED_PROMPTS);
        assert!(lock(&run.queued).is_none(), "the prompts are dropped");
        assert_eq!(
            run.queue_prompt("late".into()).await,
            Err(QueueRefusal::Closed)
        );

        let run = RunHandle::default();
        let mib = "x".repeat(1024 * 1024);
        let fit = MAX_QUEUED_PROMPT_BYTES / mib.len();
        for _ in 0..fit {
            assert_eq!(run.queue_prompt(mib.clone()).await, Ok(()));
        }
        assert_eq!(
            run.queue_prompt("y".into()).await,
            Err(QueueRefusal::Full { waiting: fit })
        );
        run.stop("test");
        assert!(lock(&run.queued).is_none(), "stop drops the queue");
    }
}
