//! The one error-code table.
//!
//! Every service error names an [`ErrorCode`]; the code decides the gRPC
//! status a service answers with, and the HTTP status and `error` string the
//! gateway answers with after mapping the gRPC status back through
//! [`ErrorCode::from_grpc`]. Internal errors never carry their details across
//! a service boundary.

use http::StatusCode;
use tonic::Code;

/// A stable, documented error category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Malformed request: unparsable body or id.
    BadRequest,
    /// Well-formed but invalid values.
    Validation,
    /// Missing or invalid credentials.
    Unauthorized,
    /// Authenticated but not allowed.
    Forbidden,
    /// The resource does not exist (or is not visible to the caller).
    NotFound,
    /// A concurrent change won (optimistic concurrency) or the resource exists.
    Conflict,
    /// The resource is in a state that does not allow the operation.
    FailedPrecondition,
    /// Too many requests.
    RateLimited,
    /// A dependency is down.
    Unavailable,
    /// A dependency did not answer in time.
    Timeout,
    /// Anything else; details stay in the logs.
    Internal,
}

/// Every row of the table: code, its `error` string, gRPC code, HTTP status.
pub const TABLE: &[(ErrorCode, &str, Code, StatusCode)] = &[
    (
        ErrorCode::BadRequest,
        "bad_request",
        Code::InvalidArgument,
        StatusCode::BAD_REQUEST,
    ),
    (
        ErrorCode::Validation,
        "validation_error",
        Code::InvalidArgument,
        StatusCode::BAD_REQUEST,
    ),
    (
        ErrorCode::Unauthorized,
        "unauthorized",
        Code::Unauthenticated,
        StatusCode::UNAUTHORIZED,
    ),
    (
        ErrorCode::Forbidden,
        "forbidden",
        Code::PermissionDenied,
        StatusCode::FORBIDDEN,
    ),
    (
        ErrorCode::NotFound,
        "not_found",
        Code::NotFound,
        StatusCode::NOT_FOUND,
    ),
    (
        ErrorCode::Conflict,
        "conflict",
        Code::Aborted,
        StatusCode::CONFLICT,
    ),
    (
        ErrorCode::FailedPrecondition,
        "conflict",
        Code::FailedPrecondition,
        StatusCode::CONFLICT,
    ),
    (
        ErrorCode::RateLimited,
        "rate_limited",
        Code::ResourceExhausted,
        StatusCode::TOO_MANY_REQUESTS,
    ),
    (
        ErrorCode::Unavailable,
        "service_unavailable",
        Code::Unavailable,
        StatusCode::SERVICE_UNAVAILABLE,
    ),
    (
        ErrorCode::Timeout,
        "service_unavailable",
        Code::DeadlineExceeded,
        StatusCode::GATEWAY_TIMEOUT,
    ),
    (
        ErrorCode::Internal,
        "internal_error",
        Code::Internal,
        StatusCode::INTERNAL_SERVER_ERROR,
    ),
];

impl ErrorCode {
    fn row(self) -> &'static (ErrorCode, &'static str, Code, StatusCode) {
        TABLE
            .iter()
            .find(|row| row.0 == self)
            .expect("every error code has a row in TABLE")
    }

    /// The `error` string of the API's error body.
    pub fn as_str(self) -> &'static str {
        self.row().1
    }

    /// The gRPC status code a service answers with.
    pub fn grpc_code(self) -> Code {
        self.row().2
    }

    /// The HTTP status the gateway answers with.
    pub fn http_status(self) -> StatusCode {
        self.row().3
    }

    /// Maps a downstream gRPC status code back to an error code.
    pub fn from_grpc(code: Code) -> ErrorCode {
        match code {
            Code::InvalidArgument | Code::OutOfRange => ErrorCode::Validation,
            Code::Unauthenticated => ErrorCode::Unauthorized,
            Code::PermissionDenied => ErrorCode::Forbidden,
            Code::NotFound => ErrorCode::NotFound,
            Code::Aborted | Code::AlreadyExists => ErrorCode::Conflict,
            Code::FailedPrecondition => ErrorCode::FailedPrecondition,
            Code::ResourceExhausted => ErrorCode::RateLimited,
            Code::Unavailable => ErrorCode::Unavailable,
            Code::DeadlineExceeded | Code::Cancelled => ErrorCode::Timeout,
            Code::Ok | Code::Unknown | Code::Internal | Code::Unimplemented | Code::DataLoss => {
                ErrorCode::Internal
            }
        }
    }
}

/// An error that knows its place in the table.
pub trait ServiceError: std::error::Error {
    fn error_code(&self) -> ErrorCode;

    /// The gRPC status for this error. Internal errors are logged here, where
    /// they are handled, and leave the service as an opaque message.
    fn to_status(&self) -> tonic::Status {
        let code = self.error_code();
        if code == ErrorCode::Internal {
            tracing::error!(error = %self, "internal error");
            tonic::Status::new(code.grpc_code(), "internal error")
        } else {
            tonic::Status::new(code.grpc_code(), self.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ErrorCode; 11] = [
        ErrorCode::BadRequest,
        ErrorCode::Validation,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::FailedPrecondition,
        ErrorCode::RateLimited,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Internal,
    ];

    #[test]
    fn every_code_round_trips_through_grpc() {
        for code in ALL {
            let back = ErrorCode::from_grpc(code.grpc_code());
            // Both kinds of invalid argument come back as a validation error.
            if code == ErrorCode::BadRequest {
                assert_eq!(back, ErrorCode::Validation);
            } else {
                assert_eq!(back, code, "{code:?}");
            }
        }
    }

    #[test]
    fn http_statuses_and_names() {
        assert_eq!(ErrorCode::NotFound.http_status(), StatusCode::NOT_FOUND);
        // The seed documents both invalid-input codes as 400.
        assert_eq!(ErrorCode::BadRequest.http_status(), StatusCode::BAD_REQUEST);
        assert_eq!(ErrorCode::Validation.http_status(), StatusCode::BAD_REQUEST);
        assert_eq!(ErrorCode::FailedPrecondition.as_str(), "conflict");
        assert_eq!(ErrorCode::Internal.as_str(), "internal_error");
        assert_eq!(
            ErrorCode::RateLimited.http_status(),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(TABLE.len(), ALL.len());
    }

    #[derive(Debug, thiserror::Error)]
    #[error("database password is hunter2")]
    struct Leaky;

    impl ServiceError for Leaky {
        fn error_code(&self) -> ErrorCode {
            ErrorCode::Internal
        }
    }

    #[test]
    fn internal_status_hides_details() {
        let status = Leaky.to_status();
        assert_eq!(status.code(), Code::Internal);
        assert!(!status.message().contains("hunter2"));
    }
}
