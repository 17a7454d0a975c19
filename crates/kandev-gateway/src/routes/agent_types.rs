//! The agent type registry: everyone reads it, only admins change it.

use axum::{Json, extract::State, http::StatusCode};
use kandev_proto::v1 as pb;

use crate::{
    api::{AgentType, AgentTypeList, AgentTypeParams, AgentTypePatch},
    auth::CurrentUser,
    clients::{Answer, agent_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath, ApiQuery},
    state::AppState,
};

fn require_admin(user: &CurrentUser) -> ApiResult<()> {
    if user.is_admin {
        Ok(())
    } else {
        Err(ApiError::forbidden("only admins can change agent types"))
    }
}

fn validate(t: &AgentType) -> ApiResult<()> {
    if t.id.trim().is_empty() || t.name.trim().is_empty() || t.image.trim().is_empty() {
        return Err(ApiError::validation("id, name and image must not be empty"));
    }
    Ok(())
}

async fn upsert(state: &AppState, t: AgentType) -> ApiResult<AgentType> {
    validate(&t)?;
    let saved = state
        .agents()
        .upsert_agent_type(pb::UpsertAgentTypeRequest {
            agent_type: Some(t.into()),
        })
        .await
        .answer(agent_err)?;
    Ok(saved.into())
}

async fn fetch(state: &AppState, id: String) -> ApiResult<AgentType> {
    Ok(state
        .agents()
        .get_agent_type(pb::GetAgentTypeRequest { id })
        .await
        .answer(agent_err)?
        .into())
}

/// The names of the caller's stored secrets; none when the agent manager
/// cannot say (the list then shows what the server alone lacks).
async fn own_secret_names(state: &AppState, user: &CurrentUser) -> Vec<String> {
    let listed = state
        .agents()
        .list_user_secrets(pb::ListUserSecretsRequest {
            scope: user.username.clone(),
        })
        .await;
    match listed {
        Ok(list) => list
            .into_inner()
            .secrets
            .into_iter()
            .map(|s| s.name)
            .collect(),
        Err(status) => {
            tracing::debug!(msg = status.message(), "cannot list the caller's secrets");
            vec![]
        }
    }
}

/// `missing_env` is what neither the server nor the caller's own secrets
/// provide.
#[utoipa::path(operation_id = "list_agent_types", get, path = "/api/v1/agent-types", tag = "agent-types", params(AgentTypeParams),
    responses((status = 200, body = AgentTypeList), (status = 503, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiQuery(params): ApiQuery<AgentTypeParams>,
) -> ApiResult<Json<AgentTypeList>> {
    let resp = state
        .agents()
        .list_agent_types(pb::ListAgentTypesRequest {
            include_disabled: params.include_disabled,
        })
        .await
        .answer(agent_err)?;
    let mut agent_types: Vec<AgentType> =
        resp.agent_types.into_iter().map(AgentType::from).collect();
    if agent_types.iter().any(|t| !t.missing_env.is_empty()) {
        let own = own_secret_names(&state, &user).await;
        for t in &mut agent_types {
            t.missing_env.retain(|name| !own.contains(name));
        }
    }
    Ok(Json(AgentTypeList { agent_types }))
}

#[utoipa::path(operation_id = "create_agent_type", post, path = "/api/v1/agent-types", tag = "agent-types",
    request_body = AgentType,
    responses((status = 201, body = AgentType), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiJson(body): ApiJson<AgentType>,
) -> ApiResult<(StatusCode, Json<AgentType>)> {
    require_admin(&user)?;
    validate(&body)?;
    // Create must not overwrite: refuse an id that exists.
    match fetch(&state, body.id.clone()).await {
        Ok(_) => {
            return Err(ApiError::new(
                kandev_common::ErrorCode::Conflict,
                format!("agent type {:?} already exists", body.id),
            ));
        }
        Err(e) if e.code == kandev_common::ErrorCode::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok((StatusCode::CREATED, Json(upsert(&state, body).await?)))
}

#[utoipa::path(operation_id = "replace_agent_type", put, path = "/api/v1/agent-types/{id}", tag = "agent-types",
    params(("id" = String, Path, description = "agent type id")),
    request_body = AgentType,
    responses((status = 200, body = AgentType), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn replace(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<AgentType>,
) -> ApiResult<Json<AgentType>> {
    require_admin(&user)?;
    if body.id != id {
        return Err(ApiError::validation("the body's id must match the path"));
    }
    fetch(&state, id).await?;
    Ok(Json(upsert(&state, body).await?))
}

#[utoipa::path(operation_id = "patch_agent_type", patch, path = "/api/v1/agent-types/{id}", tag = "agent-types",
    params(("id" = String, Path, description = "agent type id")),
    request_body = AgentTypePatch,
    responses((status = 200, body = AgentType), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn patch(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<AgentTypePatch>,
) -> ApiResult<Json<AgentType>> {
    require_admin(&user)?;
    let mut current = fetch(&state, id).await?;
    body.apply(&mut current);
    Ok(Json(upsert(&state, current).await?))
}

#[utoipa::path(operation_id = "disable_agent_type", post, path = "/api/v1/agent-types/{id}/disable", tag = "agent-types",
    params(("id" = String, Path, description = "agent type id")),
    responses((status = 200, body = AgentType), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn disable(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<AgentType>> {
    require_admin(&user)?;
    let mut current = fetch(&state, id).await?;
    current.enabled = false;
    Ok(Json(upsert(&state, current).await?))
}

/// `DELETE /agent-types/{id}`: the same as disable (types are never
/// removed, running instances may still refer to them).
#[utoipa::path(operation_id = "delete_agent_type", delete, path = "/api/v1/agent-types/{id}", tag = "agent-types",
    params(("id" = String, Path, description = "agent type id")),
    responses((status = 200, description = "disabled", body = AgentType), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn delete(
    state: State<AppState>,
    user: CurrentUser,
    id: ApiPath<String>,
) -> ApiResult<Json<AgentType>> {
    disable(state, user, id).await
}
