//! Kandev in one process: the task service, the agent manager, the
//! orchestrator and the gateway, each as it runs on its own, wired
//! together on one machine:
//!
//! - state in SQLite files of one data directory (`tasks.db`, `agents.db`,
//!   `orchestrator.db`, `gateway.db`), the outbox and the feed among it;
//! - the durable streams (`task.*`, `agent.*`, `acp.message.*`) in
//!   `streams.db` ([`LocalStreams`]: the same order and at-least-once
//!   delivery as JetStream, kept across a restart), the live feed in
//!   process ([`LocalLive`]);
//! - the services' gRPC on loopback ports of their own, with a service
//!   token made for this run; only the gateway's port (REST, WebSocket, UI)
//!   is meant for users;
//! - Docker, as ever, runs the agents.
//!
//! Configuration is the services' own (`KANDEV_*` variables and the TOML
//! file), with the data directory's paths as defaults; what wires the parts
//! together (listen addresses of the internal ports, databases, peers'
//! URLs, the service token) is set here and not configurable.
//!
//! [`export`] (`kandev export`) moves an installation's SQLite files into
//! the Postgres database of the four-service deployment.

pub mod export;

use std::{
    fs::File,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use figment::{Figment, providers::Serialized};
use kandev_common::{CancellationToken, config, serve};
use kandev_events::{
    EventBus,
    durable::LocalStreams,
    live::{Live, LocalLive},
};
use serde::{Serialize, de::DeserializeOwned};

/// The file of the key that seals users' secrets, in the data directory.
pub const SECRETS_KEY_FILE: &str = "secrets-key";

/// The parts whose state is a SQLite file of the data directory (the
/// streams' file, `streams.db`, is not one: its content is in flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    TaskService,
    AgentManager,
    Orchestrator,
    Gateway,
}

impl Part {
    /// In the order they are built (and exported).
    pub const ALL: [Part; 4] = [
        Part::TaskService,
        Part::AgentManager,
        Part::Orchestrator,
        Part::Gateway,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Part::TaskService => "task service",
            Part::AgentManager => "agent manager",
            Part::Orchestrator => "orchestrator",
            Part::Gateway => "gateway",
        }
    }

    /// Its SQLite file in the data directory.
    pub fn file(self) -> &'static str {
        match self {
            Part::TaskService => "tasks.db",
            Part::AgentManager => "agents.db",
            Part::Orchestrator => "orchestrator.db",
            Part::Gateway => "gateway.db",
        }
    }

    fn database_url(self, dir: &Path) -> String {
        sqlite(dir, self.file())
    }
}

/// The file of the durable streams in the data directory.
const STREAMS_FILE: &str = "streams.db";

/// How many live messages a follower may fall behind before it misses
/// some (and reads the gap from the stored feed).
const LIVE_CAPACITY: usize = 4096;

