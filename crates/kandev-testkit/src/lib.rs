//! Test helpers shared by Kandev's integration tests (dev-dependency only).
//!
//! # Layout
//! - [`TestDb`]: a fresh, empty Postgres database per test.
//! - [`OwnNats`]: a `nats-server -js` of the test's own on a free port, that
//!   can be stopped and restarted on the same port and store; with
//!   [`OwnNats::start_with_auth`], under `deploy/nats/nats.conf` (a user per
//!   service, each allowed only its subjects) with passwords of its own.
//! - [`nats_raw`]: a NATS protocol session by hand, for what a server
//!   answers a client that is not Kandev's.
//! - [`free_port`]: a port nobody listens on right now.
//! - [`assert_help`], [`service_command`]: a service binary's `--help`, and
//!   the binary set up to serve on a port with a test database;
//!   [`service_settings`]: the same for a service started in-process;
//!   [`agent_manager_dir`]: the directories of an in-process agent manager;
//!   [`run_until_cancelled`]: it running until the test stops it;
//!   [`init_tracing`]: its logs, when `TEST_LOG` is set.
//! - [`ensure_docker`]: a Docker engine that answers (started without bridge
//!   or iptables when none does) and the `kandev/mock-agent:latest` image
//!   (built by `dockerfiles/mock-agent/build.sh` when missing; never pulled).
//! - [`OwnDocker`]: a `dockerd` of the test's own (own socket, data and exec
//!   roots), that can be stopped, killed and started again without
//!   disturbing the machine's engine or the tests that use it.
//!
//! - [`http`]: one HTTP/1.1 request, its status and JSON body
//!   ([`service_http`]: with the [`SERVICE_TOKEN`] internal ports require).
//! - [`eventually`]: wait on a condition, never on a sleep.
//! - [`git`], [`git_init`]: a test's git repository, made and committed to
//!   with a fixed author and no user configuration.
//! - [`fake_github`]: a local server speaking the GitHub API subset Kandev
//!   uses (issues, comments, pull requests, check runs, statuses and job
//!   logs; 401, 404 and 301 answers).
//! - [`fake_gitlab`]: the same for GitLab's REST API v4 (issues, notes,
//!   merge requests, pipelines, jobs and traces; 404 and 401 answers) and
//!   its `Issue Hook` webhook deliveries.
//!
//! `KANDEV_TEST_PG_BASE` overrides the Postgres server URL
//! (default `postgres://postgres@127.0.0.1:5432`).

pub mod fake_github;
pub mod fake_gitlab;

use std::{
    net::TcpListener as StdListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::LazyLock,
    time::Duration,
};

use kandev_common::{CancellationToken, config::ServiceSettings};
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

/// Postgres server URL without a database; overridable for other machines.
pub static PG_BASE: LazyLock<String> = LazyLock::new(|| {
    std::env::var("KANDEV_TEST_PG_BASE")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
});

/// The NATS server the tests share; overridable for other machines.
pub static NATS_URL: LazyLock<String> = LazyLock::new(|| {
    std::env::var("KANDEV_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
});

/// A fresh, empty database; dropped by [`TestDb::drop_db`].
#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        let name = format!("kandev_test_{}", Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&format!("{}/postgres", *PG_BASE))
            .await
            .expect("postgres must be running");
        admin
            .execute(format!(r#"CREATE DATABASE "{name}""#).as_str())
            .await
            .expect("create test database");
        TestDb {
            url: format!("{}/{name}", *PG_BASE),
            name,
        }
    }

    pub async fn drop_db(&self) {
        if let Ok(mut admin) = PgConnection::connect(&format!("{}/postgres", *PG_BASE)).await {
            let _ = admin
                .execute(
                    format!(r#"DROP DATABASE IF EXISTS "{}" WITH (FORCE)"#, self.name).as_str(),
                )
                .await;
        }
    }
}

/// Polls `probe` every 100 ms until it returns `Some`, for up to `secs`
/// seconds; then fails the test naming `what`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `git args…` in `dir` as author `t <t@e>`, with no global
/// configuration; panics when it fails.
pub fn git(dir: &std::path::Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@e"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?} in {}", dir.display());
}

/// Makes `dir` a git repository on branch `main` with every file in it
/// committed.
pub fn git_init(dir: &std::path::Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "init"]);
}

