//! Harness of Kandev's end-to-end suite.
//!
//! [`Stack`] runs the four real service binaries (`kandev-task-service`,
//! `kandev-agent-manager`, `kandev-orchestrator`, `kandev-gateway`) as
//! separate processes on free ports, with a fresh Postgres database
//! ([`TestDb`]), a private NATS with JetStream ([`OwnNats`]) and the Docker
//! engine with the mock-agent image ([`kandev_testkit::ensure_docker`]).
//! Tests drive the stack only through the gateway: [`Api`] for REST and
//! [`Feed`] for a task's WebSocket stream.
//!
//! The binaries are taken from the cargo target directory of the test
//! binary itself (`target/debug/<bin>`); `scripts/test` builds them first.
//! Each process's output goes to `target/e2e-logs/<test>/<service>.log`.

use std::{
    collections::BTreeMap,
    fs::OpenOptions,
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use kandev_testkit::{OwnNats, TestDb, free_port, remove_containers};
pub use kandev_testkit::{ensure_agent_base, ensure_seed_agent_image, eventually};
use serde_json::{Value, json};
use tokio::{net::TcpStream, sync::Semaphore, time::Instant};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{self as tg, client::IntoClientRequest},
};

pub use serde_json;

pub mod agents;
pub mod fixtures;
pub mod trackers;

pub use fixtures::{check_named, is_prompt_with, merged, mock_task, mock_tasks_through, mock_type};

/// The administrator every stack is bootstrapped with.
pub const ADMIN: &str = "admin";
pub const ADMIN_PASSWORD: &str = "e2e-admin-password";
const JWT_SECRET: &str = "e2e-jwt-secret-e2e-jwt-secret-e2e-jwt-secret";

/// Stacks running at once (each is four services, a NATS server and
/// agents; the machines running this are small).
static STACKS: Semaphore = Semaphore::const_new(2);

/// One of the four services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Svc {
    TaskService,
    AgentManager,
    Orchestrator,
    Gateway,
}

impl Svc {
    pub const ALL: [Svc; 4] = [
        Svc::TaskService,
        Svc::AgentManager,
        Svc::Orchestrator,
        Svc::Gateway,
    ];

    /// Its user in `deploy/nats/nats.conf`.
    pub fn nats_user(self) -> &'static str {
        match self {
            Svc::TaskService => "task-service",
            Svc::AgentManager => "agent-manager",
            Svc::Orchestrator => "orchestrator",
            Svc::Gateway => "gateway",
        }
    }

    pub fn bin(self) -> &'static str {
        match self {
            Svc::TaskService => "kandev-task-service",
            Svc::AgentManager => "kandev-agent-manager",
            Svc::Orchestrator => "kandev-orchestrator",
            Svc::Gateway => "kandev-gateway",
        }
    }
}

/// Knobs of a stack.
#[derive(Debug, Clone)]
pub struct Options {
    /// `KANDEV_MAX_CONCURRENT` of the orchestrator.
    pub max_concurrent: u32,
    /// More variables per service, set after (so over) the defaults.
    pub env: Vec<(Svc, String, String)>,
    /// NATS servers: 1, or a cluster (3) with streams replicated on each.
    pub nats_nodes: usize,
    /// Each service on a SQLite file of its own (in the stack's directory)
    /// instead of Postgres: the storage of the one-machine `kandev`.
    pub sqlite: bool,
    /// The `kandev` binary (the four services in one process, SQLite and
    /// in-process streams) instead of four processes, Postgres and NATS. It
    /// is the stack's `Svc::Gateway` (its port is the gateway's); the other
    /// services have no process of their own.
    pub single: bool,
}

impl Options {
    /// The default stack with every service on SQLite.
    pub fn sqlite() -> Options {
        Options {
            sqlite: true,
            ..Options::default()
        }
    }

    /// The default stack as the `kandev` binary.
    pub fn single() -> Options {
        Options {
            sqlite: true,
            single: true,
            ..Options::default()
        }
    }

    /// These options with `key=value` in the environment of `svc`.
    pub fn with(mut self, svc: Svc, key: &str, value: impl Into<String>) -> Options {
        self.env.push((svc, key.into(), value.into()));
        self
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_concurrent: 4,
            env: Vec::new(),
            nats_nodes: 1,
            sqlite: false,
            single: false,
        }
    }
}

/// The `kandev` binary's one process, in place of the four `procs`: their
/// settings in one environment (the gateway's listen address), without
/// what `kandev` wires itself (databases, NATS, peers, the token).
fn single_binary(procs: Vec<Proc>, port: u16, dir: &std::path::Path) -> Proc {
    let wired = |k: &str| {
        k.starts_with("KANDEV_NATS_")
            || k.starts_with("KANDEV_DATABASE_")
            || k == "KANDEV_SERVICE_TOKEN"
            || [
                "KANDEV_TASK_SERVICE_URL",
                "KANDEV_AGENT_MANAGER_URL",
                "KANDEV_ORCHESTRATOR_URL",
            ]
            .contains(&k)
    };
    let mut env: Vec<(String, String)> = Vec::new();
    for proc in &procs {
        for (k, v) in proc.env.iter().filter(|(k, _)| !wired(k)) {
            match env.iter_mut().find(|(e, _)| e == k) {
                Some(kept) if proc.svc == Svc::Gateway => kept.1 = v.clone(),
                Some(_) => {}
                None => env.push((k.clone(), v.clone())),
            }
        }
    }
    env.push((
        "KANDEV_DATA_DIR".into(),
        dir.join("data").display().to_string(),
    ));
    Proc {
        svc: Svc::Gateway,
        replica: 0,
        port,
        env,
        child: None,
        starts: 0,
    }
}

