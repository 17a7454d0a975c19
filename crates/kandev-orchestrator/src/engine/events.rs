//! The reactions to `task.*` and `agent.*` events: each applied once (by
//! envelope id) under the engine's lock, then the queue is dispatched.

use kandev_events::{
    Envelope, TaskState,
    agent::{AgentEventKind, AgentLifecycle},
    subjects,
    task::{TaskCreated, TaskDeleted, TaskSnapshot, TaskStateChanged, TaskUpdated},
};
use kandev_proto::v1 as pb;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    ACTOR, Engine, Execution, ORIGIN_ELIGIBLE, TaskFacts, eligible, is_auggie, task_state,
};
use crate::domain::{ExecState, Result};

/// A `task.*` event, parsed once from its subject and payload.
enum TaskEvent {
    Created(TaskCreated),
    StateChanged(TaskStateChanged),
    Updated(TaskUpdated),
    Deleted(TaskDeleted),
}

impl TaskEvent {
    /// The envelope id and the event; an unknown subject, or a payload
    /// that is not its subject's, is an error saying which.
    fn parse(subject: &str, payload: &[u8]) -> std::result::Result<(Uuid, TaskEvent), String> {
        fn data<T: serde::de::DeserializeOwned>(
            payload: &[u8],
        ) -> std::result::Result<(Uuid, T), String> {
            serde_json::from_slice::<Envelope<T>>(payload)
                .map(|env| (env.id, env.data))
                .map_err(|err| err.to_string())
        }
        match subject {
            subjects::TASK_CREATED => data(payload).map(|(id, d)| (id, TaskEvent::Created(d))),
            subjects::TASK_STATE_CHANGED => {
                data(payload).map(|(id, d)| (id, TaskEvent::StateChanged(d)))
            }
            subjects::TASK_UPDATED => data(payload).map(|(id, d)| (id, TaskEvent::Updated(d))),
            subjects::TASK_DELETED => data(payload).map(|(id, d)| (id, TaskEvent::Deleted(d))),
            other => Err(format!("no task event has the subject {other:?}")),
        }
    }

    /// The task after the change.
    fn task(&self) -> &TaskSnapshot {
        match self {
            TaskEvent::Created(e) => &e.task,
            TaskEvent::StateChanged(e) => &e.task,
            TaskEvent::Updated(e) => &e.task,
            TaskEvent::Deleted(e) => &e.task,
        }
    }
}

/// An event that cannot be applied: logged and counted by `source`
/// (`task` or `agent`), then acknowledged (it would never parse).
fn malformed(source: &'static str, subject: &str, err: &str) {
    tracing::warn!(%err, subject, source, "skipping a malformed event");
    metrics::counter!(crate::metric_names::EVENTS_MALFORMED, "source" => source).increment(1);
}

impl Engine {
    /// Handles one `task.*` event; returns once it is fully applied.
    pub async fn handle_task_event(&self, subject: &str, payload: &[u8]) -> Result<()> {
        let (id, event) = match TaskEvent::parse(subject, payload) {
            Ok(parsed) => parsed,
            Err(err) => {
                malformed("task", subject, &err);
                return Ok(());
            }
        };
        // The card moves at once, whatever the engine decides next.
        let deleted = matches!(event, TaskEvent::Deleted(_));
        self.signal_task(event.task(), deleted);
        let _guard = self.lock.lock().await?;
        if self.seen(id).await? {
            return Ok(());
        }
        match &event {
            TaskEvent::Created(created) => self.on_created(&created.task).await?,
            TaskEvent::StateChanged(change) if change.actor != ACTOR => {
                self.on_state_changed(change).await?;
            }
            TaskEvent::Updated(update) if update.actor != ACTOR => self.on_updated(update).await?,
            TaskEvent::Deleted(gone) => self.on_deleted(gone.task.id).await?,
            // The engine's own changes.
            TaskEvent::StateChanged(_) | TaskEvent::Updated(_) => {}
        }
        self.mark_seen(id).await?;
        let dispatched = self.dispatch().await;
        // Its execution may have changed too (queued, stopped).
        if !deleted {
            self.signal_execution(event.task().id);
        }
        dispatched
    }

