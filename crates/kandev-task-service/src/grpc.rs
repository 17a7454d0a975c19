//! The gRPC adapter: parse the request into domain inputs, call the store,
//! convert the result. No logic of its own.

use std::sync::Arc;

use kandev_common::ServiceError;
use kandev_proto::{
    time::from_chrono,
    v1::{self as pb, task_service_server::TaskService},
};
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::{
    domain::{
        self, Board, BoardName, BoardPatch, NewBoard, NewTask, Page, StateChange, Task, TaskError,
        TaskEventRecord, TaskPatch, TaskState, TaskTitle, bounded, parse_id,
    },
    store::TaskStore,
    workflow::{Column, ColumnInput, parse_columns},
};

/// Serves `kandev.v1.TaskService` over a [`TaskStore`].
pub struct GrpcTaskAdapter {
    store: Arc<dyn TaskStore>,
}

impl GrpcTaskAdapter {
    pub fn new(store: Arc<dyn TaskStore>) -> Self {
        GrpcTaskAdapter { store }
    }
}

fn status(err: TaskError) -> Status {
    err.to_status()
}

fn state_from_proto(value: i32) -> Result<TaskState, TaskError> {
    if value == pb::TaskState::Unspecified as i32 {
        return Err(TaskError::InvalidArgument("state is required".into()));
    }
    TaskState::from_proto(value).map_err(|e| TaskError::InvalidArgument(e.to_string()))
}

fn board_to_proto(b: Board) -> pb::Board {
    pb::Board {
        id: b.id.to_string(),
        name: b.name,
        description: b.description,
        owner: b.owner,
        created_at: Some(from_chrono(b.created_at)),
        updated_at: Some(from_chrono(b.updated_at)),
    }
}

fn task_to_proto(t: Task) -> pb::Task {
    let blocked_reason = if t.blocked {
        crate::deps::blocked_reason(&t.blockers)
    } else {
        String::new()
    };
    pb::Task {
        parent_id: t.parent_id.map(|p| p.to_string()).unwrap_or_default(),
        blocked: t.blocked,
        blocked_by: t
            .blockers
            .into_iter()
            .map(|b| pb::TaskBlocker {
                id: b.id.to_string(),
                title: b.title,
                state: b.state.to_proto() as i32,
            })
            .collect(),
        blocked_reason,
        subtask_ids: t.subtasks.iter().map(Uuid::to_string).collect(),
        id: t.id.to_string(),
        board_id: t.board_id.to_string(),
        title: t.title,
        description: t.description,
        state: t.state.to_proto() as i32,
        priority: t.priority,
        agent_type: t.agent_type,
        repository_url: t.repository_url,
        branch: t.branch,
        workspace_path: t.workspace_path,
        metadata_json: serde_json::Value::Object(t.metadata).to_string(),
        max_retries: t.max_retries,
        autostart: t.autostart,
        created_by: t.created_by,
        position: t.position,
        version: t.version,
        column_id: t.column_id.map(|c| c.to_string()).unwrap_or_default(),
        queued: t.queued,
        created_at: Some(from_chrono(t.created_at)),
        updated_at: Some(from_chrono(t.updated_at)),
    }
}

fn column_to_proto(c: Column) -> pb::Column {
    pb::Column {
        id: c.id.to_string(),
        board_id: c.board_id.to_string(),
        name: c.name,
        position: c.position,
        colour: c.colour,
        state: c.state.to_proto() as i32,
        wip_limit: c.wip_limit,
        agent_type: c.agent_type,
        prompt_template: c.prompt_template,
        on_success: c.on_success.map(|id| id.to_string()),
        on_failure: c.on_failure.map(|id| id.to_string()),
        new_session: c.new_session,
        profile_id: c.profile_id.map(|id| id.to_string()),
    }
}

fn columns_to_proto(columns: Vec<Column>) -> pb::ListColumnsResponse {
    pb::ListColumnsResponse {
        columns: columns.into_iter().map(column_to_proto).collect(),
    }
}

