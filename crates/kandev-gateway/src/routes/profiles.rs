//! Agent profiles: named settings on an agent type (model, mode,
//! instructions, environment and MCP servers from the caller's secrets),
//! the caller's own or shared by an admin. A task names one with
//! `profile_id`. Secrets are named, never given or returned.

use std::collections::BTreeMap;

use axum::{Json, extract::State, http::StatusCode};
use chrono::{DateTime, Utc};
use kandev_proto::{time::to_chrono, v1 as pb};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use crate::{
    auth::CurrentUser,
    clients::{Answer, agent_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath, ApiQuery},
    state::AppState,
};

/// An MCP server the agent is given in its ACP session.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    pub name: String,
    /// `stdio` (a command run inside the agent's container), `http` or `sse`.
    #[schema(example = "stdio")]
    pub transport: String,
    /// stdio: the program.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: variable name -> the name of one of the caller's secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// http, sse: the server's URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// http, sse: header name -> the name of one of the caller's secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// A profile as created or replaced.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentProfileInput {
    pub agent_type: String,
    pub name: String,
    /// Shared with every user (admins only); else the caller's own. Only
    /// on creation.
    #[serde(default)]
    pub shared: bool,
    /// The model, as the agent names it in its session (empty: its own).
    #[serde(default)]
    pub model: String,
    /// The session mode, as the agent advertises it (empty: its own).
    #[serde(default)]
    pub mode: String,
    /// Prepended to the first prompt of each new session.
    #[serde(default)]
    pub instructions: String,
    /// Variable name -> the name of one of the caller's secrets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
}

/// A profile as served: secrets by name, never by value.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentProfile {
    #[schema(format = Uuid)]
    pub id: String,
    pub agent_type: String,
    pub name: String,
    /// Shared by an admin with every user.
    pub shared: bool,
    /// The owning user; absent when shared.
    pub owner: Option<String>,
    pub model: String,
    pub mode: String,
    pub instructions: String,
    pub env: BTreeMap<String, String>,
    pub mcp_servers: Vec<McpServer>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentProfileList {
    pub profiles: Vec<AgentProfile>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ProfileQuery {
    /// Only this agent type's profiles.
    pub agent_type: Option<String>,
}

/// `$to { … }` of the MCP server `$s` of the other shape (REST or proto):
/// the same fields, for both directions.
macro_rules! mcp_server {
    ($($to:ident)::+, $s:ident) => {
        $($to)::+ {
            name: $s.name,
            transport: $s.transport,
            command: $s.command,
            args: $s.args,
            env: $s.env.into_iter().collect(),
            url: $s.url,
            headers: $s.headers.into_iter().collect(),
        }
    };
}

impl From<pb::AgentProfile> for AgentProfile {
    fn from(p: pb::AgentProfile) -> Self {
        AgentProfile {
            id: p.id,
            agent_type: p.agent_type,
            name: p.name,
            shared: p.owner.is_empty(),
            owner: Some(p.owner).filter(|o| !o.is_empty()),
            model: p.model,
            mode: p.mode,
            instructions: p.instructions,
            env: p.env.into_iter().collect(),
            mcp_servers: p
                .mcp_servers
                .into_iter()
                .map(|s| mcp_server!(McpServer, s))
                .collect(),
            created_at: p.created_at.as_ref().and_then(to_chrono),
            updated_at: p.updated_at.as_ref().and_then(to_chrono),
        }
    }
}

fn to_proto(id: String, owner: String, b: AgentProfileInput) -> pb::AgentProfile {
    pb::AgentProfile {
        id,
        owner,
        agent_type: b.agent_type,
        name: b.name,
        model: b.model,
        mode: b.mode,
        instructions: b.instructions,
        env: b.env.into_iter().collect(),
        mcp_servers: b
            .mcp_servers
            .into_iter()
            .map(|s| mcp_server!(pb::McpServerSpec, s))
            .collect(),
        created_at: None,
        updated_at: None,
    }
}

fn caller(user: &CurrentUser) -> Option<pb::ProfileCaller> {
    Some(pb::ProfileCaller {
        scope: user.username.clone(),
        admin: user.is_admin,
    })
}

/// The agent manager's refusal: a validation error names its field
/// (`details: {field, problem}`), a profile the caller may not see is
/// not found.
fn profile_err(status: tonic::Status) -> ApiError {
    match status.code() {
        tonic::Code::InvalidArgument => {
            let message = status.message().to_string();
            let mut err = ApiError::validation(format!("invalid agent profile: {message}"));
            if let Some((field, problem)) = message.split_once(": ") {
                err.details = Some(json!({ "field": field, "problem": problem }));
            }
            err
        }
        tonic::Code::NotFound => ApiError::not_found("agent profile not found"),
        _ => agent_err(status),
    }
}

/// The profile `id`, when the caller may use it (their own or shared);
/// for a task's `profile_id`.
pub async fn visible(
    state: &AppState,
    user: &CurrentUser,
    id: &str,
) -> ApiResult<pb::AgentProfile> {
    state
        .agents()
        .get_agent_profile(pb::GetAgentProfileRequest {
            caller: caller(user),
            id: id.to_string(),
        })
        .await
        .answer(profile_err)
}

/// The launch metadata key the agent manager reads the profile from.
pub use kandev_events::task::AGENT_PROFILE as METADATA_KEY;

/// Puts the profile `id` a task or launch asks for into its `metadata`,
/// when the caller may use it and it is for `agent_type`; else a 400 that
/// names `profile_id`.
pub async fn bind(
    state: &AppState,
    user: &CurrentUser,
    id: &str,
    agent_type: &str,
    metadata: &mut Option<serde_json::Map<String, serde_json::Value>>,
) -> ApiResult<()> {
    let refuse = |problem: String| {
        let mut err = ApiError::validation(format!("profile_id: {problem}"));
        err.details = Some(json!({ "field": "profile_id", "problem": problem }));
        err
    };
    if uuid::Uuid::parse_str(id.trim()).is_err() {
        return Err(refuse("must be a UUID".into()));
    }
    let profile = match visible(state, user, id.trim()).await {
        Ok(p) => p,
        Err(e) if e.code == kandev_common::ErrorCode::NotFound => {
            return Err(refuse("no such agent profile".into()));
        }
        Err(e) => return Err(e),
    };
    if profile.agent_type != agent_type {
        return Err(refuse(format!(
            "the profile {:?} is for agent type {}, not {agent_type:?}",
            profile.name, profile.agent_type
        )));
    }
    metadata
        .get_or_insert_with(Default::default)
        .insert(METADATA_KEY.into(), profile.id.into());
    Ok(())
}

#[utoipa::path(operation_id = "list_agent_profiles", get, path = "/api/v1/agent-profiles", tag = "agent-profiles",
    params(ProfileQuery),
    responses((status = 200, body = AgentProfileList), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(username = %user.username))]