    /// Auto-started at creation: the creator's run.
    async fn on_created(&self, task: &TaskSnapshot) -> Result<()> {
        let t = TaskFacts::from(task);
        if eligible(&t) {
            self.enqueue_eligible(&t, &task.created_by, task).await?;
        }
        Ok(())
    }

    async fn on_updated(&self, update: &TaskUpdated) -> Result<()> {
        let t = TaskFacts::from(&update.task);
        let exec = self.execution(t.id).await?;
        match exec.as_ref().map(Execution::state) {
            Some(ExecState::Queued) => {
                self.store
                    .update_queued(t.id, t.priority, t.max_retries)
                    .await?;
            }
            Some(s) if s.is_active() || s == ExecState::RetryWait => {}
            _ if eligible(&t) => {
                self.enqueue_eligible(&t, &update.actor, &update.task)
                    .await?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn on_deleted(&self, task_id: Uuid) -> Result<()> {
        let exec = self.execution(task_id).await?;
        if let Some(exec) = exec.as_ref().filter(|e| e.state().is_active()) {
            self.stop_agent(exec, "task deleted").await;
        }
        self.store.drop_pending_prompts(task_id).await?;
        // Its clone and local branch go with it (nothing pushed), also when
        // its runs were launched directly, without an execution here.
        self.remove_workspace(task_id, "task deleted").await;
        self.store.forget_direct_clone(task_id).await?;
        self.store.delete_review_comments(task_id).await?;
        self.store.drop_checks(task_id).await?;
        if exec.is_some() {
            self.store.delete(task_id).await?;
        }
        Ok(())
    }

    /// Queues a task an event made eligible, as a run for the person whose
    /// change did it, else for the board's owner (see [`Engine::run_as`]).
    async fn enqueue_eligible(
        &self,
        t: &TaskFacts,
        actor: &str,
        task: &TaskSnapshot,
    ) -> Result<()> {
        let run_as = self.run_as(actor, &task.board_id.to_string()).await?;
        self.enqueue(t, "", ORIGIN_ELIGIBLE, &run_as).await
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
                    self.enqueue_eligible(&t, &change.actor, &change.task)
                        .await?;
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
        let _guard = self.lock.lock().await?;
        let env: Envelope<AgentLifecycle> = match serde_json::from_slice(payload) {
            Ok(env) => env,
            Err(err) => {
                malformed("agent", "agent.*", &err.to_string());
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
        } else if exec.is_none() {
            self.on_direct_run_event(&ev).await?;
        } else {
            tracing::debug!(task_id = %ev.task_id, instance = %ev.instance_id, kind = ?ev.kind,
                "agent event of an instance that is not the task's current one");
        }
        self.mark_seen(env.id).await?;
        let dispatched = self.dispatch().await;
        self.signal_execution(ev.task_id);
        dispatched
    }

    /// A run launched directly, with no execution here: once it ends, its
    /// clone is due after the retention; while one runs, it is not.
    async fn on_direct_run_event(&self, ev: &AgentLifecycle) -> Result<()> {
        match ev.kind {
            AgentEventKind::Completed | AgentEventKind::Failed | AgentEventKind::Stopped => {
                self.store.direct_run_ended(ev.task_id, ev.at).await?;
            }
            AgentEventKind::Started | AgentEventKind::Running => {
                self.store.forget_direct_clone(ev.task_id).await?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn on_agent_event(&self, exec: &Execution, ev: &AgentLifecycle) -> Result<()> {
        let task_id = exec.task_id;
        if let Some(session) = ev.acp_session_id.as_deref().filter(|s| !s.is_empty()) {
            self.store.set_session(task_id, session).await?;
        }
        let active = exec.state().is_active();
        match ev.kind {
            AgentEventKind::Started | AgentEventKind::Running
                if exec.state() == ExecState::Launching =>
            {
                self.set_state(task_id, ExecState::Running).await?;
            }
            AgentEventKind::Completed if active => self.on_completed(exec, ev).await?,
            AgentEventKind::Failed if active => self.on_failed(exec, ev).await?,
            AgentEventKind::Stopped if active => {
                self.set_state(task_id, ExecState::Stopped).await?;
            }
            AgentEventKind::WaitingForInput if active => {
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
            AgentEventKind::Preparing if active => {
                // The card says how far the agent's image is: "preparing
                // the agent image ...", then how long it took.
                let detail = ev.summary.clone().unwrap_or_default();
                self.record_metadata(task_id, &json!({ "agent_image": detail }))
                    .await;
            }
            AgentEventKind::InputReceived if active => {
                self.move_task(
                    task_id,
                    TaskState::WaitingForInput,
                    TaskState::InProgress,
                    "answered",
                )
                .await;
            }
            // A run that is over hears no more.
            _ => {}
        }
        Ok(())
    }

    /// The turn ended: held follow-ups go on as the next turn; a cancelled
    /// turn waits for one; else the task is done (to REVIEW when it works
    /// on files and the settings say so).
    async fn on_completed(&self, exec: &Execution, ev: &AgentLifecycle) -> Result<()> {
        let task_id = exec.task_id;
        self.set_state(task_id, ExecState::Completed).await?;
        let mut patch = json!({
            "completed_at": ev.at,
            "summary": ev.summary.clone().unwrap_or_default(),
            "stop_reason": ev.stop_reason.clone().unwrap_or_default(),
            "last_instance_id": ev.instance_id,
            "attempts": exec.attempts,
        });
        crate::domain::merge_fields(&mut patch, session_patch(exec, ev));
        // Follow-ups held while the turn ran go now, as the next turn: the
        // task stays in progress (a cancelled turn too).
        if self.send_held(exec).await {
            kandev_common::text::strip_nul_json(&mut patch);
            self.record_metadata(task_id, &patch).await;
            return Ok(());
        }
        if ev.stop_reason.as_deref() == Some("cancelled") {
            // A person cancelled the turn: the task is not done; it stays
            // in progress, idle, for a follow-up.
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
        let target = if self.settings.complete_to_review && self.has_files(task_id).await {
            pb::TaskState::Review
        } else {
            pb::TaskState::Completed
        };
        tracing::info!(%task_id, ?target, "run completed");
        self.finish_task(task_id, target, "agent completed", patch)
            .await;
        Ok(())
    }

    /// The run failed: its session is kept so a rerun can resume it; an
    /// agent's own error answer would repeat, so it is not retried.
    async fn on_failed(&self, exec: &Execution, ev: &AgentLifecycle) -> Result<()> {
        let patch = session_patch(exec, ev);
        if !patch.as_object().is_none_or(serde_json::Map::is_empty) {
            self.record_metadata(exec.task_id, &patch).await;
        }
        let error = ev
            .error
            .clone()
            .unwrap_or_else(|| "agent failed".to_string());
        self.run_failed(exec, &error, ev.retryable != Some(false))
            .await
    }

    /// Whether the task works on files (a repository, or a workspace
    /// directory): only then is there work to review, so only then does a
    /// finished run go to REVIEW; a task with neither completes, as the
    /// seed has every finished run do. A task that cannot be read is taken
    /// to have files (REVIEW loses nothing: the person moves it on).
    async fn has_files(&self, task_id: Uuid) -> bool {
        match self.get_task(task_id).await {
            Ok(task) => !task.repository_url.is_empty() || !task.workspace_path.is_empty(),
            Err(err) => {
                tracing::warn!(%task_id, %err, "cannot read the task; it goes to review");
                true
            }
        }
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
}

/// The run's ACP session as task metadata (`{}` when it has none): the
/// event's, else the one the run had.
fn session_patch(exec: &Execution, ev: &AgentLifecycle) -> Value {
    let session = ev
        .acp_session_id
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(&exec.acp_session_id);
    if session.is_empty() {
        return json!({});
    }
    let mut patch = json!({ "acp_session_id": session });
    if is_auggie(&exec.agent_type) {
        patch["auggie_session_id"] = json!(session);
    }
    patch
}
