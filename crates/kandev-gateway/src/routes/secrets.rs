//! The caller's own secrets for their agents (API keys, forge tokens):
//! set, listed by name, deleted; values are never returned. The agent
//! manager stores them encrypted and gives each one, by name, to the
//! caller's runs whose agent type lists that variable.

use axum::{Json, extract::State, http::StatusCode};
use kandev_proto::v1 as pb;

use crate::{
    api::{SetSecretRequest, UserSecret, UserSecretList},
    auth::CurrentUser,
    clients::{Answer, agent_err},
    error::{ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath},
    state::AppState,
};

#[utoipa::path(operation_id = "list_secrets", get, path = "/api/v1/users/me/secrets", tag = "auth",
    responses((status = 200, body = UserSecretList), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
) -> ApiResult<Json<UserSecretList>> {
    let list = state
        .agents()
        .list_user_secrets(pb::ListUserSecretsRequest {
            scope: user.username,
        })
        .await
        .answer(agent_err)?;
    Ok(Json(UserSecretList {
        secrets: list.secrets.into_iter().map(UserSecret::from).collect(),
    }))
}

#[utoipa::path(operation_id = "set_secret", put, path = "/api/v1/users/me/secrets/{name}", tag = "auth",
    params(("name" = String, Path, description = "an environment variable name, e.g. GITHUB_TOKEN")),
    request_body = SetSecretRequest,
    responses((status = 200, body = UserSecret), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn set(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<SetSecretRequest>,
) -> ApiResult<Json<UserSecret>> {
    let saved = state
        .agents()
        .set_user_secret(pb::SetUserSecretRequest {
            scope: user.username.clone(),
            name,
            value: body.value,
        })
        .await
        .answer(agent_err)?;
    tracing::info!(username = %user.username, secret = %saved.name, "secret set");
    Ok(Json(saved.into()))
}

#[utoipa::path(operation_id = "delete_secret", delete, path = "/api/v1/users/me/secrets/{name}", tag = "auth",
    params(("name" = String, Path, description = "the secret's name")),
    responses((status = 204, description = "deleted"), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    state
        .agents()
        .delete_user_secret(pb::DeleteUserSecretRequest {
            scope: user.username.clone(),
            name: name.clone(),
        })
        .await
        .answer(agent_err)?;
    tracing::info!(username = %user.username, secret = %name, "secret deleted");
    Ok(StatusCode::NO_CONTENT)
}