/// Lazily unmounts `path`, ignoring errors: an agent manager running as root
/// mounts its workspaces root on itself (nosuid,nodev) and unmounts it when
/// it stops, which a SIGKILLed one cannot.
pub fn unmount(path: &std::path::Path) {
    let _ = std::process::Command::new("umount")
        .arg("--lazy")
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// A port that was free a moment ago, and never handed out before by this
/// process. It is drawn below the kernel's ephemeral range (32768 and up
/// by default): a port from `bind(0)` is in that range, where an outgoing
/// connection of any test (gRPC, NATS, Postgres) may take it between this
/// check and the service's own bind, and the kernel may hand the same one
/// to the next `bind(0)`.
pub fn free_port() -> u16 {
    const LOW: u16 = 20_000;
    const HIGH: u16 = 32_000;
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = LOW + (Uuid::new_v4().as_u128() % u128::from(HIGH - LOW)) as u16;
        if !given.contains(&port) && StdListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
}

/// Checks that the service binary `bin` answers `--help` with a text that
/// mentions each of `words`.
pub fn assert_help(bin: &str, words: &[&str]) {
    let out = std::process::Command::new(bin)
        .arg("--help")
        .output()
        .expect("the binary runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in words {
        assert!(text.contains(word), "{word} in {text}");
    }
}

/// The service binary `bin`, to listen on `port` with the Postgres
/// database at `database_url`, the tests' NATS ([`NATS_URL`]) and the
/// [`SERVICE_TOKEN`].
pub fn service_command(bin: &str, port: u16, database_url: &str) -> std::process::Command {
    let mut command = std::process::Command::new(bin);
    command
        .env("KANDEV_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("KANDEV_DATABASE_URL", database_url)
        .env("KANDEV_NATS_URL", &*NATS_URL)
        .env("KANDEV_SERVICE_TOKEN", SERVICE_TOKEN);
    command
}

/// Logs of the code under test on stderr, once per test binary, when
/// `TEST_LOG` is set.
pub fn init_tracing() {
    static TRACING: LazyLock<()> = LazyLock::new(|| {
        if std::env::var("TEST_LOG").is_ok() {
            let _ = kandev_common::telemetry::init("test", &Default::default());
        }
    });
    LazyLock::force(&TRACING);
}

/// Runs a service started in-process on a task of its own until the
/// returned token is cancelled: `run` is its `run_until_stopped`; a failed
/// run panics with `what` (e.g. "task service runs").
pub fn run_until_cancelled<F, E>(
    what: &'static str,
    run: impl FnOnce(CancellationToken) -> F,
) -> (CancellationToken, tokio::task::JoinHandle<()>)
where
    F: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Debug,
{
    let stop = CancellationToken::new();
    let running = run(stop.clone());
    let handle = tokio::spawn(async move {
        running.await.expect(what);
    });
    (stop, handle)
}

/// `defaults` for a service started in-process by a test: on a free local
/// port, with the database at `database_url`, NATS at `nats_url` and the
/// [`SERVICE_TOKEN`]; what [`service_command`] gives a service binary.
pub fn service_settings(
    defaults: ServiceSettings,
    database_url: &str,
    nats_url: &str,
) -> ServiceSettings {
    ServiceSettings {
        listen_addr: "127.0.0.1:0".into(),
        database_url: database_url.into(),
        nats_url: nats_url.into(),
        service_token: Some(SERVICE_TOKEN.into()),
        ..defaults
    }
}

/// A new directory for an agent manager a test starts in-process, with the
/// `workspaces/`, `allowed/` and `home/` its `Settings::rooted_in` names
/// made; the test removes it.
pub fn agent_manager_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", Uuid::new_v4().simple()));
    for sub in ["workspaces", "allowed", "home"] {
        std::fs::create_dir_all(dir.join(sub)).expect("a directory for the agent manager");
    }
    dir
}

/// The NATS users of `deploy/nats/nats.conf`, one per service.
pub const NATS_USERS: [&str; 4] = ["task-service", "agent-manager", "orchestrator", "gateway"];

/// `deploy/nats/nats.conf`: the users and their permissions.
pub fn nats_config_file() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nats/nats.conf")
}

