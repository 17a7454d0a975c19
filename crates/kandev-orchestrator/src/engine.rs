//! The orchestration engine: the persisted launch queue, concurrency limits,
//! launching through the agent manager, and the reactions to `task.*` and
//! `agent.*` events. Every decision runs under one lock, with the
//! `executions` table as the truth, so a restart picks up where it stopped.
//!
//! Here: the queue and launching. Beside it: `events` (the reactions),
//! `orchestration` (the calls of the adapters), `store` (every statement),
//! `slots` (the limits, pure), `failover` (runs of a pool's gone managers),
//! `followups` (follow-ups held until a turn ends), `board`, `review`,
//! `ci` (the checks of pushed work, "Fix CI") and `workspaces`.
//!
//! Each run is for one user (`run_as`, stored with its queue entry): the
//! agent manager gives its container that user's stored secrets and agent
//! home volume. It is the person who started it (start, a follow-up that
//! needs a new run, request changes), the creator for a task auto-started
//! at creation, and, for a run no person started, the board's owner; never
//! the task's creator merely for having filed it.

mod board;
pub mod ci;
mod events;
mod failover;
pub mod followups;
mod orchestration;
pub mod review;
pub mod signals;
mod slots;
pub mod store;
pub mod trackers;
mod workspaces;

use std::sync::Arc;

use chrono::Utc;
use kandev_common::trace::TracedChannel;
use kandev_events::{TaskState, task::TaskSnapshot};
use kandev_proto::v1::{self as pb, task_service_client::TaskServiceClient};
use serde_json::{Value, json};
use tracing::Instrument as _;
use uuid::Uuid;

use self::signals::BoardSignals;
use crate::{
    clients::AgentControl,
    config::Settings,
    domain::{ExecState, ExecutionView, OrchestratorError, Result},
    feed::{FeedHub, Fence},
    leader::DecisionLock,
};

pub use self::store::Execution;
use self::{
    slots::Slots,
    store::{Enqueue, ExecutionStore},
};

/// The actor name of every change the orchestrator makes.
pub const ACTOR: &str = "orchestrator";

const ORIGIN_ELIGIBLE: &str = "eligible";
const ORIGIN_MANUAL: &str = "manual";

/// The fields of a task the engine needs, from an event or from GetTask.
#[derive(Debug, Clone)]
struct TaskFacts {
    id: Uuid,
    state: TaskState,
    priority: i32,
    agent_type: Option<String>,
    max_retries: i32,
    autostart: bool,
    /// Waiting for a blocker to complete (issue 41): not started by itself.
    blocked: bool,
}

impl From<&TaskSnapshot> for TaskFacts {
    fn from(t: &TaskSnapshot) -> Self {
        TaskFacts {
            id: t.id,
            state: t.state,
            priority: t.priority,
            agent_type: t.agent_type.clone().filter(|a| !a.is_empty()),
            max_retries: t.max_retries,
            autostart: t.autostart,
            blocked: t.blocked,
        }
    }
}

fn eligible(t: &TaskFacts) -> bool {
    t.state == TaskState::Todo && t.agent_type.is_some() && t.autostart && !t.blocked
}

/// Whether `actor` names a person: not empty (an internal caller), not
/// the orchestrator itself, not a board's workflow.
fn is_person(actor: &str) -> bool {
    !actor.is_empty() && actor != ACTOR && actor != kandev_events::task::WORKFLOW_ACTOR
}

/// The state of a task read over gRPC; the task service never sends an
/// unknown one, so one is an internal error.
fn task_state(task: &pb::Task) -> Result<TaskState> {
    TaskState::from_proto(task.state)
        .map_err(|e| OrchestratorError::Internal(format!("task {}: {e}", task.id)))
}

