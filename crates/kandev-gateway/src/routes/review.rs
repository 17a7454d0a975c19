//! The comments kept from a task's requests for changes (the orchestrator
//! keeps them, round by round): listed for whoever may see the task,
//! resolved or opened again by the task's board's owner or the comment's
//! author.

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use kandev_proto::{time::to_chrono, v1 as pb};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::access::{parse_id, visible_task};
use crate::{
    auth::CurrentUser,
    clients::{Answer, orch_err, task_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath},
    state::AppState,
};

/// A comment kept from a request for changes: on a line of a file, on a
/// file (no line), or on the whole change (no path).
#[derive(Debug, Serialize, ToSchema)]
pub struct StoredReviewComment {
    #[schema(value_type = uuid::Uuid)]
    pub id: String,
    #[schema(value_type = uuid::Uuid)]
    pub task_id: String,
    /// The task's request for changes it came with: 1, 2, …
    pub round: i32,
    /// The file; empty: the whole change.
    pub path: String,
    /// The line (1-based) on `side`; none: the whole file.
    pub line: Option<u32>,
    /// `new` (the file after the change) or `old` (a removed line).
    pub side: String,
    /// The line as it read when commented (empty when unknown): a diff
    /// whose line differs shows the comment as outdated.
    pub line_text: String,
    pub body: String,
    pub author: String,
    pub created_at: Option<DateTime<Utc>>,
    pub resolved: bool,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<DateTime<Utc>>,
}

impl From<pb::StoredReviewComment> for StoredReviewComment {
    fn from(c: pb::StoredReviewComment) -> Self {
        let resolved_at = c.resolved_at.as_ref().and_then(to_chrono);
        StoredReviewComment {
            id: c.id,
            task_id: c.task_id,
            round: c.round,
            path: c.path,
            line: u32::try_from(c.line).ok().filter(|l| *l > 0),
            side: c.side,
            line_text: c.line_text,
            body: c.body,
            author: c.author,
            created_at: c.created_at.as_ref().and_then(to_chrono),
            resolved: resolved_at.is_some(),
            resolved_by: Some(c.resolved_by).filter(|r| !r.is_empty()),
            resolved_at,
        }
    }
}

/// A task's kept review comments.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewComments {
    /// Round by round, each round in writing order.
    pub comments: Vec<StoredReviewComment>,
}

/// Resolve a comment, or open it again.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveReviewComment {
    pub resolved: bool,
}

async fn kept(state: &AppState, task_id: &str) -> ApiResult<Vec<pb::StoredReviewComment>> {
    Ok(state
        .orchestrator()
        .list_review_comments(pb::ListReviewCommentsRequest {
            task_id: task_id.to_string(),
        })
        .await
        .answer(orch_err)?
        .comments)
}

#[utoipa::path(operation_id = "list_review_comments", get, path = "/api/v1/tasks/{id}/review/comments", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id")),
    responses((status = 200, body = ReviewComments),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ReviewComments>> {
    let task = visible_task(&state, &user, &id).await?;
    let comments = kept(&state, &task.id).await?;
    Ok(Json(ReviewComments {
        comments: comments.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(operation_id = "resolve_review_comment", patch, path = "/api/v1/tasks/{id}/review/comments/{commentId}", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id"),
        ("commentId" = uuid::Uuid, Path, description = "review comment id")),
    request_body = ResolveReviewComment,
    responses((status = 200, body = StoredReviewComment),
        (status = 400, body = ErrorBody),
        (status = 403, description = "neither the board's owner nor the comment's author", body = ErrorBody),
        (status = 404, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(task_id = %id, comment_id = %comment_id))]
pub async fn resolve(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath((id, comment_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ResolveReviewComment>,
) -> ApiResult<Json<StoredReviewComment>> {
    // The ids first: a bad id is a bad request whoever asks.
    parse_id("task", &id)?;
    let comment_id = parse_id("review comment", &comment_id)?;
    let task = visible_task(&state, &user, &id).await?;
    let comment = kept(&state, &task.id)
        .await?
        .into_iter()
        .find(|c| c.id == comment_id)
        .ok_or_else(|| ApiError::not_found("review comment not found"))?;
    if user.username != comment.author && user.username != board_owner(&state, &task).await? {
        return Err(ApiError::forbidden(
            "only the board's owner or the comment's author may resolve it",
        ));
    }
    let comment = state
        .orchestrator()
        .resolve_review_comment(pb::ResolveReviewCommentRequest {
            task_id: task.id,
            comment_id,
            resolved: body.resolved,
            actor: user.username.clone(),
        })
        .await
        .answer(orch_err)?;
    Ok(Json(comment.into()))
}

/// The owner of the task's board.
async fn board_owner(state: &AppState, task: &pb::Task) -> ApiResult<String> {
    Ok(state
        .tasks()
        .get_board(pb::GetBoardRequest {
            id: task.board_id.clone(),
        })
        .await
        .answer(task_err)?
        .owner)
}
