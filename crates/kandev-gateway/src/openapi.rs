//! The OpenAPI document, generated from the handlers and the request and
//! response types. `docs/openapi.yaml` is this document; a test fails when
//! it is stale (`KANDEV_UPDATE_OPENAPI=1 cargo test -p kandev-gateway
//! openapi` rewrites it).

use axum::{Json, response::IntoResponse};
use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

use crate::{api, error::ErrorBody, routes};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Kandev API",
        description = "The Kandev gateway: boards, tasks, agents and the orchestrator. \
            Every error has the body `{error, message, details, http_status}`.",
        license(name = "Apache-2.0"),
    ),
    paths(
        routes::auth::login,
        routes::auth::me,
        routes::auth::create_user,
        routes::boards::create_board,
        routes::boards::list_boards,
        routes::boards::get_board,
        routes::boards::update_board,
        routes::boards::delete_board,
        routes::boards::create_task,
        routes::boards::list_tasks,
        routes::boards::list_cards,
        routes::tasks::get_task,
        routes::tasks::update_task,
        routes::tasks::delete_task,
        routes::tasks::change_state,
        routes::tasks::list_events,
        routes::changes::changes,
        routes::changes::diff,
        routes::changes::review,
        routes::agents::launch,
        routes::agents::prompt,
        routes::agents::cancel,
        routes::agents::status,
        routes::agents::logs,
        routes::agents::session,
        routes::agent_types::list,
        routes::agent_types::create,
        routes::agent_types::replace,
        routes::agent_types::patch,
        routes::agent_types::delete,
        routes::agent_types::disable,
        routes::secrets::list,
        routes::secrets::set,
        routes::secrets::delete,
        routes::orchestrator::start,
        routes::orchestrator::stop,
        routes::orchestrator::status,
        routes::orchestrator::stream,
    ),
    components(schemas(ErrorBody, api::TaskState)),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "auth", description = "Login and users"),
        (name = "boards", description = "Boards, owned by their creator"),
        (name = "tasks", description = "Tasks and their state machine"),
        (name = "agents", description = "Agent instances"),
        (name = "agent-types", description = "The agent type registry"),
        (name = "orchestrator", description = "Task executions and their live stream"),
    )
)]
pub struct ApiDoc;

/// The document as YAML, as committed in `docs/openapi.yaml`.
pub fn yaml() -> String {
    ApiDoc::openapi()
        .to_yaml()
        .expect("the OpenAPI document serializes")
}

/// `GET /api/v1/openapi.json`.
pub async fn json() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}