/// The engine; cheap to share behind an `Arc`.
pub struct Engine {
    store: Arc<dyn ExecutionStore>,
    settings: Arc<Settings>,
    agents: Arc<dyn AgentControl>,
    tasks: TaskServiceClient<TracedChannel>,
    hub: Arc<FeedHub>,
    /// `board.<board_id>`: a card changed (set once at start, see
    /// [`Engine::signal_boards_on`]).
    signals: std::sync::OnceLock<Arc<BoardSignals>>,
    /// Instances whose run moved to another manager.
    fence: Arc<Fence>,
    /// Decisions of every replica, one at a time.
    lock: DecisionLock,
    /// For forges' REST APIs.
    http: reqwest::Client,
    /// Agent types `kandev_running_agents` has a series for: only types
    /// that ran (a made-up type never launches), so its labels stay bounded
    /// by the registry however many types tasks name.
    gauged_types: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Engine {
    /// The engine over its stored executions, deciding under `lock`.
    pub fn new(
        store: Arc<dyn ExecutionStore>,
        lock: DecisionLock,
        settings: Arc<Settings>,
        agents: Arc<dyn AgentControl>,
        tasks: TaskServiceClient<TracedChannel>,
        hub: Arc<FeedHub>,
        fence: Arc<Fence>,
    ) -> Arc<Self> {
        Arc::new(Engine {
            lock,
            store,
            settings,
            agents,
            tasks,
            hub,
            fence,
            http: reqwest::Client::new(),
            gauged_types: Default::default(),
            signals: std::sync::OnceLock::new(),
        })
    }

    /// Signals every change of a card on `board.<board_id>` of `live`
    /// (see [`signals`]); without it, none is sent.
    pub fn signal_boards_on(&self, live: Arc<dyn kandev_events::live::Live>) {
        let _ = self
            .signals
            .set(BoardSignals::new(live, self.tasks.clone()));
    }

    /// A `task.*` event of `task` was received.
    fn signal_task(&self, task: &TaskSnapshot, deleted: bool) {
        if let Some(s) = self.signals.get() {
            s.task_changed(task.board_id, task.id, deleted);
        }
    }

    /// The execution of `task_id` changed.
    fn signal_execution(&self, task_id: Uuid) {
        if let Some(s) = self.signals.get() {
            s.execution_changed(task_id);
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    async fn execution(&self, task_id: Uuid) -> Result<Option<Execution>> {
        Ok(self.store.get(task_id).await?)
    }

    async fn set_state(&self, task_id: Uuid, state: ExecState) -> Result<()> {
        Ok(self.store.set_state(task_id, state).await?)
    }

    async fn get_task(&self, task_id: Uuid) -> Result<pb::Task> {
        self.tasks
            .clone()
            .get_task(pb::GetTaskRequest {
                id: task_id.to_string(),
            })
            .await
            .map(|r| r.into_inner())
            .map_err(OrchestratorError::upstream("task service"))
    }

    async fn change_task_state(
        &self,
        task_id: Uuid,
        state: pb::TaskState,
        reason: &str,
        patch: Option<Value>,
    ) -> Result<pb::Task> {
        self.tasks
            .clone()
            .change_task_state(pb::ChangeTaskStateRequest {
                id: task_id.to_string(),
                state: state as i32,
                expected_version: None,
                actor: ACTOR.into(),
                reason: reason.into(),
                metadata_patch_json: patch.map(|p| p.to_string()),
            })
            .await
            .map(|r| r.into_inner())
            .map_err(OrchestratorError::upstream("task service"))
    }

    /// Moves the task to `state`, and when the state machine refuses it,
    /// still records `patch` in the metadata.
    async fn finish_task(
        &self,
        task_id: Uuid,
        state: pb::TaskState,
        reason: &str,
        mut patch: Value,
    ) {
        // What the agent wrote may hold NUL, which Postgres refuses.
        kandev_common::text::strip_nul_json(&mut patch);
        let mut result = self
            .change_task_state(task_id, state, reason, Some(patch.clone()))
            .await;
        if let Err(OrchestratorError::Upstream { status, .. }) = &result
            && status.code() == tonic::Code::InvalidArgument
        {
            // A refused metadata patch never keeps the task in its old
            // state: move it, then record what metadata can be.
            tracing::warn!(%task_id, "the run's metadata was refused; changing the state without it");
            result = self.change_task_state(task_id, state, reason, None).await;
        }
        match result {
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%task_id, %err, "cannot change the task state; recording metadata only");
                self.record_metadata(task_id, &patch).await;
            }
        }
    }

    /// Merges `patch` into the task's metadata; a failure is logged (the
    /// run's outcome is in the feed either way).
    async fn record_metadata(&self, task_id: Uuid, patch: &Value) {
        let update = self
            .tasks
            .clone()
            .update_task(pb::UpdateTaskRequest {
                id: task_id.to_string(),
                metadata_patch_json: Some(patch.to_string()),
                actor: ACTOR.into(),
                ..Default::default()
            })
            .await;
        if let Err(err) = update {
            tracing::warn!(%task_id, %err, "cannot record the run's metadata");
        }
    }

    async fn board_owner(&self, board_id: &str) -> Result<String> {
        self.tasks
            .clone()
            .get_board(pb::GetBoardRequest {
                id: board_id.to_string(),
            })
            .await
            .map(|r| r.into_inner().owner)
            .map_err(OrchestratorError::upstream("task service"))
    }

    /// Whose secrets and agent home volume a run started by `actor` uses:
    /// that person, or, when no person started it, the owner of the board.
    async fn run_as(&self, actor: &str, board_id: &str) -> Result<String> {
        if is_person(actor) {
            Ok(actor.to_string())
        } else {
            self.board_owner(board_id).await
        }
    }

    /// Puts the task in the queue (or refreshes its queued entry), as a
    /// run for `run_as`.
    async fn enqueue(&self, t: &TaskFacts, prompt: &str, origin: &str, run_as: &str) -> Result<()> {
        let Some(agent_type) = &t.agent_type else {
            return Ok(());
        };
        let traceparent = kandev_common::trace::current().unwrap_or_default();
        self.store
            .enqueue(&Enqueue {
                task_id: t.id,
                agent_type,
                priority: t.priority,
                max_retries: t.max_retries,
                prompt,
                origin,
                traceparent: &traceparent,
                run_as,
            })
            .await?;
        tracing::info!(task_id = %t.id, priority = t.priority, %agent_type, run_as, "task queued");
        Ok(())
    }

    /// Launches queued tasks, highest priority first and first come first
    /// served, while the global and per-type limits allow.
    async fn dispatch(&self) -> Result<()> {
        let mut slots = Slots::new(
            self.settings.max_concurrent,
            &self.settings.per_agent_type_limits,
            self.store.active_by_type().await?,
        );
        let queue = self.store.queued().await?;
        let queued = queue.len();
        let mut launched = 0usize;
        for exec in queue {
            if slots.full() {
                break;
            }
            // Its type's limit is reached, or every manager of the pool is
            // full (or lacks the image): the run waits in the queue.
            if !slots.admits(&exec.agent_type) || !self.agents.has_room(&exec.agent_type) {
                continue;
            }
            let waited = (Utc::now() - exec.updated_at).to_std().unwrap_or_default();
            if self.launch(exec.clone()).await? {
                metrics::histogram!(crate::metric_names::QUEUE_WAIT_SECONDS)
                    .record(waited.as_secs_f64());
                launched += 1;
                slots.take(&exec.agent_type);
            }
        }
        metrics::gauge!(crate::metric_names::QUEUE_DEPTH)
            .set(queued.saturating_sub(launched) as f64);
        self.gauge_running(slots.running());
        Ok(())
    }

    /// Launches one queued task; `true` when it now holds a slot. The launch
    /// continues the trace of what queued it.
    async fn launch(&self, exec: Execution) -> Result<bool> {
        let span = tracing::info_span!(
            "launch",
            task_id = %exec.task_id,
            trace_id = tracing::field::Empty,
        );
        let queued_by = Some(exec.traceparent.as_str()).filter(|t| !t.is_empty());
        kandev_common::trace::continue_from(&span, queued_by);
        self.launch_queued(exec).instrument(span).await
    }

    async fn launch_queued(&self, exec: Execution) -> Result<bool> {
        let task_id = exec.task_id;
        let attempts = exec.attempts + 1;
        self.store.begin_launch(task_id, attempts).await?;
        let task = match self.get_task(task_id).await {
            Ok(task) => task,
            Err(err) if matches!(&err, OrchestratorError::Upstream { status, .. } if status.code() == tonic::Code::NotFound) =>
            {
                tracing::info!(%task_id, "queued task no longer exists");
                self.set_state(task_id, ExecState::Stopped).await?;
                return Ok(false);
            }
            Err(err) => {
                self.run_failed(&exec_with_attempts(exec, attempts), &err.to_string(), true)
                    .await?;
                return Ok(false);
            }
        };
        let still_eligible = task_state(&task)? == TaskState::Todo
            && task.agent_type.as_deref().is_some_and(|a| !a.is_empty())
            && task.autostart
            && !task.blocked;
        if exec.origin == ORIGIN_ELIGIBLE && exec.attempts == 0 && !still_eligible {
            // Queued by an event that is history now (replayed after
            // downtime, say): the task has moved on.
            tracing::info!(%task_id, "queued task is no longer eligible");
            self.store.drop_launch(task_id, exec.attempts).await?;
            return Ok(false);
        }
        let run_as = match self.launch_user(&exec, &task).await {
            Ok(user) => user,
            Err(err) => {
                self.run_failed(&exec_with_attempts(exec, attempts), &err.to_string(), true)
                    .await?;
                return Ok(false);
            }
        };
        let request = launch_request(&exec, &task, run_as);
        match self.agents.launch(request).await {
            Ok(instance) => {
                let instance_id = Uuid::parse_str(&instance.id).ok();
                self.store
                    .launched(task_id, instance_id, &instance.manager_id)
                    .await?;
                tracing::info!(%task_id, instance = %instance.id, attempts, "agent launched");
                self.move_to_in_progress(task_id, task_state(&task)?, "agent launched")
                    .await;
                Ok(true)
            }
            Err(status) => {
                let error = format!("launch failed: {}", status.message());
                let retryable = launch_retryable(status.code());
                self.run_failed(&exec_with_attempts(exec, attempts), &error, retryable)
                    .await?;
                Ok(false)
            }
        }
    }

    /// The user a queued run launches for; a run queued before `run_as`
    /// was recorded is its board owner's, recorded now.
    async fn launch_user(&self, exec: &Execution, task: &pb::Task) -> Result<String> {
        if !exec.run_as.is_empty() {
            return Ok(exec.run_as.clone());
        }
        let owner = self.board_owner(&task.board_id).await?;
        self.store.set_run_as(exec.task_id, &owner).await?;
        Ok(owner)
    }

    async fn move_to_in_progress(&self, task_id: Uuid, current: TaskState, reason: &str) {
        // From any other state, a finished one too: straight there, with no
        // TODO in between (a follow-up is not a reopened task).
        if current == TaskState::InProgress {
            return;
        }
        if let Err(err) = self
            .change_task_state(task_id, pb::TaskState::InProgress, reason, None)
            .await
        {
            tracing::warn!(%task_id, %err, "cannot move the task to IN_PROGRESS");
        }
    }

    /// A run failed: retry after a backoff, or give up.
    async fn run_failed(&self, exec: &Execution, error: &str, retryable: bool) -> Result<()> {
        let task_id = exec.task_id;
        if retryable && exec.attempts <= exec.max_retries {
            let delay = self.settings.retry_delay(exec.attempts);
            let retry_at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
            self.store.retry_later(task_id, retry_at, error).await?;
            tracing::info!(%task_id, attempts = exec.attempts, ?delay, error, "run failed, will retry");
        } else {
            self.store.failed(task_id, error).await?;
            tracing::info!(%task_id, attempts = exec.attempts, error, "run failed, no retries left");
            let patch = json!({
                "last_error": error,
                "failed_at": Utc::now(),
                "attempts": exec.attempts,
            });
            self.finish_task(task_id, pb::TaskState::Failed, "agent failed", patch)
                .await;
        }
        Ok(())
    }

    async fn stop_agent(&self, exec: &Execution, reason: &str) {
        if let Some(instance) = exec.instance_id
            && let Err(status) = self.agents.stop(&instance.to_string(), reason).await
        {
            tracing::warn!(task_id = %exec.task_id, %instance, %status, "StopAgent failed");
        }
    }

    async fn seen(&self, id: Uuid) -> Result<bool> {
        Ok(self.store.seen(id).await?)
    }

    async fn mark_seen(&self, id: Uuid) -> Result<()> {
        Ok(self.store.mark_seen(id).await?)
    }

    /// Forgets handled envelope ids older than a day: JetStream redelivers
    /// only unacknowledged messages, and its duplicate window is minutes.
    pub async fn prune(&self) -> Result<u64> {
        Ok(self.store.prune_seen().await?)
    }

    /// Re-queues runs whose retry time has come, then dispatches.
    pub async fn tick(&self) -> Result<()> {
        let _guard = self.lock.lock().await?;
        self.store.requeue_due_retries().await?;
        self.failover().await?;
        self.dispatch().await
    }

    /// After a restart: a launch that was cut short adopts the instance the
    /// agent manager started for it, or goes back to the queue.
    pub async fn recover(&self) -> Result<()> {
        let _guard = self.lock.lock().await?;
        let launching = self.store.launching().await?;
        for exec in launching {
            let mut live: Vec<pb::AgentInstance> = self
                .agents
                .list_instances(&exec.task_id.to_string())
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|i| {
                    matches!(
                        pb::AgentStatus::try_from(i.status),
                        Ok(pb::AgentStatus::Pending
                            | pb::AgentStatus::Starting
                            | pb::AgentStatus::Running)
                    )
                })
                .collect();
            // The newest first; never one whose run moved elsewhere.
            live.sort_by_key(|i| std::cmp::Reverse(i.started_at.map(|t| (t.seconds, t.nanos))));
            let mut adopted = None;
            for i in live {
                if let Ok(id) = Uuid::parse_str(&i.id)
                    && !self.store.is_moved(id).await?
                {
                    adopted = Some((id, i.manager_id));
                    break;
                }
            }
            match adopted {
                Some((instance, manager)) => {
                    self.store.adopt(exec.task_id, instance, &manager).await?;
                }
                None => self.store.requeue_interrupted(exec.task_id).await?,
            }
        }
        self.dispatch().await
    }

