//! The one HTTP error type: `{ "error", "message", "details", "http_status" }`.
//!
//! Codes and statuses come from [`kandev_common::ErrorCode`]; downstream
//! gRPC statuses are mapped through [`ErrorCode::from_grpc`]. An internal
//! error is logged here, where it is handled, and leaves as an opaque 500.

use axum::{
    Json,
    extract::rejection::{JsonRejection, PathRejection, QueryRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use kandev_common::ErrorCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: bad_request, validation_error, unauthorized, forbidden,
    /// not_found, conflict, rate_limited, service_unavailable, internal_error.
    #[schema(example = "not_found")]
    pub error: String,
    /// A human-readable message.
    pub message: String,
    /// Additional context, when there is any: for a request that could not
    /// be parsed, `{"reason": "..."}`.
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
    pub http_status: u16,
}

/// An error answered to the client.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<Value>,
    /// Overrides the table's HTTP status (413 for a body over the limit, 408
    /// for one not received in time).
    pub status: Option<StatusCode>,
    /// Sent as `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: None,
            status: None,
            retry_after: None,
        }
    }

    /// Adds `details: {"reason": ...}`: why the request was refused, in the
    /// parser's words (always an object, as the OpenAPI schema says).
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.details = Some(serde_json::json!({ "reason": reason.into() }));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Validation, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn rate_limited(retry_after_secs: u64) -> Self {
        let mut err = Self::new(ErrorCode::RateLimited, "too many requests, slow down");
        err.retry_after = Some(retry_after_secs.max(1));
        err
    }

    /// An unexpected failure: logged in full here, opaque to the client.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(ErrorCode::Internal, "internal error")
    }

    /// Maps a downstream gRPC status of `service`. Internal errors stay
    /// opaque; an unreachable service says which one is down.
    pub fn from_status(service: &'static str, status: tonic::Status) -> Self {
        let code = ErrorCode::from_grpc(status.code());
        match code {
            ErrorCode::Internal => {
                tracing::error!(service, grpc_code = ?status.code(), message = status.message(), "downstream internal error");
                Self::new(code, "internal error")
            }
            ErrorCode::Unavailable => {
                tracing::warn!(
                    service,
                    message = status.message(),
                    "downstream unavailable"
                );
                Self::new(
                    code,
                    format!("the {service} is unavailable, try again later"),
                )
            }
            ErrorCode::Timeout => {
                tracing::warn!(service, message = status.message(), "downstream timed out");
                Self::new(code, format!("the {service} did not answer in time"))
            }
            _ => Self::new(code, status.message().to_string()),
        }
    }

    pub fn http_status(&self) -> StatusCode {
        self.status.unwrap_or_else(|| self.code.http_status())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.http_status();
        let body = ErrorBody {
            error: self.code.as_str().to_string(),
            message: self.message,
            details: self.details,
            http_status: status.as_u16(),
        };
        let mut response = (status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
        }
        response
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let text = rejection.body_text();
        match rejection {
            JsonRejection::JsonDataError(_) => {
                ApiError::validation("the request body has invalid or missing fields")
                    .with_reason(text)
            }
            JsonRejection::JsonSyntaxError(_) => {
                ApiError::bad_request("the request body is not valid JSON").with_reason(text)
            }
            JsonRejection::MissingJsonContentType(_) => {
                ApiError::bad_request("expected a request with Content-Type: application/json")
            }
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                let mut err = ApiError::bad_request("the request body is too large");
                err.status = Some(StatusCode::PAYLOAD_TOO_LARGE);
                err
            }
            _ => ApiError::bad_request("the request body could not be read").with_reason(text),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_request("invalid query parameters").with_reason(rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::bad_request("invalid path parameters").with_reason(rejection.body_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_status_does_not_leak() {
        let err = ApiError::from_status(
            "task service",
            tonic::Status::internal("password authentication failed for user postgres"),
        );
        assert_eq!(err.http_status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(err.message, "internal error");
    }

    #[test]
    fn grpc_codes_map_through_the_table() {
        use StatusCode as H;
        use tonic::Code as G;
        let cases = [
            (G::NotFound, H::NOT_FOUND, "not_found"),
            (G::Aborted, H::CONFLICT, "conflict"),
            (G::FailedPrecondition, H::CONFLICT, "conflict"),
            (G::InvalidArgument, H::BAD_REQUEST, "validation_error"),
            (
                G::Unavailable,
                H::SERVICE_UNAVAILABLE,
                "service_unavailable",
            ),
            (G::PermissionDenied, H::FORBIDDEN, "forbidden"),
        ];
        for (grpc, http, name) in cases {
            let err = ApiError::from_status("x", tonic::Status::new(grpc, "m"));
            assert_eq!(err.http_status(), http, "{grpc:?}");
            assert_eq!(err.code.as_str(), name);
        }
    }
}
