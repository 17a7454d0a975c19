//! The orchestration engine: the persisted launch queue, concurrency limits,
//! launching through the agent manager, and the reactions to `task.*` and
//! `agent.*` events. Every decision runs under one lock, with the
//! `executions` table as the truth, so a restart picks up where it stopped.

mod board;
pub mod review;
mod workspaces;

use std::{collections::HashMap, sync::Arc};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kandev_common::trace::TracedChannel;
use kandev_events::{
    Envelope, TaskState,
    agent::{AgentEventKind, AgentLifecycle},
    subjects,
    task::{TaskCreated, TaskDeleted, TaskSnapshot, TaskStateChanged, TaskUpdated},
};
use kandev_proto::v1::{self as pb, task_service_client::TaskServiceClient};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::sync::Mutex;
use tracing::Instrument as _;
use uuid::Uuid;

use crate::{
    clients::AgentControl,
    config::Settings,
    domain::{
        ExecState, ExecutionView, Orchestration, OrchestratorError, PermissionAnswer, Result,
    },
    feed::{self, FeedHub},
};

/// The actor name of every change the orchestrator makes.
pub const ACTOR: &str = "orchestrator";

const ORIGIN_ELIGIBLE: &str = "eligible";
const ORIGIN_MANUAL: &str = "manual";

/// One row of `executions`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Execution {
    pub task_id: Uuid,
    #[sqlx(try_from = "String")]
    pub state: ExecState,
    pub agent_type: String,
    pub priority: i32,
    pub queue_order: Option<i64>,
    pub instance_id: Option<Uuid>,
    pub attempts: i32,
    pub max_retries: i32,
    pub last_error: String,
    pub acp_session_id: String,
    pub prompt: String,
    pub retry_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// `eligible` or `manual`.
    pub origin: String,
    /// The trace of what queued the run (W3C `traceparent`), or empty.
    pub traceparent: String,
}

impl Execution {
    pub fn state(&self) -> ExecState {
        self.state
    }
}

/// The fields of a task the engine needs, from an event or from GetTask.
#[derive(Debug, Clone)]
struct TaskFacts {
    id: Uuid,
    state: TaskState,
    priority: i32,
    agent_type: Option<String>,
    max_retries: i32,
    autostart: bool,
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
        }
    }
}

fn eligible(t: &TaskFacts) -> bool {
    t.state == TaskState::Todo && t.agent_type.is_some() && t.autostart
}

/// The state of a task read over gRPC; the task service never sends an
/// unknown one, so one is an internal error.
fn task_state(task: &pb::Task) -> Result<TaskState> {
    TaskState::from_proto(task.state)
        .map_err(|e| OrchestratorError::Internal(format!("task {}: {e}", task.id)))
}

/// The engine; cheap to share behind an `Arc`.
pub struct Engine {
    pool: PgPool,
    settings: Arc<Settings>,
    agents: Arc<dyn AgentControl>,
    tasks: TaskServiceClient<TracedChannel>,
    hub: Arc<FeedHub>,
    lock: Mutex<()>,
    /// For forges' REST APIs.
    http: reqwest::Client,
}

const SELECT_EXEC: &str = "SELECT task_id, state, agent_type, priority, queue_order, instance_id, \
     attempts, max_retries, last_error, acp_session_id, prompt, retry_at, updated_at, origin, \
     traceparent FROM executions";

