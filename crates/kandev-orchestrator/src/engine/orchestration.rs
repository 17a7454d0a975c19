//! The engine as the gRPC and REST adapters call it: start, stop, follow
//! up, cancel, answer permissions, review, and read executions.

use async_trait::async_trait;
use chrono::Utc;
use kandev_proto::v1 as pb;
use serde_json::json;
use uuid::Uuid;

use super::{
    Engine, Execution, board,
    followups::{PendingPrompt, with_held},
    is_person, review,
    store::TrackerLinkRow,
    task_state, trackers,
};
use crate::{
    domain::{ExecState, ExecutionView, OrchestratorError, Result},
    orchestration::{Orchestration, PermissionAnswer},
};

#[async_trait]
impl Orchestration for Engine {
    async fn start_task(
        &self,
        task_id: Uuid,
        prompt: Option<String>,
        actor: &str,
    ) -> Result<ExecutionView> {
        self.start(task_id, prompt, actor).await
    }

    async fn stop_task(&self, task_id: Uuid, reason: &str) -> Result<ExecutionView> {
        let reason = if reason.is_empty() {
            "stopped on request"
        } else {
            reason
        };
        {
            let _guard = self.lock.lock().await?;
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
        self.execution_view(task_id).await
    }

    async fn get_execution(&self, task_id: Uuid) -> Result<ExecutionView> {
        self.execution_view(task_id).await
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

    async fn prompt(&self, task_id: Uuid, text: String, actor: &str) -> Result<ExecutionView> {
        self.follow_up(task_id, text, actor).await
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

    async fn pending_prompts(&self, task_id: Uuid) -> Result<Vec<PendingPrompt>> {
        self.held(task_id).await
    }

    async fn edit_pending_prompt(
        &self,
        task_id: Uuid,
        prompt_id: Uuid,
        text: &str,
        actor: &str,
    ) -> Result<PendingPrompt> {
        self.edit_held(task_id, prompt_id, text, actor).await
    }

    async fn cancel_pending_prompt(
        &self,
        task_id: Uuid,
        prompt_id: Uuid,
        actor: &str,
    ) -> Result<()> {
        self.cancel_held(task_id, prompt_id, actor).await
    }

    async fn review_task(
        &self,
        task_id: Uuid,
        review: review::Review,
    ) -> Result<review::ReviewOutcome> {
        self.review(task_id, review).await
    }

    async fn review_comments(&self, task_id: Uuid) -> Result<Vec<review::ReviewCommentRow>> {
        self.kept_review_comments(task_id).await
    }

    async fn resolve_review_comment(
        &self,
        task_id: Uuid,
        comment_id: Uuid,
        resolved: bool,
        actor: &str,
    ) -> Result<review::ReviewCommentRow> {
        self.resolve_comment(task_id, comment_id, resolved, actor)
            .await
    }

    async fn task_checks(&self, task_id: Uuid) -> Result<Option<super::store::TaskChecksRow>> {
        self.checks_of(task_id).await
    }

    async fn fix_ci(&self, task_id: Uuid, actor: &str) -> Result<(ExecutionView, Vec<String>)> {
        self.fix_ci_now(task_id, actor).await
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
                actor: answer.actor,
            })
            .await
            .map_err(OrchestratorError::upstream("agent manager"))
    }

    async fn set_tracker_link(&self, request: pb::SetTrackerLinkRequest) -> Result<TrackerLinkRow> {
        let link = trackers::link_from_proto(request, &self.settings.forges)?;
        Engine::set_tracker_link(self, link).await
    }

    async fn tracker_link(&self, board_id: Uuid) -> Result<TrackerLinkRow> {
        Engine::tracker_link(self, board_id).await
    }

    async fn delete_tracker_link(&self, board_id: Uuid) -> Result<()> {
        Engine::delete_tracker_link(self, board_id).await
    }

    async fn tracker_webhook(
        &self,
        kind: &str,
        event: &str,
        signature: &str,
        payload: &[u8],
    ) -> Result<trackers::Applied> {
        Engine::tracker_webhook(self, kind, event, signature, payload).await
    }
}

impl Engine {
    /// Queues a run, or sends `prompt` as a follow-up while one runs
    /// ([`Orchestration::start_task`]).
    pub(crate) async fn start(
        &self,
        task_id: Uuid,
        prompt: Option<String>,
        actor: &str,
    ) -> Result<ExecutionView> {
        let prompt = prompt.filter(|p| !p.trim().is_empty());
        let guard = self.lock.lock().await?;
        match self.execution(task_id).await? {
            Some(exec) if exec.state().is_active() => {
                let Some(text) = prompt else {
                    return Err(OrchestratorError::FailedPrecondition(
                        "the task is already running".into(),
                    ));
                };
                // Held until the turn ends (see `followups`).
                check_prompter(&exec, actor)?;
                self.hold_follow_up(&exec, actor, &text).await?;
                drop(guard);
            }
            Some(exec) if matches!(exec.state(), ExecState::Queued | ExecState::RetryWait) => {
                if let Some(text) = prompt {
                    self.store.set_prompt(task_id, &text).await?;
                }
                if is_person(actor) {
                    // Started by a person: the run is theirs.
                    self.store.set_run_as(task_id, actor).await?;
                }
                drop(guard);
            }
            Some(exec)
                if exec.state() == ExecState::Completed
                    && prompt.is_some()
                    && exec.instance_id.is_some() =>
            {
                self.follow_up_completed(exec, prompt, actor).await?;
                drop(guard);
            }
            _ => {
                let task = self.get_task(task_id).await?;
                let run_as = self.run_as(actor, &task.board_id).await?;
                let held = self.held_for(task_id, &run_as).await?;
                self.new_run(task_id, &task, with_held(&held, prompt), &run_as)
                    .await?;
                self.forget_held(task_id, &held).await;
                drop(guard);
            }
        }
        self.execution_view(task_id).await
    }

