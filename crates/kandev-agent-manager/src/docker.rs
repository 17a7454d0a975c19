//! The Docker side, through bollard: images, agent containers (created
//! with `OpenStdin=true, StdinOnce=false` so they survive the manager),
//! attach streams, exit codes, label-based listing, and `docker exec`.
//!
//! Errors tell an engine that did not answer ([`DockerError::Unreachable`]:
//! down, restarting, or the connection broke) from one that answered with
//! an error, so callers can wait for a restarting engine instead of
//! blaming the agent.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use bollard::{
    container::AttachContainerResults,
    errors::Error as BollardError,
    models::EventMessage,
    models::{
        ContainerCreateBody, ContainerSummary, HostConfig, HostConfigLogConfig, Mount, MountType,
        MountVolumeOptions,
    },
    query_parameters::{
        AttachContainerOptions, CreateContainerOptions, CreateImageOptions, EventsOptions,
        KillContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
        StopContainerOptions,
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
/// Label holding the instance's turn number a container was created for.
pub const LABEL_TURN: &str = "kandev.turn";

/// Output frames of a container.
pub type LogStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<bollard::container::LogOutput, BollardError>> + Send>,
>;

/// Why a Docker call failed; the message says what was attempted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerError {
    /// The engine did not answer: it is down or restarting, or the
    /// connection to it broke.
    #[error("{0}")]
    Unreachable(String),
    /// The engine answered with an error.
    #[error("{0}")]
    Engine(String),
}

impl DockerError {
    /// Classifies a bollard error; `what` names what failed.
    fn from_bollard(what: &str, err: BollardError) -> Self {
        if unreachable(&err) {
            DockerError::Unreachable(format!("{what}: the Docker engine is unreachable ({err})"))
        } else {
            DockerError::Engine(format!("{what}: {err}"))
        }
    }

    pub fn is_unreachable(&self) -> bool {
        matches!(self, DockerError::Unreachable(_))
    }
}

impl From<DockerError> for crate::domain::AgentError {
    fn from(err: DockerError) -> Self {
        match err {
            // Worth retrying once the engine is back.
            DockerError::Unreachable(m) => crate::domain::AgentError::Unavailable(m),
            DockerError::Engine(m) => crate::domain::AgentError::FailedPrecondition(m),
        }
    }
}

/// Whether `err` means the engine did not answer (as opposed to answering
/// with an error).
pub fn unreachable(err: &BollardError) -> bool {
    matches!(
        err,
        BollardError::IOError { .. }
            | BollardError::HyperResponseError { .. }
            | BollardError::HyperLegacyError { .. }
            | BollardError::HttpClientError { .. }
            | BollardError::RequestTimeoutError
            | BollardError::SocketNotFoundError(_)
    )
}

/// What the engine says of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Running,
    /// Created but not running, or exited; the exit code once it ran.
    Exited(Option<i64>),
    /// No such container.
    Missing,
}

/// Everything needed to create one agent container.
#[derive(Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    /// Entrypoint and arguments; empty keeps the image's own.
    pub command: Vec<String>,
    pub working_dir: String,
    /// `uid:gid` the agent runs as: never root.
    pub user: String,
    /// `KEY=VALUE`; may hold secrets, so never logged.
    pub env: Vec<String>,
    /// `host:container:ro|rw`.
    pub binds: Vec<String>,
    /// A named volume kept across containers (an agent type's home).
    pub home: Option<HomeVolume>,
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
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

/// A named Docker volume mounted read-write at `target`; created on first
/// use with the engine's default driver and `labels`, and the image's
/// content at `target` copied in.
#[derive(Debug, Clone, PartialEq)]
pub struct HomeVolume {
    pub name: String,
    pub target: String,
    pub labels: HashMap<String, String>,
}

/// The `kandev.home` label of agent home volumes (its value: the agent type).
pub const LABEL_HOME: &str = "kandev.home";

/// A Docker engine client. The underlying bollard client is made on
/// first use: bollard refuses a unix socket that does not exist yet, and
/// the manager must start (and keep going) while the engine is down.
#[derive(Clone)]
pub struct Docker {
    host: Arc<str>,
    client: Arc<Mutex<Option<bollard::Docker>>>,
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
    /// A missing socket is not an error here: the engine may be starting.
    pub fn connect(host: &str) -> Result<Self, BollardError> {
        let docker = Docker {
            host: host.into(),
            client: Arc::new(Mutex::new(None)),
        };
        match docker.api() {
            Ok(_) | Err(BollardError::SocketNotFoundError(_)) => Ok(docker),
            Err(e) => Err(e),
        }
    }

