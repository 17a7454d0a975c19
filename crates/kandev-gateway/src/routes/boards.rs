//! Boards and the tasks on them.

use axum::{
    Json,
    extract::{RawQuery, State},
    http::StatusCode,
};
use kandev_proto::v1 as pb;

use super::{
    access::{parse_id, visible_board},
    repository,
};
use crate::{
    api::{
        Board, BoardCards, BoardList, Card, CreateBoardRequest, CreateTaskRequest, MAX_CARDS,
        PageParams, Task, TaskExecution, TaskList, TaskState, UpdateBoardRequest, parse_state,
    },
    auth::CurrentUser,
    clients::{Answer, orch_err, task_err},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{ApiJson, ApiPath, ApiQuery},
    state::AppState,
};

#[utoipa::path(post, path = "/api/v1/boards", tag = "boards",
    request_body = CreateBoardRequest,
    responses((status = 201, body = Board),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn create_board(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiJson(body): ApiJson<CreateBoardRequest>,
) -> ApiResult<(StatusCode, Json<Board>)> {
    let board = state
        .tasks()
        .create_board(pb::CreateBoardRequest {
            name: body.name,
            description: body.description,
            owner: user.username,
        })
        .await
        .answer(task_err)?;
    Ok((StatusCode::CREATED, Json(board.into())))
}

#[utoipa::path(get, path = "/api/v1/boards", tag = "boards", params(PageParams),
    responses((status = 200, body = BoardList), (status = 401, body = ErrorBody)))]
pub async fn list_boards(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiQuery(page): ApiQuery<PageParams>,
) -> ApiResult<Json<BoardList>> {
    // Admins list every board; everyone else only their own.
    let owner = if user.is_admin {
        String::new()
    } else {
        user.username
    };
    let resp = state
        .tasks()
        .list_boards(pb::ListBoardsRequest {
            owner,
            page_size: page.page_size.unwrap_or(0),
            page_token: page.page_token.unwrap_or_default(),
        })
        .await
        .answer(task_err)?;
    Ok(Json(BoardList::from_proto(resp)))
}

#[utoipa::path(get, path = "/api/v1/boards/{id}", tag = "boards",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    responses((status = 200, body = Board),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_board(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Board>> {
    Ok(Json(visible_board(&state, &user, &id).await?.into()))
}

#[utoipa::path(patch, path = "/api/v1/boards/{id}", tag = "boards",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    request_body = UpdateBoardRequest,
    responses((status = 200, body = Board), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn update_board(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateBoardRequest>,
) -> ApiResult<Json<Board>> {
    let board = visible_board(&state, &user, &id).await?;
    let updated = state
        .tasks()
        .update_board(pb::UpdateBoardRequest {
            id: board.id,
            name: body.name,
            description: body.description,
            actor: user.username,
        })
        .await
        .answer(task_err)?;
    Ok(Json(updated.into()))
}

#[utoipa::path(delete, path = "/api/v1/boards/{id}", tag = "boards",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete_board(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let board = visible_board(&state, &user, &id).await?;
    state
        .tasks()
        .delete_board(pb::DeleteBoardRequest {
            id: board.id,
            actor: user.username,
        })
        .await
        .answer(task_err)?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/api/v1/boards/{id}/tasks", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    request_body = CreateTaskRequest,
    responses((status = 201, body = Task), (status = 404, body = ErrorBody),
        (status = 400, description = "invalid fields, or a repository the task may not use \
            (`details`: `field`, `problem`)", body = ErrorBody)))]
/// Creates a task. Its repository is checked first by the agent manager
/// (the repository policy; a local repository must exist, be a git
/// repository and have the branch): a refusal is a 400 that says why.
pub async fn create_task(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<CreateTaskRequest>,
) -> ApiResult<(StatusCode, Json<Task>)> {
    let board = visible_board(&state, &user, &id).await?;
    let parent_id = body
        .parent_id
        .as_deref()
        .map(|p| parse_id("parent task", p))
        .transpose()?;
    repository::check(&state, &body.repository_url, &body.branch).await?;
    let mut metadata = body.metadata;
    if let Some(profile_id) = &body.profile_id {
        let agent_type = body.agent_type.as_deref().unwrap_or_default();
        super::profiles::bind(&state, &user, profile_id, agent_type, &mut metadata).await?;
    }
    let metadata_json = match metadata {
        Some(map) => serde_json::Value::Object(map).to_string(),
        None => String::new(),
    };
    let task = state
        .tasks()
        .create_task(pb::CreateTaskRequest {
            board_id: board.id,
            title: body.title,
            description: body.description,
            priority: body.priority,
            agent_type: body.agent_type,
            repository_url: body.repository_url,
            branch: body.branch,
            workspace_path: body.workspace_path,
            metadata_json,
            max_retries: body.max_retries,
            created_by: user.username,
            state: body.state.map(|s| s.to_proto() as i32).unwrap_or_default(),
            autostart: body.autostart,
            parent_id,
        })
        .await
        .answer(task_err)?;
    Ok((StatusCode::CREATED, Json(task.into())))
}

/// `state` may repeat (`?state=TODO&state=REVIEW`) or be a comma list.
#[derive(Debug, Default)]
struct ListTasksQuery {
    states: Vec<TaskState>,
    page_size: i32,
    page_token: String,
}

