//! The Docker side, through bollard: images, agent containers (created
//! with `OpenStdin=true, StdinOnce=false` so they survive the manager),
//! attach streams, exit codes, label-based listing, and `docker exec`.

use std::collections::HashMap;

use bollard::{
    container::AttachContainerResults,
    errors::Error as BollardError,
    models::{ContainerCreateBody, ContainerSummary, HostConfig},
    query_parameters::{
        AttachContainerOptions, CreateContainerOptions, CreateImageOptions, KillContainerOptions,
        ListContainersOptions, LogsOptions, RemoveContainerOptions, StopContainerOptions,
    },
};
use futures::StreamExt;

/// Label holding the task id of an agent container.
pub const LABEL_TASK: &str = "kandev.task_id";
/// Label holding the instance id of an agent container.
pub const LABEL_INSTANCE: &str = "kandev.instance_id";
/// Label naming the manager that owns an agent container.
pub const LABEL_MANAGER: &str = "kandev.manager";
/// Label holding the agent type of an agent container.
pub const LABEL_TYPE: &str = "kandev.agent_type";

/// Output frames of a container.
pub type LogStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<bollard::container::LogOutput, BollardError>> + Send>,
>;

/// Everything needed to create one agent container.
#[derive(Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    /// Entrypoint and arguments; empty keeps the image's own.
    pub command: Vec<String>,
    pub working_dir: String,
    /// `KEY=VALUE`; may hold secrets, so never logged.
    pub env: Vec<String>,
    /// `host:container:ro|rw`.
    pub binds: Vec<String>,
    pub labels: HashMap<String, String>,
    pub memory_bytes: i64,
    pub nano_cpus: i64,
    pub pids_limit: i64,
    pub network_mode: String,
}

impl std::fmt::Debug for ContainerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerSpec")
            .field("name", &self.name)
            .field("image", &self.image)
            .field("binds", &self.binds)
            .finish_non_exhaustive()
    }
}

/// A Docker engine client.
#[derive(Clone)]
pub struct Docker {
    client: bollard::Docker,
}

impl std::fmt::Debug for Docker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Docker").finish_non_exhaustive()
    }
}

