//! The container a turn runs in, built in one place: its environment for
//! the run's user, the task's agent profile, the workspace and credential
//! mounts, the type's home volume, labels and limits. A launch (or a
//! follow-up turn) asks [`run_env`] once, then [`spec`]; the runner gets
//! the result and assembles nothing itself.
//!
//! A variable a type lists (required or optional env) takes its value from,
//! in order: the launch request, the user's stored secrets, the operator's
//! `KANDEV_AGENT_ENV__*` configuration, and, only for types an admin opted in
//! with `host_credentials`, the host's own tokens. The operator's files
//! (`~/.ssh`, `~/.gitconfig`, `~/.git-credentials`) are mounted only for
//! opted-in types too: nobody's agent gets the operator's identity by
//! default. A profile's variables come last, and never replace one set
//! before them.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
    sync::Arc,
};

use secrecy::{ExposeSecret as _, SecretString};

use crate::{
    config::Settings,
    credentials::UserSecrets,
    docker::{
        ContainerSpec, HomeVolume, LABEL_HOME, LABEL_INSTANCE, LABEL_MANAGER, LABEL_TASK,
        LABEL_TURN, LABEL_TYPE,
    },
    domain::{AgentError, AgentInstance, AgentType, Result, home_volume_name},
    profiles::{Profiles, ResolvedProfile},
    runner::CONTAINER_WORKSPACE,
};

/// Whose run it is and what its request asked for.
#[derive(Clone, Copy)]
pub struct RunFor<'a> {
    pub agent_type: &'a AgentType,
    /// The launch request's own variables.
    pub request_env: &'a BTreeMap<String, String>,
    /// The task's metadata, which names its profile.
    pub metadata: &'a serde_json::Map<String, serde_json::Value>,
    /// The user the run is for (empty: nobody's secrets).
    pub scope: &'a str,
}

/// A run's environment and profile, the user's secrets opened into them.
/// Its `Debug` names variables, never values.
#[derive(Clone)]
pub struct RunEnv {
    /// `KEY=VALUE`.
    pub env: Vec<String>,
    pub profile: Option<Arc<ResolvedProfile>>,
}

impl std::fmt::Debug for RunEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEnv")
            .field("env", &crate::domain::env_names(&self.env))
            .field("profile", &self.profile)
            .finish()
    }
}

/// The environment and profile of a run: the user's secrets are opened
/// once, for both. A required variable or a profile's secret the user
/// lacks is a refusal that names it.
#[tracing::instrument(skip_all, fields(agent_type = %run.agent_type.id))]
pub async fn run_env(
    secrets: &UserSecrets,
    profiles: &Profiles,
    settings: &Settings,
    run: RunFor<'_>,
) -> Result<RunEnv> {
    let user_env = secrets.env_for(run.scope).await?;
    let env = environment(settings, run.agent_type, run.request_env, &user_env)?;
    let profile = match profiles
        .for_launch(run.metadata, run.scope, &run.agent_type.id)
        .await?
    {
        Some(profile) => {
            let resolved = crate::profiles::resolve::resolve(&profile, &user_env)?;
            tracing::info!(profile = ?resolved, "the run uses an agent profile");
            Some(Arc::new(resolved))
        }
        None => None,
    };
    Ok(RunEnv {
        env: with_profile_env(env, profile.as_deref()),
        profile,
    })
}

