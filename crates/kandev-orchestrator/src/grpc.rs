//! The gRPC adapter: parse the request, call the [`Orchestration`], convert
//! the result. No logic of its own.

use std::sync::Arc;

use kandev_common::ServiceError;
use kandev_proto::v1::{self as pb, orchestrator_server::Orchestrator};
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::engine::ci::checks_to_proto;
use crate::engine::followups::{parse_prompt_id, pending_to_proto};
use crate::engine::review::{Review, comment_to_proto};
use crate::engine::trackers::link_to_proto;
use crate::{
    domain::{ExecutionView, OrchestratorError},
    feed::FeedReader,
    http::{PageQuery, parse_task_id},
    orchestration::{Orchestration, PermissionAnswer},
};

/// The most frames one `ReadFeed` returns.
const READ_FEED_MAX: i64 = 1000;

/// Serves `kandev.v1.Orchestrator` over an [`Orchestration`] and the feed.
pub struct GrpcOrchestratorAdapter {
    orchestration: Arc<dyn Orchestration>,
    feed: FeedReader,
}

impl GrpcOrchestratorAdapter {
    pub fn new(orchestration: Arc<dyn Orchestration>, feed: FeedReader) -> Self {
        GrpcOrchestratorAdapter {
            orchestration,
            feed,
        }
    }
}

