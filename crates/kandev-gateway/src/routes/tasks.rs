//! One task: read, update, delete, change state, its history.

use axum::{Json, extract::State, http::StatusCode};
use kandev_proto::v1 as pb;

use super::{
    access::{parse_id, visible_task},
    repository,
};
use crate::{
    api::{
        ChangeStateRequest, DeleteTaskParams, PageParams, PutBlockersRequest, Task, TaskEventList,
        UpdateTaskRequest,
    },
    auth::CurrentUser,
    clients::{Answer, task_err},
    error::{ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath, ApiQuery},
    state::AppState,
};

#[utoipa::path(get, path = "/api/v1/tasks/{id}", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id")),
    responses((status = 200, body = Task),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_task(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Task>> {
    Ok(Json(visible_task(&state, &user, &id).await?.into()))
}

#[utoipa::path(patch, path = "/api/v1/tasks/{id}", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id")),
    request_body = UpdateTaskRequest,
    responses((status = 200, body = Task), (status = 404, body = ErrorBody),
        (status = 409, description = "the task changed since `version`", body = ErrorBody),
        (status = 400, description = "invalid fields, or a repository the task may not use \
            (`details`: `field`, `problem`)", body = ErrorBody)))]
/// Updates a task. A new `repository_url` or `branch` is checked as at
/// creation.
pub async fn update_task(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateTaskRequest>,
) -> ApiResult<Json<Task>> {
    let task = visible_task(&state, &user, &id).await?;
    if body.repository_url.is_some() || body.branch.is_some() {
        let url = body
            .repository_url
            .as_deref()
            .unwrap_or(&task.repository_url);
        let branch = body.branch.as_deref().unwrap_or(&task.branch);
        repository::check(&state, url, branch).await?;
    }
    let (agent_type, clear_agent_type) = match body.agent_type {
        None => (None, false),
        Some(None) => (None, true),
        Some(Some(t)) => (Some(t), false),
    };
    let updated = state
        .tasks()
        .update_task(pb::UpdateTaskRequest {
            id: task.id,
            expected_version: body.version,
            title: body.title,
            description: body.description,
            priority: body.priority,
            agent_type,
            repository_url: body.repository_url,
            branch: body.branch,
            workspace_path: body.workspace_path,
            metadata_patch_json: body
                .metadata
                .map(|m| serde_json::Value::Object(m).to_string()),
            max_retries: body.max_retries,
            position: body.position,
            clear_agent_type,
            actor: user.username,
            autostart: body.autostart,
        })
        .await
        .answer(task_err)?;
    Ok(Json(updated.into()))
}

#[utoipa::path(delete, path = "/api/v1/tasks/{id}", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id"), DeleteTaskParams),
    responses((status = 204),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete_task(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<DeleteTaskParams>,
) -> ApiResult<StatusCode> {
    let task = visible_task(&state, &user, &id).await?;
    state
        .tasks()
        .delete_task(pb::DeleteTaskRequest {
            id: task.id,
            expected_version: params.version,
            actor: user.username,
        })
        .await
        .answer(task_err)?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(patch, path = "/api/v1/tasks/{id}/state", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id")),
    request_body = ChangeStateRequest,
    responses((status = 200, body = Task), (status = 404, body = ErrorBody),
        (status = 409, description = "a forbidden transition or a version conflict", body = ErrorBody),
        (status = 400, body = ErrorBody)))]
pub async fn change_state(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ChangeStateRequest>,
) -> ApiResult<Json<Task>> {
    let task = visible_task(&state, &user, &id).await?;
    let updated = state
        .tasks()
        .change_task_state(pb::ChangeTaskStateRequest {
            id: task.id,
            state: body.state.to_proto() as i32,
            expected_version: body.version,
            actor: user.username,
            reason: body.reason,
            metadata_patch_json: None,
        })
        .await
        .answer(task_err)?;
    Ok(Json(updated.into()))
}

#[utoipa::path(get, path = "/api/v1/tasks/{id}/events", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id"), PageParams),
    responses((status = 200, body = TaskEventList),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_events(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiQuery(page): ApiQuery<PageParams>,
) -> ApiResult<Json<TaskEventList>> {
    let task = visible_task(&state, &user, &id).await?;
    let resp = state
        .tasks()
        .list_task_events(pb::ListTaskEventsRequest {
            task_id: task.id,
            page_size: page.page_size.unwrap_or(0),
            page_token: page.page_token.unwrap_or_default(),
        })
        .await
        .answer(task_err)?;
    Ok(Json(TaskEventList::from_proto(resp)))
}

#[utoipa::path(put, path = "/api/v1/tasks/{id}/blockers", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id")),
    request_body = PutBlockersRequest,
    responses((status = 200, body = Task),
        (status = 400, description = "a malformed id, the task itself, a task listed twice, a \
            task of another board (another user's included), or links that make a cycle (the \
            message names its tasks)", body = ErrorBody),
        (status = 404, description = "no such task, or no such blocker task", body = ErrorBody),
        (status = 409, description = "the task changed since `version`", body = ErrorBody)))]
/// Replaces the tasks this task waits for ("blocked by"). While any of them
/// is not COMPLETED the task is `blocked`: it is not started by itself, and
/// `blocked_reason` says why (a FAILED or CANCELLED blocker keeps it
/// blocked). When the last completes, a task with `autostart` starts.
#[tracing::instrument(skip_all)]
pub async fn put_blockers(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PutBlockersRequest>,
) -> ApiResult<Json<Task>> {
    let blocker_ids = body
        .blocked_by
        .iter()
        .map(|b| parse_id("blocker task", b))
        .collect::<ApiResult<Vec<_>>>()?;
    let task = visible_task(&state, &user, &id).await?;
    let updated = state
        .tasks()
        .put_task_blockers(pb::PutTaskBlockersRequest {
            id: task.id,
            blocker_ids,
            expected_version: body.version,
            actor: user.username,
        })
        .await
        .answer(task_err)?;
    Ok(Json(updated.into()))
}
