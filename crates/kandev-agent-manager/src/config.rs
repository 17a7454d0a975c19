//! Settings of the agent manager.

use std::{collections::BTreeMap, path::Path};

use kandev_common::config::{self, ConfigError, ServiceConfig, ServiceSettings};
use kandev_events::nats::NatsLogin;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

/// Host variables read once by [`load`], given to agents whose type lists
/// them (required or optional env) and is opted in to the operator's
/// credentials (`host_credentials`).
pub const HOST_PASSTHROUGH_ENV: &[&str] = &["GITHUB_TOKEN", "GITLAB_TOKEN", "GEMINI_API_KEY"];

/// What happens to a cloned workspace when its instance is stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspacePolicy {
    /// Workspaces stay on the host (the default).
    #[default]
    Keep,
    /// A workspace the manager cloned is deleted on `StopAgent`. A caller's
    /// own `workspace_path` is never deleted.
    RemoveOnStop,
}

/// Loaded from defaults, the config file and `KANDEV_*` variables. Its
/// Debug output hides the secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Its port (gRPC and HTTP: `/healthz`, `/readyz`), database, NATS,
    /// service token and logging: the keys every service has.
    #[serde(flatten)]
    pub common: ServiceSettings,
    /// `KANDEV_DOCKER_HOST`: a `unix://` socket or `tcp://` address; empty
    /// uses the local defaults (`DOCKER_HOST`, then the unix socket).
    pub docker_host: String,
    /// Names this manager in the `kandev.manager` label of its containers;
    /// reconciliation only touches containers with its own name
    /// (`KANDEV_MANAGER_ID`). Managers sharing a Docker host need distinct ids.
    pub manager_id: String,
    /// Where the orchestrators reach this manager's gRPC API, as it
    /// announces itself to the pool (`KANDEV_ADVERTISE_URL`); empty:
    /// `http://<listen address>` (127.0.0.1 for an unspecified one).
    pub advertise_url: String,
    /// At most this many active instances at once on this manager
    /// (`KANDEV_MAX_INSTANCES`); 0 is no limit. Launches beyond it are
    /// refused (UNAVAILABLE) and the orchestrators place elsewhere.
    pub max_instances: u32,
    /// How often it announces itself on NATS, in ms (`KANDEV_ANNOUNCE_MS`).
    pub announce_ms: u64,
    /// Pull a missing image (`KANDEV_PULL_IMAGES`); tests turn it off.
    pub pull_images: bool,
    /// Build a missing agent image of Kandev's own (`kandev/<recipe>:latest`)
    /// from its recipe under `dockerfiles/` (`KANDEV_BUILD_AGENT_IMAGES`).
    pub build_agent_images: bool,
    /// The base of the agent images built here (`KANDEV_AGENT_BASE_IMAGE`):
    /// an image with Node.js and npm; `dockerfiles/agent-base/build.sh`
    /// assembles one from the host's own files where no registry answers.
    pub agent_base_image: String,
    /// The network of the image builds' `RUN` steps
    /// (`KANDEV_AGENT_BUILD_NETWORK`); empty: the engine's default, or
    /// `host` on an engine without a `bridge` network.
    pub agent_build_network: String,
    /// The npm registry the builds install from (`KANDEV_AGENT_NPM_REGISTRY`);
    /// empty: npm's default.
    pub agent_npm_registry: String,
    /// How long one image build may take (`KANDEV_AGENT_BUILD_TIMEOUT_SECS`).
    pub agent_build_timeout_secs: u64,
    /// Cloned repositories go to `<workspaces_root>/<task_id>`.
    pub workspaces_root: String,
    /// A request's `workspace_path` must lie under one of these (after
    /// canonicalizing); empty refuses every `workspace_path`.
    pub allowed_workspace_roots: Vec<String>,
    /// Schemes a `repository_url` may use (`KANDEV_ALLOWED_REPOSITORY_SCHEMES`);
    /// scp-like `user@host:path` counts as `ssh`.
    pub allowed_repository_schemes: Vec<String>,
    /// Local repositories (paths, `file://`) are cloned only from under one
    /// of these (`KANDEV_ALLOWED_REPOSITORY_ROOTS`); empty refuses them all.
    pub allowed_repository_roots: Vec<String>,
    /// Allow repository hosts on loopback, private and link-local addresses
    /// (`KANDEV_ALLOW_INTERNAL_REPOSITORY_HOSTS`), for a self-hosted forge.
    pub allow_internal_repository_hosts: bool,
    /// How long a clone may take (`KANDEV_CLONE_TIMEOUT_SECS`); it runs
    /// after the launch has answered, with the instance `pending`.
    pub clone_timeout_secs: u64,
    /// The prefix of each task's branch in its clone
    /// (`KANDEV_BRANCH_PREFIX`): `<prefix><short task id>-<title slug>`.
    pub branch_prefix: String,
    pub workspace_policy: WorkspacePolicy,
    /// Where `.ssh`, `.gitconfig` and `.git-credentials` are looked up for
    /// read-only credential mounts (`KANDEV_CREDENTIALS_HOME`); defaults to
    /// the host's `HOME` when loaded by [`load`].
    pub credentials_home: String,
    /// Where the credential files appear in the container: the home of the
    /// non-root `agent` user of the images under `dockerfiles/`.
    pub container_home: String,
    /// The user agents run as, `uid:gid` (`KANDEV_AGENT_USER`): never root.
    /// Empty: the manager's own user when it is not root, else `1000:1000`
    /// (the `agent` user of the images under `dockerfiles/`). A manager
    /// running as root gives each clone to this user; one that is not root
    /// can only run agents as itself.
    pub agent_user: String,
    /// Seconds to wait for the agent's `initialize` answer.
    pub initialize_timeout_secs: u64,
    /// Seconds an `ask` permission request waits for `RespondPermission`.
    pub permission_timeout_secs: u64,
    /// stderr lines kept per instance in `agent_logs`.
    pub max_log_lines: i64,
    /// How often the last published `seq` and the progress are stored, in ms.
    pub seq_flush_ms: u64,
    /// Capacity of the per-instance publish queue, in events. A few full
    /// batches (a batch is at most 256 KiB): when the bus is slower than
    /// the agent, its output waits in its pipe beyond them, not in memory
    /// (8192 held ~20 MiB per flooding agent).
    pub publish_queue: usize,
    /// How long a publisher waits for more of an agent's events before it
    /// publishes them, in ms (`KANDEV_PUBLISH_LINGER_MS`; 0: at once). The
    /// publishers of all agents publish on the same ticks, so many agents
    /// at modest rates send in bursts, as one agent's flood does: an event
    /// waits at most this long, half of it on average.
    pub publish_linger_ms: u64,
    /// Seconds a turn waits for a Docker engine that stopped answering
    /// (restarting, say) before it fails (`KANDEV_ENGINE_GRACE_SECS`).
    pub engine_grace_secs: u64,
    /// Values for agent env variables (`KANDEV_AGENT_ENV__ANTHROPIC_API_KEY`)
    /// that the operator shares with every user's agents whose type lists
    /// them. Secrets: never logged, never serialized, never returned by the
    /// API.
    #[serde(skip_serializing)]
    pub agent_env: BTreeMap<String, SecretString>,
    /// [`HOST_PASSTHROUGH_ENV`] as found in the host's environment by
    /// [`load`]: the operator's own tokens, given only to types opted in
    /// with `host_credentials`.
    #[serde(skip)]
    pub host_env: BTreeMap<String, SecretString>,
    /// The key users' stored secrets are encrypted with
    /// (`KANDEV_SECRETS_KEY`, 32 bytes or more). Without it, storing a
    /// secret is refused with a clear error and launches use none.
    #[serde(skip_serializing)]
    pub secrets_key: Option<SecretString>,
    /// Serve gRPC reflection (`KANDEV_GRPC_REFLECTION`): off by default, so
    /// the port does not describe itself to whoever reaches it.
    pub grpc_reflection: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            common: ServiceSettings::new("127.0.0.1:8083", "agent_manager"),
            docker_host: String::new(),
            manager_id: "kandev-agent-manager".into(),
            advertise_url: String::new(),
            max_instances: 0,
            announce_ms: 2000,
            pull_images: true,
            build_agent_images: true,
            agent_base_image: "node:22-bookworm-slim".into(),
            agent_build_network: String::new(),
            agent_npm_registry: String::new(),
            agent_build_timeout_secs: 1800,
            workspaces_root: "/tmp/kandev/workspaces".into(),
            allowed_workspace_roots: vec![],
            allowed_repository_schemes: vec!["https".into(), "ssh".into()],
            allowed_repository_roots: vec![],
            allow_internal_repository_hosts: false,
            clone_timeout_secs: 600,
            branch_prefix: "kandev/".into(),
            workspace_policy: WorkspacePolicy::Keep,
            credentials_home: String::new(),
            container_home: "/home/agent".into(),
            agent_user: String::new(),
            initialize_timeout_secs: 30,
            permission_timeout_secs: 300,
            max_log_lines: 1000,
            seq_flush_ms: 500,
            publish_queue: 1024,
            publish_linger_ms: 5,
            engine_grace_secs: 60,
            agent_env: BTreeMap::new(),
            host_env: BTreeMap::new(),
            secrets_key: None,
            grpc_reflection: false,
        }
    }
}

