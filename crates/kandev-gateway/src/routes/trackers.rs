//! A board's link to an issue tracker (a GitHub repository or a GitLab
//! project, whose issues with the label become the board's tasks), kept by
//! the orchestrator: set, read and removed by whoever may see the board;
//! and the trackers' webhooks, public but refused unless GitHub's
//! `X-Hub-Signature-256` is that of a linked board's secret, or GitLab's
//! `X-Gitlab-Token` is one (the orchestrator checks it before it reads
//! anything). The webhook secret is never returned.

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
};
use chrono::{DateTime, Utc};
use kandev_proto::{time::to_chrono, v1 as pb};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::access::visible_board;
use crate::{
    auth::CurrentUser,
    clients::{Answer, orch_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath},
    state::AppState,
};

/// A board's tracker link, as shown (the webhook secret never is).
#[derive(Debug, Serialize, ToSchema)]
pub struct TrackerLink {
    #[schema(value_type = uuid::Uuid)]
    pub board_id: String,
    /// `github` or `gitlab`.
    pub kind: String,
    /// The repository's clone URL (tasks made of its issues work on it).
    pub repository_url: String,
    /// `owner/repo` (a GitLab project's full path) on the forge.
    pub repository: String,
    /// Only issues with this label become tasks; empty: every issue.
    pub label: String,
    /// The agent type of the tasks it makes; empty: the default.
    pub agent_type: String,
    /// Whether a webhook secret is stored; webhook deliveries are refused
    /// without one.
    pub has_webhook_secret: bool,
    /// The name of `created_by`'s secret used as the forge token (its value
    /// is never returned); empty: the forge's token from `KANDEV_FORGES`.
    pub token_secret: String,
    pub created_by: String,
    /// Why the last sync with the tracker failed, in plain words (e.g. the
    /// repository was deleted or renamed); empty when it did not.
    pub last_error: String,
    pub last_synced_at: Option<DateTime<Utc>>,
    pub created_at: Option<DateTime<Utc>>,
}

impl From<pb::TrackerLink> for TrackerLink {
    fn from(l: pb::TrackerLink) -> Self {
        TrackerLink {
            board_id: l.board_id,
            kind: l.kind,
            repository_url: l.repository_url,
            repository: l.repository,
            label: l.label,
            agent_type: l.agent_type,
            has_webhook_secret: l.has_webhook_secret,
            token_secret: l.token_secret,
            created_by: l.created_by,
            last_error: l.last_error,
            last_synced_at: l.last_synced_at.as_ref().and_then(to_chrono),
            created_at: l.created_at.as_ref().and_then(to_chrono),
        }
    }
}

/// Link a board to an issue tracker (replacing its link).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetTrackerLink {
    /// `github` or `gitlab`: the kind of the repository's forge.
    pub kind: String,
    /// The repository's clone URL, on a forge of `KANDEV_FORGES` of that
    /// kind (whose token reads its issues and comments on them).
    pub repository_url: String,
    #[serde(default)]
    pub label: String,
    #[serde(default)]
    pub agent_type: String,
    /// The secret the forge signs webhook deliveries with (GitHub), or
    /// sends as their `X-Gitlab-Token` (GitLab); stored, never returned.
    /// None: the link is only reconciled periodically.
    #[serde(default)]
    pub webhook_secret: String,
    /// The name of one of the caller's secrets (`/api/v1/secrets`) whose
    /// value is the token the link reads the forge with, instead of the
    /// forge's from `KANDEV_FORGES`; a name the caller has no secret of is
    /// refused (400).
    #[serde(default)]
    pub token_secret: String,
}

/// What a webhook delivery did.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookOutcome {
    /// `created`, `updated`, `cancelled` or `ignored`.
    pub outcome: String,
    #[schema(value_type = Option<uuid::Uuid>)]
    pub task_id: Option<String>,
}

#[utoipa::path(operation_id = "set_tracker_link", post, path = "/api/v1/boards/{id}/tracker", tag = "boards",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    request_body = SetTrackerLink,
    responses((status = 200, body = TrackerLink),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(board_id = %id))]
pub async fn set(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<SetTrackerLink>,
) -> ApiResult<Json<TrackerLink>> {
    let board = visible_board(&state, &user, &id).await?;
    // The tasks it makes work on this repository: the same policy as a
    // task's own.
    super::repository::check(&state, &body.repository_url, "").await?;
    let link = state
        .orchestrator()
        .set_tracker_link(pb::SetTrackerLinkRequest {
            board_id: board.id,
            kind: body.kind,
            repository_url: body.repository_url,
            label: body.label,
            agent_type: body.agent_type,
            webhook_secret: body.webhook_secret,
            token_secret: body.token_secret,
            created_by: user.username.clone(),
        })
        .await
        .answer(orch_err)?;
    Ok(Json(link.into()))
}

