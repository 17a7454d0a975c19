//! Each user's own secrets for their agents' runs: stored sealed, opened
//! only to build a run's container ([`crate::container`]) or for a call
//! made on the user's behalf.
//!
//! Users' secrets are stored encrypted with AES-256-GCM under a key derived
//! (HKDF-SHA256) from `KANDEV_SECRETS_KEY`; the user and the name are bound
//! as associated data, so a row copied to another user or name does not
//! open. Values are decrypted only to build a container's environment and
//! never leave the service otherwise.

use std::collections::BTreeMap;

use ring::{aead, hkdf, rand::SecureRandom as _};
use secrecy::{ExposeSecret as _, SecretString};

use crate::{
    domain::{AgentError, Result, invalid},
    store::Store,
};

pub use crate::domain::{AUGGIE_SESSION_ID, SecretEntry, TASK_DESCRIPTION, check_name};

/// The longest secret value accepted (a PEM key fits; a file does not).
pub const MAX_SECRET_BYTES: usize = 16 * 1024;
/// The most secrets one user keeps.
pub const MAX_SECRETS_PER_USER: i64 = 100;

/// The cipher of users' secrets.
pub struct SecretBox {
    key: aead::LessSafeKey,
    rng: ring::rand::SystemRandom,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

fn aad(scope: &str, name: &str) -> Vec<u8> {
    format!("kandev-user-secret\0{scope}\0{name}").into_bytes()
}

impl SecretBox {
    pub fn new(secret: &SecretString) -> Self {
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"kandev user secrets");
        let prk = salt.extract(secret.expose_secret().as_bytes());
        let okm = prk
            .expand(&[b"aes-256-gcm v1"], &aead::AES_256_GCM)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        SecretBox {
            key: aead::LessSafeKey::new(aead::UnboundKey::from(okm)),
            rng: ring::rand::SystemRandom::new(),
        }
    }

    /// `(nonce, ciphertext with tag)` of a value for a user and a name.
    pub fn seal(&self, scope: &str, name: &str, value: &str) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut nonce = [0u8; aead::NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| AgentError::Internal("no randomness for a nonce".into()))?;
        let mut sealed = value.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(aad(scope, name)),
                &mut sealed,
            )
            .map_err(|_| AgentError::Internal("could not encrypt a secret".into()))?;
        Ok((nonce.to_vec(), sealed))
    }

    /// The value, or `None` when it does not open under this key (another
    /// key, another user or name, or tampered).
    pub fn open(
        &self,
        scope: &str,
        name: &str,
        nonce: &[u8],
        sealed: &[u8],
    ) -> Option<SecretString> {
        let nonce = aead::Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, aead::Aad::from(aad(scope, name)), &mut buf)
            .ok()?;
        String::from_utf8(plain.to_vec())
            .ok()
            .map(SecretString::from)
    }
}

fn check_value(value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(invalid("a secret's value must not be empty"));
    }
    if value.len() > MAX_SECRET_BYTES {
        return Err(invalid(format!(
            "a secret's value is at most {MAX_SECRET_BYTES} bytes"
        )));
    }
    if value.contains('\0') {
        return Err(invalid("a secret's value must not contain NUL bytes"));
    }
    Ok(())
}

fn check_scope(scope: &str) -> Result<()> {
    if scope.trim().is_empty() {
        return Err(invalid("scope (the user) is required"));
    }
    Ok(())
}

/// Users' secrets: stored sealed, opened only for a run of their own.
#[derive(Debug, Clone)]
pub struct UserSecrets {
    store: Store,
    cipher: Option<std::sync::Arc<SecretBox>>,
}

impl UserSecrets {
    pub fn new(store: Store, key: Option<&SecretString>) -> Self {
        UserSecrets {
            store,
            cipher: key.map(|k| std::sync::Arc::new(SecretBox::new(k))),
        }
    }

    fn cipher(&self) -> Result<&SecretBox> {
        self.cipher.as_deref().ok_or_else(|| {
            AgentError::FailedPrecondition(
                "this installation stores no secrets: the operator has not set \
                 KANDEV_SECRETS_KEY"
                    .into(),
            )
        })
    }

    pub async fn list(&self, scope: &str) -> Result<Vec<SecretEntry>> {
        check_scope(scope)?;
        self.store.list_secrets(scope).await
    }