impl Settings {
    /// The defaults with every directory the manager uses under `dir`:
    /// clones in `workspaces/`, `workspace_path`s from `allowed/`, local
    /// repositories from `repos/` and credential files from `home/`. For a
    /// self-contained setup on one machine, such as a test's.
    pub fn rooted_in(dir: &Path) -> Settings {
        let under = |sub: &str| dir.join(sub).display().to_string();
        Settings {
            workspaces_root: under("workspaces"),
            allowed_workspace_roots: vec![under("allowed")],
            allowed_repository_roots: vec![under("repos")],
            credentials_home: under("home"),
            ..Settings::default()
        }
    }

    /// Whom files Kandev makes for an agent are given to: its user, when the
    /// manager runs as root (it can give files away); otherwise the
    /// manager's own files are the agent's already.
    pub fn file_owner(&self) -> Option<(u32, u32)> {
        if nix::unistd::geteuid().is_root() {
            self.agent_owner().ok()
        } else {
            None
        }
    }

    /// The `(uid, gid)` agents run as (see [`Settings::agent_user`]).
    pub fn agent_owner(&self) -> Result<(u32, u32), String> {
        let spec = self.agent_user.trim();
        if spec.is_empty() {
            let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
            return Ok(if uid.is_root() {
                (1000, 1000)
            } else {
                (uid.as_raw(), gid.as_raw())
            });
        }
        let (uid, gid) = spec.split_once(':').unwrap_or((spec, spec));
        let parse = |s: &str| s.trim().parse::<u32>().ok();
        match (parse(uid), parse(gid)) {
            (Some(0), _) | (_, Some(0)) => {
                Err("agent_user must not be root (uid or gid 0)".to_string())
            }
            (Some(uid), Some(gid)) => Ok((uid, gid)),
            _ => Err(format!(
                "agent_user must be numeric `uid:gid` (or `uid`), not {spec:?}"
            )),
        }
    }

