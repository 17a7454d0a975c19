//! Workflow columns (issue 41): a board's columns, read and replaced, and a
//! card moved into one. The task service decides what entering a column
//! does (its automation, its WIP limit); here the caller's access is
//! checked and the bodies converted.

use axum::{Json, extract::State};
use kandev_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::access::{visible_board, visible_task};
use crate::{
    api::{Task, TaskState},
    auth::CurrentUser,
    clients::{Answer, task_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath},
    state::AppState,
};

/// One column of a board.
#[derive(Debug, Serialize, ToSchema)]
pub struct Column {
    #[schema(format = Uuid)]
    pub id: String,
    pub name: String,
    /// Its place, from 0, left to right.
    pub position: i32,
    /// `#rrggbb`, or empty for the default.
    pub colour: String,
    /// The state a card moved here takes (for an automated column: the
    /// state its runs are in).
    pub state: Option<TaskState>,
    /// At most this many cards in the column; more wait in its queue.
    pub wip_limit: Option<i32>,
    /// Entering the column starts a run of this agent type.
    pub agent_type: Option<String>,
    /// The run's prompt: `{title}`, `{description}`, `{summary}` (what the
    /// previous step's run said) and `{diff}` (the task's changes so far, a
    /// unified diff of at most 64 KiB) are filled in; empty: the title and
    /// description, then the previous summary.
    pub prompt_template: String,
    /// Its run starts a new agent session; false: it continues the task's
    /// session (the agent remembers the earlier steps).
    pub new_session: bool,
    /// The agent profile its run uses (`/api/v1/agent-profiles`); none: the
    /// task's own.
    #[schema(format = Uuid)]
    pub profile_id: Option<String>,
    /// The column a card goes to when its run here finishes.
    #[schema(format = Uuid)]
    pub on_success: Option<String>,
    /// The column a card goes to when its run here fails.
    #[schema(format = Uuid)]
    pub on_failure: Option<String>,
}

/// `$to { field: $from.field, …, $rest }` for every field a column has
/// alike in its REST and proto shapes, for both directions.
macro_rules! column_from {
    ($($to:ident)::+, $from:ident, $($rest:tt)*) => {
        $($to)::+ {
            name: $from.name,
            colour: $from.colour,
            wip_limit: $from.wip_limit,
            agent_type: $from.agent_type,
            prompt_template: $from.prompt_template,
            new_session: $from.new_session,
            profile_id: $from.profile_id,
            on_success: $from.on_success,
            on_failure: $from.on_failure,
            $($rest)*
        }
    };
}

impl From<pb::Column> for Column {
    fn from(c: pb::Column) -> Self {
        column_from!(Column, c,
            state: TaskState::from_proto(c.state).ok(),
            id: c.id,
            position: c.position,
        )
    }
}

/// A column as `PUT` gives it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ColumnInput {
    /// An existing column's id keeps it (and its cards); a new column may
    /// choose one (a UUID), so another column can name it as its next step.
    #[schema(format = Uuid)]
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub colour: String,
    pub state: TaskState,
    /// 1 or more; absent: no limit.
    pub wip_limit: Option<i32>,
    pub agent_type: Option<String>,
    #[serde(default)]
    pub prompt_template: String,
    /// Its run starts a new agent session (default: it continues the
    /// task's).
    #[serde(default)]
    pub new_session: bool,
    /// A profile of the column's agent type the caller may use.
    #[schema(format = Uuid)]
    pub profile_id: Option<String>,
    #[schema(format = Uuid)]
    pub on_success: Option<String>,
    #[schema(format = Uuid)]
    pub on_failure: Option<String>,
}