    async fn view(&self, task_id: Uuid, exec: Option<Execution>) -> Result<ExecutionView> {
        let stored = self.store.last_seq(task_id).await?;
        let last_seq = stored.max(self.hub.pending_last_seq(task_id).unwrap_or(0));
        let Some(exec) = exec else {
            return Ok(ExecutionView::idle(task_id, last_seq));
        };
        let queue_position = if exec.state() == ExecState::Queued {
            let ahead = self
                .store
                .queued_ahead(exec.priority, exec.queue_order)
                .await?;
            ahead as i32 + 1
        } else {
            0
        };
        Ok(self.view_of(exec, last_seq, queue_position))
    }

    /// Queues a new run of the task for `run_as` (its session is resumed
    /// from the task's metadata), then dispatches. Called under the lock.
    async fn new_run(
        &self,
        task_id: Uuid,
        task: &pb::Task,
        prompt: Option<String>,
        run_as: &str,
    ) -> Result<()> {
        let facts = TaskFacts {
            id: task_id,
            state: task_state(task)?,
            priority: task.priority,
            agent_type: task.agent_type.clone().filter(|a| !a.is_empty()),
            max_retries: task.max_retries,
            autostart: task.autostart,
            blocked: task.blocked,
        };
        if facts.agent_type.is_none() {
            return Err(OrchestratorError::Validation(
                "the task has no agent_type".into(),
            ));
        }
        self.enqueue(
            &facts,
            prompt.as_deref().unwrap_or(""),
            ORIGIN_MANUAL,
            run_as,
        )
        .await?;
        self.dispatch().await
    }