    /// The value configured for an agent env variable, if any.
    pub fn agent_env_value(&self, name: &str) -> Option<&SecretString> {
        find_env(&self.agent_env, name)
    }

    /// The host's own value of a [`HOST_PASSTHROUGH_ENV`] variable, if any.
    pub fn host_env_value(&self, name: &str) -> Option<&SecretString> {
        find_env(&self.host_env, name)
    }
}

fn find_env<'a>(env: &'a BTreeMap<String, SecretString>, name: &str) -> Option<&'a SecretString> {
    env.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

impl ServiceConfig for Settings {
    fn common(&self) -> &ServiceSettings {
        &self.common
    }

    fn validate_own(&self) -> Result<(), String> {
        if !kandev_events::managers::manager_id_ok(&self.manager_id) {
            return Err(format!(
                "manager_id {:?} must be 1 to 64 letters, digits, '-' or '_'",
                self.manager_id
            ));
        }
        if self.announce_ms == 0 {
            return Err("announce_ms must be positive".into());
        }
        let url = &self.advertise_url;
        if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
            return Err("advertise_url must be an http:// or https:// URL".into());
        }
        self.agent_owner()?;
        if !Path::new(&self.workspaces_root).is_absolute() {
            return Err("workspaces_root must be an absolute path".into());
        }
        if self.initialize_timeout_secs == 0 || self.seq_flush_ms == 0 || self.publish_queue == 0 {
            return Err(
                "initialize_timeout_secs, seq_flush_ms and publish_queue must be at least 1".into(),
            );
        }
        if self.max_log_lines < 1 {
            return Err("max_log_lines must be at least 1".into());
        }
        if let Some(key) = &self.secrets_key
            && key.expose_secret().len() < 32
        {
            return Err("secrets_key (KANDEV_SECRETS_KEY) must be 32 bytes or more".into());
        }
        Ok(())
    }
}