#[utoipa::path(operation_id = "get_tracker_link", get, path = "/api/v1/boards/{id}/tracker", tag = "boards",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    responses((status = 200, body = TrackerLink),
        (status = 400, body = ErrorBody),
        (status = 404, description = "no such board, or it has no tracker link", body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<TrackerLink>> {
    let board = visible_board(&state, &user, &id).await?;
    let link = state
        .orchestrator()
        .get_tracker_link(pb::GetTrackerLinkRequest { board_id: board.id })
        .await
        .answer(orch_err)?;
    Ok(Json(link.into()))
}

#[utoipa::path(operation_id = "delete_tracker_link", delete, path = "/api/v1/boards/{id}/tracker", tag = "boards",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    responses((status = 204, description = "unlinked; the tasks made of its issues stay"),
        (status = 400, body = ErrorBody),
        (status = 404, description = "no such board, or it has no tracker link", body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(board_id = %id))]
pub async fn delete(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let board = visible_board(&state, &user, &id).await?;
    state
        .orchestrator()
        .delete_tracker_link(pb::DeleteTrackerLinkRequest { board_id: board.id })
        .await
        .answer(orch_err)?;
    Ok(StatusCode::NO_CONTENT)
}

/// A header's value as text, or empty.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[utoipa::path(operation_id = "github_tracker_webhook", post, path = "/api/v1/trackers/github/webhook", tag = "boards",
    params(
        ("X-GitHub-Event" = String, Header, description = "the event (`issues`; others are acknowledged and ignored)"),
        ("X-Hub-Signature-256" = String, Header, description = "`sha256=` and the hex HMAC-SHA256 of the body with the link's webhook secret"),
    ),
    request_body(content = serde_json::Value, description = "GitHub's delivery, as GitHub sent it"),
    responses((status = 200, body = WebhookOutcome),
        (status = 400, description = "signed, but not an issue event Kandev reads", body = ErrorBody),
        (status = 401, description = "the signature is missing or matches no linked board's secret; nothing changed", body = ErrorBody)),
    security(()))]
#[tracing::instrument(skip_all)]
pub async fn github_webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<WebhookOutcome>> {
    let signature = header(&headers, "x-hub-signature-256");
    if !signature.starts_with("sha256=") {
        return Err(ApiError::unauthorized(
            "the X-Hub-Signature-256 header is missing or not sha256",
        ));
    }
    deliver(
        &state,
        "github",
        header(&headers, "x-github-event"),
        signature,
        body,
    )
    .await
}

#[utoipa::path(operation_id = "gitlab_tracker_webhook", post, path = "/api/v1/trackers/gitlab/webhook", tag = "boards",
    params(
        ("X-Gitlab-Event" = String, Header, description = "the event (`Issue Hook`; others are acknowledged and ignored)"),
        ("X-Gitlab-Token" = String, Header, description = "the link's webhook secret, as set on the GitLab project's webhook"),
    ),
    request_body(content = serde_json::Value, description = "GitLab's delivery, as GitLab sent it"),
    responses((status = 200, body = WebhookOutcome),
        (status = 400, description = "proven, but not an issue event Kandev reads", body = ErrorBody),
        (status = 401, description = "the token is missing or is no linked board's secret; nothing changed", body = ErrorBody)),
    security(()))]
#[tracing::instrument(skip_all)]
pub async fn gitlab_webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<WebhookOutcome>> {
    let token = header(&headers, "x-gitlab-token");
    if token.is_empty() {
        return Err(ApiError::unauthorized(
            "the X-Gitlab-Token header is missing",
        ));
    }
    deliver(
        &state,
        "gitlab",
        header(&headers, "x-gitlab-event"),
        token,
        body,
    )
    .await
}

/// Hands a delivery and its proof to the orchestrator, which checks it.
async fn deliver(
    state: &AppState,
    kind: &str,
    event: &str,
    proof: &str,
    body: Bytes,
) -> ApiResult<Json<WebhookOutcome>> {
    let outcome = state
        .orchestrator()
        .deliver_tracker_webhook(pb::TrackerWebhookRequest {
            kind: kind.into(),
            event: event.to_string(),
            signature: proof.to_string(),
            payload: body.to_vec(),
        })
        .await
        .answer(orch_err)?;
    Ok(Json(WebhookOutcome {
        outcome: outcome.outcome,
        task_id: Some(outcome.task_id).filter(|t| !t.is_empty()),
    }))
}