    /// Sets `kandev_running_agents` for the types running now and back to 0
    /// for those that ran before.
    fn gauge_running(&self, running: &std::collections::HashMap<String, u32>) {
        let mut gauged = self.gauged_types.lock().unwrap_or_else(|e| e.into_inner());
        gauged.extend(
            running
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(t, _)| t.clone()),
        );
        for agent_type in gauged.iter() {
            let n = running.get(agent_type).copied().unwrap_or(0);
            metrics::gauge!(crate::metric_names::RUNNING_AGENTS, "agent_type" => agent_type.clone())
                .set(f64::from(n));
        }
    }

    fn running_instance(exec: &Option<Execution>) -> Option<Uuid> {
        exec.as_ref()
            .filter(|e| e.state() == ExecState::Running)
            .and_then(|e| e.instance_id)
    }
}

/// Augment's agent types, whose session id the seed also documents as the
/// task's `metadata.auggie_session_id`.
fn is_auggie(agent_type: &str) -> bool {
    matches!(agent_type, "augment-agent" | "auggie-cli")
}

fn exec_with_attempts(mut exec: Execution, attempts: i32) -> Execution {
    exec.attempts = attempts;
    exec
}

/// Whether a launch the agent manager refused with `code` may pass when
/// tried again. A refusal (no such agent type, a missing secret, a
/// repository the policy refuses, one gone or without the branch) is
/// refused again: the run fails once. An unavailable engine or manager, a
/// limit or an internal failure may come back. A failure found after the
/// launch answered comes as `agent.failed`, whose `retryable` says the
/// same (see `events`).
fn launch_retryable(code: tonic::Code) -> bool {
    use tonic::Code;
    match code {
        Code::Unavailable
        | Code::Internal
        | Code::Unknown
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::Cancelled => true,
        Code::Ok
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::DataLoss
        | Code::Unauthenticated => false,
    }
}