fn column_input(c: pb::Column) -> Result<ColumnInput, TaskError> {
    let state = state_from_proto(c.state)?;
    Ok(ColumnInput {
        id: Some(c.id).filter(|id| !id.is_empty()),
        name: c.name,
        colour: c.colour,
        state: state.as_str().to_string(),
        wip_limit: c.wip_limit,
        agent_type: c.agent_type,
        prompt_template: c.prompt_template,
        new_session: c.new_session,
        profile_id: c.profile_id,
        on_success: c.on_success,
        on_failure: c.on_failure,
    })
}

fn event_to_proto(e: TaskEventRecord) -> pb::TaskEvent {
    pb::TaskEvent {
        id: e.id.to_string(),
        task_id: e.task_id.to_string(),
        board_id: e.board_id.to_string(),
        kind: e.kind,
        actor: e.actor,
        old_value_json: e.old_value.to_string(),
        new_value_json: e.new_value.to_string(),
        created_at: Some(from_chrono(e.created_at)),
    }
}

fn new_task(r: pb::CreateTaskRequest) -> Result<NewTask, TaskError> {
    let state = match r.state {
        0 => TaskState::Todo,
        other => state_from_proto(other)?,
    };
    Ok(NewTask {
        board_id: parse_id("board_id", &r.board_id)?,
        title: TaskTitle::parse(&r.title)?,
        description: bounded("description", &r.description, domain::MAX_DESCRIPTION_BYTES)?,
        state,
        priority: domain::priority(r.priority)?,
        agent_type: r
            .agent_type
            .filter(|a| !a.is_empty())
            .map(|a| domain::agent_type(&a))
            .transpose()?,
        repository_url: bounded("repository_url", &r.repository_url, domain::MAX_FIELD_BYTES)?,
        branch: bounded("branch", &r.branch, domain::MAX_FIELD_BYTES)?,
        workspace_path: bounded("workspace_path", &r.workspace_path, domain::MAX_FIELD_BYTES)?,
        metadata: domain::json_object("metadata", &r.metadata_json)?,
        max_retries: domain::max_retries(r.max_retries.unwrap_or(domain::DEFAULT_MAX_RETRIES))?,
        autostart: r.autostart.unwrap_or(true),
        created_by: bounded("created_by", &r.created_by, domain::MAX_FIELD_BYTES)?,
        parent_id: r
            .parent_id
            .filter(|p| !p.is_empty())
            .map(|p| parse_id("parent_id", &p))
            .transpose()?,
    })
}

fn task_patch(r: pb::UpdateTaskRequest) -> Result<TaskPatch, TaskError> {
    let field = |name: &str, v: Option<String>| {
        v.map(|v| bounded(name, &v, domain::MAX_FIELD_BYTES))
            .transpose()
    };
    let agent_type = if r.clear_agent_type {
        Some(None)
    } else {
        r.agent_type
            .map(|a| domain::agent_type(&a).map(Some))
            .transpose()?
    };
    Ok(TaskPatch {
        expected_version: r.expected_version,
        title: r.title.as_deref().map(TaskTitle::parse).transpose()?,
        description: r
            .description
            .map(|d| bounded("description", &d, domain::MAX_DESCRIPTION_BYTES))
            .transpose()?,
        priority: r.priority.map(domain::priority).transpose()?,
        agent_type,
        repository_url: field("repository_url", r.repository_url)?,
        branch: field("branch", r.branch)?,
        workspace_path: field("workspace_path", r.workspace_path)?,
        metadata_patch: r
            .metadata_patch_json
            .map(|m| domain::json_object("metadata_patch", &m))
            .transpose()?,
        max_retries: r.max_retries.map(domain::max_retries).transpose()?,
        autostart: r.autostart,
        position: r.position,
        actor: r.actor,
    })
}

