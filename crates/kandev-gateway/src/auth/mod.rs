//! Authentication: argon2 password hashes, HS256 JWTs, and the middleware
//! that turns a bearer token into a [`CurrentUser`].
//!
//! Tokens come from `Authorization: Bearer <token>`, or, on a WebSocket
//! upgrade (browsers cannot set headers there), from the
//! `Sec-WebSocket-Protocol` list `kandev.bearer, <token>`. Tokens are never
//! logged.

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier, password_hash::SaltString};
use axum::{
    extract::{Request, State},
    middleware::Next,
    response::Response,
};
use http::{HeaderMap, header};

pub mod token;

pub use token::{Claims, CurrentUser, JwtError, JwtKeys};

use crate::{error::ApiError, state::AppState};

/// The WebSocket subprotocol that carries a token as the next protocol.
pub const WS_BEARER_PROTOCOL: &str = "kandev.bearer";

/// An argon2id hash in PHC string form.
pub fn hash_password(password: &str) -> Result<String, argon2::password_hash::Error> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|_| argon2::password_hash::Error::Crypto)?;
    let salt = SaltString::encode_b64(&salt)?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

/// Whether `password` matches `hash`; a malformed hash never matches.
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// The bearer token of a request: the Authorization header, or on a
/// WebSocket upgrade the `kandev.bearer, <token>` subprotocol pair.
pub fn bearer_token(headers: &HeaderMap) -> Option<String> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim().to_string())
            .filter(|t| !t.is_empty());
    }
    let is_upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_upgrade {
        return None;
    }
    let protocols: Vec<&str> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let at = protocols.iter().position(|p| *p == WS_BEARER_PROTOCOL)?;
    protocols
        .get(at + 1)
        .map(|t| t.to_string())
        .filter(|t| !t.is_empty())
}

/// Refuses requests without a valid token, records the user on the request
/// span, applies the per-user rate limit and inserts the [`CurrentUser`].
pub async fn require_auth(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let verified = match bearer_token(req.headers()) {
        None => Err(ApiError::unauthorized("a bearer token is required")),
        Some(token) => state.jwt().verify(&token).map_err(|e| match e {
            JwtError::Expired => ApiError::unauthorized("the token has expired"),
            _ => ApiError::unauthorized("the token is invalid"),
        }),
    };
    let user = match verified {
        Ok(user) => user,
        Err(refused) => {
            // Refusals count against the client's address, so guessing
            // tokens is as limited as any other use of the API.
            let ip = state.client_ip(req.headers(), req.extensions());
            state
                .api_limiter()
                .check(&format!("ip:{ip}"))
                .map_err(|wait| ApiError::rate_limited(wait.as_secs_f64().ceil() as u64))?;
            return Err(refused);
        }
    };
    tracing::Span::current().record("user", user.username.as_str());
    state
        .api_limiter()
        .check(&format!("user:{}", user.username))
        .map_err(|wait| ApiError::rate_limited(wait.as_secs_f64().ceil() as u64))?;
    req.extensions_mut().insert(user);
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("wrong", &hash));
        assert!(!verify_password("x", "not a hash"));
    }

    #[test]
    fn token_from_header_or_subprotocol() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer_token(&h).as_deref(), Some("abc"));

        let mut h = HeaderMap::new();
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "kandev.bearer, tok".parse().unwrap(),
        );
        assert_eq!(bearer_token(&h), None, "only on an upgrade");
        h.insert(header::UPGRADE, "websocket".parse().unwrap());
        assert_eq!(bearer_token(&h).as_deref(), Some("tok"));

        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }
}
