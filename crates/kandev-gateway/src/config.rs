//! Settings of the gateway.

use kandev_common::config::{ServiceConfig, ServiceSettings};
use kandev_events::nats::NatsLogin;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize};

/// The shortest JWT signing key accepted, in bytes.
pub const MIN_JWT_SECRET_BYTES: usize = 32;

/// A secret that was given: set and not empty (compose passes an unset
/// variable as an empty one).
pub fn given(secret: &Option<SecretString>) -> Option<&SecretString> {
    secret.as_ref().filter(|s| !s.expose_secret().is_empty())
}

/// Loaded from defaults, the config file and `KANDEV_*` variables. Its
/// Debug output hides the secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Its port (HTTP and WebSocket), its database (the users, in the
    /// `gateway` schema), NATS (the live feed of the tasks clients watch),
    /// the service token (sent on every call to the internal services) and
    /// logging: the keys every service has.
    #[serde(flatten)]
    pub common: ServiceSettings,
    /// The task service's gRPC endpoint (`KANDEV_TASK_SERVICE_URL`).
    pub task_service_url: String,
    /// The agent manager's gRPC endpoint (`KANDEV_AGENT_MANAGER_URL`).
    pub agent_manager_url: String,
    /// The orchestrator's gRPC endpoint (`KANDEV_ORCHESTRATOR_URL`).
    pub orchestrator_url: String,
    /// Feed frames a stream client may have queued before it counts as
    /// lagging and is disconnected (close code 1008).
    pub stream_client_buffer: usize,
    /// Connect timeout of downstream calls, in ms.
    pub downstream_connect_timeout_ms: u64,
    /// Timeout of one downstream call, in ms.
    pub downstream_timeout_ms: u64,
    /// How long a client may take to send a request's headers, and how long
    /// an idle keep-alive connection stays open, in seconds: a client that
    /// trickles bytes (slowloris) is disconnected after it.
    pub header_read_timeout_secs: u64,
    /// How long a client may take to send a request's whole body, in
    /// seconds, counted from its headers: a client that trickles its body
    /// is answered 408 and disconnected (see [`crate::body_deadline`]).
    pub body_read_timeout_secs: u64,
    /// HS256 signing key, at least 32 bytes (`KANDEV_JWT_SECRET`).
    #[serde(skip_serializing)]
    pub jwt_secret: Option<SecretString>,
    /// Development only: generate a random key at start when none is set
    /// (`KANDEV_DEV_RANDOM_JWT_SECRET=true`); tokens die with the process.
    pub dev_random_jwt_secret: bool,
    /// Where the gateway keeps what it generates on first start
    /// (`KANDEV_DATA_DIR`): the signing key when `KANDEV_JWT_SECRET` is not
    /// set, the first admin's password when `KANDEV_ADMIN_PASSWORD` is not
    /// set (see [`crate::first_start`]). Empty: nothing is generated, and
    /// `KANDEV_JWT_SECRET` is required.
    pub data_dir: String,
    /// Lifetime of an issued token, in seconds.
    pub jwt_ttl_secs: u64,
    /// The admin created on first start (`KANDEV_ADMIN_USERNAME`).
    pub admin_username: String,
    /// Its password (`KANDEV_ADMIN_PASSWORD`); without it no admin is created.
    #[serde(skip_serializing)]
    pub admin_password: Option<SecretString>,
    /// The bearer token Prometheus sends to scrape `/metrics`
    /// (`KANDEV_METRICS_TOKEN`); without it the gateway serves no metrics
    /// (its port is public).
    #[serde(skip_serializing)]
    pub metrics_token: Option<SecretString>,
    /// Origins allowed by CORS: a list, or a comma-separated string in the
    /// environment (`KANDEV_CORS_ALLOWED_ORIGINS=https://a,https://b`).
    /// Empty allows no cross-origin request; `*` allows any.
    #[serde(deserialize_with = "string_or_list")]
    pub cors_allowed_origins: Vec<String>,
    /// Largest accepted request body, in bytes.
    pub body_limit_bytes: usize,
    /// Use the first `X-Forwarded-For` address as the client's address, for
    /// rate limiting behind a trusted proxy.
    pub trust_forwarded_for: bool,
    pub rate_limit: RateLimitSettings,
}

/// Token buckets: `burst` requests at once, refilled at `per_minute`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RateLimitSettings {
    /// Login attempts per client address (`KANDEV_RATE_LIMIT__LOGIN_PER_MINUTE`).
    pub login_per_minute: u32,
    pub login_burst: u32,
    /// API requests per user, or per address before login.
    pub api_per_minute: u32,
    pub api_burst: u32,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        RateLimitSettings {
            login_per_minute: 10,
            login_burst: 5,
            api_per_minute: 600,
            api_burst: 100,
        }
    }
}

fn string_or_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        OneOrMany::Many(v) => v,
    })
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            common: ServiceSettings::new("127.0.0.1:8080", "gateway"),
            task_service_url: "http://127.0.0.1:8081".into(),
            orchestrator_url: "http://127.0.0.1:8082".into(),
            stream_client_buffer: 16_384,
            agent_manager_url: "http://127.0.0.1:8083".into(),
            downstream_connect_timeout_ms: 2000,
            downstream_timeout_ms: 10_000,
            header_read_timeout_secs: 30,
            body_read_timeout_secs: 30,
            jwt_secret: None,
            dev_random_jwt_secret: false,
            data_dir: String::new(),
            jwt_ttl_secs: 12 * 3600,
            admin_username: "admin".into(),
            admin_password: None,
            metrics_token: None,
            cors_allowed_origins: vec![],
            body_limit_bytes: 1024 * 1024,
            trust_forwarded_for: false,
            rate_limit: RateLimitSettings::default(),
        }
    }
}