/// The container of `instance`'s current turn, with `env` and the task's
/// work tree at `host_path` mounted as [`CONTAINER_WORKSPACE`].
pub fn spec(
    settings: &Settings,
    instance: &AgentInstance,
    agent_type: &AgentType,
    host_path: &Path,
    env: Vec<String>,
) -> ContainerSpec {
    // Checked when the settings were loaded; a bad value never runs as
    // root either way.
    let (uid, gid) = settings.agent_owner().unwrap_or((1000, 1000));
    let mut binds = vec![format!("{}:{CONTAINER_WORKSPACE}:rw", host_path.display())];
    binds.extend(credential_binds(settings, agent_type));
    let home = (!agent_type.home_volume.is_empty()).then(|| HomeVolume {
        name: home_volume_name(&agent_type.id, &instance.home_scope),
        target: agent_type.home_volume.trim_end_matches('/').to_string(),
        labels: HashMap::from([(LABEL_HOME.to_string(), agent_type.id.clone())]),
    });
    let labels = HashMap::from([
        (LABEL_TASK.to_string(), instance.task_id.to_string()),
        (LABEL_INSTANCE.to_string(), instance.id.to_string()),
        (LABEL_TYPE.to_string(), agent_type.id.clone()),
        (LABEL_MANAGER.to_string(), settings.manager_id.clone()),
        (LABEL_TURN.to_string(), instance.turns.to_string()),
    ]);
    ContainerSpec {
        name: format!("kandev-{}-{}", instance.id, instance.turns),
        image: agent_type.image.clone(),
        command: agent_type.command.clone(),
        working_dir: agent_type.working_dir.clone(),
        user: format!("{uid}:{gid}"),
        env,
        binds,
        home,
        labels,
        memory_bytes: agent_type.memory_mb.saturating_mul(1024 * 1024),
        nano_cpus: (agent_type.cpu_cores * 1e9) as i64,
        pids_limit: agent_type.pids_limit,
        network_mode: agent_type.network_mode.clone(),
    }
}

/// The container's environment with the profile's variables added (a
/// variable the type or the request already sets keeps its value).
fn with_profile_env(mut env: Vec<String>, profile: Option<&ResolvedProfile>) -> Vec<String> {
    let Some(profile) = profile else { return env };
    let name = |pair: &String| pair.split_once('=').map(|(n, _)| n.to_string());
    let set: BTreeSet<String> = env.iter().filter_map(name).collect();
    env.extend(
        profile
            .env
            .iter()
            .filter(|pair| name(pair).is_some_and(|n| !set.contains(&n)))
            .cloned(),
    );
    env
}

