//! W3C trace context across processes, so one task can be followed from
//! the REST call to its container: taken from a request's `traceparent`
//! header (HTTP or gRPC), sent on in gRPC metadata ([`Propagate`]) and NATS
//! headers ([`current`]), and kept with work that waits (the outbox, the
//! queue) as a `traceparent` string resumed with [`continue_from`].
//!
//! Every request runs in a `request` span ([`requests`]) whose fields
//! (`request_id`, `trace_id`) are on each log line written while it is
//! served, and which ends with one access line.

use std::time::Instant;

use axum::{extract::Request, middleware::Next, response::Response};
use opentelemetry::{
    Context,
    propagation::{Extractor, TextMapPropagator},
    trace::TraceContextExt,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::{Instrument, Span, field};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::service_auth::ServiceToken;

/// The W3C header (and NATS header, and gRPC metadata key) carrying the
/// trace context.
pub const TRACEPARENT: &str = "traceparent";

/// The request id header the gateway sets (or keeps) on every request.
pub const REQUEST_ID: &str = "x-request-id";

/// The trace context of `span` as a `traceparent` value
/// (`00-<trace id>-<span id>-<flags>`), when tracing is set up.
pub fn traceparent_of(span: &Span) -> Option<String> {
    let cx = span.context();
    let span_ref = cx.span();
    let sc = span_ref.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The current span's trace context as a `traceparent` value.
pub fn current() -> Option<String> {
    traceparent_of(&Span::current())
}

/// The trace id of a `traceparent` value, when it is a valid one.
pub fn trace_id(traceparent: &str) -> Option<String> {
    let cx = parse(traceparent);
    let span_ref = cx.span();
    let sc = span_ref.span_context();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// Makes `span` (not entered yet) a child of the remote context in
/// `traceparent` when it holds a valid one, and records the span's trace id
/// in its `trace_id` field (declared `field::Empty`), so log lines written
/// in it name the trace.
pub fn continue_from(span: &Span, traceparent: Option<&str>) {
    if let Some(traceparent) = traceparent {
        let cx = parse(traceparent);
        if cx.span().span_context().is_valid() {
            // Fails only without the tracing layer (tests that set up no
            // subscriber): the span is then a root, as it would be anyway.
            let _ = span.set_parent(cx);
        }
    }
    let cx = span.context();
    let span_ref = cx.span();
    let sc = span_ref.span_context();
    if sc.is_valid() {
        span.record("trace_id", field::display(sc.trace_id()));
    }
}

fn parse(traceparent: &str) -> Context {
    TraceContextPropagator::new().extract(&One(traceparent))
}

/// An extractor holding one `traceparent` value.
struct One<'a>(&'a str);

impl Extractor for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT).then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}

/// The span of one served request (HTTP or gRPC): a child of the caller's
/// trace when it sent `traceparent`. `user` is recorded by the gateway's
/// authentication.
pub fn request_span(request: &Request) -> Span {
    let headers = request.headers();
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        // The path only: query strings stay out of the logs.
        path = %request.uri().path(),
        request_id = field::Empty,
        trace_id = field::Empty,
        user = field::Empty,
    );
    if let Some(id) = headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()) {
        span.record("request_id", id);
    }
    continue_from(
        &span,
        headers.get(TRACEPARENT).and_then(|v| v.to_str().ok()),
    );
    span
}

/// Probes and scrapes: logged at debug level, not in the access log.
fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics") || path.starts_with("/grpc.health.")
}

/// Middleware: serves the request in its [`request_span`] and writes one
/// access line when the response starts (probes at debug level).
pub async fn requests(request: Request, next: Next) -> Response {
    let probe = is_probe(request.uri().path());
    let span = request_span(&request);
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    // A gRPC error answered at once carries its code in the headers.
    let grpc_status = response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok());
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let latency_ms = format_args!("{latency_ms:.3}");
    span.in_scope(|| {
        if probe {
            tracing::debug!(status, %latency_ms, "request served");
        } else {
            tracing::info!(status, grpc_status, %latency_ms, "request served");
        }
    });
    response
}

/// `router` with every request served by [`requests`].
pub fn instrument(router: axum::Router) -> axum::Router {
    router.layer(axum::middleware::from_fn(requests))
}