/// The variable `deploy/nats/nats.conf` reads `user`'s password from:
/// `KANDEV_NATS_TASK_SERVICE_PASSWORD` for `task-service`.
pub fn nats_password_var(user: &str) -> String {
    format!(
        "KANDEV_NATS_{}_PASSWORD",
        user.to_ascii_uppercase().replace('-', "_")
    )
}

/// A `nats-server` of the test's own, with JetStream.
#[derive(Debug)]
pub struct OwnNats {
    pub port: u16,
    store: PathBuf,
    child: Option<Child>,
    /// With [`OwnNats::start_with_auth`]: each user's password.
    passwords: Vec<(String, String)>,
    /// A node of [`OwnNats::start_cluster`].
    cluster: Option<ClusterNode>,
}

/// How a node of a test's NATS cluster joins the others.
#[derive(Debug, Clone)]
struct ClusterNode {
    server_name: String,
    cluster_port: u16,
    /// The other nodes' cluster ports.
    routes: Vec<u16>,
    /// Its monitoring port (`/healthz`).
    monitor_port: u16,
}

/// The user a test inspects NATS with: allowed everything, added to the
/// tests' copy of `deploy/nats/nats.conf` only.
pub const NATS_TEST_USER: &str = "kandev-test";

impl OwnNats {
    /// Without authorization: anyone may do anything.
    pub async fn start() -> OwnNats {
        Self::start_as(Vec::new()).await
    }

    /// Under `deploy/nats/nats.conf`: a connection without credentials is
    /// refused, and each of [`NATS_USERS`] (with [`OwnNats::password`]) may
    /// use only the subjects the file allows it.
    /// [`OwnNats::admin_credentials`] are those of [`NATS_TEST_USER`], a user
    /// the tests' copy of the file adds, to look into streams.
    pub async fn start_with_auth() -> OwnNats {
        Self::start_as(Self::start_with_auth_passwords()).await
    }

    fn start_with_auth_passwords() -> Vec<(String, String)> {
        NATS_USERS
            .iter()
            .chain([&NATS_TEST_USER])
            // A letter first: nats-server parses a variable's value, and a
            // value that looks like a number is not a string.
            .map(|user| (user.to_string(), format!("k{}", Uuid::new_v4().simple())))
            .collect()
    }

    async fn start_as(passwords: Vec<(String, String)>) -> OwnNats {
        let mut nats = Self::node(passwords, None);
        nats.restart().await;
        nats
    }

    fn node(passwords: Vec<(String, String)>, cluster: Option<ClusterNode>) -> OwnNats {
        let store = std::env::temp_dir().join(format!("kandev-nats-{}", Uuid::new_v4().simple()));
        OwnNats {
            port: free_port(),
            store,
            child: None,
            passwords,
            cluster,
        }
    }

    /// A JetStream cluster of `nodes` servers on 127.0.0.1 (under
    /// `deploy/nats/nats.conf` when `with_auth`, one password per user for
    /// all nodes), each with a store of its own; returns once every node
    /// reports JetStream healthy (a meta leader elected).
    pub async fn start_cluster(nodes: usize, with_auth: bool) -> Vec<OwnNats> {
        let passwords = if with_auth {
            Self::start_with_auth_passwords()
        } else {
            Vec::new()
        };
        let cluster_ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect();
        let mut cluster: Vec<OwnNats> = (0..nodes)
            .map(|i| {
                Self::node(
                    passwords.clone(),
                    Some(ClusterNode {
                        server_name: format!("n{i}"),
                        cluster_port: cluster_ports[i],
                        routes: cluster_ports
                            .iter()
                            .enumerate()
                            .filter(|(j, _)| *j != i)
                            .map(|(_, p)| *p)
                            .collect(),
                        monitor_port: free_port(),
                    }),
                )
            })
            .collect();
        for node in &mut cluster {
            node.restart().await;
        }
        for node in &cluster {
            node.wait_healthy().await;
        }
        cluster
    }

