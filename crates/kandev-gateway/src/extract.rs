//! Extractors whose rejections are [`ApiError`]s in the common error shape,
//! not axum's plain-text bodies.

use axum::{
    body::{Body, Bytes},
    extract::{FromRequest, FromRequestParts, Request, rejection::JsonRejection},
    http::request::Parts,
};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body, deserialized into one of the API's request types. No string
/// in it may hold a NUL character: Postgres cannot store one, and no title,
/// branch or name needs one.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let (parts, bytes) = read_body(req, state).await?;
        let json = Request::from_parts(parts, Body::from(bytes.clone()));
        let axum::Json(value) = axum::Json::<T>::from_request(json, state).await?;
        if has_nul(&bytes) {
            return Err(ApiError::validation(
                "text in the request must not contain NUL (\\u0000) characters",
            ));
        }
        Ok(ApiJson(value))
    }
}

/// A JSON body that may be left out: an empty body is `T::default()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let (parts, bytes) = read_body(req, state).await?;
        if bytes.trim_ascii().is_empty() {
            return Ok(OptionalApiJson(T::default()));
        }
        let req = Request::from_parts(parts, Body::from(bytes));
        let ApiJson(value) = ApiJson::from_request(req, state).await?;
        Ok(OptionalApiJson(value))
    }
}

/// The request's head and its whole body (within the body limit).
async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<(Parts, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = Bytes::from_request(Request::from_parts(parts.clone(), body), state)
        .await
        .map_err(JsonRejection::from)?;
    Ok((parts, bytes))
}

/// Whether a valid JSON document holds `\u0000` in a string (raw control
/// characters are not valid JSON, so the escape is the only way in). The
/// escape counts when an odd number of backslashes precede the `u`.
pub fn has_nul(json: &[u8]) -> bool {
    memchr::memmem::find_iter(json, b"u0000").any(|at| {
        let backslashes = json[..at].iter().rev().take_while(|&&b| b == b'\\').count();
        backslashes % 2 == 1
    })
}

/// Whether a URL part holds a NUL once percent-decoded: `%00` is the only
/// way one gets into a URI.
fn has_encoded_nul(part: &str) -> bool {
    part.contains("%00")
}

/// Refuses a query holding a NUL.
fn refuse_nul(query: &str) -> Result<(), ApiError> {
    if has_encoded_nul(query) {
        return Err(ApiError::validation(
            "the query must not contain NUL (%00) characters",
        ));
    }
    Ok(())
}

/// Query parameters. No value may hold a NUL character, as in [`ApiJson`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        refuse_nul(parts.uri.query().unwrap_or_default())?;
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(value))
    }
}

/// Path parameters. (A path id is checked where it is parsed: a UUID, or a
/// name of a checked alphabet, so a `%00` there is refused as a bad id.)
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(value) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(ApiPath(value))
    }
}

#[cfg(test)]
mod tests {
    use super::{has_encoded_nul, has_nul};

    #[test]
    fn nul_escapes_are_found_and_escaped_backslashes_are_not() {
        assert!(has_nul(br#"{"title":"a\u0000b"}"#));
        assert!(has_nul(br#"{"a\u0000":1}"#));
        assert!(has_nul(br#"{"t":"\\\u0000"}"#));
        assert!(!has_nul(br#"{"t":"\\u0000"}"#));
        assert!(!has_nul(br#"{"t":"u0000 \u0001"}"#));
    }

    #[test]
    fn an_encoded_nul_in_a_url_part_is_found() {
        assert!(has_encoded_nul("agent_type=%21%2Br9u%00"));
        assert!(!has_encoded_nul("agent_type=%2500"));
        assert!(!has_encoded_nul("limit=100"));
    }
}