#[tonic::async_trait]
impl TaskService for GrpcTaskAdapter {
    async fn create_board(
        &self,
        request: Request<pb::CreateBoardRequest>,
    ) -> Result<Response<pb::Board>, Status> {
        let r = request.into_inner();
        let new = (|| {
            Ok::<_, TaskError>(NewBoard {
                name: BoardName::parse(&r.name)?,
                description: bounded("description", &r.description, domain::MAX_DESCRIPTION_BYTES)?,
                owner: bounded("owner", &r.owner, domain::MAX_FIELD_BYTES)?,
            })
        })()
        .map_err(status)?;
        let board = self.store.create_board(new).await.map_err(status)?;
        Ok(Response::new(board_to_proto(board)))
    }

    async fn get_board(
        &self,
        request: Request<pb::GetBoardRequest>,
    ) -> Result<Response<pb::Board>, Status> {
        let id = parse_id("id", &request.into_inner().id).map_err(status)?;
        let board = self.store.get_board(id).await.map_err(status)?;
        Ok(Response::new(board_to_proto(board)))
    }

    async fn list_boards(
        &self,
        request: Request<pb::ListBoardsRequest>,
    ) -> Result<Response<pb::ListBoardsResponse>, Status> {
        let r = request.into_inner();
        let page = Page::parse(r.page_size, &r.page_token).map_err(status)?;
        let owner = (!r.owner.is_empty()).then_some(r.owner);
        let (boards, next_page_token) =
            self.store.list_boards(owner, page).await.map_err(status)?;
        Ok(Response::new(pb::ListBoardsResponse {
            boards: boards.into_iter().map(board_to_proto).collect(),
            next_page_token,
        }))
    }

    async fn update_board(
        &self,
        request: Request<pb::UpdateBoardRequest>,
    ) -> Result<Response<pb::Board>, Status> {
        let r = request.into_inner();
        let (id, patch) = (|| {
            Ok::<_, TaskError>((
                parse_id("id", &r.id)?,
                BoardPatch {
                    name: r.name.as_deref().map(BoardName::parse).transpose()?,
                    description: r
                        .description
                        .as_deref()
                        .map(|d| bounded("description", d, domain::MAX_DESCRIPTION_BYTES))
                        .transpose()?,
                },
            ))
        })()
        .map_err(status)?;
        let board = self.store.update_board(id, patch).await.map_err(status)?;
        Ok(Response::new(board_to_proto(board)))
    }

    async fn delete_board(
        &self,
        request: Request<pb::DeleteBoardRequest>,
    ) -> Result<Response<pb::DeleteBoardResponse>, Status> {
        let r = request.into_inner();
        let id = parse_id("id", &r.id).map_err(status)?;
        self.store.delete_board(id, r.actor).await.map_err(status)?;
        Ok(Response::new(pb::DeleteBoardResponse {}))
    }