    /// The client URLs of a cluster's nodes, comma-separated, as
    /// `KANDEV_NATS_URL` takes them.
    pub fn cluster_url(nodes: &[OwnNats]) -> String {
        nodes.iter().map(OwnNats::url).collect::<Vec<_>>().join(",")
    }

    /// Waits for a cluster node's `/healthz` (JetStream current with its
    /// meta leader).
    pub async fn wait_healthy(&self) {
        let Some(node) = &self.cluster else { return };
        let url = format!("http://127.0.0.1:{}/healthz", node.monitor_port);
        eventually(60, "the NATS cluster node is healthy", || async {
            let up = tokio::net::TcpStream::connect(("127.0.0.1", node.monitor_port))
                .await
                .is_ok();
            (up && http("GET", &url, None).await.0 == 200).then_some(())
        })
        .await;
    }

    /// The user and password of [`NATS_TEST_USER`], allowed everything, to
    /// look into streams: `async_nats::ConnectOptions::with_user_and_password`
    /// (async-nats ignores credentials in the URL). Panics when the server
    /// was not started with [`OwnNats::start_with_auth`].
    pub fn admin_credentials(&self) -> (String, String) {
        (NATS_TEST_USER.to_string(), self.password(NATS_TEST_USER))
    }

    /// The password of `user` (one of [`NATS_USERS`]); panics when the
    /// server was not started with [`OwnNats::start_with_auth`].
    pub fn password(&self, user: &str) -> String {
        self.passwords
            .iter()
            .find(|(u, _)| u == user)
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| panic!("no NATS user {user:?}: start_with_auth has them"))
    }

    /// `KANDEV_NATS_USER` and `KANDEV_NATS_PASSWORD` for the service whose
    /// user is `user`; none without authorization.
    pub fn service_env(&self, user: &str) -> Vec<(String, String)> {
        if self.passwords.is_empty() {
            return Vec::new();
        }
        vec![
            ("KANDEV_NATS_USER".into(), user.into()),
            ("KANDEV_NATS_PASSWORD".into(), self.password(user)),
        ]
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub async fn restart(&mut self) {
        let mut cmd = Command::new("nats-server");
        if !self.passwords.is_empty() {
            // deploy/nats/nats.conf as it is, plus the tests' own user.
            let deployed = std::fs::read_to_string(nats_config_file()).expect("read nats.conf");
            assert_eq!(deployed.matches("users = [").count(), 1, "one users list");
            let conf = deployed.replace(
                "users = [",
                &format!(
                    "users = [\n    {{ user: {NATS_TEST_USER}, password: ${} }}",
                    nats_password_var(NATS_TEST_USER)
                ),
            );
            let file = self.store.with_extension("conf");
            std::fs::write(&file, conf).expect("write the tests' nats.conf");
            cmd.arg("-c").arg(file);
            for (user, password) in &self.passwords {
                cmd.env(nats_password_var(user), password);
            }
        }
        if let Some(node) = &self.cluster {
            let routes: Vec<String> = node
                .routes
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect();
            cmd.args(["--server_name", &node.server_name])
                .args(["--cluster_name", "kandev-test"])
                .args([
                    "--cluster",
                    &format!("nats://127.0.0.1:{}", node.cluster_port),
                ])
                .args(["--routes", &routes.join(",")])
                .args(["-m", &node.monitor_port.to_string()]);
        }
        let child = cmd
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server is installed");
        self.child = Some(child);
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("nats-server did not start");
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Speaks the NATS protocol by hand on `127.0.0.1:port`: `CONNECT` (with
/// `login` as user and password, if any, and `verbose`, so every operation
/// is answered), then each of `ops` (protocol lines such as `SUB x 1` or
/// `PUB x 2\r\nhi`, without the final CRLF), then `PING`. Returns the
/// server's answers after its `INFO`, up to its `PONG` or until it closes
/// the connection: `+OK`, `-ERR '...'`, `MSG ...` and their payloads.
pub async fn nats_raw(port: u16, login: Option<(&str, &str)>, ops: &[&str]) -> Vec<String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("nats-server answers");
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let info = lines
        .next_line()
        .await
        .expect("read INFO")
        .unwrap_or_default();
    assert!(info.starts_with("INFO "), "not a NATS server: {info}");
    let mut connect = serde_json::json!({
        "verbose": true, "pedantic": false, "tls_required": false,
        "name": "kandev-testkit-raw", "lang": "raw", "version": "0", "protocol": 1,
    });
    if let Some((user, pass)) = login {
        connect["user"] = user.into();
        connect["pass"] = pass.into();
    }
    let mut out = format!("CONNECT {connect}\r\n");
    for op in ops {
        out.push_str(op);
        out.push_str("\r\n");
    }
    out.push_str("PING\r\n");
    // The server may close before reading it all (a refused CONNECT).
    let _ = write.write_all(out.as_bytes()).await;
    let mut answers = Vec::new();
    let read_all = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line == "PONG" {
                break;
            }
            answers.push(line);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read_all)
        .await
        .expect("nats-server answers PING or closes within 10 s");
    answers
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.store);
        let _ = std::fs::remove_file(self.store.with_extension("conf"));
    }
}