struct Proc {
    svc: Svc,
    /// 0 for the first instance of `svc`, then 1, 2, ... (replicas).
    replica: usize,
    port: u16,
    env: Vec<(String, String)>,
    child: Option<Child>,
    starts: u32,
}

/// The target directory of this build (`.../target`), from the test
/// binary's own path (`target/debug/deps/<test>`).
pub fn target_dir() -> PathBuf {
    profile_dir()
        .parent()
        .expect("the profile directory lives in target")
        .to_path_buf()
}

/// The binary `name` of this build (`kandev`, `kandev-gateway`, ...).
pub fn binary(name: &str) -> PathBuf {
    profile_dir().join(name)
}

/// `target/<profile>`: where the service binaries of this build are, from
/// the running binary's own path (a test in `target/<profile>/deps`, or a
/// binary such as the benchmark in `target/<profile>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("the binary lives in a directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target/<profile>/deps").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The whole stack, as separate processes.
pub struct Stack {
    /// The `kandev` binary runs everything ([`Options::single`]).
    single: bool,
    pub test: String,
    log_dir: PathBuf,
    db: Option<TestDb>,
    /// The NATS server (the first node of a cluster).
    pub nats: OwnNats,
    /// The other nodes of a cluster ([`Options::nats_nodes`]).
    pub nats_peers: Vec<OwnNats>,
    dir: tempfile::TempDir,
    manager_id: String,
    procs: Vec<Proc>,
    _permit: tokio::sync::SemaphorePermit<'static>,
}

/// A bare repository on disk ([`Stack::bare_repo`]).
pub struct BareRepo {
    /// Its directory (`--git-dir`).
    pub path: PathBuf,
    /// Its `file://` URL, a task's `repository_url`.
    pub url: String,
    /// Its `owner/repo` on a forge for `file:///` (the path without the
    /// leading `/` and `.git`).
    pub repo: String,
}

