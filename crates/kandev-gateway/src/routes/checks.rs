//! The CI checks of a task's pushed work (the orchestrator polls the
//! forge and keeps them): read by whoever may see the task; "Fix CI"
//! sends the failing checks' names and the end of their output to the
//! agent as a follow-up in the same session.

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use kandev_proto::{time::to_chrono, v1 as pb};
use serde::Serialize;
use utoipa::ToSchema;

use super::access::visible_task;
use crate::{
    api::TaskExecution,
    auth::CurrentUser,
    clients::{Answer, orch_err},
    error::{ApiResult, ErrorBody},
    extract::ApiPath,
    state::AppState,
};

/// One CI check of the pushed commit, as the forge reported it (its text
/// is the forge's, size-bounded).
#[derive(Debug, Serialize, ToSchema)]
pub struct CiCheck {
    pub name: String,
    /// `check_run` (GitHub checks) or `status` (a commit status).
    pub kind: String,
    /// `queued`, `in_progress` or `completed`.
    pub status: String,
    /// When completed: `success`, `failure`, `neutral`, `skipped`,
    /// `cancelled`, `timed_out`, …; else empty.
    pub conclusion: String,
    /// Where the forge shows it (http(s) only), or empty.
    pub url: String,
    pub failed: bool,
    /// The end of its output or log (failed checks only), at most 4 KiB.
    pub log_tail: String,
}

/// The CI checks of a task's last pushed commit.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskChecks {
    #[schema(value_type = uuid::Uuid)]
    pub task_id: String,
    /// The commit watched; empty: nothing pushed to a forge.
    pub sha: String,
    /// `none`, `pending`, `success` or `failure`.
    pub state: String,
    pub checks: Vec<CiCheck>,
    /// Why the last read of the forge failed, or empty.
    pub error: String,
    /// Whether the forge is still read for this commit.
    pub polling: bool,
    pub updated_at: Option<DateTime<Utc>>,
    /// When a "Fix CI" follow-up went for this commit, if one did.
    pub fix_sent_at: Option<DateTime<Utc>>,
}

impl From<pb::TaskChecks> for TaskChecks {
    fn from(c: pb::TaskChecks) -> Self {
        TaskChecks {
            task_id: c.task_id,
            sha: c.sha,
            state: c.state,
            checks: c
                .checks
                .into_iter()
                .map(|k| CiCheck {
                    name: k.name,
                    kind: k.kind,
                    status: k.status,
                    conclusion: k.conclusion,
                    url: k.url,
                    failed: k.failed,
                    log_tail: k.log_tail,
                })
                .collect(),
            error: c.error,
            polling: c.polling,
            updated_at: c.updated_at.as_ref().and_then(to_chrono),
            fix_sent_at: c.fix_sent_at.as_ref().and_then(to_chrono),
        }
    }
}

/// What "Fix CI" sent.
#[derive(Debug, Serialize, ToSchema)]
pub struct FixCiResponse {
    pub execution: TaskExecution,
    /// The failing checks whose names and log tails went to the agent.
    pub checks: Vec<String>,
}

#[utoipa::path(operation_id = "get_task_checks", get, path = "/api/v1/orchestrator/tasks/{taskId}/checks", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id")),
    responses((status = 200, body = TaskChecks),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(task_id = %task_id))]
pub async fn get(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
) -> ApiResult<Json<TaskChecks>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let checks = state
        .orchestrator()
        .get_task_checks(pb::GetTaskChecksRequest { task_id: task.id })
        .await
        .answer(orch_err)?;
    Ok(Json(checks.into()))
}

#[utoipa::path(operation_id = "fix_ci", post, path = "/api/v1/orchestrator/tasks/{taskId}/fix-ci", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id")),
    responses((status = 200, body = FixCiResponse),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "no check failed on the task's pushed commit, or the run belongs to another user", body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(task_id = %task_id))]
pub async fn fix(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
) -> ApiResult<Json<FixCiResponse>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let fixed = state
        .orchestrator()
        .fix_ci(pb::FixCiRequest {
            task_id: task.id,
            actor: user.username,
        })
        .await
        .answer(orch_err)?;
    Ok(Json(FixCiResponse {
        execution: fixed.execution.unwrap_or_default().into(),
        checks: fixed.checks,
    }))
}
