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

/// Answers every operation may give besides its own: 400 (a request that
/// does not parse, NUL bytes), 429 (the rate limit) and, behind the bearer
/// token, 401. Documented once here so no handler can forget them.
struct CommonErrors;

impl Modify for CommonErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let error = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
        };
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in operations.into_iter().flatten() {
                // `security(())` marks the public operations (login).
                let public = op
                    .security
                    .as_ref()
                    .is_some_and(|s| s.iter().all(|r| r == &Default::default()));
                let mut add = |code: &str, description: &str| {
                    op.responses
                        .responses
                        .entry(code.to_string())
                        .or_insert_with(|| error(description).into());
                };
                add("400", "the request could not be parsed");
                add(
                    "429",
                    "too many requests: retry after `Retry-After` seconds",
                );
                if !public {
                    add("401", "no valid bearer token");
                }
            }
        }
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
        routes::trackers::set,
        routes::trackers::get,
        routes::trackers::delete,
        routes::trackers::github_webhook,
        routes::trackers::gitlab_webhook,
        routes::board_stream::stream,
        routes::tasks::get_task,
        routes::tasks::update_task,
        routes::tasks::delete_task,
        routes::tasks::change_state,
        routes::tasks::list_events,
        routes::tasks::put_blockers,
        routes::workflow::list_columns,
        routes::workflow::put_columns,
        routes::workflow::move_task,
        routes::changes::changes,
        routes::changes::diff,
        routes::changes::review,
        routes::review::list,
        routes::review::resolve,
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
        routes::profiles::list,
        routes::profiles::create,
        routes::profiles::get,
        routes::profiles::replace,
        routes::profiles::delete,
        routes::secrets::list,
        routes::secrets::set,
        routes::secrets::delete,
        routes::orchestrator::start,
        routes::orchestrator::stop,
        routes::orchestrator::status,
        routes::orchestrator::stream,
        routes::followups::list,
        routes::followups::edit,
        routes::followups::cancel,
        routes::feed::page,
        routes::checks::get,
        routes::checks::fix,
    ),
    components(schemas(ErrorBody, api::TaskState)),
    modifiers(&BearerAuth, &CommonErrors),
    security(("bearer" = [])),
    tags(
        (name = "auth", description = "Login and users"),
        (name = "boards", description = "Boards, owned by their creator"),
        (name = "tasks", description = "Tasks and their state machine"),
        (name = "agents", description = "Agent instances"),
        (name = "agent-types", description = "The agent type registry"),
        (name = "agent-profiles", description = "Agent profiles: model, mode, instructions, environment and MCP servers on an agent type, chosen per task"),
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
