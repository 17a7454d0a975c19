//! The router: public and protected `/api/v1` routes, health, the UI, and
//! the layers around them (request id, tracing span, CORS, body limit,
//! security headers).

use std::time::Duration;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    middleware,
    routing::{get, patch, post, put},
};
use http::{HeaderName, HeaderValue, Method, header};
use kandev_common::{
    metrics::{self, Scrape},
    serve::{ReadinessCheck, health_routes},
};
use secrecy::ExposeSecret;
use tower::ServiceBuilder;
use tower_http::{
    cors::{AllowOrigin, CorsLayer},
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    set_header::SetResponseHeaderLayer,
};

use crate::{
    auth::require_auth, body_deadline, config::Settings, error::ApiError, openapi, state::AppState,
    web,
};

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

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

async fn api_not_found() -> ApiError {
    ApiError::not_found("no such API route")
}

async fn method_not_allowed() -> ApiError {
    let mut err = ApiError::bad_request("method not allowed on this route");
    err.status = Some(http::StatusCode::METHOD_NOT_ALLOWED);
    err
}

/// The `/api/v1` routes: the public ones, and the rest behind
/// authentication.
fn api(state: AppState) -> Router<AppState> {
    let public = Router::new()
        .route("/auth/login", post(auth::login))
        .route("/openapi.json", get(openapi::json))
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

fn cors(origins: &[String]) -> CorsLayer {
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        )
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE, REQUEST_ID])
        .expose_headers([REQUEST_ID, header::RETRY_AFTER])
        .max_age(Duration::from_secs(600))
}

/// The UI's content security policy: its own scripts, styles and
/// connections only (no inline script or style, no framing, no plugins).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
    base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// Headers on every response, unless a handler set its own.
fn security_headers() -> [SetResponseHeaderLayer<HeaderValue>; 4] {
    [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ]
    .map(|(name, value)| {
        SetResponseHeaderLayer::if_not_present(name, HeaderValue::from_static(value))
    })
}

/// The whole application.
pub fn router(
    state: AppState,
    settings: &Settings,
    readiness: Vec<(&'static str, ReadinessCheck)>,
) -> Router {
    let [csp, frames, sniff, referrer] = security_headers();
    let layers = ServiceBuilder::new()
        .layer(csp)
        .layer(frames)
        .layer(sniff)
        .layer(referrer)
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .layer(middleware::from_fn(kandev_common::trace::requests))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(cors(&settings.cors_allowed_origins))
        .layer(DefaultBodyLimit::max(settings.body_limit_bytes));
    let app = Router::new()
        .nest("/api/v1", api(state.clone()))
        .fallback(web::serve)
        .with_state(state)
        .merge(health_routes(readiness))
        // Inside the metrics layer, so a 408 is counted as one.
        .layer(middleware::from_fn_with_state(
            Duration::from_secs(settings.body_read_timeout_secs),
            body_deadline::enforce,
        ));
    // The gateway's port is public: /metrics only with the scrape token.
    // An empty token is no token: never a scrape with an empty bearer.
    let scrape = match &settings.metrics_token {
        Some(token) if !token.expose_secret().trim().is_empty() => {
            Scrape::Token(token.expose_secret().to_owned())
        }
        _ => Scrape::Off,
    };
    let app = metrics::instrument("gateway", app, scrape);
    crate::metric_names::describe();
    // Exported from the start, so dashboards and alerts see a zero.
    ::metrics::counter!(crate::metric_names::WS_LAGGING_DISCONNECTS).increment(0);
    ::metrics::gauge!(crate::metric_names::WS_CLIENTS).increment(0.0);
    ::metrics::counter!(crate::metric_names::ACP_MESSAGES, "hop" => "gateway").increment(0);
    app.layer(layers)
}