impl Stack {
    /// Starts everything for the test `test` and waits until the gateway
    /// is ready (every dependency answers its `/readyz`).
    pub async fn start(test: &str, options: Options) -> Stack {
        let permit = tokio::time::timeout(Duration::from_secs(900), STACKS.acquire())
            .await
            .expect("a stack slot within 15 min")
            .expect("semaphore open");
        tokio::task::spawn_blocking(kandev_testkit::ensure_docker)
            .await
            .expect("ensure_docker");
        let log_dir = target_dir().join("e2e-logs").join(test);
        let _ = std::fs::remove_dir_all(&log_dir);
        std::fs::create_dir_all(&log_dir).expect("log dir");
        let db = if options.sqlite {
            None
        } else {
            Some(TestDb::create().await)
        };
        // NATS as deployed: deploy/nats/nats.conf, a user per service.
        let (nats, nats_peers, nats_url) = if options.nats_nodes > 1 {
            let mut nodes = OwnNats::start_cluster(options.nats_nodes, true).await;
            let url = OwnNats::cluster_url(&nodes);
            let first = nodes.remove(0);
            (first, nodes, url)
        } else {
            let nats = OwnNats::start_with_auth().await;
            let url = nats.url();
            (nats, Vec::new(), url)
        };
        let replicas = options.nats_nodes.min(3).to_string();
        let dir = tempfile::Builder::new()
            .prefix("kandev-e2e-")
            .tempdir()
            .expect("temp dir");
        for sub in ["workspaces", "home", "repos"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        // Unique per stack: its directory's random name.
        let manager_id = dir
            .path()
            .file_name()
            .expect("a named directory")
            .to_string_lossy()
            .to_ascii_lowercase();

        let ports: BTreeMap<Svc, u16> = Svc::ALL.iter().map(|s| (*s, free_port())).collect();
        let url = |s: Svc| format!("http://127.0.0.1:{}", ports[&s]);
        let mut procs = Vec::new();
        for svc in Svc::ALL {
            let mut env: Vec<(String, String)> = vec![
                (
                    "KANDEV_LISTEN_ADDR".into(),
                    format!("127.0.0.1:{}", ports[&svc]),
                ),
                (
                    "KANDEV_DATABASE_URL".into(),
                    match &db {
                        Some(db) => db.url.clone(),
                        None => format!(
                            "sqlite://{}",
                            dir.path().join(format!("{}.db", svc.bin())).display()
                        ),
                    },
                ),
                ("KANDEV_DATABASE_MAX_CONNECTIONS".into(), "4".into()),
                ("KANDEV_LOG__FILTER".into(), "info".into()),
                ("KANDEV_LOG__FORMAT".into(), "pretty".into()),
                ("NO_COLOR".into(), "1".into()),
                // The secret the services share; internal ports require it.
                (
                    "KANDEV_SERVICE_TOKEN".into(),
                    kandev_testkit::SERVICE_TOKEN.into(),
                ),
            ];
            let mut set = |k: &str, v: String| env.push((k.into(), v));
            set("KANDEV_NATS_URL", nats_url.clone());
            if svc != Svc::Gateway {
                set("KANDEV_NATS_STREAM_REPLICAS", replicas.clone());
            }
            match svc {
                Svc::TaskService => {
                    set("KANDEV_OUTBOX_POLL_MS", "100".into());
                }
                Svc::AgentManager => {
                    set("KANDEV_MANAGER_ID", manager_id.clone());
                    set("KANDEV_PULL_IMAGES", "false".into());
                    set(
                        "KANDEV_WORKSPACES_ROOT",
                        dir.path().join("workspaces").display().to_string(),
                    );
                    set(
                        "KANDEV_CREDENTIALS_HOME",
                        dir.path().join("home").display().to_string(),
                    );
                    // `Stack::git_repo` makes the test's repositories here.
                    set(
                        "KANDEV_ALLOWED_REPOSITORY_ROOTS",
                        format!("[{:?}]", dir.path().join("repos").display().to_string()),
                    );
                    // `Stack::project` makes `workspace_path` directories here.
                    set(
                        "KANDEV_ALLOWED_WORKSPACE_ROOTS",
                        format!("[{:?}]", dir.path().join("projects").display().to_string()),
                    );
                    set("KANDEV_INITIALIZE_TIMEOUT_SECS", "30".into());
                    set("KANDEV_SEQ_FLUSH_MS", "100".into());
                    // As `scripts/dev-up` and compose run it: users can
                    // store secrets.
                    set(
                        "KANDEV_SECRETS_KEY",
                        "an-e2e-secrets-key-of-32-bytes-or-more".into(),
                    );
                }
                Svc::Orchestrator => {
                    set("KANDEV_TASK_SERVICE_URL", url(Svc::TaskService));
                    set("KANDEV_AGENT_MANAGER_URL", url(Svc::AgentManager));
                    set("KANDEV_MAX_CONCURRENT", options.max_concurrent.to_string());
                    set("KANDEV_RETRY_BACKOFF_MS", "100".into());
                    set("KANDEV_RETRY_BACKOFF_MAX_MS", "500".into());
                    set("KANDEV_FEED_FLUSH_MS", "20".into());
                }
                Svc::Gateway => {
                    set("KANDEV_TASK_SERVICE_URL", url(Svc::TaskService));
                    set("KANDEV_AGENT_MANAGER_URL", url(Svc::AgentManager));
                    set("KANDEV_ORCHESTRATOR_URL", url(Svc::Orchestrator));
                    set("KANDEV_JWT_SECRET", JWT_SECRET.into());
                    set("KANDEV_ADMIN_USERNAME", ADMIN.into());
                    set("KANDEV_ADMIN_PASSWORD", ADMIN_PASSWORD.into());
                    set("KANDEV_DOWNSTREAM_TIMEOUT_MS", "30000".into());
                    set("KANDEV_RATE_LIMIT__LOGIN_PER_MINUTE", "6000".into());
                    set("KANDEV_RATE_LIMIT__LOGIN_BURST", "1000".into());
                    set("KANDEV_RATE_LIMIT__API_PER_MINUTE", "600000".into());
                    set("KANDEV_RATE_LIMIT__API_BURST", "100000".into());
                }
            }
            env.extend(nats.service_env(svc.nats_user()));
            // The test's own settings replace the stack's.
            for (_, k, v) in options.env.iter().filter(|(s, _, _)| *s == svc) {
                match env.iter_mut().find(|(e, _)| e == k) {
                    Some(kept) => kept.1 = v.clone(),
                    None => env.push((k.clone(), v.clone())),
                }
            }
            procs.push(Proc {
                svc,
                replica: 0,
                port: ports[&svc],
                env,
                child: None,
                starts: 0,
            });
        }
        if options.single {
            procs = vec![single_binary(procs, ports[&Svc::Gateway], dir.path())];
        }
        let mut stack = Stack {
            single: options.single,
            test: test.into(),
            log_dir,
            db,
            nats,
            nats_peers,
            dir,
            manager_id,
            procs,
            _permit: permit,
        };
        for svc in Svc::ALL {
            if !options.single || svc == Svc::Gateway {
                stack.spawn(svc).await;
            }
        }
        stack
    }

    /// The binary that runs `svc`: its own, or `kandev` for all.
    fn bin(&self, svc: Svc) -> &'static str {
        if self.single { "kandev" } else { svc.bin() }
    }