/// `KEY=VALUE` for a container: each variable the type lists, from the
/// first source that has it (see the module's documentation), then the
/// request's own variables. A required variable with no value is an error
/// that names it.
pub fn environment(
    settings: &Settings,
    agent_type: &AgentType,
    request_env: &BTreeMap<String, String>,
    user_env: &BTreeMap<String, SecretString>,
) -> Result<Vec<String>> {
    let lookup = |name: &str| -> Option<String> {
        let configured = || {
            settings
                .agent_env_value(name)
                .or_else(|| {
                    agent_type
                        .host_credentials
                        .then(|| settings.host_env_value(name))
                        .flatten()
                })
                .map(|s| s.expose_secret().to_string())
        };
        let nonempty = |v: &String| !v.is_empty();
        request_env
            .get(name)
            .cloned()
            .filter(nonempty)
            .or_else(|| {
                user_env
                    .get(name)
                    .map(|s| s.expose_secret().to_string())
                    .filter(nonempty)
            })
            .or_else(|| configured().filter(nonempty))
    };
    let mut env = BTreeMap::new();
    for name in &agent_type.required_env {
        let value = lookup(name).ok_or_else(|| {
            AgentError::FailedPrecondition(format!(
                "agent type {:?} requires the environment variable {name}: set it as one of \
                 your secrets, or ask the operator to configure it",
                agent_type.id
            ))
        })?;
        env.insert(name.clone(), value);
    }
    for name in &agent_type.optional_env {
        if let Some(value) = lookup(name) {
            env.insert(name.clone(), value);
        }
    }
    for (k, v) in request_env {
        env.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Ok(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
}

/// Read-only binds of the operator's credential files, for types an admin
/// opted in to them; files that do not exist are skipped.
pub fn credential_binds(settings: &Settings, agent_type: &AgentType) -> Vec<String> {
    if !agent_type.host_credentials || settings.credentials_home.is_empty() {
        return vec![];
    }
    let home = Path::new(&settings.credentials_home);
    let mounts = agent_type.credential_mounts;
    [
        (mounts.ssh, ".ssh"),
        (mounts.gitconfig, ".gitconfig"),
        (mounts.git_credentials, ".git-credentials"),
    ]
    .into_iter()
    .filter(|(wanted, _)| *wanted)
    .map(|(_, name)| (home.join(name), name))
    .filter(|(source, _)| source.exists())
    .map(|(source, name)| {
        format!(
            "{}:{}/{name}:ro",
            source.display(),
            settings.container_home.trim_end_matches('/')
        )
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> SecretString {
        SecretString::from(s.to_string())
    }

    fn agent_type(host_credentials: bool) -> AgentType {
        AgentType {
            id: "t".into(),
            name: "t".into(),
            description: String::new(),
            image: "i".into(),
            command: vec![],
            working_dir: "/workspace".into(),
            memory_mb: 64,
            cpu_cores: 1.0,
            pids_limit: 10,
            timeout_seconds: 10,
            capabilities: vec![],
            required_env: vec!["API_KEY".into()],
            optional_env: vec!["GITHUB_TOKEN".into(), "EXTRA".into()],
            credential_mounts: crate::domain::CredentialMounts {
                ssh: true,
                gitconfig: true,
                git_credentials: true,
            },
            network_mode: "none".into(),
            permission_policy: crate::domain::PermissionPolicyKind::AutoApprove,
            enabled: true,
            home_volume: String::new(),
            state_paths: vec![],
            internal: false,
            host_credentials,
        }
    }

    #[test]
    fn the_environment_takes_the_request_then_the_user_then_the_operator() {
        let mut settings = Settings::default();
        settings
            .agent_env
            .insert("API_KEY".into(), key("operator-api-key"));
        settings
            .host_env
            .insert("GITHUB_TOKEN".into(), key("operator-github"));
        let none = BTreeMap::new();
        let nobody = BTreeMap::new();
        let shared = environment(&settings, &agent_type(false), &none, &nobody).unwrap();
        // The operator's configured key is shared; the host's token is not.
        assert_eq!(shared, vec!["API_KEY=operator-api-key"]);
        let opted_in = environment(&settings, &agent_type(true), &none, &nobody).unwrap();
        assert_eq!(
            opted_in,
            vec!["API_KEY=operator-api-key", "GITHUB_TOKEN=operator-github"]
        );
        let user = BTreeMap::from([
            ("API_KEY".to_string(), key("user-api-key")),
            ("GITHUB_TOKEN".to_string(), key("user-github")),
            ("UNLISTED".to_string(), key("never-given")),
        ]);
        let own = environment(&settings, &agent_type(true), &none, &user).unwrap();
        assert_eq!(
            own,
            vec!["API_KEY=user-api-key", "GITHUB_TOKEN=user-github"]
        );
        let request = BTreeMap::from([("API_KEY".to_string(), "from-request".to_string())]);
        let asked = environment(&settings, &agent_type(false), &request, &user).unwrap();
        assert_eq!(
            asked,
            vec!["API_KEY=from-request", "GITHUB_TOKEN=user-github"]
        );
        settings.agent_env.clear();
        let err = environment(&settings, &agent_type(false), &none, &nobody).unwrap_err();
        assert!(err.to_string().contains("API_KEY"), "{err}");
    }

    #[test]
    fn the_operators_files_are_mounted_only_for_opted_in_types() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".ssh")).unwrap();
        std::fs::write(home.path().join(".gitconfig"), "").unwrap();
        let settings = Settings {
            credentials_home: home.path().display().to_string(),
            ..Settings::default()
        };
        assert!(credential_binds(&settings, &agent_type(false)).is_empty());
        let binds = credential_binds(&settings, &agent_type(true));
        assert_eq!(binds.len(), 2, "{binds:?}");
        assert!(binds[0].ends_with(":/home/agent/.ssh:ro"), "{binds:?}");
        assert!(
            binds[1].ends_with(":/home/agent/.gitconfig:ro"),
            "{binds:?}"
        );
    }
}