fn not_found(err: &BollardError) -> bool {
    matches!(
        err,
        BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

impl Docker {
    /// Connects to `host` (`unix://…`, `tcp://…`), or with the local
    /// defaults when empty.
    pub fn connect(host: &str) -> Result<Self, BollardError> {
        let client = if host.is_empty() {
            bollard::Docker::connect_with_local_defaults()?
        } else {
            bollard::Docker::connect_with_host(host)?
        };
        Ok(Docker { client })
    }

    pub fn client(&self) -> &bollard::Docker {
        &self.client
    }

    pub async fn ping(&self) -> Result<(), String> {
        self.client
            .ping()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Makes sure `image` is present, pulling it when allowed; the error
    /// names the image.
    pub async fn ensure_image(&self, image: &str, pull: bool) -> Result<(), String> {
        match self.client.inspect_image(image).await {
            Ok(_) => return Ok(()),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(format!("cannot inspect image {image}: {e}")),
        }
        if !pull {
            return Err(format!(
                "image {image} is not present on the Docker host and pulling is disabled"
            ));
        }
        let options = CreateImageOptions {
            from_image: Some(image.to_string()),
            ..Default::default()
        };
        let mut pull_stream = self.client.create_image(Some(options), None, None);
        while let Some(step) = pull_stream.next().await {
            if let Err(e) = step {
                return Err(format!(
                    "image {image} is not present on the Docker host and could not be pulled: {e}"
                ));
            }
        }
        Ok(())
    }

    /// Creates the container (not started).
    pub async fn create(&self, spec: &ContainerSpec) -> Result<String, String> {
        let host_config = HostConfig {
            binds: Some(spec.binds.clone()),
            memory: Some(spec.memory_bytes),
            memory_swap: Some(spec.memory_bytes),
            nano_cpus: Some(spec.nano_cpus),
            pids_limit: Some(spec.pids_limit),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            cap_drop: Some(vec!["ALL".into()]),
            network_mode: Some(spec.network_mode.clone()),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            entrypoint: (!spec.command.is_empty()).then(|| spec.command.clone()),
            working_dir: Some(spec.working_dir.clone()),
            env: Some(spec.env.clone()),
            labels: Some(spec.labels.clone()),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(false),
            tty: Some(false),
            host_config: Some(host_config),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: Some(spec.name.clone()),
            ..Default::default()
        };
        self.client
            .create_container(Some(options), body)
            .await
            .map(|r| r.id)
            .map_err(|e| format!("cannot create the container: {e}"))
    }

    /// Attaches to stdin only; output is read with [`Docker::follow_logs`].
    pub async fn attach(&self, id: &str) -> Result<AttachContainerResults, String> {
        let options = AttachContainerOptions {
            stdin: true,
            stdout: false,
            stderr: false,
            stream: true,
            logs: false,
            ..Default::default()
        };
        self.client
            .attach_container(id, Some(options))
            .await
            .map_err(|e| format!("cannot attach to the container: {e}"))
    }

    /// Follows stdout and stderr from the Docker log, each frame prefixed
    /// with its RFC 3339 timestamp, from `since` (unix seconds; 0 = start).
    /// The stream ends when the container stops.
    pub fn follow_logs(&self, id: &str, since: i32) -> LogStream {
        let options = LogsOptions {
            follow: true,
            stdout: true,
            stderr: true,
            since,
            timestamps: true,
            ..Default::default()
        };
        Box::pin(self.client.logs(id, Some(options)))
    }

    pub async fn start(&self, id: &str) -> Result<(), String> {
        self.client
            .start_container(id, None)
            .await
            .map_err(|e| format!("the container failed to start: {e}"))
    }

    /// Waits for the container to exit; its exit code, `None` when unknown.
    pub async fn wait_exit(&self, id: &str) -> Option<i64> {
        let mut wait = self.client.wait_container(id, None);
        match wait.next().await {
            Some(Ok(resp)) => Some(resp.status_code),
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Some(code),
            _ => self.exit_code(id).await,
        }
    }

    /// The exit code of an exited container.
    pub async fn exit_code(&self, id: &str) -> Option<i64> {
        let info = self.client.inspect_container(id, None).await.ok()?;
        let state = info.state?;
        if state.running == Some(true) {
            None
        } else {
            state.exit_code
        }
    }

    /// Whether the container is running (`None` when it does not exist).
    pub async fn is_running(&self, id: &str) -> Option<bool> {
        let info = self.client.inspect_container(id, None).await.ok()?;
        Some(info.state.and_then(|s| s.running).unwrap_or(false))
    }

    /// Stops the container: SIGTERM, then SIGKILL after `grace_secs`.
    pub async fn stop(&self, id: &str, grace_secs: i32) {
        let options = StopContainerOptions {
            t: Some(grace_secs),
            signal: None,
        };
        if let Err(e) = self.client.stop_container(id, Some(options)).await {
            tracing::debug!(container = id, error = %e, "stop");
        }
    }

    /// Kills the container if it runs (errors are ignored: it may be gone).
    pub async fn kill(&self, id: &str) {
        let options = KillContainerOptions {
            signal: "SIGKILL".into(),
        };
        if let Err(e) = self.client.kill_container(id, Some(options)).await {
            tracing::debug!(container = id, error = %e, "kill");
        }
    }

    /// Removes the container, killing it first if needed.
    pub async fn remove(&self, id: &str) {
        let options = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        if let Err(e) = self.client.remove_container(id, Some(options)).await
            && !not_found(&e)
        {
            tracing::warn!(container = id, error = %e, "cannot remove container");
        }
    }

    /// Every container of the manager `manager_id` with an instance label,
    /// running or not.
    pub async fn list_managed(&self, manager_id: &str) -> Result<Vec<ContainerSummary>, String> {
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_string(),
            vec![
                LABEL_INSTANCE.to_string(),
                format!("{LABEL_MANAGER}={manager_id}"),
            ],
        );
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        self.client
            .list_containers(Some(options))
            .await
            .map_err(|e| e.to_string())
    }
}