impl ServiceConfig for Settings {
    fn common(&self) -> &ServiceSettings {
        &self.common
    }

    fn validate_own(&self) -> Result<(), String> {
        for (name, url) in [
            ("task_service_url", &self.task_service_url),
            ("agent_manager_url", &self.agent_manager_url),
            ("orchestrator_url", &self.orchestrator_url),
        ] {
            if !url.starts_with("http://") && !url.starts_with("https://") {
                return Err(format!("{name} must be an http:// or https:// URL"));
            }
        }
        let nats_url = &self.common.nats_url;
        if !nats_url.starts_with("nats://") && !nats_url.starts_with("tls://") {
            return Err("nats_url must be a nats:// or tls:// URL".into());
        }
        if self.stream_client_buffer == 0 {
            return Err("stream_client_buffer must be at least 1".into());
        }
        if !self.data_dir.is_empty() && !std::path::Path::new(&self.data_dir).is_absolute() {
            return Err("data_dir (KANDEV_DATA_DIR) must be an absolute path".into());
        }
        match given(&self.jwt_secret) {
            Some(secret) if secret.expose_secret().len() < MIN_JWT_SECRET_BYTES => {
                return Err(format!(
                    "jwt_secret must be at least {MIN_JWT_SECRET_BYTES} bytes"
                ));
            }
            None if !self.dev_random_jwt_secret && self.data_dir.is_empty() => {
                return Err(format!(
                    "KANDEV_JWT_SECRET is required (at least {MIN_JWT_SECRET_BYTES} bytes), \
                     or KANDEV_DATA_DIR for the gateway to generate one and keep it there; \
                     set KANDEV_DEV_RANDOM_JWT_SECRET=true only for development"
                ));
            }
            _ => {}
        }
        if self.jwt_ttl_secs == 0 {
            return Err("jwt_ttl_secs must be at least 1".into());
        }
        if self.body_limit_bytes == 0 {
            return Err("body_limit_bytes must be at least 1".into());
        }
        if self.downstream_timeout_ms == 0 || self.downstream_connect_timeout_ms == 0 {
            return Err("downstream timeouts must be at least 1 ms".into());
        }
        if self.header_read_timeout_secs == 0 {
            return Err("header_read_timeout_secs must be at least 1".into());
        }
        if self.body_read_timeout_secs == 0 {
            return Err("body_read_timeout_secs must be at least 1".into());
        }
        let r = &self.rate_limit;
        if r.login_per_minute == 0
            || r.login_burst == 0
            || r.api_per_minute == 0
            || r.api_burst == 0
        {
            return Err("rate limits must be at least 1".into());
        }
        Ok(())
    }
}

impl Settings {
    /// Who this service is to NATS.
    pub fn nats_login(&self) -> NatsLogin {
        NatsLogin::configured("kandev-gateway", &self.common)
    }
}

#[cfg(test)]
mod tests {
    use kandev_common::config::Validate;

    use super::*;

    fn valid() -> Settings {
        let mut valid = Settings {
            jwt_secret: Some("x".repeat(32).into()),
            ..Settings::default()
        };
        valid.common.service_token = Some("s".repeat(32).into());
        valid
    }

    #[test]
    fn requires_a_long_enough_secret_or_the_dev_flag() {
        assert!(valid().validate().is_ok());
        let none = Settings::default();
        assert!(none.validate().unwrap_err().contains("KANDEV_JWT_SECRET"));
        let short = Settings {
            jwt_secret: Some("short".into()),
            ..Settings::default()
        };
        assert!(short.validate().unwrap_err().contains("32 bytes"));
        let dev = Settings {
            jwt_secret: None,
            dev_random_jwt_secret: true,
            ..valid()
        };
        assert!(dev.validate().is_ok());
        // A data directory lets the gateway generate and keep one; an empty
        // value counts as not set.
        let kept = Settings {
            jwt_secret: Some("".into()),
            data_dir: "/var/lib/kandev/gateway".into(),
            ..valid()
        };
        assert!(kept.validate().is_ok());
        let relative = Settings {
            data_dir: "data".into(),
            ..kept
        };
        assert!(relative.validate().unwrap_err().contains("absolute"));
        // The service token too: the internal services refuse calls without.
        let mut no_token = valid();
        no_token.common.service_token = None;
        let err = no_token.validate().unwrap_err();
        assert!(err.contains("KANDEV_SERVICE_TOKEN"), "{err}");
    }

    #[test]
    fn debug_hides_secrets() {
        let mut s = Settings {
            admin_password: Some("hunter2-hunter2".into()),
            ..valid()
        };
        s.common.nats_user = Some("gateway".into());
        s.common.nats_password = Some("nats-hunter3".into());
        let shown = format!("{s:?}");
        assert!(!shown.contains("xxxxxxxx"));
        assert!(!shown.contains("ssssssss"));
        assert!(!shown.contains("hunter2"));
        assert!(!shown.contains("hunter3"), "{shown}");
        assert!(shown.contains("gateway"), "{shown}");
    }

    #[test]
    fn origins_from_a_comma_list() {
        let s: Settings = serde_json::from_value(
            serde_json::json!({"cors_allowed_origins": "https://a, https://b"}),
        )
        .unwrap();
        assert_eq!(s.cors_allowed_origins, vec!["https://a", "https://b"]);
    }
}