fn parse_list_query(raw: Option<&str>) -> ApiResult<ListTasksQuery> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|_| ApiError::bad_request("invalid query string"))?;
    let mut q = ListTasksQuery::default();
    for (key, value) in pairs {
        match key.as_str() {
            "state" => {
                for s in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    q.states.push(parse_state(s)?);
                }
            }
            "page_size" => {
                q.page_size = value
                    .parse()
                    .map_err(|_| ApiError::bad_request("page_size must be an integer"))?;
            }
            "page_token" => q.page_token = value,
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {other:?}"
                )));
            }
        }
    }
    Ok(q)
}

#[utoipa::path(get, path = "/api/v1/boards/{id}/tasks", tag = "tasks",
    params(
        ("id" = uuid::Uuid, Path, description = "board id"),
        ("state" = Option<Vec<TaskState>>, Query, description = "only these states; repeat or comma-separate"),
        PageParams,
    ),
    responses((status = 200, body = TaskList), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn list_tasks(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<TaskList>> {
    let query = parse_list_query(raw.as_deref())?;
    let board = visible_board(&state, &user, &id).await?;
    let resp = state
        .tasks()
        .list_tasks(pb::ListTasksRequest {
            board_id: board.id,
            states: query.states.iter().map(|s| s.to_proto() as i32).collect(),
            page_size: query.page_size,
            page_token: query.page_token,
        })
        .await
        .answer(task_err)?;
    Ok(Json(TaskList::from_proto(resp)))
}

#[utoipa::path(get, path = "/api/v1/boards/{id}/cards", tag = "tasks",
    params(("id" = uuid::Uuid, Path, description = "board id")),
    responses((status = 200, body = BoardCards),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
/// Every card of the board with its live execution state, in one request
/// (what the board page polls, whatever the number of cards).
pub async fn list_cards(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<BoardCards>> {
    let board = visible_board(&state, &user, &id).await?;
    Ok(Json(board_cards(&state, &board.id).await?))
}

/// Every card of board `board_id` (the caller checked it may see it).
#[tracing::instrument(skip(state))]
pub async fn board_cards(state: &AppState, board_id: &str) -> ApiResult<BoardCards> {
    let mut tasks = Vec::new();
    let mut page_token = String::new();
    let truncated = loop {
        let page = state
            .tasks()
            .list_tasks(pb::ListTasksRequest {
                board_id: board_id.to_string(),
                states: vec![],
                page_size: 500,
                page_token,
            })
            .await
            .answer(task_err)?;
        tasks.extend(page.tasks);
        if tasks.len() >= MAX_CARDS {
            let more = tasks.len() > MAX_CARDS || !page.next_page_token.is_empty();
            tasks.truncate(MAX_CARDS);
            break more;
        }
        if page.next_page_token.is_empty() {
            break false;
        }
        page_token = page.next_page_token;
    };
    let mut executions = Vec::with_capacity(tasks.len());
    for chunk in tasks.chunks(1000) {
        let resp = state
            .orchestrator()
            .list_task_executions(pb::ListTaskExecutionsRequest {
                task_ids: chunk.iter().map(|t| t.id.clone()).collect(),
            })
            .await
            .answer(orch_err)?;
        executions.extend(resp.executions);
    }
    let cards = tasks
        .into_iter()
        .zip(executions)
        .map(|(task, execution)| Card {
            task: Task::from(task),
            execution: TaskExecution::from(execution),
        })
        .collect();
    Ok(BoardCards { cards, truncated })
}

/// The card of task `task_id` when it is on board `board_id`; `None` when
/// the task is gone or on another board.
#[tracing::instrument(skip(state))]
pub async fn board_card(
    state: &AppState,
    board_id: &str,
    task_id: &str,
) -> ApiResult<Option<Card>> {
    let task = match state
        .tasks()
        .get_task(pb::GetTaskRequest {
            id: task_id.to_string(),
        })
        .await
    {
        Ok(task) => task.into_inner(),
        Err(status) if status.code() == tonic::Code::NotFound => return Ok(None),
        Err(status) => return Err(task_err(status)),
    };
    if task.board_id != board_id {
        return Ok(None);
    }
    let execution = state
        .orchestrator()
        .list_task_executions(pb::ListTaskExecutionsRequest {
            task_ids: vec![task.id.clone()],
        })
        .await
        .answer(orch_err)?
        .executions
        .pop()
        .ok_or_else(|| ApiError::internal("the orchestrator answered no execution"))?;
    Ok(Some(Card {
        task: Task::from(task),
        execution: TaskExecution::from(execution),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_repeat_or_comma() {
        let q = parse_list_query(Some("state=TODO&state=REVIEW,BLOCKED&page_size=5")).unwrap();
        assert_eq!(
            q.states,
            vec![TaskState::Todo, TaskState::Review, TaskState::Blocked]
        );
        assert_eq!(q.page_size, 5);
        assert!(parse_list_query(Some("state=NOPE")).is_err());
        assert!(parse_list_query(Some("page_size=x")).is_err());
        assert!(parse_list_query(None).unwrap().states.is_empty());
    }
}
