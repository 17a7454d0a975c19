//! The follow-ups a task's run holds until its turn ends (the orchestrator
//! keeps them): a follow-up sent while the run is busy (`POST .../start`
//! with a `prompt`, the stream's `prompt` command) waits here, listed for
//! whoever may see the task, edited or cancelled by its author until it
//! goes with the next turn.

use axum::{Json, extract::State, http::StatusCode};
use chrono::{DateTime, Utc};
use kandev_proto::{time::to_chrono, v1 as pb};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::access::{parse_id, visible_task};
use crate::{
    auth::CurrentUser,
    clients::{Answer, orch_err},
    error::{ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath},
    state::AppState,
};

/// A follow-up waiting for the turn to end.
#[derive(Debug, Serialize, ToSchema)]
pub struct PendingPrompt {
    #[schema(value_type = uuid::Uuid)]
    pub id: String,
    #[schema(value_type = uuid::Uuid)]
    pub task_id: String,
    pub text: String,
    /// The run's user who sent it; only they may change or cancel it.
    pub author: String,
    pub queued_at: Option<DateTime<Utc>>,
}

impl From<pb::PendingPrompt> for PendingPrompt {
    fn from(p: pb::PendingPrompt) -> Self {
        PendingPrompt {
            id: p.id,
            task_id: p.task_id,
            text: p.text,
            author: p.author,
            queued_at: p.queued_at.as_ref().and_then(to_chrono),
        }
    }
}

/// The follow-ups a task holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct PendingPrompts {
    /// In the order they came: they go to the agent together, in this
    /// order, as one prompt when the turn ends.
    pub pending_prompts: Vec<PendingPrompt>,
}

/// A held follow-up's new text.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditPendingPrompt {
    pub text: String,
}

#[utoipa::path(get, path = "/api/v1/orchestrator/tasks/{taskId}/pending-prompts", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id")),
    responses((status = 200, body = PendingPrompts),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(task_id): ApiPath<String>,
) -> ApiResult<Json<PendingPrompts>> {
    let task = visible_task(&state, &user, &task_id).await?;
    let held = state
        .orchestrator()
        .list_pending_prompts(pb::ListPendingPromptsRequest { task_id: task.id })
        .await
        .answer(orch_err)?
        .prompts;
    Ok(Json(PendingPrompts {
        pending_prompts: held.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(put, path = "/api/v1/orchestrator/tasks/{taskId}/pending-prompts/{promptId}", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id"),
        ("promptId" = uuid::Uuid, Path, description = "held follow-up id")),
    request_body = EditPendingPrompt,
    responses((status = 200, body = PendingPrompt),
        (status = 400, body = ErrorBody),
        (status = 404, description = "no such task, or the follow-up was sent or cancelled", body = ErrorBody),
        (status = 409, description = "another user's follow-up", body = ErrorBody),
        (status = 422, description = "a blank text, or one over 1 MiB", body = ErrorBody),
        (status = 429, description = "the follow-ups waiting would hold more than 4 MiB", body = ErrorBody),
        (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(task_id = %task_id, prompt_id = %prompt_id))]
pub async fn edit(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath((task_id, prompt_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<EditPendingPrompt>,
) -> ApiResult<Json<PendingPrompt>> {
    parse_id("task", &task_id)?;
    let prompt_id = parse_id("follow-up", &prompt_id)?;
    let task = visible_task(&state, &user, &task_id).await?;
    let held = state
        .orchestrator()
        .edit_pending_prompt(pb::EditPendingPromptRequest {
            task_id: task.id,
            prompt_id,
            text: body.text,
            actor: user.username,
        })
        .await
        .answer(orch_err)?;
    Ok(Json(held.into()))
}

#[utoipa::path(delete, path = "/api/v1/orchestrator/tasks/{taskId}/pending-prompts/{promptId}", tag = "orchestrator",
    params(("taskId" = uuid::Uuid, Path, description = "task id"),
        ("promptId" = uuid::Uuid, Path, description = "held follow-up id")),
    responses((status = 204, description = "cancelled: it is never sent"),
        (status = 400, body = ErrorBody),
        (status = 404, description = "no such task, or the follow-up was sent or cancelled", body = ErrorBody),
        (status = 409, description = "another user's follow-up", body = ErrorBody),
        (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(task_id = %task_id, prompt_id = %prompt_id))]
pub async fn cancel(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath((task_id, prompt_id)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    parse_id("task", &task_id)?;
    let prompt_id = parse_id("follow-up", &prompt_id)?;
    let task = visible_task(&state, &user, &task_id).await?;
    state
        .orchestrator()
        .cancel_pending_prompt(pb::CancelPendingPromptRequest {
            task_id: task.id,
            prompt_id,
            actor: user.username,
        })
        .await
        .answer(orch_err)?;
    Ok(StatusCode::NO_CONTENT)
}
