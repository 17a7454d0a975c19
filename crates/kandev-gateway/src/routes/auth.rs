//! Login, the current user, and user creation by admins.

use std::sync::LazyLock;

use axum::{
    Json,
    extract::{Request, State},
    http::StatusCode,
};
use chrono::DateTime;
use kandev_common::ErrorCode;

use crate::{
    api::{CreateUserRequest, LoginRequest, LoginResponse, UserResponse},
    auth::{self, CurrentUser},
    error::{ApiError, ApiResult, ErrorBody},
    extract::ApiJson,
    state::AppState,
    users::{UserError, UserStore},
};

pub const MIN_PASSWORD_CHARS: usize = 8;
pub const MAX_USERNAME_CHARS: usize = 64;

/// Verified when the user does not exist, so that a missing user takes as
/// long to refuse as a wrong password.
static DUMMY_HASH: LazyLock<String> =
    LazyLock::new(|| auth::hash_password("not the password").unwrap_or_default());

pub fn validate_username(username: &str) -> ApiResult<()> {
    let ok = !username.is_empty()
        && username.chars().count() <= MAX_USERNAME_CHARS
        && username
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::validation(format!(
            "username must be 1 to {MAX_USERNAME_CHARS} letters, digits, '_', '-' or '.'"
        )))
    }
}

pub fn validate_password(password: &str) -> ApiResult<()> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(ApiError::validation(format!(
            "password must be at least {MIN_PASSWORD_CHARS} characters"
        )));
    }
    Ok(())
}

async fn hash(password: String) -> ApiResult<String> {
    tokio::task::spawn_blocking(move || auth::hash_password(&password))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}

#[utoipa::path(post, path = "/api/v1/auth/login", tag = "auth",
    request_body = LoginRequest,
    responses((status = 200, body = LoginResponse),
        (status = 401, body = ErrorBody),
        (status = 429, description = "too many attempts from this address; see Retry-After", body = ErrorBody)),
    security(()))]
pub async fn login(State(state): State<AppState>, req: Request) -> ApiResult<Json<LoginResponse>> {
    let ip = state.client_ip(req.headers(), req.extensions());
    state
        .login_limiter()
        .check(&ip)
        .map_err(|wait| ApiError::rate_limited(wait.as_secs_f64().ceil() as u64))?;
    let ApiJson(body) =
        <ApiJson<LoginRequest> as axum::extract::FromRequest<()>>::from_request(req, &()).await?;

    let user = state
        .users()
        .find(&body.username)
        .await
        .map_err(ApiError::internal)?;
    let hash_to_check = user
        .as_ref()
        .map(|u| u.password_hash.clone())
        .unwrap_or_else(|| DUMMY_HASH.clone());
    let password = body.password;
    let matches =
        tokio::task::spawn_blocking(move || auth::verify_password(&password, &hash_to_check))
            .await
            .map_err(ApiError::internal)?;
    let user = match user {
        Some(user) if matches => user,
        _ => {
            tracing::info!(username = %body.username, %ip, "login refused");
            return Err(ApiError::unauthorized("invalid username or password"));
        }
    };
    let current = CurrentUser {
        username: user.username,
        is_admin: user.is_admin,
    };
    let (token, exp) = state.jwt().issue(&current).map_err(ApiError::internal)?;
    tracing::info!(username = %current.username, "login");
    Ok(Json(LoginResponse {
        token,
        expires_at: DateTime::from_timestamp(exp as i64, 0).unwrap_or_default(),
    }))
}

#[utoipa::path(get, path = "/api/v1/auth/me", tag = "auth",
    responses((status = 200, body = UserResponse), (status = 401, body = ErrorBody)))]
pub async fn me(user: CurrentUser) -> Json<UserResponse> {
    Json(UserResponse {
        username: user.username,
        is_admin: user.is_admin,
        created_at: None,
    })
}

#[utoipa::path(post, path = "/api/v1/users", tag = "auth",
    request_body = CreateUserRequest,
    responses((status = 201, body = UserResponse), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn create_user(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiJson(body): ApiJson<CreateUserRequest>,
) -> ApiResult<(StatusCode, Json<UserResponse>)> {
    if !user.is_admin {
        return Err(ApiError::forbidden("only admins can create users"));
    }
    validate_username(&body.username)?;
    validate_password(&body.password)?;
    let password_hash = hash(body.password).await?;
    let created = state
        .users()
        .insert(&body.username, &password_hash, body.is_admin)
        .await
        .map_err(|e| match e {
            UserError::Exists(_) => ApiError::new(ErrorCode::Conflict, e.to_string()),
            UserError::Database(e) => ApiError::internal(e),
        })?;
    tracing::info!(username = %created.username, admin = created.is_admin, by = %user.username, "user created");
    Ok((
        StatusCode::CREATED,
        Json(UserResponse {
            username: created.username,
            is_admin: created.is_admin,
            created_at: Some(created.created_at),
        }),
    ))
}

/// Creates the configured admin when no admin exists yet.
pub async fn bootstrap_admin(
    users: &dyn UserStore,
    username: &str,
    password: Option<&str>,
) -> anyhow::Result<()> {
    if users.any_admin().await? {
        return Ok(());
    }
    let Some(password) = password else {
        tracing::warn!("no admin exists and KANDEV_ADMIN_PASSWORD is not set; nobody can log in");
        return Ok(());
    };
    validate_username(username).map_err(|e| anyhow::anyhow!(e.message))?;
    validate_password(password).map_err(|e| anyhow::anyhow!(e.message))?;
    let password_hash = hash(password.to_string())
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    match users.insert(username, &password_hash, true).await {
        Ok(_) => tracing::info!(%username, "bootstrap admin created"),
        // Another gateway replica won the race.
        Err(UserError::Exists(_)) => {}
        Err(UserError::Database(e)) => return Err(e.into()),
    }
    Ok(())
}