impl From<ColumnInput> for pb::Column {
    fn from(c: ColumnInput) -> Self {
        column_from!(pb::Column, c,
            id: c.id.unwrap_or_default(),
            state: c.state.to_proto() as i32,
            ..Default::default()
        )
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutColumnsRequest {
    /// The board's columns, left to right (1 to 32).
    pub columns: Vec<ColumnInput>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ColumnList {
    pub columns: Vec<Column>,
}

impl From<pb::ListColumnsResponse> for ColumnList {
    fn from(r: pb::ListColumnsResponse) -> Self {
        ColumnList {
            columns: r.columns.into_iter().map(Column::from).collect(),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveTaskRequest {
    /// A column of the task's board.
    #[schema(format = Uuid)]
    pub column_id: String,
    /// Move only an unchanged task.
    pub version: Option<i64>,
}

#[utoipa::path(get, path = "/api/v1/boards/{id}/columns", tag = "boards",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    responses((status = 200, body = ColumnList),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
/// The board's workflow columns, left to right. A new board has the
/// default workflow: one column per task state, no limits, no automation.
#[tracing::instrument(skip_all)]
pub async fn list_columns(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ColumnList>> {
    let board = visible_board(&state, &user, &id).await?;
    let resp = state
        .tasks()
        .list_columns(pb::ListColumnsRequest { board_id: board.id })
        .await
        .answer(task_err)?;
    Ok(Json(resp.into()))
}

#[utoipa::path(put, path = "/api/v1/boards/{id}/columns", tag = "boards",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    request_body = PutColumnsRequest,
    responses((status = 200, body = ColumnList), (status = 404, body = ErrorBody),
        (status = 400, description = "a bad column: its name, colour, state, a WIP limit below 1, \
            an agent type, a profile the caller cannot use or of another agent type, a next step \
            naming no column of the list, an id of another board",
            body = ErrorBody)))]
/// Replaces the board's columns. Cards of a removed column go to the first
/// column of their state; a column whose limit grew lets its queue in.
#[tracing::instrument(skip_all)]
pub async fn put_columns(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PutColumnsRequest>,
) -> ApiResult<Json<ColumnList>> {
    let board = visible_board(&state, &user, &id).await?;
    check_profiles(&state, &user, &body.columns).await?;
    let resp = state
        .tasks()
        .put_columns(pb::PutColumnsRequest {
            board_id: board.id,
            columns: body.columns.into_iter().map(pb::Column::from).collect(),
        })
        .await
        .answer(task_err)?;
    Ok(Json(resp.into()))
}

/// Each column's profile is one the caller may use, of the column's agent
/// type (a column without one is checked by the task service).
async fn check_profiles(
    state: &AppState,
    user: &CurrentUser,
    columns: &[ColumnInput],
) -> ApiResult<()> {
    for c in columns {
        if let (Some(profile), Some(agent)) = (
            c.profile_id.as_deref().filter(|p| !p.is_empty()),
            c.agent_type.as_deref().filter(|a| !a.is_empty()),
        ) {
            super::profiles::bind(state, user, profile, agent, &mut None).await?;
        }
    }
    Ok(())
}

#[utoipa::path(post, path = "/api/v1/tasks/{id}/move", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "task id")),
    request_body = MoveTaskRequest,
    responses((status = 200, body = Task),
        (status = 400, body = ErrorBody),
        (status = 404, description = "no such task, or no such column on its board", body = ErrorBody),
        (status = 409, description = "a transition the state machine forbids, or a version conflict",
            body = ErrorBody)))]
/// Moves a card into a column of its board. An automated column starts its
/// run (or queues the card when its WIP limit is reached); any other gives
/// the card the column's state.
#[tracing::instrument(skip_all)]
pub async fn move_task(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<MoveTaskRequest>,
) -> ApiResult<Json<Task>> {
    let column_id = uuid::Uuid::parse_str(&body.column_id)
        .map_err(|_| ApiError::validation(format!("column_id {:?} is not a UUID", body.column_id)))?
        .to_string();
    let task = visible_task(&state, &user, &id).await?;
    let moved = state
        .tasks()
        .move_task(pb::MoveTaskRequest {
            id: task.id,
            column_id,
            expected_version: body.version,
            actor: user.username,
        })
        .await
        .answer(task_err)?;
    Ok(Json(moved.into()))
}
