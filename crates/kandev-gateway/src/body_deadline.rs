//! A deadline for a request's whole body (`body_read_timeout_secs`): a
//! client that sends its body slower than that (one byte every few seconds)
//! is answered 408 and its connection closed, instead of holding a
//! connection and a task for as long as it likes. The headers have their
//! own deadline (see [`crate::server`]).
//!
//! A request without a body (a WebSocket upgrade among them) is left alone,
//! and so is a body that has arrived in time however slowly it is read.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    body::Body,
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http::{HeaderValue, Method, StatusCode, Version, header};
use hyper::body::{Body as HttpBody, Bytes, Frame, SizeHint};
use tokio::time::Sleep;

use crate::error::ApiError;

/// Why a body stopped: its deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received in time")]
pub struct BodyTimedOut;

/// The middleware: `within` is the time the whole body may take, counted
/// from when the handlers start (the headers are in).
pub async fn enforce(State(within): State<Duration>, request: Request, next: Next) -> Response {
    let upgrade =
        request.method() == Method::CONNECT || request.headers().contains_key(header::UPGRADE);
    if upgrade || request.body().is_end_stream() {
        return next.run(request).await;
    }
    let version = request.version();
    let expired = Arc::new(AtomicBool::new(false));
    let flag = expired.clone();
    let request = request.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(within)),
            expired: flag,
        })
    });
    let response = next.run(request).await;
    if !expired.load(Ordering::Acquire) {
        return response;
    }
    // Whatever the handler made of the failed read, the client hears 408.
    tracing::info!(
        timeout_secs = within.as_secs(),
        "request body not received in time; closing the connection"
    );
    let mut err = ApiError::bad_request(format!(
        "the request body was not received within {} s",
        within.as_secs()
    ));
    err.status = Some(StatusCode::REQUEST_TIMEOUT);
    let mut response = err.into_response();
    // HTTP/1: the rest of the body may still be on its way; the
    // connection cannot be reused. (HTTP/2 ends only the stream.)
    if version <= Version::HTTP_11 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// `inner`, failing with [`BodyTimedOut`] once `deadline` passes while a
/// frame is still awaited.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
    expired: Arc<AtomicBool>,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        // What has arrived is delivered, even past the deadline.
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.deadline.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.expired.store(true, Ordering::Release);
        Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::{Router, middleware, routing::post};
    use futures::StreamExt as _;
    use tower::ServiceExt as _;

    fn app(within: Duration) -> Router {
        Router::new()
            .route(
                "/",
                post(|body: Bytes| async move { format!("{} bytes", body.len()) }),
            )
            .layer(middleware::from_fn_with_state(within, enforce))
    }

    /// A body of two chunks, the second sent only when `second` fires.
    fn body(second: tokio::sync::oneshot::Receiver<()>) -> Body {
        let first = futures::stream::once(async { Ok::<_, std::io::Error>(Bytes::from("a")) });
        let rest = futures::stream::once(async move {
            let _ = second.await;
            Ok(Bytes::from("b"))
        });
        Body::from_stream(first.chain(rest))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_past_its_deadline_is_a_408_that_closes_the_connection() {
        let (_never, second) = tokio::sync::oneshot::channel();
        let request = Request::post("/").body(body(second)).unwrap();
        let response = app(Duration::from_secs(30)).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(response.headers()[header::CONNECTION], "close");
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["error"], "bad_request");
        assert_eq!(body["http_status"], 408);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_in_time_is_served() {
        let (send, second) = tokio::sync::oneshot::channel();
        let request = Request::post("/").body(body(second)).unwrap();
        // The last byte a second before the deadline (paused time).
        let late = async {
            tokio::time::sleep(Duration::from_secs(29)).await;
            send.send(()).unwrap();
        };
        let (response, ()) = tokio::join!(app(Duration::from_secs(30)).oneshot(request), late);
        let response = response.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get(header::CONNECTION).is_none());
    }
}