    pub async fn set(&self, scope: &str, name: &str, value: &str) -> Result<SecretEntry> {
        check_scope(scope)?;
        check_name(name)?;
        check_value(value)?;
        let (nonce, sealed) = self.cipher()?.seal(scope, name, value)?;
        self.store
            .put_secret(scope, name, &nonce, &sealed, MAX_SECRETS_PER_USER)
            .await
    }

    pub async fn delete(&self, scope: &str, name: &str) -> Result<()> {
        check_scope(scope)?;
        if self.store.delete_secret(scope, name).await? {
            Ok(())
        } else {
            Err(AgentError::NotFound(format!("secret {name:?}")))
        }
    }

    /// One of a user's secrets, opened, for a call made on their behalf
    /// (a tracker link's forge token): only `scope`'s secret named `name`.
    pub async fn open_one(&self, scope: &str, name: &str) -> Result<SecretString> {
        check_scope(scope)?;
        let cipher = self.cipher()?;
        let missing = || AgentError::NotFound(format!("no secret named {name:?}"));
        let (name, nonce, sealed) = self
            .store
            .sealed_secrets(scope)
            .await?
            .into_iter()
            .find(|(n, _, _)| n == name)
            .ok_or_else(missing)?;
        cipher.open(scope, &name, &nonce, &sealed).ok_or_else(|| {
            AgentError::FailedPrecondition(format!(
                "the secret {name:?} does not open with the current KANDEV_SECRETS_KEY; set it again"
            ))
        })
    }

    /// A user's secrets, opened, for a run's environment. Rows that do not
    /// open (the key changed) are left out with a warning; the run then
    /// lacks them as if they were never set.
    pub async fn env_for(&self, scope: &str) -> Result<BTreeMap<String, SecretString>> {
        let (Some(cipher), false) = (self.cipher.as_deref(), scope.is_empty()) else {
            return Ok(BTreeMap::new());
        };
        let mut env = BTreeMap::new();
        for (name, nonce, sealed) in self.store.sealed_secrets(scope).await? {
            match cipher.open(scope, &name, &nonce, &sealed) {
                Some(value) => {
                    env.insert(name, value);
                }
                None => tracing::warn!(
                    secret = %name,
                    "a stored secret does not open with the current KANDEV_SECRETS_KEY; \
                     the user must set it again"
                ),
            }
        }
        Ok(env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> SecretString {
        SecretString::from(s.to_string())
    }

    #[test]
    fn a_sealed_secret_opens_only_for_its_user_name_and_key() {
        let cipher = SecretBox::new(&key("k".repeat(32).as_str()));
        let (nonce, sealed) = cipher.seal("alice", "GITHUB_TOKEN", "ghp-alice").unwrap();
        assert!(!sealed.windows(9).any(|w| w == b"ghp-alice"));
        let opened = cipher
            .open("alice", "GITHUB_TOKEN", &nonce, &sealed)
            .unwrap();
        assert_eq!(opened.expose_secret(), "ghp-alice");
        assert!(
            cipher
                .open("bob", "GITHUB_TOKEN", &nonce, &sealed)
                .is_none()
        );
        assert!(
            cipher
                .open("alice", "GITLAB_TOKEN", &nonce, &sealed)
                .is_none()
        );
        let other = SecretBox::new(&key("x".repeat(32).as_str()));
        assert!(
            other
                .open("alice", "GITHUB_TOKEN", &nonce, &sealed)
                .is_none()
        );
        let mut tampered = sealed.clone();
        tampered[0] ^= 1;
        assert!(
            cipher
                .open("alice", "GITHUB_TOKEN", &nonce, &tampered)
                .is_none()
        );
        // A fresh nonce each time: the same value never seals the same way.
        let (nonce2, sealed2) = cipher.seal("alice", "GITHUB_TOKEN", "ghp-alice").unwrap();
        assert_ne!((nonce, sealed), (nonce2, sealed2));
    }

    #[test]
    fn names_and_values_are_checked() {
        for bad in [
            "",
            "1X",
            "A-B",
            "A B",
            "TASK_DESCRIPTION",
            "path",
            &"A".repeat(129),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        check_name("ANTHROPIC_API_KEY").unwrap();
        assert!(check_value("").is_err());
        assert!(check_value("a\0b").is_err());
        assert!(check_value(&"v".repeat(MAX_SECRET_BYTES + 1)).is_err());
        check_value(&"v".repeat(MAX_SECRET_BYTES)).unwrap();
    }
}