#[tonic::async_trait]
impl Orchestrator for GrpcOrchestratorAdapter {
    async fn start_task(
        &self,
        request: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::TaskExecution>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let prompt = Some(req.prompt).filter(|p| !p.is_empty());
        let view = self
            .orchestration
            .start_task(task_id, prompt, &req.actor)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(view.to_proto()))
    }

    async fn stop_task(
        &self,
        request: Request<pb::StopTaskRequest>,
    ) -> Result<Response<pb::TaskExecution>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let view = self
            .orchestration
            .stop_task(task_id, &req.reason)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(view.to_proto()))
    }

    async fn get_task_execution(
        &self,
        request: Request<pb::GetTaskExecutionRequest>,
    ) -> Result<Response<pb::TaskExecution>, Status> {
        let task_id = parse_task_id(&request.into_inner().task_id).map_err(|e| e.to_status())?;
        let view = self
            .orchestration
            .get_execution(task_id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(view.to_proto()))
    }

    async fn list_task_executions(
        &self,
        request: Request<pb::ListTaskExecutionsRequest>,
    ) -> Result<Response<pb::ListTaskExecutionsResponse>, Status> {
        let ids = request
            .into_inner()
            .task_ids
            .iter()
            .map(|id| parse_task_id(id))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_status())?;
        let views = self
            .orchestration
            .list_executions(&ids)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::ListTaskExecutionsResponse {
            executions: views.iter().map(ExecutionView::to_proto).collect(),
        }))
    }

    async fn read_feed(
        &self,
        request: Request<pb::ReadFeedRequest>,
    ) -> Result<Response<pb::ReadFeedResponse>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        if req.after < 0 {
            return Err(
                OrchestratorError::Validation("after must be 0 or more".into()).to_status(),
            );
        }
        let limit = if req.limit <= 0 {
            READ_FEED_MAX
        } else {
            req.limit.min(READ_FEED_MAX)
        };
        let frames = self
            .feed
            .read(task_id, req.after, limit)
            .await
            .map_err(|e| OrchestratorError::Database(e).to_status())?;
        Ok(Response::new(pb::ReadFeedResponse {
            frames: frames.iter().map(|f| f.text.to_string()).collect(),
        }))
    }

    async fn read_feed_page(
        &self,
        request: Request<pb::ReadFeedPageRequest>,
    ) -> Result<Response<pb::ReadFeedPageResponse>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let query = PageQuery {
            before: (req.before != 0).then_some(req.before),
            limit: (req.limit != 0).then_some(req.limit),
        };
        let (before, limit) = query.parse().map_err(|e| e.to_status())?;
        let page = self
            .feed
            .page(task_id, before, limit)
            .await
            .map_err(|e| OrchestratorError::Database(e).to_status())?;
        let items = page
            .items
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| OrchestratorError::Internal(e.to_string()).to_status())?;
        Ok(Response::new(pb::ReadFeedPageResponse {
            items,
            covers_to: page.covers_to,
            earliest: page.earliest.unwrap_or(0),
            has_more: page.has_more,
        }))
    }

    async fn cancel_turn(
        &self,
        request: Request<pb::CancelTurnRequest>,
    ) -> Result<Response<pb::CancelTurnResponse>, Status> {
        let task_id = parse_task_id(&request.into_inner().task_id).map_err(|e| e.to_status())?;
        self.orchestration
            .cancel_turn(task_id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::CancelTurnResponse {}))
    }

    async fn respond_permission(
        &self,
        request: Request<pb::TaskPermissionRequest>,
    ) -> Result<Response<pb::TaskPermissionResponse>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        if req.option_id.is_empty() && !req.cancelled {
            return Err(OrchestratorError::Validation(
                "permission needs option_id or cancelled: true".into(),
            )
            .to_status());
        }
        self.orchestration
            .respond_permission(
                task_id,
                PermissionAnswer {
                    request_id: req.request_id,
                    option_id: req.option_id,
                    cancelled: req.cancelled,
                    actor: req.actor,
                },
            )
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::TaskPermissionResponse {}))
    }

    async fn list_pending_prompts(
        &self,
        request: Request<pb::ListPendingPromptsRequest>,
    ) -> Result<Response<pb::ListPendingPromptsResponse>, Status> {
        let task_id = parse_task_id(&request.into_inner().task_id).map_err(|e| e.to_status())?;
        let held = self
            .orchestration
            .pending_prompts(task_id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::ListPendingPromptsResponse {
            prompts: held.iter().map(pending_to_proto).collect(),
        }))
    }

    async fn edit_pending_prompt(
        &self,
        request: Request<pb::EditPendingPromptRequest>,
    ) -> Result<Response<pb::PendingPrompt>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let id = parse_prompt_id(&req.prompt_id).map_err(|e| e.to_status())?;
        let held = self
            .orchestration
            .edit_pending_prompt(task_id, id, &req.text, &req.actor)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pending_to_proto(&held)))
    }

    async fn cancel_pending_prompt(
        &self,
        request: Request<pb::CancelPendingPromptRequest>,
    ) -> Result<Response<pb::CancelPendingPromptResponse>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let id = parse_prompt_id(&req.prompt_id).map_err(|e| e.to_status())?;
        self.orchestration
            .cancel_pending_prompt(task_id, id, &req.actor)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::CancelPendingPromptResponse {}))
    }

    async fn review_task(
        &self,
        request: Request<pb::ReviewTaskRequest>,
    ) -> Result<Response<pb::ReviewTaskResponse>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let review = Review::from_proto(req).map_err(|e| e.to_status())?;
        let outcome = self
            .orchestration
            .review_task(task_id, review)
            .await
            .map_err(|e| e.to_status())?;
        let delivery = outcome.delivery.unwrap_or_default();
        Ok(Response::new(pb::ReviewTaskResponse {
            execution: Some(outcome.execution.to_proto()),
            branch: delivery.branch,
            commit: delivery.commit,
            committed: delivery.committed,
            pushed_to: delivery.pushed_to,
            pull_request_url: outcome.pull_request.unwrap_or_default(),
        }))
    }

    async fn list_review_comments(
        &self,
        request: Request<pb::ListReviewCommentsRequest>,
    ) -> Result<Response<pb::ListReviewCommentsResponse>, Status> {
        let task_id = parse_task_id(&request.into_inner().task_id).map_err(|e| e.to_status())?;
        let comments = self
            .orchestration
            .review_comments(task_id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::ListReviewCommentsResponse {
            comments: comments.iter().map(comment_to_proto).collect(),
        }))
    }

    async fn resolve_review_comment(
        &self,
        request: Request<pb::ResolveReviewCommentRequest>,
    ) -> Result<Response<pb::StoredReviewComment>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let comment_id = Uuid::parse_str(&req.comment_id).map_err(|_| {
            OrchestratorError::BadRequest(format!("comment id {:?} is not a UUID", req.comment_id))
                .to_status()
        })?;
        let comment = self
            .orchestration
            .resolve_review_comment(task_id, comment_id, req.resolved, &req.actor)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(comment_to_proto(&comment)))
    }

    async fn get_task_checks(
        &self,
        request: Request<pb::GetTaskChecksRequest>,
    ) -> Result<Response<pb::TaskChecks>, Status> {
        let task_id = parse_task_id(&request.into_inner().task_id).map_err(|e| e.to_status())?;
        let row = self
            .orchestration
            .task_checks(task_id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(checks_to_proto(task_id, row.as_ref())))
    }

    async fn fix_ci(
        &self,
        request: Request<pb::FixCiRequest>,
    ) -> Result<Response<pb::FixCiResponse>, Status> {
        let req = request.into_inner();
        let task_id = parse_task_id(&req.task_id).map_err(|e| e.to_status())?;
        let (execution, checks) = self
            .orchestration
            .fix_ci(task_id, &req.actor)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::FixCiResponse {
            execution: Some(execution.to_proto()),
            checks,
        }))
    }
    async fn set_tracker_link(
        &self,
        request: Request<pb::SetTrackerLinkRequest>,
    ) -> Result<Response<pb::TrackerLink>, Status> {
        let link = self
            .orchestration
            .set_tracker_link(request.into_inner())
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(link_to_proto(&link)))
    }

    async fn get_tracker_link(
        &self,
        request: Request<pb::GetTrackerLinkRequest>,
    ) -> Result<Response<pb::TrackerLink>, Status> {
        let board_id = parse_board_id(&request.into_inner().board_id)?;
        let link = self
            .orchestration
            .tracker_link(board_id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(link_to_proto(&link)))
    }

    async fn delete_tracker_link(
        &self,
        request: Request<pb::DeleteTrackerLinkRequest>,
    ) -> Result<Response<pb::DeleteTrackerLinkResponse>, Status> {
        let board_id = parse_board_id(&request.into_inner().board_id)?;
        self.orchestration
            .delete_tracker_link(board_id)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(pb::DeleteTrackerLinkResponse {}))
    }

    async fn deliver_tracker_webhook(
        &self,
        request: Request<pb::TrackerWebhookRequest>,
    ) -> Result<Response<pb::TrackerWebhookResponse>, Status> {
        let req = request.into_inner();
        let applied = self
            .orchestration
            .tracker_webhook(&req.kind, &req.event, &req.signature, &req.payload)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(applied.to_proto()))
    }
}

fn parse_board_id(raw: &str) -> Result<Uuid, Status> {
    Uuid::parse_str(raw)
        .map_err(|_| OrchestratorError::BadRequest(format!("invalid board id {raw:?}")).to_status())
}
