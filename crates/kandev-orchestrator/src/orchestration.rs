//! What the adapters (gRPC, REST, the WebSocket feed) can ask of the
//! orchestrator: the [`Orchestration`] port, which the engine implements.

use async_trait::async_trait;
use kandev_proto::v1 as pb;
use uuid::Uuid;

use crate::{
    domain::{ExecutionView, Result},
    engine::{
        followups::PendingPrompt,
        review::{Review, ReviewCommentRow, ReviewOutcome},
        store::{TaskChecksRow, TrackerLinkRow},
        trackers::Applied,
    },
};

/// An answer to a permission request of the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionAnswer {
    /// The JSON-RPC id of the request, as JSON text.
    pub request_id: String,
    pub option_id: String,
    pub cancelled: bool,
    /// Who answers (a username, named in the feed), or empty.
    pub actor: String,
}

/// Everything the adapters can ask of the orchestrator. `actor` is the
/// user who asks (the username the gateway forwards), or empty for a
/// caller without a person: a run it starts uses that user's secrets and
/// agent home volume (see [`crate::engine`]'s `run_as`).
#[async_trait]
pub trait Orchestration: Send + Sync + 'static {
    /// Queues a run (or, while one runs, sends `prompt` as a follow-up).
    async fn start_task(
        &self,
        task_id: Uuid,
        prompt: Option<String>,
        actor: &str,
    ) -> Result<ExecutionView>;
    /// Stops the running agent or takes the task out of the queue.
    async fn stop_task(&self, task_id: Uuid, reason: &str) -> Result<ExecutionView>;
    async fn get_execution(&self, task_id: Uuid) -> Result<ExecutionView>;
    /// The executions of many tasks (a board's cards), in the given order.
    async fn list_executions(&self, task_ids: &[Uuid]) -> Result<Vec<ExecutionView>>;
    /// A follow-up prompt: to the running agent, or a new run resuming the
    /// session when none runs.
    async fn prompt(&self, task_id: Uuid, text: String, actor: &str) -> Result<ExecutionView>;
    /// Cancels the running prompt turn (`session/cancel`).
    async fn cancel_turn(&self, task_id: Uuid) -> Result<()>;
    /// The follow-ups held until the task's turn ends, in the order they
    /// came (see `engine::followups`).
    async fn pending_prompts(&self, task_id: Uuid) -> Result<Vec<PendingPrompt>>;
    /// Replaces the text of a held follow-up, as `actor` (its author, or
    /// empty for a caller without a person).
    async fn edit_pending_prompt(
        &self,
        task_id: Uuid,
        prompt_id: Uuid,
        text: &str,
        actor: &str,
    ) -> Result<PendingPrompt>;
    /// Cancels a held follow-up, as `actor`: it is never sent.
    async fn cancel_pending_prompt(
        &self,
        task_id: Uuid,
        prompt_id: Uuid,
        actor: &str,
    ) -> Result<()>;
    async fn respond_permission(&self, task_id: Uuid, answer: PermissionAnswer) -> Result<()>;
    /// The review loop of a task in REVIEW: request changes, or approve.
    async fn review_task(&self, task_id: Uuid, review: Review) -> Result<ReviewOutcome>;
    /// The comments kept from the task's requests for changes.
    async fn review_comments(&self, task_id: Uuid) -> Result<Vec<ReviewCommentRow>>;
    /// Resolves a kept comment as `actor`, or (`resolved` false) opens it
    /// again; not found when the task has no such comment.
    async fn resolve_review_comment(
        &self,
        task_id: Uuid,
        comment_id: Uuid,
        resolved: bool,
        actor: &str,
    ) -> Result<ReviewCommentRow>;
    /// The CI checks of the task's last pushed commit; `None` when nothing
    /// was pushed to a forge whose checks are read.
    async fn task_checks(&self, task_id: Uuid) -> Result<Option<TaskChecksRow>>;
    /// Sends the failing checks' names and log tails to the agent as
    /// `actor`'s follow-up; the names sent. Refused when none failed.
    async fn fix_ci(&self, task_id: Uuid, actor: &str) -> Result<(ExecutionView, Vec<String>)>;
    /// Links a board to its issue tracker, or replaces its link (the
    /// request checked against the configured forges).
    async fn set_tracker_link(&self, request: pb::SetTrackerLinkRequest) -> Result<TrackerLinkRow>;
    /// Not found when the board has no link.
    async fn tracker_link(&self, board_id: Uuid) -> Result<TrackerLinkRow>;
    async fn delete_tracker_link(&self, board_id: Uuid) -> Result<()>;
    /// A tracker's webhook delivery: unauthenticated unless its signature
    /// is a linked board's.
    async fn tracker_webhook(
        &self,
        kind: &str,
        event: &str,
        signature: &str,
        payload: &[u8],
    ) -> Result<Applied>;
}