    /// The bollard client, made now if it was not yet.
    pub fn api(&self) -> Result<bollard::Docker, BollardError> {
        let mut slot = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let client = if self.host.is_empty() {
            bollard::Docker::connect_with_local_defaults()?
        } else {
            bollard::Docker::connect_with_host(&self.host)?
        };
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Runs one engine call on the client; either failing (no client, or
    /// the call) is classified with `what` as the message.
    async fn call<T, Fut>(
        &self,
        what: &str,
        f: impl FnOnce(bollard::Docker) -> Fut,
    ) -> Result<T, DockerError>
    where
        Fut: std::future::Future<Output = Result<T, BollardError>>,
    {
        let answer = match self.api() {
            Ok(client) => f(client).await,
            Err(e) => Err(e),
        };
        answer.map_err(|e| {
            // `what` is always a literal: a bounded label.
            metrics::counter!(crate::metric_names::DOCKER_ERRORS, "operation" => what.to_owned())
                .increment(1);
            DockerError::from_bollard(what, e)
        })
    }

    pub async fn ping(&self) -> Result<(), DockerError> {
        let answer = match self.api() {
            Ok(client) => client.ping().await.map(|_| ()),
            Err(e) => Err(e),
        };
        answer.map_err(|e| {
            DockerError::Unreachable(format!("the Docker engine does not answer ({e})"))
        })
    }

    /// Waits until the engine answers a ping, polling with a backoff from
    /// 100 ms to 2 s; the last error once `within` has passed.
    pub async fn wait_reachable(&self, within: Duration) -> Result<(), DockerError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut delay = Duration::from_millis(100);
        loop {
            let err = match self.ping().await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(err);
            }
            tokio::time::sleep(delay.min(deadline - now)).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// Whether the engine has `image` (false when it does not answer).
    pub async fn has_image(&self, image: &str) -> bool {
        match self.api() {
            Ok(api) => api.inspect_image(image).await.is_ok(),
            Err(_) => false,
        }
    }

    /// The labels of `image`; `None` when the host does not have it (or
    /// the engine does not answer).
    pub async fn image_labels(&self, image: &str) -> Option<HashMap<String, String>> {
        let inspected = self.api().ok()?.inspect_image(image).await.ok()?;
        Some(inspected.config.and_then(|c| c.labels).unwrap_or_default())
    }

    /// Whether the engine has a network of this name.
    pub async fn has_network(&self, name: &str) -> bool {
        match self.api() {
            Ok(api) => api
                .inspect_network(
                    name,
                    None::<bollard::query_parameters::InspectNetworkOptions>,
                )
                .await
                .is_ok(),
            Err(_) => false,
        }
    }

    /// Makes sure `image` is present, pulling it when allowed; the error
    /// names the image.
    pub async fn ensure_image(&self, image: &str, pull: bool) -> Result<(), DockerError> {
        match self
            .api()
            .map_err(|e| DockerError::from_bollard(&format!("cannot inspect image {image}"), e))?
            .inspect_image(image)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if not_found(&e) => {}
            Err(e) => {
                return Err(DockerError::from_bollard(
                    &format!("cannot inspect image {image}"),
                    e,
                ));
            }
        }
        if !pull {
            return Err(DockerError::Engine(format!(
                "image {image} is not present on the Docker host and pulling is disabled"
            )));
        }
        let options = CreateImageOptions {
            from_image: Some(image.to_string()),
            ..Default::default()
        };
        let mut pull_stream = self
            .api()
            .map_err(|e| DockerError::from_bollard(&format!("cannot pull image {image}"), e))?
            .create_image(Some(options), None, None);
        while let Some(step) = pull_stream.next().await {
            if let Err(e) = step {
                return Err(DockerError::from_bollard(
                    &format!(
                        "image {image} is not present on the Docker host and could not be pulled"
                    ),
                    e,
                ));
            }
        }
        Ok(())
    }

    /// Creates the container (not started), logging as
    /// [`agent_log_config`] says.
    pub async fn create(&self, spec: &ContainerSpec) -> Result<String, DockerError> {
        let host_config = HostConfig {
            binds: Some(spec.binds.clone()),
            mounts: spec.home.as_ref().map(|home| {
                vec![Mount {
                    target: Some(home.target.clone()),
                    source: Some(home.name.clone()),
                    typ: Some(MountType::VOLUME),
                    read_only: Some(false),
                    volume_options: Some(MountVolumeOptions {
                        labels: Some(home.labels.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]
            }),
            memory: Some(spec.memory_bytes),
            memory_swap: Some(spec.memory_bytes),
            nano_cpus: Some(spec.nano_cpus),
            pids_limit: Some(spec.pids_limit),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            cap_drop: Some(vec!["ALL".into()]),
            network_mode: Some(spec.network_mode.clone()),
            log_config: Some(agent_log_config()),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            entrypoint: (!spec.command.is_empty()).then(|| spec.command.clone()),
            working_dir: Some(spec.working_dir.clone()),
            user: Some(spec.user.clone()),
            env: Some(spec.env.clone()),
            labels: Some(spec.labels.clone()),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(false),
            tty: Some(false),
            // With no network the engine joins no network at all: no
            // endpoint on its `none` network, whose locks in Docker 20.10's
            // libnetwork can deadlock the engine when containers start and
            // exit at once (seen in the soak test). The container still has
            // a network namespace of its own holding only `lo`.
            network_disabled: (spec.network_mode == "none").then_some(true),
            host_config: Some(host_config),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: Some(spec.name.clone()),
            ..Default::default()
        };
        let id = self
            .call("cannot create the container", |c| async move {
                c.create_container(Some(options), body).await.map(|r| r.id)
            })
            .await?;
        if let Some(home) = &spec.home {
            self.give_home_to(home, &spec.user).await;
        }
        Ok(id)
    }

    /// Gives a fresh home volume's root to the agent's `uid:gid`: a volume
    /// whose path the image lacks starts as root's, and the agent runs as
    /// another user. Only a manager running as root on the engine's host
    /// can (the volume's directory is the engine's); elsewhere the image
    /// must hold the path, owned by the agent's user (as `dockerfiles/*`
    /// do for `/home/agent`).
    async fn give_home_to(&self, home: &HomeVolume, user: &str) {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let Some((uid, gid)) = user
            .split_once(':')
            .and_then(|(u, g)| Some((u.parse::<u32>().ok()?, g.parse::<u32>().ok()?)))
        else {
            return;
        };
        let Ok(volume) = self
            .call("cannot inspect the home volume", |c| async move {
                c.inspect_volume(&home.name).await
            })
            .await
        else {
            return;
        };
        let root = std::path::Path::new(&volume.mountpoint);
        let owned_by_root = std::fs::symlink_metadata(root)
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0 && m.is_dir());
        if owned_by_root && let Err(e) = std::os::unix::fs::lchown(root, Some(uid), Some(gid)) {
            tracing::warn!(volume = %home.name, error = %e, "cannot give the home volume to the agent's user");
        }
    }

    /// Attaches to the container's stdin and, with `output`, to its stdout
    /// and stderr as they are written (not what was written before).
    pub async fn attach(
        &self,
        id: &str,
        output: bool,
    ) -> Result<AttachContainerResults, DockerError> {
        let options = AttachContainerOptions {
            stdin: true,
            stdout: output,
            stderr: output,
            stream: true,
            logs: false,
            ..Default::default()
        };
        self.call("cannot attach to the container", |c| async move {
            c.attach_container(id, Some(options)).await
        })
        .await
    }

    /// Follows stdout and stderr from the Docker log, from the start; the
    /// stream ends when the container stops. The same bytes as the attach
    /// stream, kept by the engine: what a restarted manager re-reads.
    pub fn follow_logs(&self, id: &str) -> LogStream {
        let options = LogsOptions {
            follow: true,
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        match self.api() {
            Ok(client) => Box::pin(client.logs(id, Some(options))),
            Err(e) => Box::pin(futures::stream::once(async move { Err(e) })),
        }
    }

    pub async fn start(&self, id: &str) -> Result<(), DockerError> {
        self.call("the container failed to start", |c| async move {
            c.start_container(id, None).await
        })
        .await
    }

    /// Waits for the container to exit; its exit code, `None` when unknown.
    pub async fn wait_exit(&self, id: &str) -> Option<i64> {
        let Ok(client) = self.api() else {
            return None;
        };
        let mut wait = client.wait_container(id, None);
        match wait.next().await {
            Some(Ok(resp)) => Some(resp.status_code),
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Some(code),
            _ => self.exit_code(id).await,
        }
    }

    /// Whether the container runs, exited (with its code) or is gone.
    pub async fn state(&self, id: &str) -> Result<ContainerState, DockerError> {
        match self
            .api()
            .map_err(|e| DockerError::from_bollard("cannot inspect the container", e))?
            .inspect_container(id, None)
            .await
        {
            Ok(info) => {
                let state = info.state.unwrap_or_default();
                Ok(if state.running == Some(true) {
                    ContainerState::Running
                } else {
                    ContainerState::Exited(state.exit_code)
                })
            }
            Err(e) if not_found(&e) => Ok(ContainerState::Missing),
            Err(e) => Err(DockerError::from_bollard("cannot inspect the container", e)),
        }
    }

    /// The exit code of an exited container.
    pub async fn exit_code(&self, id: &str) -> Option<i64> {
        match self.state(id).await {
            Ok(ContainerState::Exited(code)) => code,
            _ => None,
        }
    }

    /// Whether the container is running (`None` when it does not exist or
    /// the engine does not answer).
    pub async fn is_running(&self, id: &str) -> Option<bool> {
        match self.state(id).await {
            Ok(ContainerState::Running) => Some(true),
            Ok(ContainerState::Exited(_)) => Some(false),
            Ok(ContainerState::Missing) | Err(_) => None,
        }
    }

    /// Stops the container: SIGTERM, then SIGKILL after `grace_secs`.
    pub async fn stop(&self, id: &str, grace_secs: i32) {
        let options = StopContainerOptions {
            t: Some(grace_secs),
            signal: None,
        };
        let Ok(client) = self.api() else {
            return;
        };
        if let Err(e) = client.stop_container(id, Some(options)).await {
            tracing::debug!(container = id, error = %e, "stop");
        }
    }

    /// Kills the container if it runs (errors are ignored: it may be gone).
    pub async fn kill(&self, id: &str) {
        let options = KillContainerOptions {
            signal: "SIGKILL".into(),
        };
        let Ok(client) = self.api() else {
            return;
        };
        if let Err(e) = client.kill_container(id, Some(options)).await {
            tracing::debug!(container = id, error = %e, "kill");
        }
    }

    /// Removes the container, killing it first if needed. An engine that
    /// does not answer leaves it for the next reconciliation.
    pub async fn remove(&self, id: &str) {
        let options = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        let removed = match self.api() {
            Ok(client) => client.remove_container(id, Some(options)).await,
            Err(e) => Err(e),
        };
        match removed {
            Ok(()) => {}
            Err(e) if not_found(&e) => {}
            Err(e) if unreachable(&e) => {
                tracing::warn!(container = id, error = %e, "the Docker engine is unreachable; the container is removed once it is back");
            }
            Err(e) => tracing::warn!(container = id, error = %e, "cannot remove container"),
        }
    }

    /// The signal of the last `kill` the engine delivered to the container
    /// since `since` (unix seconds), from the engine's recent-events
    /// buffer: a container stopped by `docker stop`, `docker kill` or an
    /// engine shutting down has one; an agent that exited by itself has
    /// none.
    pub async fn last_kill_signal(
        &self,
        id: &str,
        since: i64,
    ) -> Result<Option<String>, DockerError> {
        let filters = HashMap::from([
            ("container".to_string(), vec![id.to_string()]),
            ("event".to_string(), vec!["kill".to_string()]),
        ]);
        let until = chrono::Utc::now().timestamp() + 1;
        let mut events = self
            .api()
            .map_err(|e| DockerError::from_bollard("cannot read events", e))?
            .events(Some(EventsOptions {
                since: Some(since.to_string()),
                until: Some(until.to_string()),
                filters: Some(filters),
            }));
        let mut signal = None;
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| DockerError::from_bollard("cannot read events", e))?;
            signal = event
                .actor
                .and_then(|a| a.attributes)
                .and_then(|mut a| a.remove("signal"))
                .or(signal);
        }
        Ok(signal)
    }

    /// Whether the engine stops answering within `within` (an engine that
    /// is shutting down does, once it has stopped its containers).
    pub async fn goes_away(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if self.ping().await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        false
    }

    /// The engine's event stream for the containers of `manager_id`; it
    /// stays open as long as the engine runs, so its end (or error) is how
    /// an engine restart is noticed.
    pub fn container_events(
        &self,
        manager_id: &str,
    ) -> futures::stream::BoxStream<'static, Result<EventMessage, BollardError>> {
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            (
                "label".to_string(),
                vec![format!("{LABEL_MANAGER}={manager_id}")],
            ),
        ]);
        match self.api() {
            Ok(client) => client
                .events(Some(EventsOptions {
                    filters: Some(filters),
                    ..Default::default()
                }))
                .boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    }

    /// Every container of the manager `manager_id` with an instance label,
    /// running or not.
    pub async fn list_managed(
        &self,
        manager_id: &str,
    ) -> Result<Vec<ContainerSummary>, DockerError> {
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
        self.call("cannot list containers", |c| async move {
            c.list_containers(Some(options)).await
        })
        .await
    }
}

/// How agent containers log, whatever the engine's defaults: their log is
/// where a restarted manager reads the output back from the start (lines
/// counted), so it must exist and must not lose its first lines to
/// rotation. Docker's `local` driver (its most efficient one that `docker
/// logs` reads), every option set so that none of the engine's defaults is
/// merged in: rotation only past 10 files of 1 GiB, rotated files not
/// compressed.
pub fn agent_log_config() -> HostConfigLogConfig {
    let options = [
        ("max-size", "1g"),
        ("max-file", "10"),
        ("compress", "false"),
    ];
    HostConfigLogConfig {
        typ: Some("local".into()),
        config: Some(
            options
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        ),
    }
}
