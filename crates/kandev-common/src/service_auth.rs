//! Service-to-service authentication: one shared secret,
//! `KANDEV_SERVICE_TOKEN`, that every Kandev service is given.
//!
//! The internal services (task service, orchestrator, agent manager) answer
//! a request only when it carries `Authorization: Bearer <token>`
//! ([`require`]); their clients (the gateway's, the orchestrator's) send it
//! on every call ([`crate::trace::traced`]). Probes stay open: `/healthz`,
//! `/readyz`, `/metrics` and the standard `grpc.health.v1.Health` service.
//!
//! A shared token is the simpler of the two designs (the other being mutual
//! TLS with a generated CA): one secret to generate and hand to four
//! processes, nothing to renew. It does not encrypt the traffic and does not
//! tell the services apart; whoever holds it may call any internal port.
//!
//! The token is required, with no opt-out: a service without one (or with
//! one shorter than [`MIN_TOKEN_BYTES`]) refuses to start and says so,
//! naming [`ENV_VAR`].

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::ErrorCode;

/// The variable holding the token.
pub const ENV_VAR: &str = "KANDEV_SERVICE_TOKEN";

/// The shortest token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 32;

/// The shared service token: never printed, never serialized (settings keep
/// it with `#[serde(skip_serializing)]`).
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct ServiceToken(String);

impl ServiceToken {
    /// The token itself, for the `authorization` header only.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }

    /// `Bearer <token>` as gRPC metadata, marked sensitive.
    pub fn bearer(&self) -> tonic::metadata::MetadataValue<tonic::metadata::Ascii> {
        let mut value: tonic::metadata::MetadataValue<_> = format!("Bearer {}", self.0)
            .parse()
            .expect("a validated token is a valid header value");
        value.set_sensitive(true);
        value
    }

    /// Whether `headers` carry `Authorization: Bearer <this token>`.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        bearer_matches(headers, &self.0)
    }
}

/// Whether `headers` carry `Authorization: Bearer <token>`. The comparison
/// takes the same time wherever the first difference is, whatever the
/// length sent.
pub fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(sent) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (Sha256::digest(sent.as_bytes()), Sha256::digest(token));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

impl From<String> for ServiceToken {
    fn from(s: String) -> Self {
        ServiceToken(s)
    }
}

impl From<&str> for ServiceToken {
    fn from(s: &str) -> Self {
        ServiceToken(s.to_string())
    }
}

impl std::fmt::Debug for ServiceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceToken([redacted])")
    }
}

/// The configured token, when it can be used; else a message naming
/// [`ENV_VAR`], for the settings' validation and the start.
pub fn check(token: &Option<ServiceToken>) -> Result<&ServiceToken, String> {
    let Some(token) = token else {
        return Err(format!(
            "{ENV_VAR} is required: the secret shared by the Kandev services \
             (at least {MIN_TOKEN_BYTES} bytes; generate one with `openssl rand -hex 32`)"
        ));
    };
    let value = token.expose_secret();
    if value.len() < MIN_TOKEN_BYTES {
        return Err(format!(
            "{ENV_VAR} must be at least {MIN_TOKEN_BYTES} bytes (it has {})",
            value.len()
        ));
    }
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{ENV_VAR} must be printable ASCII without spaces (it is sent in a header)"
        ));
    }
    Ok(token)
}

/// Requests answered without the token: liveness, readiness, scrapes and
/// the standard gRPC health service, which probes use.
pub fn is_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
        || path.starts_with("/grpc.health.v1.Health/")
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"))
}

const REFUSED: &str = "missing or invalid service credential";

/// The refusal: a gRPC `UNAUTHENTICATED` status to a gRPC call, a 401 with
/// the common error body to anything else (REST, a WebSocket upgrade).
fn refuse(grpc: bool) -> Response {
    if grpc {
        let mut response = StatusCode::OK.into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert(
            "grpc-status",
            HeaderValue::from(tonic::Code::Unauthenticated as i32),
        );
        headers.insert("grpc-message", HeaderValue::from_static(REFUSED_ENCODED));
        return response;
    }
    let code = ErrorCode::Unauthorized;
    let body = serde_json::json!({
        "error": code.as_str(),
        "message": REFUSED,
        "details": null,
        "http_status": code.http_status().as_u16(),
    });
    (code.http_status(), Json(body)).into_response()
}

/// [`REFUSED`] percent-encoded, as `grpc-message` is.
const REFUSED_ENCODED: &str = "missing%20or%20invalid%20service%20credential";