    async fn create_task(
        &self,
        request: Request<pb::CreateTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let new = new_task(request.into_inner()).map_err(status)?;
        let task = self.store.create_task(new).await.map_err(status)?;
        Ok(Response::new(task_to_proto(task)))
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let id = parse_id("id", &request.into_inner().id).map_err(status)?;
        let task = self.store.get_task(id).await.map_err(status)?;
        Ok(Response::new(task_to_proto(task)))
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let r = request.into_inner();
        let (board_id, states, page) = (|| {
            Ok::<_, TaskError>((
                parse_id("board_id", &r.board_id)?,
                r.states
                    .iter()
                    .map(|s| state_from_proto(*s))
                    .collect::<Result<Vec<_>, _>>()?,
                Page::parse(r.page_size, &r.page_token)?,
            ))
        })()
        .map_err(status)?;
        let (tasks, next_page_token) = self
            .store
            .list_tasks(board_id, states, page)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListTasksResponse {
            tasks: tasks.into_iter().map(task_to_proto).collect(),
            next_page_token,
        }))
    }

    async fn update_task(
        &self,
        request: Request<pb::UpdateTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let r = request.into_inner();
        let id = parse_id("id", &r.id).map_err(status)?;
        let patch = task_patch(r).map_err(status)?;
        let task = self.store.update_task(id, patch).await.map_err(status)?;
        Ok(Response::new(task_to_proto(task)))
    }

    async fn change_task_state(
        &self,
        request: Request<pb::ChangeTaskStateRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let r = request.into_inner();
        let (id, change) = (|| {
            Ok::<_, TaskError>((
                parse_id("id", &r.id)?,
                StateChange {
                    to: state_from_proto(r.state)?,
                    expected_version: r.expected_version,
                    actor: r.actor,
                    reason: bounded("reason", &r.reason, domain::MAX_FIELD_BYTES)?,
                    metadata_patch: r
                        .metadata_patch_json
                        .map(|m| domain::json_object("metadata_patch", &m))
                        .transpose()?,
                },
            ))
        })()
        .map_err(status)?;
        let task = self.store.change_state(id, change).await.map_err(status)?;
        Ok(Response::new(task_to_proto(task)))
    }

    async fn delete_task(
        &self,
        request: Request<pb::DeleteTaskRequest>,
    ) -> Result<Response<pb::DeleteTaskResponse>, Status> {
        let r = request.into_inner();
        let id = parse_id("id", &r.id).map_err(status)?;
        self.store
            .delete_task(id, r.expected_version, r.actor)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DeleteTaskResponse {}))
    }

    async fn list_task_events(
        &self,
        request: Request<pb::ListTaskEventsRequest>,
    ) -> Result<Response<pb::ListTaskEventsResponse>, Status> {
        let r = request.into_inner();
        let id = parse_id("task_id", &r.task_id).map_err(status)?;
        let page = Page::parse(r.page_size, &r.page_token).map_err(status)?;
        let (events, next_page_token) = self.store.list_events(id, page).await.map_err(status)?;
        Ok(Response::new(pb::ListTaskEventsResponse {
            events: events.into_iter().map(event_to_proto).collect(),
            next_page_token,
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn list_columns(
        &self,
        request: Request<pb::ListColumnsRequest>,
    ) -> Result<Response<pb::ListColumnsResponse>, Status> {
        let board_id = parse_id("board_id", &request.into_inner().board_id).map_err(status)?;
        let columns = self.store.list_columns(board_id).await.map_err(status)?;
        Ok(Response::new(columns_to_proto(columns)))
    }

    #[tracing::instrument(skip_all)]
    async fn put_columns(
        &self,
        request: Request<pb::PutColumnsRequest>,
    ) -> Result<Response<pb::ListColumnsResponse>, Status> {
        let r = request.into_inner();
        let (board_id, columns) = (|| {
            let board_id = parse_id("board_id", &r.board_id)?;
            let inputs = r
                .columns
                .into_iter()
                .map(column_input)
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, TaskError>((board_id, parse_columns(board_id, inputs)?))
        })()
        .map_err(status)?;
        self.store.get_board(board_id).await.map_err(status)?;
        let saved = self
            .store
            .put_columns(board_id, columns)
            .await
            .map_err(status)?;
        Ok(Response::new(columns_to_proto(saved)))
    }

    #[tracing::instrument(skip_all)]
    async fn move_task(
        &self,
        request: Request<pb::MoveTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let r = request.into_inner();
        let id = parse_id("id", &r.id).map_err(status)?;
        let column = parse_id("column_id", &r.column_id).map_err(status)?;
        let task = self
            .store
            .move_task(id, column, r.expected_version, r.actor)
            .await
            .map_err(status)?;
        Ok(Response::new(task_to_proto(task)))
    }

    #[tracing::instrument(skip_all)]
    async fn put_task_blockers(
        &self,
        request: Request<pb::PutTaskBlockersRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let r = request.into_inner();
        let (id, blockers) = (|| {
            Ok::<_, TaskError>((
                parse_id("id", &r.id)?,
                r.blocker_ids
                    .iter()
                    .map(|b| parse_id("blocker id", b))
                    .collect::<Result<Vec<_>, _>>()?,
            ))
        })()
        .map_err(status)?;
        let task = self
            .store
            .put_blockers(id, blockers, r.expected_version, r.actor)
            .await
            .map_err(status)?;
        Ok(Response::new(task_to_proto(task)))
    }
}
