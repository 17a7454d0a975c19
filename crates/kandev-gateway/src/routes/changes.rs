//! A task's changes: the files its agent changed on the task's branch
//! against the base it started from (committed and not), and each file's
//! diff. Read from the task's clone by the agent manager; after an approval
//! that removed the clone, the approved commit's.

use axum::{Json, extract::State};
use kandev_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::access::visible_task;
use crate::{
    auth::CurrentUser,
    clients::{AgentManager, Answer, agent_err, orch_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiPath, ApiQuery},
    state::AppState,
};

/// One changed file.
#[derive(Debug, Serialize, ToSchema)]
pub struct FileChange {
    pub path: String,
    /// The path before a rename or copy.
    pub old_path: Option<String>,
    /// `added`, `modified`, `deleted`, `renamed`, `copied` or `type_changed`.
    pub status: String,
    pub additions: i64,
    pub deletions: i64,
    /// Binary files have no line counts and no textual diff.
    pub binary: bool,
}

/// Where the task's work lives and what changed there.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskChanges {
    #[schema(value_type = uuid::Uuid)]
    pub task_id: String,
    /// The clone, on the agent manager's host.
    pub workspace_path: String,
    /// The task's branch.
    pub branch: String,
    pub base_branch: String,
    pub base_commit: String,
    pub head_commit: String,
    pub files: Vec<FileChange>,
    /// Disk used by the clone, in bytes.
    pub disk_bytes: i64,
    /// The approved change, when the files are exactly it: nothing changed
    /// in the clone since the approval, or the clone was removed after it.
    pub delivered: Option<DeliveredChange>,
    /// The agent's clone was removed after the approval: the files and
    /// diffs are the delivered commit's against the base (kept until the
    /// retention removes them), `workspace_path` is empty, and there is
    /// nothing to deliver again.
    pub clone_removed: bool,
}

/// The commit an approval delivered, and where it was pushed.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveredChange {
    /// The task's branch.
    pub branch: String,
    pub commit: String,
    /// The remote the branch was pushed to (no credentials); absent when
    /// committed only.
    pub pushed_to: Option<String>,
}

/// The unified diff of one file.
#[derive(Debug, Serialize, ToSchema)]
pub struct FileDiff {
    pub path: String,
    pub diff: String,
    /// The diff was cut at the size limit; its last line says so.
    pub truncated: bool,
    pub binary: bool,
}

/// Which file.
/// The agent manager that has the task's workspace: the one the
/// orchestrator says ran it (a pool), else the configured one.
async fn agents_of(state: &AppState, task_id: &str) -> AgentManager {
    let url = state
        .orchestrator()
        .get_task_execution(pb::GetTaskExecutionRequest {
            task_id: task_id.to_string(),
        })
        .await
        .map(|r| r.into_inner().agent_manager_url)
        .unwrap_or_default();
    state.downstream().agents_at(&url)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DiffParams {
    /// The file's path in the repository, as listed by `changes`.
    pub path: String,
}

#[utoipa::path(get, path = "/api/v1/tasks/{id}/changes", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id")),
    responses((status = 200, body = TaskChanges),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub async fn changes(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<TaskChanges>> {
    let task = visible_task(&state, &user, &id).await?;
    let c = agents_of(&state, &task.id)
        .await
        .get_changes(pb::GetChangesRequest { task_id: task.id })
        .await
        .answer(agent_err)?;
    Ok(Json(TaskChanges {
        task_id: c.task_id,
        workspace_path: c.workspace_path,
        branch: c.branch,
        base_branch: c.base_branch,
        base_commit: c.base_commit,
        head_commit: c.head_commit,
        files: c
            .files
            .into_iter()
            .map(|f| FileChange {
                old_path: Some(f.old_path).filter(|p| !p.is_empty()),
                path: f.path,
                status: f.status,
                additions: f.additions,
                deletions: f.deletions,
                binary: f.binary,
            })
            .collect(),
        disk_bytes: c.disk_bytes,
        delivered: c.delivered.map(|d| DeliveredChange {
            branch: d.branch,
            commit: d.commit,
            pushed_to: Some(d.pushed_to).filter(|p| !p.is_empty()),
        }),
        clone_removed: c.clone_removed,
    }))
}

#[utoipa::path(get, path = "/api/v1/tasks/{id}/changes/diff", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id"), DiffParams),
    responses((status = 200, body = FileDiff),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub async fn diff(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<DiffParams>,
) -> ApiResult<Json<FileDiff>> {
    if params.path.is_empty() || params.path.contains('\0') {
        return Err(ApiError::validation("path must name a changed file"));
    }
    let task = visible_task(&state, &user, &id).await?;
    let d = agents_of(&state, &task.id)
        .await
        .get_file_diff(pb::GetFileDiffRequest {
            task_id: task.id,
            path: params.path,
        })
        .await
        .answer(agent_err)?;
    Ok(Json(FileDiff {
        path: d.path,
        diff: d.diff,
        truncated: d.truncated,
        binary: d.binary,
    }))
}

/// One review comment: on a line of a file, on a file, or on the whole
/// change (no path). The comments of a request for changes are kept (see
/// `GET /tasks/{id}/review/comments`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewComment {
    #[serde(default)]
    pub path: String,
    pub line: Option<u32>,
    /// Which side of the diff `line` is on; `new` when absent.
    pub side: Option<DiffSide>,
    /// The commented line's text (at most 2000 characters), so that a
    /// later diff whose line differs shows the comment as outdated.
    #[serde(default)]
    pub line_text: String,
    pub body: String,
}

/// A side of a diff: the file after the change (added and unchanged
/// lines), or before it (removed lines).
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DiffSide {
    New,
    Old,
}

impl DiffSide {
    fn as_str(self) -> &'static str {
        match self {
            DiffSide::New => "new",
            DiffSide::Old => "old",
        }
    }
}

/// The longest `line_text` a comment keeps.
const MAX_LINE_TEXT: usize = 2000;

/// The reviewer's decision on a task in REVIEW.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewRequest {
    /// `request_changes`: the comments go to the agent as a follow-up in
    /// its session and the task goes back to IN_PROGRESS. `approve`: the
    /// work is committed on the task's branch, pushed, and the task is
    /// COMPLETED.
    pub action: String,
    #[serde(default)]
    pub comments: Vec<ReviewComment>,
    /// A general comment (request_changes) or the commit message (approve).
    #[serde(default)]
    pub message: String,
    /// approve: merge the branch into its base on the remote instead of
    /// opening a pull request (for repositories without a forge).
    #[serde(default)]
    pub merge: bool,
}

/// What the review did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewResponse {
    pub execution: crate::api::TaskExecution,
    /// What approval delivered.
    pub delivery: Option<Delivery>,
}

