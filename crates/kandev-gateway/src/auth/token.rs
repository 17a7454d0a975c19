//! Who a request is from: the [`CurrentUser`] a token names, and the
//! HS256 keys ([`JwtKeys`]) that issue and check tokens.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

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
}
