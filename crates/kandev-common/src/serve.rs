//! Serving one service on one listener: gRPC (with health, and reflection
//! when enabled)
//! and plain HTTP (`/healthz`, `/readyz`, and whatever the service adds).

use std::{future::Future, pin::Pin, sync::Arc};

use axum::{Json, Router, http::StatusCode, response::IntoResponse, routing::get};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The read buffer of a server's WebSocket. Tungstenite zeroes its whole
/// read buffer (128 KiB by default) before every read attempt, the ones
/// that find nothing included, and a stream session polls its socket each
/// time it wakes to send: with 500 clients on a task at 200 frames/s that
/// zeroing was a third of the gateway's CPU. Clients send small commands; a
/// larger message is read in several reads (`max_message_size` bounds it).
pub const WS_READ_BUFFER: usize = 4 * 1024;

/// A readiness check: `Ok` when a dependency answers, else why not.
pub type ReadinessCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// A readiness check from a cheap synchronous probe.
pub fn sync_check(
    probe: impl Fn() -> Result<(), String> + Send + Sync + 'static,
) -> ReadinessCheck {
    Arc::new(move || {
        let result = probe();
        Box::pin(async move { result })
    })
}

/// `/healthz` (the process is alive) and `/readyz` (every named check passes).
pub fn health_routes(checks: Vec<(&'static str, ReadinessCheck)>) -> Router {
    let checks = Arc::new(checks);
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route(
            "/readyz",
            get(move || {
                let checks = checks.clone();
                async move {
                    let mut ready = true;
                    let mut results = serde_json::Map::new();
                    for (name, check) in checks.iter() {
                        let value = match check().await {
                            Ok(()) => "ok".to_string(),
                            Err(why) => {
                                ready = false;
                                why
                            }
                        };
                        results.insert((*name).to_string(), value.into());
                    }
                    let status = if ready {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    let body = serde_json::json!({
                        "status": if ready { "ready" } else { "unavailable" },
                        "checks": results,
                    });
                    (status, Json(body)).into_response()
                }
            }),
        )
}

/// Serves `router` (gRPC routes merged with HTTP routes) until `shutdown`
/// fires, then lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(no_delay(listener), router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// `listener` with `TCP_NODELAY` on every accepted connection: a small
/// frame (a stream message, a gRPC answer) leaves at once instead of
/// waiting for the peer's delayed ACK (up to 40 ms).
pub fn no_delay(
    listener: TcpListener,
) -> axum::serve::TapIo<TcpListener, fn(&mut tokio::net::TcpStream)> {
    use axum::serve::ListenerExt;
    fn set(stream: &mut tokio::net::TcpStream) {
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%err, "cannot set TCP_NODELAY");
        }
    }
    listener.tap_io(set as fn(&mut tokio::net::TcpStream))
}

/// The gRPC routes every service starts from: the standard health service
/// and, when `reflection` names the service's descriptor set, reflection
/// over it (off unless configured). The service adds its own server to the
/// builder and marks itself serving on the reporter.
pub fn grpc_base(
    reflection: Option<&'static [u8]>,
) -> Result<
    (
        tonic::service::RoutesBuilder,
        tonic_health::server::HealthReporter,
    ),
    String,
> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(health);
    if let Some(descriptor_set) = reflection {
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(descriptor_set)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| e.to_string())?;
        routes.add_service(reflection);
    }
    Ok((routes, reporter))
}

pub use tonic_health::{ServingStatus, server::HealthReporter};

#[cfg(test)]
mod tests {
    use super::grpc_base;
    use axum::body::Body;
    use http::Request;
    use tower::ServiceExt as _;

    /// The gRPC status a call to the reflection service gets at once.
    async fn reflection_status(reflection: Option<&'static [u8]>) -> Option<String> {
        let (routes, _) = grpc_base(reflection).unwrap();
        let router = routes.routes().into_axum_router();
        let request = Request::post("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Body::empty())
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        response
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().to_string())
    }

    #[tokio::test]
    async fn reflection_is_served_only_when_enabled() {
        // 12: UNIMPLEMENTED, as for any service the port does not have.
        assert_eq!(reflection_status(None).await.as_deref(), Some("12"));
        assert_ne!(
            reflection_status(Some(tonic_health::pb::FILE_DESCRIPTOR_SET))
                .await
                .as_deref(),
            Some("12")
        );
    }
}
