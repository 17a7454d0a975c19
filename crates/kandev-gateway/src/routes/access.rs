//! Ownership checks: users see only their own boards and the tasks, agent
//! instances and executions under them; admins see everything. Anything
//! not visible answers 404, exactly like something that does not exist.

use kandev_common::ErrorCode;
use kandev_proto::v1 as pb;

use crate::{
    auth::CurrentUser,
    clients::{Answer, agent_err, task_err},
    error::{ApiError, ApiResult},
    state::AppState,
};

/// A well-formed id (every board, task and agent instance id is a UUID),
/// in its canonical form, or 400.
pub fn parse_id(what: &str, id: &str) -> ApiResult<String> {
    uuid::Uuid::parse_str(id)
        .map(|u| u.to_string())
        .map_err(|_| ApiError::bad_request(format!("{what} id {id:?} is not a UUID")))
}

/// The one answer for a board the caller may not see, whether it is
/// someone else's or does not exist: the same status and body (no id, no
/// downstream wording), so a 404 never tells which.
fn board_not_found() -> ApiError {
    ApiError::not_found("board not found")
}

fn task_not_found() -> ApiError {
    ApiError::not_found("task not found")
}

fn instance_not_found() -> ApiError {
    ApiError::not_found("agent instance not found")
}

/// `err`, with a not-found (a missing resource, or one not visible) made
/// into `hidden`.
fn hide_not_found(err: ApiError, hidden: fn() -> ApiError) -> ApiError {
    if err.code == ErrorCode::NotFound {
        hidden()
    } else {
        err
    }
}

/// The board, when the caller may see it.
pub async fn visible_board(state: &AppState, user: &CurrentUser, id: &str) -> ApiResult<pb::Board> {
    let id = parse_id("board", id)?;
    let board = state
        .tasks()
        .get_board(pb::GetBoardRequest { id })
        .await
        .answer(|status| hide_not_found(task_err(status), board_not_found))?;
    if user.can_access(&board.owner) {
        Ok(board)
    } else {
        Err(board_not_found())
    }
}

/// The task, when the caller may see its board.
pub async fn visible_task(state: &AppState, user: &CurrentUser, id: &str) -> ApiResult<pb::Task> {
    let id = parse_id("task", id)?;
    let task = state
        .tasks()
        .get_task(pb::GetTaskRequest { id })
        .await
        .answer(|status| hide_not_found(task_err(status), task_not_found))?;
    if user.is_admin {
        return Ok(task);
    }
    visible_board(state, user, &task.board_id)
        .await
        .map(|_| task)
        .map_err(|e| hide_not_found(e, task_not_found))
}

/// The agent instance, when the caller may see its task.
pub async fn visible_instance(
    state: &AppState,
    user: &CurrentUser,
    instance_id: &str,
) -> ApiResult<pb::AgentInstance> {
    // Checked here, so a malformed id is a 400 whether or not the agent
    // manager is up.
    let instance_id = parse_id("agent instance", instance_id)?;
    let instance = state
        .agents()
        .get_status(pb::GetStatusRequest { instance_id })
        .await
        .answer(|status| hide_not_found(agent_err(status), instance_not_found))?;
    if user.is_admin {
        return Ok(instance);
    }
    match visible_task(state, user, &instance.task_id).await {
        Ok(_) => Ok(instance),
        Err(e) if e.code == ErrorCode::BadRequest => Err(instance_not_found()),
        Err(e) => Err(hide_not_found(e, instance_not_found)),
    }
}