impl Engine {
    pub fn new(
        pool: PgPool,
        settings: Arc<Settings>,
        agents: Arc<dyn AgentControl>,
        tasks: TaskServiceClient<TracedChannel>,
        hub: Arc<FeedHub>,
    ) -> Arc<Self> {
        Arc::new(Engine {
            pool,
            settings,
            agents,
            tasks,
            hub,
            lock: Mutex::new(()),
            http: reqwest::Client::new(),
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    async fn execution(&self, task_id: Uuid) -> Result<Option<Execution>> {
        Ok(
            sqlx::query_as::<_, Execution>(&format!("{SELECT_EXEC} WHERE task_id = $1"))
                .bind(task_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn set_state(&self, task_id: Uuid, state: ExecState) -> Result<()> {
        sqlx::query("UPDATE executions SET state = $2, updated_at = now() WHERE task_id = $1")
            .bind(task_id)
            .bind(state.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
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

    /// Puts the task in the queue (or refreshes its queued entry).
    async fn enqueue(&self, t: &TaskFacts, prompt: &str, origin: &str) -> Result<()> {
        let Some(agent_type) = &t.agent_type else {
            return Ok(());
        };
        sqlx::query(
            "INSERT INTO executions (task_id, state, agent_type, priority, queue_order, attempts,
                                     max_retries, last_error, prompt, instance_id, retry_at, origin,
                                     traceparent)
             VALUES ($1, 'queued', $2, $3, nextval('queue_order'), 0, $4, '', $5, NULL, NULL, $6, $7)
             ON CONFLICT (task_id) DO UPDATE SET
                state = 'queued', agent_type = $2, priority = $3,
                queue_order = CASE WHEN executions.state = 'queued' THEN executions.queue_order
                                   ELSE nextval('queue_order') END,
                attempts = 0, max_retries = $4, last_error = '', prompt = $5,
                instance_id = NULL, retry_at = NULL, origin = $6, traceparent = $7,
                workspace_removed = false, updated_at = now()",
        )
        .bind(t.id)
        .bind(agent_type)
        .bind(t.priority)
        .bind(t.max_retries.max(0))
        .bind(prompt)
        .bind(origin)
        .bind(kandev_common::trace::current().unwrap_or_default())
        .execute(&self.pool)
        .await?;
        tracing::info!(task_id = %t.id, priority = t.priority, %agent_type, "task queued");
        Ok(())
    }

    /// Launches queued tasks, highest priority first and first come first
    /// served, while the global and per-type limits allow.
    async fn dispatch(&self) -> Result<()> {
        let mut running: HashMap<String, u32> = HashMap::new();
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT agent_type, count(*) FILTER (WHERE state IN ('launching', 'running'))
               FROM executions GROUP BY agent_type",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut total: u32 = 0;
        for (agent_type, n) in rows {
            total += n as u32;
            running.insert(agent_type, n as u32);
        }
        let queue = sqlx::query_as::<_, Execution>(&format!(
            "{SELECT_EXEC} WHERE state = 'queued' ORDER BY priority DESC, queue_order"
        ))
        .fetch_all(&self.pool)
        .await?;
        let queued = queue.len();
        let mut launched = 0usize;
        for exec in queue {
            if total >= self.settings.max_concurrent {
                break;
            }
            let of_type = running.get(&exec.agent_type).copied().unwrap_or(0);
            if let Some(limit) = self.settings.per_agent_type_limits.get(&exec.agent_type)
                && of_type >= *limit
            {
                continue;
            }
            let waited = (Utc::now() - exec.updated_at).to_std().unwrap_or_default();
            if self.launch(exec.clone()).await? {
                metrics::histogram!("kandev_queue_wait_seconds").record(waited.as_secs_f64());
                total += 1;
                launched += 1;
                *running.entry(exec.agent_type).or_default() += 1;
            }
        }
        metrics::gauge!("kandev_queue_depth").set(queued.saturating_sub(launched) as f64);
        for (agent_type, n) in &running {
            metrics::gauge!("kandev_running_agents", "agent_type" => agent_type.clone())
                .set(f64::from(*n));
        }
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
        sqlx::query(
            "UPDATE executions SET state = 'launching', attempts = $2, queue_order = NULL,
                                   updated_at = now() WHERE task_id = $1",
        )
        .bind(task_id)
        .bind(attempts)
        .execute(&self.pool)
        .await?;
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
            && task.autostart;
        if exec.origin == ORIGIN_ELIGIBLE && exec.attempts == 0 && !still_eligible {
            // Queued by an event that is history now (replayed after
            // downtime, say): the task has moved on.
            tracing::info!(%task_id, "queued task is no longer eligible");
            sqlx::query(
                "UPDATE executions SET state = 'stopped', attempts = $2, updated_at = now()
                 WHERE task_id = $1",
            )
            .bind(task_id)
            .bind(exec.attempts)
            .execute(&self.pool)
            .await?;
            return Ok(false);
        }
        let metadata: Value = serde_json::from_str(&task.metadata_json).unwrap_or(json!({}));
        let resume = metadata
            .get("acp_session_id")
            .or_else(|| metadata.get("auggie_session_id"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let prompt = if exec.prompt.is_empty() {
            if task.description.is_empty() {
                task.title.clone()
            } else {
                format!("{}\n\n{}", task.title, task.description)
            }
        } else {
            exec.prompt.clone()
        };
        let workspace = if !task.repository_url.is_empty() {
            Some(pb::launch_agent_request::Workspace::Repository(
                pb::GitWorkspace {
                    repository_url: task.repository_url.clone(),
                    branch: task.branch.clone(),
                    title: task.title.clone(),
                },
            ))
        } else if !task.workspace_path.is_empty() {
            Some(pb::launch_agent_request::Workspace::WorkspacePath(
                task.workspace_path.clone(),
            ))
        } else {
            None
        };
        let request = pb::LaunchAgentRequest {
            task_id: task_id.to_string(),
            agent_type: exec.agent_type.clone(),
            workspace,
            env: Default::default(),
            priority: task.priority,
            metadata_json: task.metadata_json.clone(),
            prompt,
            resume_session_id: resume,
            home_scope: task.created_by.clone(),
        };
        match self.agents.launch(request).await {
            Ok(instance) => {
                let instance_id = Uuid::parse_str(&instance.id).ok();
                sqlx::query(
                    "UPDATE executions SET state = 'running', instance_id = $2, prompt = '',
                                           updated_at = now() WHERE task_id = $1",
                )
                .bind(task_id)
                .bind(instance_id)
                .execute(&self.pool)
                .await?;
                tracing::info!(%task_id, instance = %instance.id, attempts, "agent launched");
                self.move_to_in_progress(task_id, task_state(&task)?).await;
                Ok(true)
            }
            Err(status) => {
                let error = format!("launch failed: {}", status.message());
                // A refused request (no such type, a policy, a bad
                // repository) is refused again; an unavailable engine or
                // manager may come back.
                let retryable = matches!(
                    status.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::Internal
                        | tonic::Code::Unknown
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::ResourceExhausted
                        | tonic::Code::Aborted
                );
                self.run_failed(&exec_with_attempts(exec, attempts), &error, retryable)
                    .await?;
                Ok(false)
            }
        }
    }

    async fn move_to_in_progress(&self, task_id: Uuid, current: TaskState) {
        let path: &[pb::TaskState] = match current {
            TaskState::InProgress => &[],
            s if s.is_terminal() => &[pb::TaskState::Todo, pb::TaskState::InProgress],
            _ => &[pb::TaskState::InProgress],
        };
        for state in path {
            if let Err(err) = self
                .change_task_state(task_id, *state, "agent launched", None)
                .await
            {
                tracing::warn!(%task_id, %err, "cannot move the task to IN_PROGRESS");
                return;
            }
        }
    }

    /// A run failed: retry after a backoff, or give up.
    async fn run_failed(&self, exec: &Execution, error: &str, retryable: bool) -> Result<()> {
        let task_id = exec.task_id;
        if retryable && exec.attempts <= exec.max_retries {
            let delay = self.settings.retry_delay(exec.attempts);
            let retry_at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
            sqlx::query(
                "UPDATE executions SET state = 'retry_wait', retry_at = $2, last_error = $3,
                                       updated_at = now() WHERE task_id = $1",
            )
            .bind(task_id)
            .bind(retry_at)
            .bind(error)
            .execute(&self.pool)
            .await?;
            tracing::info!(%task_id, attempts = exec.attempts, ?delay, error, "run failed, will retry");
        } else {
            sqlx::query(
                "UPDATE executions SET state = 'failed', last_error = $2, updated_at = now()
                 WHERE task_id = $1",
            )
            .bind(task_id)
            .bind(error)
            .execute(&self.pool)
            .await?;
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

    /// Handles one `task.*` event; returns once it is fully applied.
    pub async fn handle_task_event(&self, subject: &str, payload: &[u8]) -> Result<()> {
        let _guard = self.lock.lock().await;
        let id: Uuid = match serde_json::from_slice::<Envelope<Value>>(payload) {
            Ok(env) => env.id,
            Err(err) => {
                tracing::warn!(%err, subject, "skipping a malformed task event");
                return Ok(());
            }
        };
        if self.seen(id).await? {
            return Ok(());
        }
        match subject {
            subjects::TASK_CREATED => {
                if let Ok(env) = serde_json::from_slice::<Envelope<TaskCreated>>(payload) {
                    let t = TaskFacts::from(&env.data.task);
                    if eligible(&t) {
                        self.enqueue(&t, "", ORIGIN_ELIGIBLE).await?;
                    }
                }
            }
            subjects::TASK_STATE_CHANGED => {
                if let Ok(env) = serde_json::from_slice::<Envelope<TaskStateChanged>>(payload)
                    && env.data.actor != ACTOR
                {
                    self.on_state_changed(&env.data).await?;
                }
            }
            subjects::TASK_UPDATED => {
                if let Ok(env) = serde_json::from_slice::<Envelope<TaskUpdated>>(payload)
                    && env.data.actor != ACTOR
                {
                    let t = TaskFacts::from(&env.data.task);
                    let exec = self.execution(t.id).await?;
                    let state = exec.as_ref().map(Execution::state);
                    match state {
                        Some(ExecState::Queued) => {
                            sqlx::query(
                                "UPDATE executions SET priority = $2, max_retries = $3
                                 WHERE task_id = $1",
                            )
                            .bind(t.id)
                            .bind(t.priority)
                            .bind(t.max_retries.max(0))
                            .execute(&self.pool)
                            .await?;
                        }
                        Some(s) if s.is_active() || s == ExecState::RetryWait => {}
                        _ if eligible(&t) => self.enqueue(&t, "", ORIGIN_ELIGIBLE).await?,
                        _ => {}
                    }
                }
            }
            subjects::TASK_DELETED => {
                if let Ok(env) = serde_json::from_slice::<Envelope<TaskDeleted>>(payload)
                    && let Some(exec) = self.execution(env.data.task.id).await?
                {
                    if exec.state().is_active() {
                        self.stop_agent(&exec, "task deleted").await;
                    }
                    // Its clone and local branch go with it (nothing pushed).
                    self.remove_workspace(exec.task_id, "task deleted").await;
                    sqlx::query("DELETE FROM executions WHERE task_id = $1")
                        .bind(exec.task_id)
                        .execute(&self.pool)
                        .await?;
                }
            }
            _ => {}
        }
        self.mark_seen(id).await?;
        self.dispatch().await
    }

    async fn on_state_changed(&self, change: &TaskStateChanged) -> Result<()> {
        let t = TaskFacts::from(&change.task);
        let exec = self.execution(t.id).await?;
        let state = exec.as_ref().map(Execution::state);
        match change.to {
            TaskState::Todo | TaskState::Cancelled => {
                if let Some(exec) = &exec {
                    if matches!(
                        exec.state(),
                        ExecState::Launching
                            | ExecState::Running
                            | ExecState::Queued
                            | ExecState::RetryWait
                    ) {
                        self.set_state(t.id, ExecState::Stopped).await?;
                    }
                    if exec.state().is_active() {
                        let reason = format!("task moved to {}", change.to);
                        self.stop_agent(exec, &reason).await;
                    }
                }
                if eligible(&t) {
                    self.enqueue(&t, "", ORIGIN_ELIGIBLE).await?;
                }
            }
            _ => {
                // Moved elsewhere by a person while queued: it is no longer
                // eligible.
                if state == Some(ExecState::Queued) {
                    self.set_state(t.id, ExecState::Stopped).await?;
                }
            }
        }
        Ok(())
    }

    /// Handles one `agent.*` event.
    pub async fn handle_agent_event(&self, payload: &[u8]) -> Result<()> {
        let _guard = self.lock.lock().await;
        let env: Envelope<AgentLifecycle> = match serde_json::from_slice(payload) {
            Ok(env) => env,
            Err(err) => {
                tracing::warn!(%err, "skipping a malformed agent event");
                return Ok(());
            }
        };
        if self.seen(env.id).await? {
            return Ok(());
        }
        let ev = env.data;
        let exec = self.execution(ev.task_id).await?;
        let current = exec
            .as_ref()
            .filter(|e| e.instance_id == Some(ev.instance_id));
        if let Some(exec) = current {
            self.on_agent_event(exec, &ev).await?;
        } else {
            tracing::debug!(task_id = %ev.task_id, instance = %ev.instance_id, kind = ?ev.kind,
                "agent event of an instance that is not the task's current one");
        }
        self.mark_seen(env.id).await?;
        self.dispatch().await
    }

    async fn on_agent_event(&self, exec: &Execution, ev: &AgentLifecycle) -> Result<()> {
        let task_id = exec.task_id;
        if let Some(session) = ev.acp_session_id.as_deref().filter(|s| !s.is_empty()) {
            sqlx::query("UPDATE executions SET acp_session_id = $2 WHERE task_id = $1")
                .bind(task_id)
                .bind(session)
                .execute(&self.pool)
                .await?;
        }
        let session = ev
            .acp_session_id
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| exec.acp_session_id.clone());
        match ev.kind {
            AgentEventKind::Started | AgentEventKind::Running => {
                if exec.state() == ExecState::Launching {
                    self.set_state(task_id, ExecState::Running).await?;
                }
            }
            AgentEventKind::Completed => {
                if !exec.state().is_active() {
                    return Ok(());
                }
                self.set_state(task_id, ExecState::Completed).await?;
                let mut patch = json!({
                    "completed_at": ev.at,
                    "summary": ev.summary.clone().unwrap_or_default(),
                    "stop_reason": ev.stop_reason.clone().unwrap_or_default(),
                    "last_instance_id": ev.instance_id,
                    "attempts": exec.attempts,
                });
                if !session.is_empty() {
                    patch["acp_session_id"] = json!(session);
                    if is_auggie(&exec.agent_type) {
                        patch["auggie_session_id"] = json!(session);
                    }
                }
                if ev.stop_reason.as_deref() == Some("cancelled") {
                    // A person cancelled the turn: the task is not done; it
                    // stays in progress, idle, for a follow-up.
                    tracing::info!(%task_id, "turn cancelled; the task waits for a follow-up");
                    kandev_common::text::strip_nul_json(&mut patch);
                    self.record_metadata(task_id, &patch).await;
                    self.move_task(
                        task_id,
                        TaskState::WaitingForInput,
                        TaskState::InProgress,
                        "turn cancelled",
                    )
                    .await;
                    return Ok(());
                }
                let target = if self.settings.complete_to_review {
                    pb::TaskState::Review
                } else {
                    pb::TaskState::Completed
                };
                tracing::info!(%task_id, ?target, "run completed");
                self.finish_task(task_id, target, "agent completed", patch)
                    .await;
            }
            AgentEventKind::Failed => {
                if !exec.state().is_active() {
                    return Ok(());
                }
                if !session.is_empty() {
                    // Keep the session so a rerun can resume it.
                    let mut patch = json!({ "acp_session_id": session });
                    if is_auggie(&exec.agent_type) {
                        patch["auggie_session_id"] = json!(session);
                    }
                    self.record_metadata(task_id, &patch).await;
                }
                let error = ev
                    .error
                    .clone()
                    .unwrap_or_else(|| "agent failed".to_string());
                // The agent's own error answer would repeat: no retry.
                self.run_failed(exec, &error, ev.retryable != Some(false))
                    .await?;
            }
            AgentEventKind::Stopped => {
                if exec.state().is_active() {
                    self.set_state(task_id, ExecState::Stopped).await?;
                }
            }
            AgentEventKind::WaitingForInput => {
                if exec.state().is_active() {
                    let question = ev.summary.as_deref().unwrap_or("a permission");
                    let reason = format!("the agent asks: {question}");
                    self.move_task(
                        task_id,
                        TaskState::InProgress,
                        TaskState::WaitingForInput,
                        &reason,
                    )
                    .await;
                }
            }
            AgentEventKind::InputReceived => {
                if exec.state().is_active() {
                    self.move_task(
                        task_id,
                        TaskState::WaitingForInput,
                        TaskState::InProgress,
                        "answered",
                    )
                    .await;
                }
            }
        }
        Ok(())
    }

    /// Moves the task from `from` to `to`; a task a person moved elsewhere
    /// meanwhile stays where it is.
    async fn move_task(&self, task_id: Uuid, from: TaskState, to: TaskState, reason: &str) {
        match self.get_task(task_id).await.map(|t| task_state(&t)) {
            Ok(Ok(state)) if state == from => {
                if let Err(err) = self
                    .change_task_state(task_id, to.to_proto(), reason, None)
                    .await
                {
                    tracing::warn!(%task_id, %err, %to, "cannot move the task");
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(err)) | Err(err) => tracing::warn!(%task_id, %err, "cannot read the task"),
        }
    }

    async fn seen(&self, id: Uuid) -> Result<bool> {
        let row: Option<(Uuid,)> = sqlx::query_as("SELECT id FROM processed_events WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    async fn mark_seen(&self, id: Uuid) -> Result<()> {
        sqlx::query("INSERT INTO processed_events (id) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Forgets handled envelope ids older than a day: JetStream redelivers
    /// only unacknowledged messages, and its duplicate window is minutes.
    pub async fn prune(&self) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM processed_events WHERE processed_at < now() - interval '1 day'",
        )
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Re-queues runs whose retry time has come, then dispatches.
    pub async fn tick(&self) -> Result<()> {
        let _guard = self.lock.lock().await;
        sqlx::query(
            "UPDATE executions SET state = 'queued', queue_order = nextval('queue_order'),
                                   retry_at = NULL, updated_at = now()
             WHERE state = 'retry_wait' AND retry_at <= now()",
        )
        .execute(&self.pool)
        .await?;
        self.dispatch().await
    }

    /// After a restart: a launch that was cut short adopts the instance the
    /// agent manager started for it, or goes back to the queue.
    pub async fn recover(&self) -> Result<()> {
        let _guard = self.lock.lock().await;
        let launching =
            sqlx::query_as::<_, Execution>(&format!("{SELECT_EXEC} WHERE state = 'launching'"))
                .fetch_all(&self.pool)
                .await?;
        for exec in launching {
            let live = self
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
                .max_by_key(|i| i.started_at.map(|t| (t.seconds, t.nanos)));
            match live.and_then(|i| Uuid::parse_str(&i.id).ok()) {
                Some(instance) => {
                    sqlx::query(
                        "UPDATE executions SET state = 'running', instance_id = $2 WHERE task_id = $1",
                    )
                    .bind(exec.task_id)
                    .bind(instance)
                    .execute(&self.pool)
                    .await?;
                }
                None => {
                    sqlx::query(
                        "UPDATE executions SET state = 'queued', attempts = greatest(attempts - 1, 0),
                                               queue_order = nextval('queue_order') WHERE task_id = $1",
                    )
                    .bind(exec.task_id)
                    .execute(&self.pool)
                    .await?;
                }
            }
        }
        self.dispatch().await
    }

    async fn view(&self, task_id: Uuid, exec: Option<Execution>) -> Result<ExecutionView> {
        let stored = feed::store::last_seq(&self.pool, task_id).await?;
        let last_seq = stored.max(self.hub.pending_last_seq(task_id).unwrap_or(0));
        let Some(exec) = exec else {
            return Ok(ExecutionView::idle(task_id, last_seq));
        };
        let queue_position = if exec.state() == ExecState::Queued {
            let (ahead,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM executions
                 WHERE state = 'queued' AND (priority > $1 OR (priority = $1 AND queue_order < $2))",
            )
            .bind(exec.priority)
            .bind(exec.queue_order.unwrap_or(i64::MAX))
            .fetch_one(&self.pool)
            .await?;
            ahead as i32 + 1
        } else {
            0
        };
        Ok(ExecutionView {
            task_id,
            state: exec.state(),
            instance_id: exec.instance_id,
            attempts: exec.attempts,
            queue_position,
            last_error: exec.last_error,
            acp_session_id: exec.acp_session_id,
            updated_at: exec.updated_at,
            last_seq,
        })
    }

    /// Queues a new run of the task (its session is resumed from the
    /// task's metadata), then dispatches. Called under the lock.
    async fn new_run(&self, task_id: Uuid, prompt: Option<String>) -> Result<()> {
        let task = self.get_task(task_id).await?;
        let facts = TaskFacts {
            id: task_id,
            state: task_state(&task)?,
            priority: task.priority,
            agent_type: task.agent_type.clone().filter(|a| !a.is_empty()),
            max_retries: task.max_retries,
            autostart: task.autostart,
        };
        if facts.agent_type.is_none() {
            return Err(OrchestratorError::Validation(
                "the task has no agent_type".into(),
            ));
        }
        self.enqueue(&facts, prompt.as_deref().unwrap_or(""), ORIGIN_MANUAL)
            .await?;
        self.dispatch().await
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

#[async_trait]
impl Orchestration for Engine {
    async fn start_task(&self, task_id: Uuid, prompt: Option<String>) -> Result<ExecutionView> {
        let prompt = prompt.filter(|p| !p.trim().is_empty());
        let guard = self.lock.lock().await;
        let exec = self.execution(task_id).await?;
        match exec.as_ref().map(Execution::state) {
            Some(s) if s.is_active() => {
                let Some(text) = prompt else {
                    return Err(OrchestratorError::FailedPrecondition(
                        "the task is already running".into(),
                    ));
                };
                let Some(instance) = Self::running_instance(&exec) else {
                    return Err(OrchestratorError::FailedPrecondition(
                        "the task's agent is still launching".into(),
                    ));
                };
                drop(guard);
                self.agents
                    .send_prompt(&instance.to_string(), &text)
                    .await
                    .map_err(OrchestratorError::upstream("agent manager"))?;
            }
            Some(ExecState::Queued | ExecState::RetryWait) => {
                if let Some(text) = prompt {
                    sqlx::query("UPDATE executions SET prompt = $2 WHERE task_id = $1")
                        .bind(task_id)
                        .bind(text)
                        .execute(&self.pool)
                        .await?;
                }
                drop(guard);
            }
            Some(ExecState::Completed)
                if prompt.is_some() && exec.as_ref().is_some_and(|e| e.instance_id.is_some()) =>
            {
                // A follow-up turn on the same instance (the agent manager
                // resumes its session); a new run when it refuses.
                let instance = exec
                    .as_ref()
                    .and_then(|e| e.instance_id)
                    .unwrap_or_default();
                let text = prompt.clone().unwrap_or_default();
                match self.agents.send_prompt(&instance.to_string(), &text).await {
                    Ok(()) => {
                        self.set_state(task_id, ExecState::Running).await?;
                        let task = self.get_task(task_id).await?;
                        self.move_to_in_progress(task_id, task_state(&task)?).await;
                    }
                    Err(status)
                        if matches!(
                            status.code(),
                            tonic::Code::FailedPrecondition | tonic::Code::NotFound
                        ) =>
                    {
                        tracing::info!(%task_id, %instance, msg = status.message(), "follow-up needs a new run");
                        self.new_run(task_id, prompt).await?;
                    }
                    Err(status) => {
                        return Err(OrchestratorError::upstream("agent manager")(status));
                    }
                }
                drop(guard);
            }
            _ => {
                self.new_run(task_id, prompt).await?;
                drop(guard);
            }
        }
        self.get_execution(task_id).await
    }

    async fn stop_task(&self, task_id: Uuid, reason: &str) -> Result<ExecutionView> {
        let reason = if reason.is_empty() {
            "stopped on request"
        } else {
            reason
        };
        {
            let _guard = self.lock.lock().await;
            let exec = self
                .execution(task_id)
                .await?
                .ok_or_else(|| OrchestratorError::NotFound("the task has no execution".into()))?;
            match exec.state() {
                s if s.is_active() => {
                    if let Some(instance) = exec.instance_id {
                        match self.agents.stop(&instance.to_string(), reason).await {
                            Ok(()) => {}
                            Err(status) if status.code() == tonic::Code::NotFound => {}
                            Err(status) => {
                                return Err(OrchestratorError::upstream("agent manager")(status));
                            }
                        }
                    }
                    self.set_state(task_id, ExecState::Stopped).await?;
                    // The card leaves IN_PROGRESS: a stopped run is a cancelled one.
                    if self.get_task(task_id).await?.state == pb::TaskState::InProgress as i32 {
                        let patch = json!({ "stopped_at": Utc::now(), "stop_reason": reason });
                        self.finish_task(task_id, pb::TaskState::Cancelled, reason, patch)
                            .await;
                    }
                }
                ExecState::Queued | ExecState::RetryWait => {
                    self.set_state(task_id, ExecState::Stopped).await?;
                }
                _ => {
                    return Err(OrchestratorError::FailedPrecondition(
                        "the task is neither running nor queued".into(),
                    ));
                }
            }
            self.dispatch().await?;
        }
        self.get_execution(task_id).await
    }

    async fn get_execution(&self, task_id: Uuid) -> Result<ExecutionView> {
        let exec = self.execution(task_id).await?;
        let view = self.view(task_id, exec.clone()).await?;
        if exec.is_none() && view.last_seq == 0 {
            // Unknown here: say whether the task exists at all.
            self.get_task(task_id).await?;
        }
        Ok(view)
    }

    async fn list_executions(&self, task_ids: &[Uuid]) -> Result<Vec<ExecutionView>> {
        if task_ids.len() > board::MAX_TASKS {
            return Err(OrchestratorError::Validation(format!(
                "at most {} task ids per call",
                board::MAX_TASKS
            )));
        }
        self.executions_of(task_ids).await
    }

    async fn prompt(&self, task_id: Uuid, text: String) -> Result<ExecutionView> {
        if text.trim().is_empty() {
            return Err(OrchestratorError::Validation(
                "the prompt must not be empty".into(),
            ));
        }
        self.start_task(task_id, Some(text)).await
    }

    async fn cancel_turn(&self, task_id: Uuid) -> Result<()> {
        let exec = self.execution(task_id).await?;
        let instance = Self::running_instance(&exec).ok_or_else(|| {
            OrchestratorError::FailedPrecondition("the task has no running agent".into())
        })?;
        self.agents
            .cancel(&instance.to_string(), "cancelled by the user")
            .await
            .map_err(OrchestratorError::upstream("agent manager"))
    }

    async fn review_task(
        &self,
        task_id: Uuid,
        review: review::Review,
    ) -> Result<review::ReviewOutcome> {
        self.review(task_id, review).await
    }

    async fn respond_permission(&self, task_id: Uuid, answer: PermissionAnswer) -> Result<()> {
        let exec = self.execution(task_id).await?;
        let instance = Self::running_instance(&exec).ok_or_else(|| {
            OrchestratorError::FailedPrecondition("the task has no running agent".into())
        })?;
        self.agents
            .respond_permission(pb::RespondPermissionRequest {
                instance_id: instance.to_string(),
                request_id: answer.request_id,
                option_id: answer.option_id,
                cancelled: answer.cancelled,
            })
            .await
            .map_err(OrchestratorError::upstream("agent manager"))
    }
}
