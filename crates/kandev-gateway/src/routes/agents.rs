//! Agent instances, as in the seed's AGENTS.md. Ownership goes through the
//! instance's task and its board.

use axum::{Json, extract::State, http::StatusCode};
use kandev_common::ErrorCode;
use kandev_proto::v1 as pb;

use super::access::{visible_instance, visible_task};
use crate::{
    api::{
        AgentInstance, AgentSession, CancelRequest, CancelResponse, LaunchAgentRequest, LogsParams,
        LogsResponse, PromptRequest, PromptResponse,
    },
    auth::CurrentUser,
    clients::{Answer, agent_err, orch_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath, ApiQuery, OptionalApiJson},
    state::AppState,
};

pub const MAX_LOG_TAIL: i32 = 10_000;

#[utoipa::path(operation_id = "launch_agent", post, path = "/api/v1/agents/launch", tag = "agents",
    request_body = LaunchAgentRequest,
    responses((status = 201, body = AgentInstance), (status = 404, body = ErrorBody),
        (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn launch(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiJson(body): ApiJson<LaunchAgentRequest>,
) -> ApiResult<(StatusCode, Json<AgentInstance>)> {
    let workspace = match (body.workspace_path, body.repository_url) {
        (Some(_), Some(_)) => {
            return Err(ApiError::validation(
                "give either workspace_path or repository_url, not both",
            ));
        }
        (Some(path), None) => Some(pb::launch_agent_request::Workspace::WorkspacePath(path)),
        (None, Some(url)) => Some(pb::launch_agent_request::Workspace::Repository(
            pb::GitWorkspace {
                repository_url: url,
                branch: body.branch.unwrap_or_default(),
                title: String::new(),
            },
        )),
        (None, None) => None,
    };
    if body.agent_type.trim().is_empty() {
        return Err(ApiError::validation("agent_type must not be empty"));
    }
    let task = visible_task(&state, &user, &body.task_id).await?;
    let mut metadata = body.metadata;
    if let Some(profile_id) = &body.profile_id {
        super::profiles::bind(&state, &user, profile_id, &body.agent_type, &mut metadata).await?;
    }
    // The first prompt: the body's, else `env.TASK_DESCRIPTION` (the agent
    // manager reads it), else the task's own description.
    let prompt = match body.prompt {
        Some(prompt) => prompt,
        None if body.env.contains_key("TASK_DESCRIPTION") => String::new(),
        None => task.description.clone(),
    };
    let instance = state
        .agents()
        .launch_agent(pb::LaunchAgentRequest {
            task_id: task.id,
            agent_type: body.agent_type,
            workspace,
            env: body.env,
            priority: body.priority,
            metadata_json: metadata
                .map(|m| serde_json::Value::Object(m).to_string())
                .unwrap_or_default(),
            prompt,
            resume_session_id: body.resume_session_id,
            // The caller's run: their secrets and home volume, whoever
            // filed the task.
            home_scope: user.username.clone(),
            fill_diff: false,
        })
        .await
        .answer(agent_err)?;
    Ok((StatusCode::CREATED, Json(instance.into())))
}

#[utoipa::path(operation_id = "prompt_agent", post, path = "/api/v1/agents/{instanceId}/prompt", tag = "agents",
    params(("instanceId" = uuid::Uuid, Path, description = "agent instance id")),
    request_body = PromptRequest,
    responses((status = 200, body = PromptResponse),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 429, description = "too many requests: retry after `Retry-After` seconds; or, without `Retry-After`, the run already has its most follow-ups waiting until its turn ends", body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn prompt(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(instance_id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptRequest>,
) -> ApiResult<Json<PromptResponse>> {
    if body.message.trim().is_empty() {
        return Err(ApiError::validation("message must not be empty"));
    }
    let instance = visible_instance(&state, &user, &instance_id).await?;
    check_prompter(&instance, &user)?;
    if is_current_run(&state, &instance).await? {
        // The task's own run: the same follow-up as the stream's prompt
        // command, so the task moves the same way (a finished run back to
        // IN_PROGRESS, with its events).
        state
            .orchestrator()
            .start_task(pb::StartTaskRequest {
                task_id: instance.task_id,
                prompt: body.message,
                actor: user.username,
            })
            .await
            .answer(orch_err)?;
        return Ok(Json(PromptResponse { accepted: true }));
    }
    // A run launched directly: the orchestrator does not supervise it.
    let resp = state
        .agents()
        .send_prompt(pb::SendPromptRequest {
            instance_id: instance.id,
            prompt: body.message,
        })
        .await
        .answer(agent_err)?;
    Ok(Json(PromptResponse {
        accepted: resp.accepted,
    }))
}

/// Whether `instance` is the run the orchestrator supervises for its task.
async fn is_current_run(state: &AppState, instance: &pb::AgentInstance) -> ApiResult<bool> {
    let exec = state
        .orchestrator()
        .get_task_execution(pb::GetTaskExecutionRequest {
            task_id: instance.task_id.clone(),
        })
        .await;
    match exec {
        Ok(exec) => Ok(exec
            .into_inner()
            .instance_id
            .eq_ignore_ascii_case(&instance.id)),
        // No such task there (deleted since): not a run of its.
        Err(status) if status.code() == tonic::Code::NotFound => Ok(false),
        Err(status) => Err(orch_err(status)),
    }
}

/// A running agent holds its user's secrets: another person may not steer
/// it with a prompt (a follow-up also reaches a finished instance's next
/// turn, which runs with the same secrets).
fn check_prompter(instance: &pb::AgentInstance, user: &CurrentUser) -> ApiResult<()> {
    if !instance.run_as.is_empty() && instance.run_as != user.username {
        return Err(ApiError::new(
            ErrorCode::FailedPrecondition,
            format!(
                "this agent runs as {}, with their secrets: only they can prompt it",
                instance.run_as
            ),
        ));
    }
    Ok(())
}

#[utoipa::path(operation_id = "cancel_agent", post, path = "/api/v1/agents/{instanceId}/cancel", tag = "agents",
    params(("instanceId" = uuid::Uuid, Path, description = "agent instance id")),
    request_body(content = Option<CancelRequest>, description = "optional: an empty body cancels with no reason"),
    responses((status = 200, body = CancelResponse),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(instance_id): ApiPath<String>,
    OptionalApiJson(body): OptionalApiJson<CancelRequest>,
) -> ApiResult<Json<CancelResponse>> {
    let instance = visible_instance(&state, &user, &instance_id).await?;
    let resp = state
        .agents()
        .cancel_agent(pb::CancelAgentRequest {
            instance_id: instance.id,
            reason: body.reason,
        })
        .await
        .answer(agent_err)?;
    Ok(Json(CancelResponse {
        cancelled: resp.cancelled,
    }))
}

#[utoipa::path(operation_id = "get_agent_status", get, path = "/api/v1/agents/{instanceId}/status", tag = "agents",
    params(("instanceId" = uuid::Uuid, Path, description = "agent instance id")),
    responses((status = 200, body = AgentInstance),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn status(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(instance_id): ApiPath<String>,
) -> ApiResult<Json<AgentInstance>> {
    Ok(Json(
        visible_instance(&state, &user, &instance_id).await?.into(),
    ))
}

#[utoipa::path(operation_id = "get_agent_logs", get, path = "/api/v1/agents/{instanceId}/logs", tag = "agents",
    params(("instanceId" = uuid::Uuid, Path, description = "agent instance id"), LogsParams),
    responses((status = 200, body = LogsResponse), (status = 404, body = ErrorBody),
        (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn logs(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(instance_id): ApiPath<String>,
    ApiQuery(params): ApiQuery<LogsParams>,
) -> ApiResult<Json<LogsResponse>> {
    let tail = params.tail.unwrap_or(0);
    if params.tail.is_some() && !(1..=MAX_LOG_TAIL).contains(&tail) {
        return Err(ApiError::validation(format!(
            "tail must be between 1 and {MAX_LOG_TAIL}"
        )));
    }
    let instance = visible_instance(&state, &user, &instance_id).await?;
    let resp = state
        .agents()
        .get_logs(pb::GetLogsRequest {
            instance_id: instance.id,
            tail,
        })
        .await
        .answer(agent_err)?;
    Ok(Json(resp.into()))
}

#[utoipa::path(operation_id = "get_agent_session", get, path = "/api/v1/agents/{instanceId}/session", tag = "agents",
    params(("instanceId" = uuid::Uuid, Path, description = "agent instance id")),
    responses((status = 200, body = AgentSession),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn session(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(instance_id): ApiPath<String>,
) -> ApiResult<Json<AgentSession>> {
    let instance = visible_instance(&state, &user, &instance_id).await?;
    let session = state
        .agents()
        .get_session(pb::GetSessionRequest {
            instance_id: instance.id,
        })
        .await
        .answer(agent_err)?;
    Ok(Json(session.into()))
}