/// What the agent manager is asked to launch for a queued run of `task`:
/// its prompt (the run's own, a workflow column's, else the task's title and
/// description), the session to resume, the workspace, and whose run it is.
fn launch_request(exec: &Execution, task: &pb::Task, run_as: String) -> pb::LaunchAgentRequest {
    use kandev_events::task::{WORKFLOW_NEW_SESSION, WORKFLOW_PROMPT};
    let metadata: Value = serde_json::from_str(&task.metadata_json).unwrap_or(json!({}));
    let workflow_prompt = metadata
        .get(WORKFLOW_PROMPT)
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty() && exec.prompt.is_empty());
    // The run an automated workflow column starts (not a follow-up), which
    // may ask for a new session.
    let from_column = workflow_prompt.is_some();
    let new_session = from_column && metadata.get(WORKFLOW_NEW_SESSION) == Some(&Value::Bool(true));
    let resume = metadata
        .get("acp_session_id")
        .or_else(|| metadata.get("auggie_session_id"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && !new_session)
        .map(str::to_string);
    let prompt = match workflow_prompt {
        Some(p) => p.to_string(),
        None if !exec.prompt.is_empty() => exec.prompt.clone(),
        None if task.description.is_empty() => task.title.clone(),
        None => format!("{}\n\n{}", task.title, task.description),
    };
    pb::LaunchAgentRequest {
        task_id: exec.task_id.to_string(),
        agent_type: exec.agent_type.clone(),
        workspace: workspace_of(task),
        env: Default::default(),
        priority: task.priority,
        metadata_json: launch_metadata(&metadata, from_column),
        prompt,
        resume_session_id: resume,
        home_scope: run_as,
        // A workflow column's template may ask for the diff so far.
        fill_diff: from_column,
    }
}