    fn proc(&mut self, svc: Svc) -> &mut Proc {
        self.replica_proc(svc, 0)
    }

    fn replica_proc(&mut self, svc: Svc, replica: usize) -> &mut Proc {
        self.procs
            .iter_mut()
            .find(|p| p.svc == svc && p.replica == replica)
            .expect("no such replica")
    }

    pub fn port(&self, svc: Svc) -> u16 {
        self.replica_port(svc, 0)
    }

    /// The port of replica `replica` of `svc` (0 is the first instance).
    pub fn replica_port(&self, svc: Svc, replica: usize) -> u16 {
        self.procs
            .iter()
            .find(|p| p.svc == svc && p.replica == replica)
            .map(|p| p.port)
            .expect("no such replica")
    }

    /// The database URL of a stack on Postgres.
    pub fn database_url(&self) -> Option<&str> {
        self.db.as_ref().map(|db| db.url.as_str())
    }

    /// The data directory of the `kandev` binary ([`Options::single`]).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The process id of `svc`, while it runs.
    pub fn pid(&self, svc: Svc) -> Option<u32> {
        self.procs
            .iter()
            .find(|p| p.svc == svc && p.replica == 0)
            .and_then(|p| p.child.as_ref().map(Child::id))
    }

    /// Starts one more instance of `svc`, configured as the first one but
    /// on a port of its own and with `env` over it; waits for its
    /// `/readyz` and returns its replica number.
    pub async fn add_replica(&mut self, svc: Svc, env: &[(&str, String)]) -> usize {
        let replica = self.procs.iter().filter(|p| p.svc == svc).count();
        let port = free_port();
        let mut vars = self.proc(svc).env.clone();
        vars.push(("KANDEV_LISTEN_ADDR".into(), format!("127.0.0.1:{port}")));
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.clone())));
        self.procs.push(Proc {
            svc,
            replica,
            port,
            env: vars,
            child: None,
            starts: 0,
        });
        self.spawn_replica(svc, replica).await;
        replica
    }

    /// The base URL (`http://127.0.0.1:<port>`) of a replica, for another
    /// service's `KANDEV_*_URL`.
    pub fn replica_url(&self, svc: Svc, replica: usize) -> String {
        format!("http://127.0.0.1:{}", self.replica_port(svc, replica))
    }

    /// The gateway's address.
    pub fn gateway(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port(Svc::Gateway)))
    }

    /// Where the agent manager clones task repositories (`<root>/<task_id>`).
    pub fn workspace(&self, task_id: &str) -> PathBuf {
        self.dir.path().join("workspaces").join(task_id)
    }

    /// The `kandev.manager` label of this stack's agent containers.
    pub fn manager_id(&self) -> &str {
        &self.manager_id
    }

    /// Starts `svc` (again) with its configuration and waits for its
    /// `/readyz`.
    pub async fn spawn(&mut self, svc: Svc) {
        self.spawn_replica(svc, 0).await;
    }

    /// [`Self::spawn`] for replica `replica` of `svc`.
    pub async fn spawn_replica(&mut self, svc: Svc, replica: usize) {
        let bin = profile_dir().join(self.bin(svc));
        assert!(
            bin.exists(),
            "{} is missing: run `cargo build --workspace --bins` first",
            bin.display()
        );
        let log_path = self.log_path(svc, replica);
        let proc = self.replica_proc(svc, replica);
        assert!(proc.child.is_none(), "{svc:?} already runs");
        proc.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("log file");
        use std::io::Write;
        let _ = writeln!(log, "===== start #{} =====", proc.starts);
        let mut cmd = Command::new(&bin);
        for (k, _) in std::env::vars() {
            if k.starts_with("KANDEV_") || k == "RUST_LOG" {
                cmd.env_remove(k);
            }
        }
        cmd.envs(proc.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log);
        proc.child = Some(cmd.spawn().expect("spawn a service"));
        let port = proc.port;
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok((200, _)) = raw_request(
                SocketAddr::from(([127, 0, 0, 1], port)),
                "GET",
                "/readyz",
                None,
                None,
                &[],
            )
            .await
            {
                return;
            }
            let proc = self.replica_proc(svc, replica);
            if let Some(status) = proc
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{svc:?} exited with {status}; see {}", log_path.display());
            }
            assert!(
                Instant::now() < deadline,
                "{svc:?} not ready within 90 s; see {}",
                log_path.display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILLs `svc` and waits for it to be gone.
    pub fn kill(&mut self, svc: Svc) {
        self.kill_replica(svc, 0);
    }

    /// SIGKILLs replica `replica` of `svc` and waits for it to be gone.
    pub fn kill_replica(&mut self, svc: Svc, replica: usize) {
        if let Some(mut child) = self.replica_proc(svc, replica).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_path(&self, svc: Svc, replica: usize) -> PathBuf {
        match replica {
            0 => self.log_dir.join(format!("{}.log", self.bin(svc))),
            n => self.log_dir.join(format!("{}-{n}.log", self.bin(svc))),
        }
    }

    /// SIGKILL, then the same binary on the same port with the same
    /// configuration.
    pub async fn restart(&mut self, svc: Svc) {
        self.kill(svc);
        self.spawn(svc).await;
    }

    /// SIGKILLs node `node` of the NATS cluster (0 is [`Stack::nats`]).
    pub fn kill_nats_node(&mut self, node: usize) {
        match node {
            0 => self.nats.stop(),
            n => self.nats_peers[n - 1].stop(),
        }
    }

    /// Waits until replica `replica` of `svc` has logged `needle`.
    pub async fn wait_log(&self, svc: Svc, replica: usize, needle: &str, secs: u64) {
        eventually(
            secs,
            &format!("{svc:?} #{replica} logs {needle:?}"),
            || async {
                self.replica_log(svc, replica)
                    .contains(needle)
                    .then_some(())
            },
        )
        .await;
    }

    /// JetStream as the tests' own NATS user, allowed everything, to look
    /// into streams.
    pub async fn jetstream(&self) -> async_nats::jetstream::Context {
        let (user, password) = self.nats.admin_credentials();
        let nats = async_nats::ConnectOptions::with_user_and_password(user, password)
            .connect(self.nats.url())
            .await
            .expect("the tests' NATS user connects");
        async_nats::jetstream::new(nats)
    }

    /// Kills the NATS server and starts it again on the same port and store.
    pub async fn restart_nats(&mut self) {
        self.nats.stop();
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.nats.restart().await;
    }

    /// An anonymous client of the gateway.
    pub fn anonymous(&self) -> Api {
        Api {
            addr: self.gateway(),
            token: None,
        }
    }

    /// What `svc` has logged so far (all its starts).
    pub fn log(&self, svc: Svc) -> String {
        self.replica_log(svc, 0)
    }

    /// What replica `replica` of `svc` has logged so far.
    pub fn replica_log(&self, svc: Svc, replica: usize) -> String {
        std::fs::read_to_string(self.log_path(svc, replica)).unwrap_or_default()
    }

    /// Logs in through `POST /auth/login`.
    pub async fn login(&self, username: &str, password: &str) -> Api {
        self.login_at(self.gateway(), username, password).await
    }

    /// The bootstrap administrator, logged in through gateway replica
    /// `replica`.
    pub async fn admin_at(&self, replica: usize) -> Api {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.replica_port(Svc::Gateway, replica)));
        self.login_at(addr, ADMIN, ADMIN_PASSWORD).await
    }

    async fn login_at(&self, addr: SocketAddr, username: &str, password: &str) -> Api {
        let anon = Api { addr, token: None };
        let r = anon
            .post(
                "/api/v1/auth/login",
                json!({"username": username, "password": password}),
            )
            .await;
        assert_eq!(r.status, 200, "login: {}", r.body);
        let token = r.body["token"].as_str().expect("a token").to_string();
        Api {
            addr,
            token: Some(token),
        }
    }

    /// The bootstrap administrator, logged in.
    pub async fn admin(&self) -> Api {
        self.login(ADMIN, ADMIN_PASSWORD).await
    }

    /// A directory a launch may name as its `workspace_path`; its absolute
    /// path.
    pub fn project(&self, name: &str) -> PathBuf {
        let dir = self.dir.path().join("projects").join(name);
        std::fs::create_dir_all(&dir).expect("project dir");
        dir
    }

    /// A git repository with a README under the stack's temp dir; its
    /// `file://` URL.
    pub fn git_repo(&self, name: &str) -> String {
        let repo = self.dir.path().join("repos").join(name);
        std::fs::create_dir_all(&repo).expect("repo dir");
        std::fs::write(repo.join("README.md"), "# e2e\n\nA test repository.\n").expect("readme");
        for args in [
            vec!["init", "-q", "-b", "main"],
            vec!["add", "README.md"],
            vec![
                "-c",
                "user.name=e2e",
                "-c",
                "user.email=e2e@example.com",
                "commit",
                "-q",
                "-m",
                "init",
            ],
        ] {
            let status = Command::new("git")
                .args(&args)
                .current_dir(&repo)
                .stdout(Stdio::null())
                .status()
                .expect("git runs");
            assert!(status.success(), "git {args:?}");
        }
        format!("file://{}", repo.display())
    }

    /// A bare clone of a fresh [`Stack::git_repo`] named `name`, that a
    /// task can clone and push to.
    pub fn bare_repo(&self, name: &str) -> BareRepo {
        let source = self.git_repo(&format!("{name}-src"));
        let source = source.trim_start_matches("file://");
        let path = std::path::Path::new(source).with_file_name(format!("{name}.git"));
        let status = Command::new("git")
            .args(["clone", "-q", "--bare", source])
            .arg(&path)
            .status()
            .expect("git runs");
        assert!(status.success(), "git clone --bare {source}");
        let url = format!("file://{}", path.display());
        let repo = path.display().to_string();
        let repo = repo.trim_start_matches('/').trim_end_matches(".git").into();
        BareRepo { path, url, repo }
    }

    /// Agent containers of this stack (`docker ps`), running or not, by
    /// the label `kandev.task_id` when given.
    pub async fn containers(&self, task_id: Option<&str>, running_only: bool) -> Vec<String> {
        let mut args = vec!["ps".to_string(), "-q".into()];
        if !running_only {
            args.push("-a".into());
        }
        args.push("--filter".into());
        args.push(format!("label=kandev.manager={}", self.manager_id));
        if let Some(task) = task_id {
            args.push("--filter".into());
            args.push(format!("label=kandev.task_id={task}"));
        }
        let out = tokio::process::Command::new("docker")
            .args(&args)
            .output()
            .await
            .expect("docker ps");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// Agent containers of the manager `manager_id` on the machine's
    /// engine, or on the engine at `docker_host`.
    pub async fn containers_of(
        &self,
        manager_id: &str,
        docker_host: Option<&str>,
        running_only: bool,
    ) -> Vec<String> {
        let mut cmd = tokio::process::Command::new("docker");
        if let Some(host) = docker_host {
            cmd.args(["-H", host]);
        }
        cmd.args(["ps", "-q", "--filter"])
            .arg(format!("label=kandev.manager={manager_id}"));
        if !running_only {
            cmd.arg("-a");
        }
        let out = cmd.output().await.expect("docker ps");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// Stops everything and drops the database.
    pub async fn stop(mut self) {
        self.kill_all();
        if let Some(db) = self.db.take() {
            db.drop_db().await;
        }
    }

    fn kill_all(&mut self) {
        // The gateways first, then their dependencies.
        self.procs
            .sort_by_key(|p| std::cmp::Reverse((p.svc, p.replica)));
        for proc in &mut self.procs {
            if let Some(mut child) = proc.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Agent managers added with ids of their own.
        for proc in &self.procs {
            if let Some((_, id)) = proc
                .env
                .iter()
                .rev()
                .find(|(k, _)| k == "KANDEV_MANAGER_ID")
                .filter(|(_, id)| *id != self.manager_id)
            {
                remove_containers(id);
            }
        }
        remove_containers(&self.manager_id);
        // Killed managers could not unmount their sealed workspaces roots
        // (`workspaces`, and `workspaces-<id>` of added managers).
        for entry in std::fs::read_dir(self.dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("workspaces")
            {
                kandev_testkit::unmount(&entry.path());
            }
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.kill_all();
        if let Some(db) = self.db.take() {
            // Drop may run inside a runtime: drop the database from a
            // thread of its own.
            let _ = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(db.drop_db());
                }
            })
            .join();
        }
    }
}

