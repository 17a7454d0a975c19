//! The whole application: the `/api/v1` routes ([`crate::routes`]) and
//! the API's own description ([`crate::openapi`]), health, the UI, and the
//! layers around them (request id, tracing span, CORS, body limit, security
//! headers, metrics).

use std::time::Duration;

use axum::{Router, extract::DefaultBodyLimit, middleware, routing::get};
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

use crate::{body_deadline, config::Settings, openapi, routes, state::AppState, web};

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

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
        .nest(
            "/api/v1",
            routes::api(state.clone()).route("/openapi.json", get(openapi::json)),
        )
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