    /// The task's execution ([`Orchestration::get_execution`]).
    pub(crate) async fn execution_view(&self, task_id: Uuid) -> Result<ExecutionView> {
        let exec = self.execution(task_id).await?;
        let view = self.view(task_id, exec.clone()).await?;
        if exec.is_none() && view.last_seq == 0 {
            // Unknown here: say whether the task exists at all.
            self.get_task(task_id).await?;
        }
        Ok(view)
    }

    /// A follow-up prompt ([`Orchestration::prompt`]).
    pub(crate) async fn follow_up(
        &self,
        task_id: Uuid,
        text: String,
        actor: &str,
    ) -> Result<ExecutionView> {
        if text.trim().is_empty() {
            return Err(OrchestratorError::Validation(
                "the prompt must not be empty".into(),
            ));
        }
        self.start(task_id, Some(text), actor).await
    }

    /// A follow-up of a completed run, from the stream's prompt command or
    /// the REST prompt of its instance alike: a turn on the same instance
    /// (the agent manager resumes its session), the task straight back to
    /// IN_PROGRESS, when it is for the run's user; a new run for the one who
    /// sent it otherwise, or when the instance refuses. The follow-ups held
    /// for whoever's run it becomes go first. Called under the lock.
    pub(super) async fn follow_up_completed(
        &self,
        exec: Execution,
        prompt: Option<String>,
        actor: &str,
    ) -> Result<()> {
        let task_id = exec.task_id;
        let task = self.get_task(task_id).await?;
        let run_as = self.run_as(actor, &task.board_id).await?;
        let held = self.held_for(task_id, &run_as).await?;
        let prompt = with_held(&held, prompt);
        let Some(instance) = exec.instance_id.filter(|_| run_as == exec.run_as) else {
            tracing::info!(%task_id, %run_as, was = %exec.run_as, "a follow-up by another user: a run of its own");
            self.new_run(task_id, &task, prompt, &run_as).await?;
            self.forget_held(task_id, &held).await;
            return Ok(());
        };
        let text = prompt.clone().unwrap_or_default();
        match self.agents.send_prompt(&instance.to_string(), &text).await {
            Ok(()) => {
                self.forget_held(task_id, &held).await;
                self.set_state(task_id, ExecState::Running).await?;
                self.move_to_in_progress(task_id, task_state(&task)?, "follow-up")
                    .await;
                Ok(())
            }
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::NotFound
                ) =>
            {
                tracing::info!(%task_id, %instance, msg = status.message(), "follow-up needs a new run");
                self.new_run(task_id, &task, prompt, &run_as).await?;
                self.forget_held(task_id, &held).await;
                Ok(())
            }
            Err(status) => Err(OrchestratorError::upstream("agent manager")(status)),
        }
    }
}

/// A running agent holds its user's secrets: another person may not steer
/// it with a prompt (they stop it and start it again, as a run of theirs).
fn check_prompter(exec: &Execution, actor: &str) -> Result<()> {
    if is_person(actor) && !exec.run_as.is_empty() && exec.run_as != actor {
        return Err(OrchestratorError::FailedPrecondition(format!(
            "this run uses {}'s secrets, so only they can prompt it while it runs; stop it and start it again to run it as {actor}",
            exec.run_as
        )));
    }
    Ok(())
}