/// Where the run works: the task's repository, else its directory.
fn workspace_of(task: &pb::Task) -> Option<pb::launch_agent_request::Workspace> {
    use pb::launch_agent_request::Workspace;
    if !task.repository_url.is_empty() {
        Some(Workspace::Repository(pb::GitWorkspace {
            repository_url: task.repository_url.clone(),
            branch: task.branch.clone(),
            title: task.title.clone(),
        }))
    } else if !task.workspace_path.is_empty() {
        Some(Workspace::WorkspacePath(task.workspace_path.clone()))
    } else {
        None
    }
}

/// The launch's metadata: the task's, with the profile of the automated
/// column the task is in (when its prompt starts the run) in place of the
/// task's own.
fn launch_metadata(metadata: &Value, from_column: bool) -> String {
    use kandev_events::task::{AGENT_PROFILE, WORKFLOW_PROFILE};
    let column_profile = metadata.get(WORKFLOW_PROFILE).filter(|p| p.is_string());
    match (metadata, column_profile) {
        (Value::Object(m), Some(profile)) if from_column => {
            let mut m = m.clone();
            m.insert(AGENT_PROFILE.into(), profile.clone());
            Value::Object(m).to_string()
        }
        _ => metadata.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::launch_retryable;

    /// What the agent manager refuses is never retried; what could not
    /// be done now is.
    #[test]
    fn refused_launches_fail_once() {
        for refused in [
            // An unknown agent type.
            Code::NotFound,
            // A repository gone, without the branch, or not a repository;
            // an invalid request.
            Code::InvalidArgument,
            // A root or host the policy refuses.
            Code::PermissionDenied,
            // A missing secret, a disabled type.
            Code::FailedPrecondition,
            Code::Unauthenticated,
            Code::Unimplemented,
        ] {
            assert!(!launch_retryable(refused), "{refused:?}");
        }
        for passing in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
            Code::Internal,
            Code::Unknown,
            Code::Aborted,
            Code::Cancelled,
        ] {
            assert!(launch_retryable(passing), "{passing:?}");
        }
    }
}