/// A gRPC client interceptor that sends the current span's trace context
/// in the call's metadata and, when it has one, the service token
/// ([`crate::service_auth`]) as `authorization: Bearer <token>`.
#[derive(Clone, Default)]
pub struct Propagate {
    authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl Propagate {
    /// Trace context and `token` on every call.
    pub fn with_token(token: &ServiceToken) -> Self {
        Propagate {
            authorization: Some(token.bearer()),
        }
    }
}

impl std::fmt::Debug for Propagate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Propagate")
            .field("token", &self.authorization.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

impl tonic::service::Interceptor for Propagate {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = current().and_then(|tp| tp.parse().ok()) {
            request.metadata_mut().insert(TRACEPARENT, value);
        }
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A gRPC channel whose calls carry the caller's trace context and the
/// service token.
pub type TracedChannel =
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Propagate>;

/// `channel` with [`Propagate`] on every call: the trace context and
/// `token`, which the internal services require.
pub fn traced(channel: tonic::transport::Channel, token: &ServiceToken) -> TracedChannel {
    tonic::service::interceptor::InterceptedService::new(channel, Propagate::with_token(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::{Registry, layer::SubscriberExt};

    const REMOTE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn with_tracing<T>(f: impl FnOnce() -> T) -> T {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = Registry::default().with(tracing_opentelemetry::layer().with_tracer(
            opentelemetry::trace::TracerProvider::tracer(&provider, "test"),
        ));
        tracing::subscriber::with_default(subscriber, f)
    }

    #[test]
    fn a_span_continues_the_remote_trace_and_passes_it_on() {
        with_tracing(|| {
            let span = tracing::info_span!("work", trace_id = field::Empty);
            continue_from(&span, Some(REMOTE));
            let sent = span.in_scope(current).expect("a trace context");
            assert!(
                sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{sent}"
            );
            // A new span id: this span is the remote one's child.
            assert!(!sent.contains("00f067aa0ba902b7"), "{sent}");
            assert_eq!(
                trace_id(&sent).as_deref(),
                Some("4bf92f3577b34da6a3ce929d0e0e4736")
            );
        });
    }

    #[test]
    fn without_a_valid_parent_a_span_starts_its_own_trace() {
        with_tracing(|| {
            for bad in [
                None,
                Some("garbage"),
                Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            ] {
                let span = tracing::info_span!("work", trace_id = field::Empty);
                continue_from(&span, bad);
                let sent = traceparent_of(&span).expect("a new trace");
                assert!(!sent.contains("4bf92f35"), "{sent}");
                assert!(trace_id(&sent).is_some());
            }
        });
    }

    #[test]
    fn grpc_calls_carry_the_current_trace() {
        use tonic::service::Interceptor as _;
        with_tracing(|| {
            let span = tracing::info_span!("call", trace_id = field::Empty);
            continue_from(&span, Some(REMOTE));
            let request = span
                .in_scope(|| Propagate::default().call(tonic::Request::new(())))
                .unwrap();
            let sent = request
                .metadata()
                .get(TRACEPARENT)
                .unwrap()
                .to_str()
                .unwrap();
            assert_eq!(
                trace_id(sent).as_deref(),
                Some("4bf92f3577b34da6a3ce929d0e0e4736")
            );
        });
        // No tracing set up: nothing is sent.
        let request = Propagate::default().call(tonic::Request::new(())).unwrap();
        assert!(request.metadata().get(TRACEPARENT).is_none());
        assert!(request.metadata().get("authorization").is_none());
    }

    #[test]
    fn grpc_calls_carry_the_service_token_and_the_trace() {
        use tonic::service::Interceptor as _;
        let token = ServiceToken::from("0123456789abcdef0123456789abcdef");
        let mut propagate = Propagate::with_token(&token);
        assert!(!format!("{propagate:?}").contains("0123"));
        with_tracing(|| {
            let span = tracing::info_span!("call", trace_id = field::Empty);
            continue_from(&span, Some(REMOTE));
            let request = span
                .in_scope(|| propagate.call(tonic::Request::new(())))
                .unwrap();
            let sent = request.metadata().get(TRACEPARENT).unwrap();
            assert!(sent.to_str().unwrap().contains("4bf92f3577b34da6"));
            assert_eq!(
                request.metadata().get("authorization").unwrap(),
                "Bearer 0123456789abcdef0123456789abcdef"
            );
        });
    }
}
