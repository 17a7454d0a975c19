//! Authentication: argon2 password hashes, HS256 JWTs, and the middleware
//! that turns a bearer token into a [`CurrentUser`].
//!
//! Tokens come from `Authorization: Bearer <token>`, or, on a WebSocket
//! upgrade (browsers cannot set headers there), from the
//! `Sec-WebSocket-Protocol` list `kandev.bearer, <token>`. Tokens are never
//! logged.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier, password_hash::SaltString};
use axum::{
    extract::{Request, State},
    middleware::Next,
    response::Response,
};
use http::{HeaderMap, header};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::{error::ApiError, state::AppState};

/// The WebSocket subprotocol that carries a token as the next protocol.
pub const WS_BEARER_PROTOCOL: &str = "kandev.bearer";
const ISSUER: &str = "kandev-gateway";

/// The authenticated caller, in request extensions after [`require_auth`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentUser {
    pub username: String,
    pub is_admin: bool,
}

impl CurrentUser {
    /// Whether the caller may see a board of `owner`.
    pub fn can_access(&self, owner: &str) -> bool {
        self.is_admin || self.username == owner
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<CurrentUser>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("a bearer token is required"))
    }
}

/// The claims of a Kandev token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// The username.
    pub sub: String,
    pub admin: bool,
    pub iat: u64,
    pub exp: u64,
    pub iss: String,
}

/// Why a token was refused.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("the token has expired")]
    Expired,
    #[error("the token is invalid")]
    Invalid,
    #[error("cannot sign the token: {0}")]
    Sign(jsonwebtoken::errors::Error),
}

/// Signs and checks tokens with one HS256 key.
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    ttl: Duration,
}

impl std::fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtKeys")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl JwtKeys {
    pub fn new(secret: &SecretString, ttl: Duration) -> Self {
        let bytes = secret.expose_secret().as_bytes();
        // Only HS256 is accepted: no `none`, no algorithm confusion.
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "sub", "iss"]);
        JwtKeys {
            encoding: EncodingKey::from_secret(bytes),
            decoding: DecodingKey::from_secret(bytes),
            validation,
            ttl,
        }
    }

    /// A random key for development, when none is configured.
    pub fn random_secret() -> SecretString {
        let mut bytes = [0u8; 48];
        getrandom::fill(&mut bytes).expect("the OS random source works");
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        hex.into()
    }

    /// A token for `user`, and when it expires (seconds since the epoch).
    pub fn issue(&self, user: &CurrentUser) -> Result<(String, u64), JwtError> {
        let iat = now_secs();
        let claims = Claims {
            sub: user.username.clone(),
            admin: user.is_admin,
            iat,
            exp: iat + self.ttl.as_secs(),
            iss: ISSUER.to_string(),
        };
        self.sign(&claims).map(|token| (token, claims.exp))
    }

    /// Signs arbitrary claims (tests use it for expired tokens).
    pub fn sign(&self, claims: &Claims) -> Result<String, JwtError> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
            .map_err(JwtError::Sign)
    }

    pub fn verify(&self, token: &str) -> Result<CurrentUser, JwtError> {
        use jsonwebtoken::errors::ErrorKind;
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => JwtError::Expired,
                _ => JwtError::Invalid,
            })?;
        Ok(CurrentUser {
            username: data.claims.sub,
            is_admin: data.claims.admin,
        })
    }
}

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

    fn keys() -> JwtKeys {
        JwtKeys::new(&"k".repeat(32).into(), Duration::from_secs(60))
    }

    #[test]
    fn round_trip_and_refusals() {
        let keys = keys();
        let alice = CurrentUser {
            username: "alice".into(),
            is_admin: false,
        };
        let (token, exp) = keys.issue(&alice).unwrap();
        assert!(exp > now_secs());
        assert_eq!(keys.verify(&token).unwrap(), alice);

        let other = JwtKeys::new(&"o".repeat(32).into(), Duration::from_secs(60));
        assert!(matches!(other.verify(&token), Err(JwtError::Invalid)));

        let expired = keys
            .sign(&Claims {
                sub: "alice".into(),
                admin: false,
                iat: 1,
                exp: 2,
                iss: ISSUER.into(),
            })
            .unwrap();
        assert!(matches!(keys.verify(&expired), Err(JwtError::Expired)));
    }

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
