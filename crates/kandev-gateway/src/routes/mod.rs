//! The `/api/v1` routes: the public ones, and the rest behind
//! authentication, grouped by area; one module per resource.

use axum::{
    Router, middleware,
    routing::{get, patch, post, put},
};

use crate::{auth::require_auth, error::ApiError, state::AppState};

pub mod access;
pub mod agent_types;
pub mod agents;
pub mod auth;
pub mod board_stream;
pub mod boards;
pub mod changes;
pub mod checks;
pub mod feed;
pub mod followups;
pub mod orchestrator;
pub mod profiles;
pub mod repository;
pub mod review;
pub mod secrets;
pub mod tasks;
pub mod trackers;
pub mod workflow;

async fn api_not_found() -> ApiError {
    ApiError::not_found("no such API route")
}

async fn method_not_allowed() -> ApiError {
    let mut err = ApiError::bad_request("method not allowed on this route");
    err.status = Some(http::StatusCode::METHOD_NOT_ALLOWED);
    err
}

/// The `/api/v1` routes: the public ones, and the rest behind
/// authentication ([`crate::app`] adds the API's own description).
pub fn api(state: AppState) -> Router<AppState> {
    let public = Router::new()
        .route("/auth/login", post(auth::login))
        // Public: refused unless signed with (or carrying) a linked
        // board's secret.
        .route("/trackers/github/webhook", post(trackers::github_webhook))
        .route("/trackers/gitlab/webhook", post(trackers::gitlab_webhook));
    let protected = Router::new()
        .merge(users_routes())
        .merge(boards_routes())
        .merge(tasks_routes())
        .merge(agents_routes())
        .merge(orchestrator_routes())
        .route_layer(middleware::from_fn_with_state(state, require_auth));
    public
        .merge(protected)
        .fallback(api_not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// Who is signed in, users and their secrets.
fn users_routes() -> Router<AppState> {
    Router::new()
        .route("/auth/me", get(auth::me))
        .route("/users", post(auth::create_user))
        .route("/users/me/secrets", get(secrets::list))
        .route(
            "/users/me/secrets/{name}",
            put(secrets::set).delete(secrets::delete),
        )
}

/// Boards, their tasks, cards, columns, tracker and live stream.
fn boards_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/boards",
            post(boards::create_board).get(boards::list_boards),
        )
        .route(
            "/boards/{id}",
            get(boards::get_board)
                .patch(boards::update_board)
                .delete(boards::delete_board),
        )
        .route(
            "/boards/{id}/tasks",
            post(boards::create_task).get(boards::list_tasks),
        )
        .route("/boards/{id}/cards", get(boards::list_cards))
        .route(
            "/boards/{id}/tracker",
            post(trackers::set)
                .get(trackers::get)
                .delete(trackers::delete),
        )
        .route("/boards/{id}/stream", get(board_stream::stream))
        .route(
            "/boards/{id}/columns",
            get(workflow::list_columns).put(workflow::put_columns),
        )
}

/// A task: itself, its place in the workflow, its changes and review.
fn tasks_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/tasks/{id}",
            get(tasks::get_task)
                .patch(tasks::update_task)
                .delete(tasks::delete_task),
        )
        .route("/tasks/{id}/move", post(workflow::move_task))
        .route("/tasks/{id}/state", patch(tasks::change_state))
        .route("/tasks/{id}/blockers", put(tasks::put_blockers))
        .route("/tasks/{id}/events", get(tasks::list_events))
        .route("/tasks/{id}/changes", get(changes::changes))
        .route("/tasks/{id}/changes/diff", get(changes::diff))
        .route("/tasks/{id}/review", post(changes::review))
        .route("/tasks/{id}/review/comments", get(review::list))
        .route(
            "/tasks/{id}/review/comments/{commentId}",
            patch(review::resolve),
        )
}

/// Agent instances, agent types and profiles.
fn agents_routes() -> Router<AppState> {
    Router::new()
        .route("/agents/launch", post(agents::launch))
        .route("/agents/{instance_id}/prompt", post(agents::prompt))
        .route("/agents/{instance_id}/cancel", post(agents::cancel))
        .route("/agents/{instance_id}/status", get(agents::status))
        .route("/agents/{instance_id}/logs", get(agents::logs))
        .route("/agents/{instance_id}/session", get(agents::session))
        .route(
            "/agent-types",
            get(agent_types::list).post(agent_types::create),
        )
        .route(
            "/agent-types/{id}",
            put(agent_types::replace)
                .patch(agent_types::patch)
                .delete(agent_types::delete),
        )
        .route("/agent-types/{id}/disable", post(agent_types::disable))
        .route(
            "/agent-profiles",
            get(profiles::list).post(profiles::create),
        )
        .route(
            "/agent-profiles/{id}",
            get(profiles::get)
                .put(profiles::replace)
                .delete(profiles::delete),
        )
}

/// A task's runs: start, stop, status, follow-ups, its feed and CI.
fn orchestrator_routes() -> Router<AppState> {
    let task = |path: &str| format!("/orchestrator/tasks/{{task_id}}{path}");
    Router::new()
        .route(&task("/start"), post(orchestrator::start))
        .route(&task("/stop"), post(orchestrator::stop))
        .route(&task("/status"), get(orchestrator::status))
        .route(&task("/pending-prompts"), get(followups::list))
        .route(
            &task("/pending-prompts/{prompt_id}"),
            put(followups::edit).delete(followups::cancel),
        )
        .route(&task("/stream"), get(orchestrator::stream))
        .route(&task("/feed"), get(feed::page))
        .route(&task("/checks"), get(checks::get))
        .route(&task("/fix-ci"), post(checks::fix))
}