/// The commit an approval made and where it was pushed.
#[derive(Debug, Serialize, ToSchema)]
pub struct Delivery {
    pub branch: String,
    pub commit: String,
    /// Whether uncommitted work was committed.
    pub committed: bool,
    /// The remote the branch was pushed to (no credentials).
    pub pushed_to: Option<String>,
    /// The pull (merge) request opened on the repository's forge.
    pub pull_request_url: Option<String>,
}

const MAX_COMMENTS: usize = 200;

#[utoipa::path(post, path = "/api/v1/tasks/{id}/review", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id")),
    request_body = ReviewRequest,
    responses((status = 200, body = ReviewResponse),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub async fn review(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    crate::extract::ApiJson(body): crate::extract::ApiJson<ReviewRequest>,
) -> ApiResult<Json<ReviewResponse>> {
    // The path first: a bad id is a bad request whatever the body says.
    super::access::parse_id("task", &id)?;
    if !matches!(body.action.as_str(), "request_changes" | "approve") {
        return Err(ApiError::validation(
            "action must be request_changes or approve",
        ));
    }
    if body.comments.len() > MAX_COMMENTS {
        return Err(ApiError::validation(format!(
            "at most {MAX_COMMENTS} comments"
        )));
    }
    if body
        .comments
        .iter()
        .any(|c| c.line_text.chars().count() > MAX_LINE_TEXT)
    {
        return Err(ApiError::validation(format!(
            "a comment's line_text has at most {MAX_LINE_TEXT} characters"
        )));
    }
    let task = visible_task(&state, &user, &id).await?;
    let r = state
        .orchestrator()
        .review_task(pb::ReviewTaskRequest {
            task_id: task.id,
            action: body.action.clone(),
            comments: body
                .comments
                .into_iter()
                .map(|c| pb::ReviewComment {
                    path: c.path,
                    line: c.line.and_then(|l| i32::try_from(l).ok()).unwrap_or(0),
                    body: c.body,
                    side: c.side.unwrap_or(DiffSide::New).as_str().to_string(),
                    line_text: c.line_text,
                })
                .collect(),
            message: body.message,
            actor: user.username.clone(),
            actor_email: String::new(),
            merge: body.merge,
        })
        .await
        .answer(orch_err)?;
    let execution = r
        .execution
        .map(crate::api::TaskExecution::from)
        .ok_or_else(|| ApiError::internal("the orchestrator sent no execution"))?;
    let delivery = (body.action == "approve").then(|| Delivery {
        branch: r.branch,
        commit: r.commit,
        committed: r.committed,
        pushed_to: Some(r.pushed_to).filter(|p| !p.is_empty()),
        pull_request_url: Some(r.pull_request_url).filter(|p| !p.is_empty()),
    });
    Ok(Json(ReviewResponse {
        execution,
        delivery,
    }))
}