/// Middleware: lets a request through when it is [`is_open`] or carries the
/// token, refuses it otherwise.
pub async fn authenticate(
    State(token): State<Arc<ServiceToken>>,
    request: Request,
    next: Next,
) -> Response {
    if is_open(request.uri().path()) || token.admits(request.headers()) {
        return next.run(request).await;
    }
    tracing::warn!(
        path = %request.uri().path(),
        "refused a request without the service credential"
    );
    refuse(is_grpc(request.headers()))
}

/// `router` answering only callers that send `token` (see [`authenticate`]).
pub fn require(router: Router, token: ServiceToken) -> Router {
    router.layer(middleware::from_fn_with_state(
        Arc::new(token),
        authenticate,
    ))
}

#[cfg(test)]
mod tests {
    use axum::{
        body::Body,
        routing::{get, post},
    };
    use http::Request;
    use tower::ServiceExt as _;

    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    /// A gRPC method, the health service, probes and a REST route.
    fn app() -> Router {
        let (routes, _) = crate::serve::grpc_base(None).unwrap();
        let router = routes
            .routes()
            .into_axum_router()
            .route("/kandev.v1.TaskService/GetTask", post(|| async { "task" }))
            .route("/api/v1/things", get(|| async { "things" }))
            .merge(crate::serve::health_routes(vec![]));
        let router = require(router, TOKEN.into());
        crate::metrics::instrument("test", router, crate::metrics::Scrape::Open)
    }

    async fn call(path: &str, grpc: bool, auth: Option<&str>) -> Response {
        let mut request = Request::builder().uri(path);
        if grpc {
            request = request
                .method("POST")
                .header("content-type", "application/grpc")
                .header("te", "trailers");
        }
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        app()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
        response.headers().get(name).map(|v| v.to_str().unwrap())
    }

    async fn json(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_grpc_call_without_the_token_is_unauthenticated() {
        let right = format!("Bearer {TOKEN}");
        let wrong = format!("Bearer {}", "x".repeat(32));
        for auth in [None, Some(wrong.as_str()), Some(TOKEN), Some("Bearer ")] {
            let response = call("/kandev.v1.TaskService/GetTask", true, auth).await;
            assert_eq!(response.status(), StatusCode::OK, "{auth:?}");
            assert_eq!(header(&response, "content-type"), Some("application/grpc"));
            assert_eq!(header(&response, "grpc-status"), Some("16"), "{auth:?}");
            let message = header(&response, "grpc-message").unwrap();
            assert!(message.contains("service%20credential"), "{message}");
        }
        let response = call("/kandev.v1.TaskService/GetTask", true, Some(&right)).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "grpc-status"), None);
    }

    #[tokio::test]
    async fn a_rest_call_without_the_token_is_401_with_the_error_body() {
        let wrong = format!("Bearer {TOKEN}x");
        for auth in [None, Some(wrong.as_str())] {
            let response = call("/api/v1/things", false, auth).await;
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
            let body = json(response).await;
            assert_eq!(body["error"], "unauthorized");
            assert_eq!(body["http_status"], 401);
            assert_eq!(body["message"], REFUSED);
            assert!(body["details"].is_null());
        }
        let response = call("/api/v1/things", false, Some(&format!("Bearer {TOKEN}"))).await;
        assert_eq!(response.status(), StatusCode::OK);
        // An unknown path is refused too, not told apart from a known one.
        let response = call("/nothing/here", false, None).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn probes_health_and_metrics_stay_open() {
        for path in ["/healthz", "/readyz", "/metrics"] {
            let response = call(path, false, None).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
        }
        let response = call("/grpc.health.v1.Health/Check", true, None).await;
        assert_eq!(response.status(), StatusCode::OK);
        // The health service answered (an empty body is a decode error, not
        // a refusal).
        assert_ne!(header(&response, "grpc-status"), Some("16"));
    }

    #[test]
    fn the_token_is_required_long_and_never_printed() {
        let err = check(&None).unwrap_err();
        assert!(err.contains(ENV_VAR) && err.contains("required"), "{err}");
        let err = check(&Some("short".into())).unwrap_err();
        assert!(err.contains(ENV_VAR) && err.contains("32 bytes"), "{err}");
        let err = check(&Some(format!("{TOKEN} x").into())).unwrap_err();
        assert!(err.contains(ENV_VAR), "{err}");
        let token = ServiceToken::from(TOKEN);
        assert!(check(&Some(token.clone())).is_ok());
        assert!(!format!("{token:?}").contains("0123"));
        let bearer = token.bearer();
        assert!(bearer.is_sensitive());
        assert!(!format!("{bearer:?}").contains("0123"), "{bearer:?}");
    }
}