/// A response of the gateway: status and body (JSON, a string when not
/// JSON, `Null` when empty).
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub body: Value,
}

impl Resp {
    /// Asserts the common error shape and returns the `error` code.
    pub fn error(&self) -> String {
        assert_eq!(
            self.body["http_status"].as_u64(),
            Some(u64::from(self.status)),
            "{}",
            self.body
        );
        assert!(self.body["message"].is_string(), "{}", self.body);
        self.body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("an error code in {}", self.body))
            .to_string()
    }
}

async fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<String>,
    headers: &[(&str, &str)],
) -> Result<(u16, Value), String> {
    let fut = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string());
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Ok((status, value))
    };
    tokio::time::timeout(Duration::from_secs(40), fut)
        .await
        .map_err(|_| "request timed out".to_string())?
}

/// A REST client of the gateway, with or without a token.
#[derive(Debug, Clone)]
pub struct Api {
    pub addr: SocketAddr,
    pub token: Option<String>,
}

impl Api {
    /// One request; `Err` when the gateway cannot be reached.
    pub async fn try_send(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<Resp, String> {
        self.try_send_with(method, path, body, &[]).await
    }

    /// One request with more headers; `Err` when the gateway cannot be reached.
    pub async fn try_send_with(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> Result<Resp, String> {
        raw_request(
            self.addr,
            method,
            path,
            self.token.as_deref(),
            body,
            headers,
        )
        .await
        .map(|(status, body)| Resp { status, body })
    }

    /// One request with a raw body; panics when the gateway is unreachable.
    pub async fn send(&self, method: &str, path: &str, body: Option<String>) -> Resp {
        self.try_send(method, path, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.send("POST", path, Some(body.to_string())).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> Resp {
        self.send("PATCH", path, Some(body.to_string())).await
    }

    /// Creates a board; its id.
    pub async fn board(&self, name: &str) -> String {
        let r = self.post("/api/v1/boards", json!({"name": name})).await;
        assert_eq!(r.status, 201, "create board: {}", r.body);
        r.body["id"].as_str().expect("board id").to_string()
    }

    /// Creates a task on `board` from `fields` (merged over a title); its id.
    pub async fn task(&self, board: &str, fields: Value) -> String {
        let mut body = json!({"title": "e2e task"});
        if let (Some(b), Value::Object(f)) = (body.as_object_mut(), fields) {
            b.extend(f);
        }
        let r = self
            .post(&format!("/api/v1/boards/{board}/tasks"), body)
            .await;
        assert_eq!(r.status, 201, "create task: {}", r.body);
        r.body["id"].as_str().expect("task id").to_string()
    }

    /// Polls `GET /tasks/{id}` (through restarts: unreachable or 5xx
    /// answers are retried) until its state is one of `states`; the task.
    pub async fn wait_state(&self, task_id: &str, states: &[&str], secs: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = Value::Null;
        loop {
            let got = self
                .try_send("GET", &format!("/api/v1/tasks/{task_id}"), None)
                .await;
            if let Ok(r) = got
                && r.status == 200
            {
                if states.iter().any(|s| r.body["state"] == *s) {
                    return r.body;
                }
                last = r.body;
            }
            assert!(
                Instant::now() < deadline,
                "task {task_id} not in {states:?} within {secs} s; last: {last}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `GET /orchestrator/tasks/{id}/status`.
    pub async fn execution(&self, task_id: &str) -> Resp {
        self.get(&format!("/api/v1/orchestrator/tasks/{task_id}/status"))
            .await
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A task's stream through the gateway, as a browser would read it: the
/// token as the `kandev.bearer` subprotocol. When the socket drops it
/// reconnects with `?after=<last seq>`. Every feed frame must carry the
/// next sequence number: a duplicate or a gap fails the test.
pub struct Feed {
    addr: SocketAddr,
    token: String,
    task_id: String,
    ws: Option<Ws>,
    /// Feed frames received, in order (seq 1..=last_seq).
    pub frames: Vec<Value>,
    /// Other frames (acks, errors, notices).
    pub others: Vec<Value>,
    pub last_seq: i64,
    /// Times the socket was opened again after a drop.
    pub reconnects: u32,
}

impl Feed {
    /// Opens the stream from the start (`?after=0`).
    pub async fn open(api: &Api, task_id: &str) -> Feed {
        Feed::open_after(api, task_id, 0).await
    }

    /// Opens the stream after `after` (a page's `covers_to`): its first
    /// frame must be `after + 1`.
    pub async fn open_after(api: &Api, task_id: &str, after: i64) -> Feed {
        let mut feed = Feed {
            addr: api.addr,
            token: api.token.clone().expect("a logged-in client"),
            task_id: task_id.into(),
            ws: None,
            frames: Vec::new(),
            others: Vec::new(),
            last_seq: after,
            reconnects: 0,
        };
        feed.connect(Instant::now() + Duration::from_secs(60)).await;
        feed
    }

    async fn try_connect(&self) -> Result<Ws, String> {
        let url = format!(
            "ws://{}/api/v1/orchestrator/tasks/{}/stream?after={}",
            self.addr, self.task_id, self.last_seq
        );
        let mut req = url.into_client_request().map_err(|e| e.to_string())?;
        req.headers_mut().insert(
            "sec-websocket-protocol",
            format!("kandev.bearer, {}", self.token)
                .parse()
                .map_err(|e| format!("{e}"))?,
        );
        let (ws, resp) = tokio::time::timeout(
            Duration::from_secs(20),
            tokio_tungstenite::connect_async(req),
        )
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
        let proto = resp
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if proto != "kandev.bearer" {
            return Err(format!("subprotocol {proto:?}"));
        }
        Ok(ws)
    }

    async fn connect(&mut self, deadline: Instant) {
        let mut last_err = String::new();
        while Instant::now() < deadline {
            match self.try_connect().await {
                Ok(ws) => {
                    self.ws = Some(ws);
                    return;
                }
                Err(e) => last_err = e,
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("the stream of {} did not open: {last_err}", self.task_id);
    }

    /// The next frame (feed or other) before `deadline`; `None` when none
    /// came. Reconnects after a drop.
    pub async fn next_until(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            if self.ws.is_none() {
                self.reconnects += 1;
                self.connect(deadline + Duration::from_secs(30)).await;
            }
            let ws = self.ws.as_mut().expect("connected");
            let msg = match tokio::time::timeout_at(deadline, ws.next()).await {
                Err(_) => return None,
                Ok(None | Some(Err(_))) => {
                    self.ws = None;
                    continue;
                }
                Ok(Some(Ok(msg))) => msg,
            };
            let text = match msg {
                tg::Message::Text(t) => t.to_string(),
                tg::Message::Close(_) => {
                    self.ws = None;
                    continue;
                }
                _ => continue,
            };
            let frame: Value = serde_json::from_str(&text).expect("JSON frames");
            if let Some(seq) = frame.get("seq").and_then(Value::as_i64) {
                assert_eq!(
                    seq,
                    self.last_seq + 1,
                    "feed of {} out of order (a gap or a duplicate): {frame}",
                    self.task_id
                );
                self.last_seq = seq;
                self.frames.push(frame.clone());
            } else {
                self.others.push(frame.clone());
            }
            return Some(frame);
        }
    }

    /// Reads until a frame matches `pred`; that frame. Panics after `secs`.
    pub async fn wait_for(
        &mut self,
        secs: u64,
        what: &str,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            match self.next_until(deadline).await {
                Some(frame) if pred(&frame) => return frame,
                Some(_) => {}
                None => panic!(
                    "no {what} on the stream of {} within {secs} s (last seq {})",
                    self.task_id, self.last_seq
                ),
            }
        }
    }

    /// Reads until a `message_chunk` whose text contains `needle`; that
    /// frame. Panics after `secs`.
    pub async fn wait_for_chunk(&mut self, secs: u64, needle: &str) -> Value {
        self.wait_for(secs, needle, |f| chunk_contains(f, needle))
            .await
    }

    /// Reads until nothing comes for `quiet`.
    pub async fn drain(&mut self, quiet: Duration) {
        while self.next_until(Instant::now() + quiet).await.is_some() {}
    }

    /// Sends a command (JSON) and waits for its answer (`id` echoed).
    pub async fn command(&mut self, mut cmd: Value, secs: u64) -> Value {
        let id = format!("c-{}", self.others.len() + self.frames.len());
        cmd["id"] = json!(id);
        let deadline = Instant::now() + Duration::from_secs(secs);
        if self.ws.is_none() {
            self.connect(deadline).await;
        }
        self.ws
            .as_mut()
            .expect("connected")
            .send(tg::Message::text(cmd.to_string()))
            .await
            .expect("send a command");
        let want = id.clone();
        self.wait_for(secs, "the command's answer", move |f| {
            f.get("seq").is_none() && f["id"] == want.as_str()
        })
        .await
    }

    /// The feed frames' `event.kind`s, in order.
    pub fn kinds(&self) -> Vec<String> {
        self.frames
            .iter()
            .map(|f| f["event"]["kind"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub async fn close(mut self) {
        if let Some(ws) = self.ws.as_mut() {
            let _ = ws.close(None).await;
        }
    }
}

/// `kind` of a feed frame's event.
pub fn kind(frame: &Value) -> &str {
    frame["event"]["kind"].as_str().unwrap_or_default()
}

/// Whether a feed frame is a `message_chunk` whose text contains `needle`.
pub fn chunk_contains(frame: &Value, needle: &str) -> bool {
    kind(frame) == "message_chunk"
        && frame["event"]["data"]["text"]
            .as_str()
            .is_some_and(|t| t.contains(needle))
}

/// Whether a feed frame is the end of a turn.
pub fn is_turn_end(frame: &Value) -> bool {
    kind(frame) == "turn_end"
}

/// The whole stored feed of a task, read by a fresh client from
/// `?after=0` until it is quiet; checks it is numbered 1..N.
pub async fn replay(api: &Api, task_id: &str) -> Vec<Value> {
    let mut feed = Feed::open(api, task_id).await;
    feed.drain(Duration::from_millis(1500)).await;
    let seqs: Vec<i64> = feed
        .frames
        .iter()
        .map(|f| f["seq"].as_i64().unwrap_or_default())
        .collect();
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(seqs, expected, "the stored feed is numbered 1..N");
    let frames = std::mem::take(&mut feed.frames);
    feed.close().await;
    frames
}

/// The text of a feed's `message_chunk` frames, in order.
pub fn chunk_text(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| kind(f) == "message_chunk")
        .filter_map(|f| f["event"]["data"]["text"].as_str())
        .collect()
}

/// Every chunk of a `slow <chunks>` run (`chunk i/<chunks>` lines) exactly
/// once, in order, in `frames`.
pub fn assert_every_chunk_once(frames: &[Value], chunks: usize) {
    let text = chunk_text(frames);
    let mut at = 0;
    for i in 1..=chunks {
        let chunk = format!("chunk {i}/{chunks}\n");
        assert_eq!(text.matches(&chunk).count(), 1, "{chunk:?} in {text:?}");
        let pos = text.find(&chunk).unwrap();
        assert!(pos >= at, "{chunk:?} out of order");
        at = pos;
    }
}

/// The agent instances whose frames a feed holds.
pub fn instances(frames: &[Value]) -> std::collections::BTreeSet<String> {
    frames
        .iter()
        .filter_map(|f| f["instance_id"].as_str().map(str::to_string))
        .collect()
}

/// A Docker engine of the test's own ([`kandev_testkit::OwnDocker`]) with
/// the mock agent's image, shared with the blocking calls that drive it.
pub type Engine = std::sync::Arc<std::sync::Mutex<kandev_testkit::OwnDocker>>;

/// Starts an [`Engine`] and loads the mock agent's image into it.
pub async fn own_engine() -> Engine {
    tokio::task::spawn_blocking(|| {
        let engine = kandev_testkit::OwnDocker::start(false);
        engine.load_image("kandev/mock-agent:latest");
        std::sync::Arc::new(std::sync::Mutex::new(engine))
    })
    .await
    .expect("an engine of its own")
}

/// Runs a blocking call on an [`Engine`] (kill, start again).
pub async fn on_engine(engine: &Engine, f: fn(&mut kandev_testkit::OwnDocker)) {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || f(&mut engine.lock().unwrap()))
        .await
        .expect("the engine call");
}