pub async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiQuery(query): ApiQuery<ProfileQuery>,
) -> ApiResult<Json<AgentProfileList>> {
    let list = state
        .agents()
        .list_agent_profiles(pb::ListAgentProfilesRequest {
            caller: caller(&user),
            agent_type: query.agent_type.unwrap_or_default(),
        })
        .await
        .answer(profile_err)?;
    Ok(Json(AgentProfileList {
        profiles: list.profiles.into_iter().map(AgentProfile::from).collect(),
    }))
}

#[utoipa::path(operation_id = "create_agent_profile", post, path = "/api/v1/agent-profiles", tag = "agent-profiles",
    request_body = AgentProfileInput,
    responses((status = 201, body = AgentProfile), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(username = %user.username))]
pub async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiJson(body): ApiJson<AgentProfileInput>,
) -> ApiResult<(StatusCode, Json<AgentProfile>)> {
    if body.shared && !user.is_admin {
        return Err(ApiError::forbidden("only admins share a profile"));
    }
    let owner = if body.shared {
        String::new()
    } else {
        user.username.clone()
    };
    let saved = save(&state, &user, to_proto(String::new(), owner, body)).await?;
    Ok((StatusCode::CREATED, Json(saved)))
}

async fn save(
    state: &AppState,
    user: &CurrentUser,
    profile: pb::AgentProfile,
) -> ApiResult<AgentProfile> {
    let saved = state
        .agents()
        .save_agent_profile(pb::SaveAgentProfileRequest {
            caller: caller(user),
            profile: Some(profile),
        })
        .await
        .answer(profile_err)?;
    tracing::info!(profile = %saved.id, agent_type = %saved.agent_type, "agent profile saved");
    Ok(saved.into())
}

#[utoipa::path(operation_id = "get_agent_profile", get, path = "/api/v1/agent-profiles/{id}", tag = "agent-profiles",
    params(("id" = uuid::Uuid, Path, description = "agent profile id")),
    responses((status = 200, body = AgentProfile), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(username = %user.username))]
pub async fn get(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<AgentProfile>> {
    let id = super::access::parse_id("agent profile", &id)?;
    Ok(Json(visible(&state, &user, &id).await?.into()))
}

#[utoipa::path(operation_id = "replace_agent_profile", put, path = "/api/v1/agent-profiles/{id}", tag = "agent-profiles",
    params(("id" = uuid::Uuid, Path, description = "agent profile id")),
    request_body = AgentProfileInput,
    responses((status = 200, body = AgentProfile), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(username = %user.username))]
pub async fn replace(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<AgentProfileInput>,
) -> ApiResult<Json<AgentProfile>> {
    // The owner stays as stored (the agent manager keeps it).
    let id = super::access::parse_id("agent profile", &id)?;
    let profile = to_proto(id, user.username.clone(), body);
    Ok(Json(save(&state, &user, profile).await?))
}

#[utoipa::path(operation_id = "delete_agent_profile", delete, path = "/api/v1/agent-profiles/{id}", tag = "agent-profiles",
    params(("id" = uuid::Uuid, Path, description = "agent profile id")),
    responses((status = 204, description = "deleted"), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(username = %user.username))]
pub async fn delete(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let id = super::access::parse_id("agent profile", &id)?;
    state
        .agents()
        .delete_agent_profile(pb::DeleteAgentProfileRequest {
            caller: caller(&user),
            id: id.clone(),
        })
        .await
        .answer(profile_err)?;
    tracing::info!(profile = %id, "agent profile deleted");
    Ok(StatusCode::NO_CONTENT)
}