impl Settings {
    /// Who this service is to NATS.
    pub fn nats_login(&self) -> NatsLogin {
        NatsLogin::configured("kandev-agent-manager", &self.common)
    }
}

/// Loads the settings ([`kandev_common::config::load`]) and reads the host
/// environment once: [`HOST_PASSTHROUGH_ENV`] into `host_env` (unless
/// configured in `agent_env`), and `HOME` as `credentials_home` (unless
/// configured).
pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
    let mut settings: Settings = config::load(file)?;
    for name in HOST_PASSTHROUGH_ENV {
        if settings.agent_env_value(name).is_none()
            && let Ok(value) = std::env::var(name)
            && !value.is_empty()
        {
            settings
                .host_env
                .insert((*name).to_string(), SecretString::from(value));
        }
    }
    if settings.credentials_home.is_empty()
        && let Ok(home) = std::env::var("HOME")
    {
        settings.credentials_home = home;
    }
    Ok(settings)
}

#[cfg(test)]
// figment's Jail API returns its own large error type.
#[allow(clippy::result_large_err)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn host_tokens_and_home_are_read_once_at_load() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("GITHUB_TOKEN", "from-host");
            jail.set_env("GEMINI_API_KEY", "gemini-host");
            jail.set_env("KANDEV_AGENT_ENV__GEMINI_API_KEY", "gemini-configured");
            jail.set_env("KANDEV_AGENT_ENV__ANTHROPIC_API_KEY", "sk-test");
            jail.set_env("HOME", "/home/someone");
            jail.set_env("KANDEV_WORKSPACE_POLICY", "remove_on_stop");
            jail.set_env("KANDEV_SERVICE_TOKEN", "service-token-service-token-12345");
            let settings = load(None).map_err(|e| e.to_string())?;
            let value = |k: &str| {
                settings
                    .agent_env_value(k)
                    .map(|v| v.expose_secret().to_string())
            };
            let host = |k: &str| {
                settings
                    .host_env_value(k)
                    .map(|v| v.expose_secret().to_string())
            };
            // The host's tokens are kept apart: only opted-in types get them.
            assert_eq!(value("GITHUB_TOKEN"), None);
            assert_eq!(host("GITHUB_TOKEN").as_deref(), Some("from-host"));
            assert_eq!(host("GEMINI_API_KEY"), None);
            // Configuration wins over the host environment.
            assert_eq!(
                value("GEMINI_API_KEY").as_deref(),
                Some("gemini-configured")
            );
            assert_eq!(value("ANTHROPIC_API_KEY").as_deref(), Some("sk-test"));
            assert_eq!(value("GITLAB_TOKEN"), None);
            assert_eq!(settings.credentials_home, "/home/someone");
            assert_eq!(settings.workspace_policy, WorkspacePolicy::RemoveOnStop);
            // Secrets stay out of Debug output.
            let debug = format!("{settings:?}");
            assert!(
                !debug.contains("sk-test")
                    && !debug.contains("from-host")
                    && !debug.contains("service-token"),
                "{debug}"
            );
            Ok(())
        });
    }

    #[test]
    fn the_service_token_is_required() {
        figment::Jail::expect_with(|jail| {
            let err = load(None).unwrap_err().to_string();
            assert!(err.contains("KANDEV_SERVICE_TOKEN is required"), "{err}");
            jail.set_env("KANDEV_SERVICE_TOKEN", "too-short");
            let err = load(None).unwrap_err().to_string();
            assert!(err.contains("at least 32 bytes"), "{err}");
            Ok(())
        });
    }
}