/// Why `kandev` could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration of the {part}: {source}")]
    Config {
        part: &'static str,
        source: config::ConfigError,
    },
    #[error("the streams: {0}")]
    Streams(#[from] kandev_events::BusError),
    #[error("the task service: {0}")]
    TaskService(#[from] kandev_task_service::startup::StartupError),
    #[error("the agent manager: {0}")]
    AgentManager(#[from] kandev_agent_manager::startup::StartupError),
    #[error("the orchestrator: {0}")]
    Orchestrator(#[from] kandev_orchestrator::startup::StartupError),
    #[error("the gateway: {0}")]
    Gateway(#[from] kandev_gateway::startup::StartupError),
    #[error("another kandev runs on the data directory {0}")]
    Locked(PathBuf),
    #[error("{0}")]
    Setup(String),
}

/// One `kandev` per data directory: an exclusive lock on its `kandev.lock`,
/// held while the process runs (the system releases it however the process
/// ends) and taken by `kandev export` too.
#[derive(Debug)]
pub struct DataDirLock(#[allow(dead_code)] File);

impl DataDirLock {
    pub fn acquire(dir: &Path) -> Result<DataDirLock, Error> {
        let path = dir.join("kandev.lock");
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| Error::DataDir {
                path: path.clone(),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => Ok(DataDirLock(file)),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked(dir.to_path_buf())),
            Err(std::fs::TryLockError::Error(source)) => Err(Error::DataDir { path, source }),
        }
    }
}

/// The four parts, bound to their ports, not serving yet.
pub struct Kandev {
    _lock: DataDirLock,
    data_dir: PathBuf,
    streams: LocalStreams,
    tasks: kandev_task_service::Application,
    agents: kandev_agent_manager::Application,
    orchestrator: kandev_orchestrator::Application,
    gateway: kandev_gateway::Application,
}

/// Drops the agents' output once the feed stored it, every second (the
/// feed is its one consumer here, known from the start), and stream events
/// older than JetStream keeps them, hourly.
async fn prune(streams: LocalStreams, stop: CancellationToken) {
    let mut often = tokio::time::interval(Duration::from_secs(1));
    often.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut hourly = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = often.tick() => {
                if let Err(err) = streams.prune_consumed(kandev_orchestrator::feed::ACP_STREAM).await {
                    tracing::warn!(%err, "pruning the agents' stored output failed");
                }
            }
            _ = hourly.tick() => {
                match streams.prune(kandev_events::bus::STREAM_MAX_AGE).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(events = n, "dropped stream events older than 7 days"),
                    Err(err) => tracing::warn!(%err, "pruning the streams failed"),
                }
            }
        }
    }
}

/// One part's settings: its defaults, then `defaults` (the data
/// directory's paths), then the file and `KANDEV_*`, then `wiring`.
fn settings<T>(
    part: Part,
    file: Option<&Path>,
    defaults: &[(&str, String)],
    wiring: &[(&str, String)],
) -> Result<T, Error>
where
    T: Serialize + DeserializeOwned + Default + config::Validate,
{
    let failed = |source| Error::Config {
        part: part.name(),
        source,
    };
    let mut base = Figment::from(Serialized::defaults(T::default()));
    for (key, value) in defaults {
        base = base.merge(Serialized::default(key, value));
    }
    let mut figment = config::figment_over(base, file).map_err(failed)?;
    for (key, value) in wiring {
        figment = figment.merge(Serialized::default(key, value));
    }
    config::load_from(figment).map_err(failed)
}

fn sqlite(dir: &Path, file: &str) -> String {
    format!("sqlite://{}", dir.join(file).display())
}

/// 48 random letters and digits (about 280 bits): a secret of the 32
/// bytes or more that service tokens and sealing keys need.
fn long_secret() -> String {
    format!(
        "{}{}",
        kandev_gateway::first_start::random_password(),
        kandev_gateway::first_start::random_password()
    )
}

fn http(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

/// The data directory, created when missing, as an absolute path.
fn open_data_dir(data_dir: &Path) -> Result<PathBuf, Error> {
    let failed = |source| Error::DataDir {
        path: data_dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(data_dir).map_err(failed)?;
    data_dir.canonicalize().map_err(failed)
}

/// What the parts are built from: the data directory, the configuration
/// file, their shared token and a readiness that always holds.
struct Parts<'a> {
    dir: &'a Path,
    file: Option<&'a Path>,
    token: String,
    ready: serve::ReadinessCheck,
}

impl Parts<'_> {
    /// One part's settings (see [`settings`]), listening on a port of its
    /// own on 127.0.0.1, on its database file, with the shared token and
    /// `wiring`.
    fn settings<T>(
        &self,
        part: Part,
        defaults: &[(&str, String)],
        wiring: &[(&str, String)],
    ) -> Result<T, Error>
    where
        T: Serialize + DeserializeOwned + Default + config::Validate,
    {
        let mut all = vec![
            ("listen_addr", "127.0.0.1:0".to_string()),
            ("database_url", part.database_url(self.dir)),
            ("service_token", self.token.clone()),
        ];
        all.extend(wiring.iter().cloned());
        settings(part, self.file, defaults, &all)
    }

    /// The agent manager, with its clones in the data directory. Users can
    /// store secrets: the key that seals them is made on first start and
    /// kept, unless KANDEV_SECRETS_KEY gives one.
    async fn agent_manager(
        &self,
        bus: Arc<dyn EventBus>,
    ) -> Result<kandev_agent_manager::Application, Error> {
        let workspaces = self.dir.join("workspaces").display().to_string();
        let mut agent_settings: kandev_agent_manager::Settings =
            self.settings(Part::AgentManager, &[("workspaces_root", workspaces)], &[])?;
        if agent_settings.secrets_key.is_none() {
            let (key, _) =
                kandev_gateway::first_start::kept(self.dir, SECRETS_KEY_FILE, long_secret)
                    .map_err(|source| Error::DataDir {
                        path: self.dir.join(SECRETS_KEY_FILE),
                        source,
                    })?;
            agent_settings.secrets_key = Some(key);
        }
        Ok(kandev_agent_manager::Application::build_with_bus(
            agent_settings,
            bus,
            self.ready.clone(),
        )
        .await?)
    }

    /// The orchestrator, on the one agent manager as its pool.
    async fn orchestrator(
        &self,
        tasks: &kandev_task_service::Application,
        agents: &kandev_agent_manager::Application,
        streams: &LocalStreams,
        live: Arc<dyn Live>,
    ) -> Result<kandev_orchestrator::Application, Error> {
        let orchestrator_settings: kandev_orchestrator::Settings = self.settings(
            Part::Orchestrator,
            &[],
            &[
                ("task_service_url", http(tasks.local_addr())),
                ("agent_manager_url", http(agents.local_addr())),
            ],
        )?;
        let control = kandev_orchestrator::pool::ManagerPool::new(
            &http(agents.local_addr()),
            &self.token.clone().into(),
            Duration::from_millis(orchestrator_settings.manager_grace_ms),
        )
        .map_err(Error::Setup)?;
        Ok(kandev_orchestrator::Application::build_on(
            orchestrator_settings,
            Arc::new(control),
            kandev_orchestrator::startup::EventStreams {
                streams: Arc::new(streams.clone()),
                live,
                ready: self.ready.clone(),
            },
        )
        .await?)
    }
}

impl Kandev {
    /// Builds every part on `data_dir` (created when missing), with the
    /// configuration `file` if any, and binds their ports.
    pub async fn build(data_dir: &Path, file: Option<&Path>) -> Result<Kandev, Error> {
        let data_dir = open_data_dir(data_dir)?;
        let lock = DataDirLock::acquire(&data_dir)?;
        let streams = LocalStreams::open(&sqlite(&data_dir, STREAMS_FILE)).await?;
        let live: Arc<dyn Live> = Arc::new(LocalLive::new(LIVE_CAPACITY));
        let parts = Parts {
            dir: &data_dir,
            file,
            // The parts' own secret for this run: they restart together.
            token: long_secret(),
            ready: serve::sync_check(|| Ok(())),
        };
        let bus: Arc<dyn EventBus> = Arc::new(streams.clone());
        let tasks = kandev_task_service::Application::build_with_bus(
            parts.settings(Part::TaskService, &[], &[])?,
            bus.clone(),
            parts.ready.clone(),
        )
        .await?;
        let agents = parts.agent_manager(bus).await?;
        let orchestrator = parts
            .orchestrator(&tasks, &agents, &streams, live.clone())
            .await?;
        // The one part on the port users configure.
        let gateway_settings: kandev_gateway::Settings = settings(
            Part::Gateway,
            file,
            &[("data_dir", data_dir.display().to_string())],
            &[
                ("database_url", Part::Gateway.database_url(&data_dir)),
                ("service_token", parts.token.clone()),
                ("task_service_url", http(tasks.local_addr())),
                ("agent_manager_url", http(agents.local_addr())),
                ("orchestrator_url", http(orchestrator.local_addr())),
            ],
        )?;
        let feeds = kandev_gateway::stream::live::LiveFeeds::new(
            live,
            gateway_settings.stream_client_buffer,
        );
        let gateway = kandev_gateway::Application::build_on(
            gateway_settings,
            feeds,
            ("bus", parts.ready.clone()),
        )
        .await?;
        Ok(Kandev {
            _lock: lock,
            data_dir,
            streams,
            tasks,
            agents,
            orchestrator,
            gateway,
        })
    }

    /// The gateway's address: the UI, the REST API and the WebSocket.
    pub fn local_addr(&self) -> SocketAddr {
        self.gateway.local_addr()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Serves until `shutdown` fires: the gateway stops first, then the
    /// orchestrator, then the agent manager and the task service, so every
    /// part drains what the one before handed it.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), Error> {
        let inner = CancellationToken::new();
        let pruning = tokio::spawn(prune(self.streams.clone(), inner.clone()));
        let tasks = tokio::spawn(self.tasks.run_until_stopped(inner.clone()));
        let agents = tokio::spawn(self.agents.run_until_stopped(inner.clone()));
        let orchestrator_stop = CancellationToken::new();
        let orchestrator = tokio::spawn(
            self.orchestrator
                .run_until_stopped(orchestrator_stop.clone()),
        );
        let gateway = self.gateway.run_until_stopped(shutdown).await;
        orchestrator_stop.cancel();
        let orchestrator = orchestrator.await;
        inner.cancel();
        let _ = pruning.await;
        let (tasks, agents) = (tasks.await, agents.await);
        self.streams.close().await;
        let joined = |e: tokio::task::JoinError| Error::Setup(format!("a part panicked: {e}"));
        gateway?;
        orchestrator.map_err(joined)??;
        agents.map_err(joined)??;
        tasks.map_err(joined)??;
        Ok(())
    }
}