/// The mock agent's image.
pub const MOCK_IMAGE: &str = "kandev/mock-agent:latest";

/// A `docker` command for the engine at `host` (`unix://…`), or the
/// machine's engine when `None`.
fn docker_cli(host: Option<&str>) -> Command {
    let mut cmd = Command::new("docker");
    if let Some(host) = host {
        cmd.args(["-H", host]);
    }
    cmd
}

fn docker_answers(host: Option<&str>) -> bool {
    docker_cli(host)
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Ids of the engine's containers (running or not) with `label` (`key` or
/// `key=value`); `None` when the engine does not answer.
fn labelled_containers(host: Option<&str>, label: &str) -> Option<Vec<String>> {
    let out = docker_cli(host)
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label={label}"))
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// Force-removes the engine's containers with `label`; errors are ignored
/// (this runs in cleanup, also while a failed test unwinds).
fn remove_labelled(host: Option<&str>, label: &str) {
    let ids = labelled_containers(host, label).unwrap_or_default();
    if !ids.is_empty() {
        let _ = docker_cli(host)
            .args(["rm", "-f"])
            .args(&ids)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

static DOCKER_READY: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Makes sure a Docker engine answers and the mock-agent image exists.
/// Blocking: call it from `spawn_blocking`.
// dockerd is meant to outlive the tests; it is never waited for.
#[allow(clippy::zombie_processes)]
pub fn ensure_docker() {
    let mut ready = DOCKER_READY.lock().unwrap_or_else(|p| p.into_inner());
    if *ready {
        return;
    }
    if !docker_answers(None) {
        Command::new("setsid")
            .args(["dockerd", "--bridge=none", "--iptables=false"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dockerd is installed");
        let up = (0..120).any(|_| {
            std::thread::sleep(Duration::from_millis(500));
            docker_answers(None)
        });
        assert!(up, "dockerd did not start within 60 s");
    }
    build_image_if_missing(MOCK_IMAGE, "mock-agent");
    *ready = true;
}

/// The seed's example agent's image (`dockerfiles/seed-agent`).
pub const SEED_AGENT_IMAGE: &str = "kandev/seed-agent:latest";

/// Makes sure a Docker engine answers and the seed agent's image exists.
/// Blocking: call it from `spawn_blocking`.
pub fn ensure_seed_agent_image() {
    ensure_docker();
    static BUILT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    build_image_if_missing(SEED_AGENT_IMAGE, "seed-agent");
}

/// The base the agent images are built on in tests:
/// `dockerfiles/agent-base/build.sh` assembles it from this machine's own
/// Node.js, git and libraries (no registry answers here).
pub const AGENT_BASE_IMAGE: &str = "kandev/agent-base:host";

/// Makes sure [`AGENT_BASE_IMAGE`] is current (the script is idempotent and
/// quick when nothing changed). Blocking: call it from `spawn_blocking`.
pub fn ensure_agent_base() -> &'static str {
    ensure_docker();
    static DONE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    if !*done {
        let script = repo_path("dockerfiles/agent-base/build.sh");
        let status = Command::new("bash")
            .arg(script)
            .env("KANDEV_AGENT_BASE_TAG", AGENT_BASE_IMAGE)
            .stdout(Stdio::null())
            .status()
            .expect("bash runs");
        assert!(status.success(), "assembling {AGENT_BASE_IMAGE} failed");
        *done = true;
    }
    AGENT_BASE_IMAGE
}

/// A path in the repository.
pub fn repo_path(rel: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Builds `image` with `dockerfiles/<dir>/build.sh` unless the machine's
/// engine has it (never pulled: no registry is needed).
fn build_image_if_missing(image: &str, dir: &str) {
    let present = Command::new("docker")
        .args(["image", "inspect", image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../dockerfiles")
            .join(dir)
            .join("build.sh");
        let status = Command::new("bash")
            .arg(script)
            .status()
            .expect("bash runs");
        assert!(status.success(), "building {image} failed");
    }
}

/// Removes every container (running or not) that an agent manager with this
/// `manager_id` labelled. Agent containers outlive their manager on purpose
/// (it re-attaches after a restart), so a test stack removes its own at the
/// end.
pub fn remove_containers(manager_id: &str) {
    remove_labelled(None, &format!("kandev.manager={manager_id}"));
}

/// A Docker engine of the test's own: its own socket, data root, exec root
/// and config file, without bridge or iptables, so it can be stopped,
/// killed and started again while other tests use the machine's engine.
/// It has no images until [`OwnDocker::load_image`] copies one from the
/// machine's engine. Dropping it removes its containers, stops it and
/// deletes its directory. Blocking: use it from `spawn_blocking`.
#[derive(Debug)]
pub struct OwnDocker {
    /// Short, so the sockets under it stay within the unix path limit.
    dir: PathBuf,
    live_restore: bool,
    child: Option<Child>,
}

impl OwnDocker {
    /// Starts the engine; with `live_restore`, its containers keep running
    /// while it is down.
    pub fn start(live_restore: bool) -> OwnDocker {
        OwnDocker::start_configured(live_restore, "{}")
    }

    /// [`OwnDocker::start`] with `daemon_json` as the engine's
    /// configuration file (say, other logging defaults).
    pub fn start_configured(live_restore: bool, daemon_json: &str) -> OwnDocker {
        let dir = PathBuf::from(format!(
            "/tmp/kd-{}",
            &Uuid::new_v4().simple().to_string()[..10]
        ));
        std::fs::create_dir_all(&dir).expect("create the engine's directory");
        std::fs::write(dir.join("daemon.json"), daemon_json).expect("write daemon.json");
        let mut engine = OwnDocker {
            dir,
            live_restore,
            child: None,
        };
        engine.start_again();
        engine
    }

    /// `unix://…` for `KANDEV_DOCKER_HOST`.
    pub fn host(&self) -> String {
        format!("unix://{}/docker.sock", self.dir.display())
    }

    /// A `docker` command talking to this engine.
    pub fn cli(&self) -> Command {
        docker_cli(Some(&self.host()))
    }

    /// Starts the engine (again), on the same socket and data.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the engine runs already");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("dockerd.log"))
            .expect("open the engine's log");
        let mut cmd = Command::new("dockerd");
        cmd.args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .arg("--config-file")
            .arg(self.dir.join("daemon.json"))
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(self.dir.join("x"))
            .arg("--pidfile")
            .arg(self.dir.join("dockerd.pid"))
            .args(["-H", &self.host()]);
        if self.live_restore {
            cmd.arg("--live-restore");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("dockerd is installed");
        self.child = Some(child);
        let up = (0..240).any(|_| {
            std::thread::sleep(Duration::from_millis(250));
            docker_answers(Some(&self.host()))
        });
        assert!(
            up,
            "dockerd in {} did not start within 60 s",
            self.dir.display()
        );
    }

    fn signal_and_wait(&mut self, signal: &str) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status();
        let _ = child.wait();
    }

    /// Stops the engine as `systemctl stop docker` would (SIGTERM) and
    /// waits for it to exit; without live restore it stops its containers.
    pub fn stop(&mut self) {
        self.signal_and_wait("-TERM");
    }

    /// Kills the engine (SIGKILL), as a crash would. Its containerd dies
    /// with it; this waits until that process is reaped too, because a
    /// restarted dockerd that still sees it would wait for it in vain.
    pub fn kill(&mut self) {
        let containerd = std::fs::read_to_string(self.dir.join("x/containerd/containerd.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok());
        self.signal_and_wait("-KILL");
        if let Some(pid) = containerd {
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            let gone = (0..80).any(|_| {
                std::thread::sleep(Duration::from_millis(250));
                !proc_dir.exists()
            });
            assert!(gone, "containerd {pid} outlived its dockerd by 20 s");
        }
    }

    /// Copies `image` from the machine's engine into this one.
    pub fn load_image(&self, image: &str) {
        let mut save = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker runs");
        let stdout = save.stdout.take().expect("piped");
        let loaded = self
            .cli()
            .arg("load")
            .stdin(stdout)
            .stdout(Stdio::null())
            .status()
            .expect("docker runs");
        let saved = save.wait().expect("docker save runs");
        assert!(saved.success() && loaded.success(), "cannot load {image}");
    }

    /// Ids of this engine's containers (running or not) with `label`
    /// (`key` or `key=value`).
    pub fn containers(&self, label: &str) -> Vec<String> {
        labelled_containers(Some(&self.host()), label).expect("docker ps answers")
    }
}

impl Drop for OwnDocker {
    fn drop(&mut self) {
        if self.child.is_some() {
            remove_labelled(Some(&self.host()), "kandev.manager");
        }
        self.stop();
        // Shims of live-restored containers outlive an engine killed and
        // never started again.
        let _ = Command::new("pkill")
            .args(["-KILL", "-f"])
            .arg(format!("{}/x/containerd", self.dir.display()))
            .status();
        // Mounts a killed engine left behind would keep the directory busy.
        let prefix = format!("{}/", self.dir.display());
        if let Ok(mounts) = std::fs::read_to_string("/proc/mounts") {
            for mount in mounts.lines().filter_map(|l| l.split(' ').nth(1)) {
                if mount.starts_with(&prefix) {
                    let _ = Command::new("umount").args(["-l", mount]).status();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `KANDEV_SERVICE_TOKEN` every test stack shares (the services refuse
/// calls without it; see `kandev_common::service_auth`).
pub const SERVICE_TOKEN: &str = "kandev-test-service-token-0123456789abcdef";

/// `Bearer <SERVICE_TOKEN>`, the `authorization` header internal ports
/// require.
pub fn service_bearer() -> String {
    format!("Bearer {SERVICE_TOKEN}")
}

/// One HTTP/1.1 request to `url` (`http://host:port/path`) with an optional
/// JSON body: the status and the body as JSON (`Null` when it is not).
pub async fn http(
    method: &str,
    url: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    http_with(method, url, body, &[]).await
}

/// [`http`] with the service token, as an internal port requires.
pub async fn service_http(
    method: &str,
    url: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    http_with(method, url, body, &[("authorization", &service_bearer())]).await
}

/// [`http`] with extra request headers.
pub async fn http_with(
    method: &str,
    url: &str,
    body: Option<serde_json::Value>,
    headers: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    use http_body_util::{BodyExt, Full};
    let uri: hyper::Uri = url.parse().expect("a valid URL");
    let host = uri.authority().expect("a URL with a host").to_string();
    let stream = tokio::net::TcpStream::connect(&host)
        .await
        .expect("the server accepts connections");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("HTTP handshake");
    tokio::spawn(conn);
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header("host", host)
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(bytes::Bytes::from(bytes)))
        .expect("a valid request");
    let response = sender.send_request(request).await.expect("a response");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the response body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}
