use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use futures::StreamExt;
use kandev_agent_manager::{
    Application, Settings, domain::InstanceStatus, manager::LaunchRequest,
    workspace::WorkspaceSource,
};
use kandev_common::{
    CancellationToken,
    trace::{TracedChannel, traced},
};
use kandev_proto::v1::{self as pb, agent_manager_client::AgentManagerClient};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use uuid::Uuid;

pub use kandev_testkit::{MOCK_IMAGE, NATS_URL, OwnDocker, TestDb, ensure_docker, free_port};

pub struct TestApp {
    pub client: AgentManagerClient<TracedChannel>,
    /// Where the service listens (gRPC and HTTP).
    pub addr: std::net::SocketAddr,
    pub db: TestDb,
    /// Holds `workspaces/`, `allowed/` and a fake `home/`.
    pub dir: TempDir,
    shutdown: CancellationToken,
    handle: JoinHandle<()>,
}

pub fn settings(db: &TestDb, dir: &Path) -> Settings {
    Settings {
        common: kandev_testkit::service_settings(Settings::default().common, &db.url, &NATS_URL),
        manager_id: db.name.clone(),
        pull_images: false,
        initialize_timeout_secs: 10,
        permission_timeout_secs: 20,
        seq_flush_ms: 100,
        // `git_repo(dir)` makes the test's repositories in `repos/`.
        ..Settings::rooted_in(dir)
    }
}

/// A client of the agent manager at `addr` that sends the service token.
pub async fn client(
    addr: impl std::fmt::Display,
) -> Result<AgentManagerClient<TracedChannel>, tonic::transport::Error> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URL")
        .connect()
        .await?;
    Ok(AgentManagerClient::new(traced(
        channel,
        &kandev_testkit::SERVICE_TOKEN.into(),
    )))
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// A manager's directory: its workspaces, allowed roots, credentials home
/// and repositories, as [`settings`] expects them.
pub fn manager_dir() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["workspaces", "allowed", "home", "repos"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    dir
}

/// A launch of the mock agent on `repo`'s `main` with `prompt`.
pub fn mock_launch(task_id: Uuid, repo: &str, prompt: &str) -> LaunchRequest {
    LaunchRequest {
        task_id,
        agent_type: "mock-agent".into(),
        workspace: WorkspaceSource::Git {
            url: repo.into(),
            branch: "main".into(),
            title: String::new(),
        },
        env: Default::default(),
        prompt: prompt.into(),
        resume_session_id: None,
        priority: 0,
        metadata: Default::default(),
        home_scope: String::new(),
        fill_diff: false,
    }
}

/// Starts a manager on a runtime of its own, launches `launches` in order,
/// waits until every one runs and the first has published `first_events`
/// events (and stored `last_seq`), then drops the runtime: the manager
/// dies mid-turn with no cleanup, as with SIGKILL, and its agents run on.
/// The instances' ids, in launch order.
pub fn launch_then_die(
    settings: Settings,
    launches: Vec<LaunchRequest>,
    first_events: i64,
) -> Vec<Uuid> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let app = Application::build(settings).await.unwrap();
            let manager = &app.manager();
            let mut ids = Vec::new();
            for launch in launches {
                ids.push(manager.launch(launch).await.unwrap().id);
            }
            for &id in &ids {
                kandev_testkit::eventually(30, "every agent running", || async move {
                    let now = manager.get_instance(id).await.unwrap();
                    (now.status == InstanceStatus::Running).then_some(())
                })
                .await;
            }
            let first = ids[0];
            kandev_testkit::eventually(30, "the first turn halfway", || async move {
                let now = manager.get_instance(first).await.unwrap();
                (now.status == InstanceStatus::Running && now.last_seq >= first_events)
                    .then_some(())
            })
            .await;
            ids
        })
        // The runtime drops here: the manager dies mid-turn, no cleanup.
    })
    .join()
    .unwrap()
}

pub async fn spawn_app_with(customize: impl FnOnce(&mut Settings)) -> TestApp {
    kandev_testkit::init_tracing();
    tokio::task::spawn_blocking(ensure_docker).await.unwrap();
    let db = TestDb::create().await;
    let dir = manager_dir();
    let mut settings = settings(&db, dir.path());
    customize(&mut settings);
    let app = Application::build(settings).await.expect("app builds");
    let addr = app.local_addr();
    let (shutdown, handle) =
        kandev_testkit::run_until_cancelled("server runs", |stop| app.run_until_stopped(stop));
    let client = client(addr).await.expect("client connects");
    TestApp {
        client,
        addr,
        db,
        dir,
        shutdown,
        handle,
    }
}

impl TestApp {
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.handle.await;
        self.db.drop_db().await;
    }

    pub fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// Launches the mock agent on a fresh clone of `repo`.
    pub async fn launch(
        &mut self,
        task_id: Uuid,
        agent_type: &str,
        repo: &str,
        prompt: &str,
    ) -> Result<pb::AgentInstance, tonic::Status> {
        self.client
            .launch_agent(launch_request(task_id, agent_type, repo, prompt))
            .await
            .map(|r| r.into_inner())
    }

    /// Launches `agent_type` with `prompt` on a new task and a fresh
    /// repository under the test's directory, watching the task's events
    /// from before the launch.
    pub async fn launch_watched(&mut self, agent_type: &str, prompt: &str) -> Launched {
        self.launch_watched_with(agent_type, prompt, |_| {}).await
    }

    /// [`TestApp::launch_watched`], with the request changed by `edit`
    /// (more env, a session to resume…) before it is sent.
    pub async fn launch_watched_with(
        &mut self,
        agent_type: &str,
        prompt: &str,
        edit: impl FnOnce(&mut pb::LaunchAgentRequest),
    ) -> Launched {
        let repo = git_repo(self.dir.path());
        let task = Uuid::new_v4();
        let watch = TaskWatch::start(task).await;
        let mut request = launch_request(task, agent_type, &repo, prompt);
        edit(&mut request);
        let instance = self.launch_agent(request).await;
        Launched {
            repo,
            task,
            watch,
            instance,
        }
    }

    /// [`TestApp::launch_watched`], returning once the agent has said
    /// something (its turn is under way).
    pub async fn launch_until_it_speaks(
        &mut self,
        agent_type: &str,
        prompt: &str,
    ) -> (TaskWatch, pb::AgentInstance) {
        let (mut watch, instance) = self.launch_watched(agent_type, prompt).await.split();
        watch.until_agent_speaks().await;
        (watch, instance)
    }

    /// Registers `agent_type`, a mock agent that needs
    /// `KANDEV_MOCK_QUIRKS`, and launches it as
    /// [`TestApp::launch_watched`] does with `quirks` (comma-separated: see
    /// the mock agent) in that variable.
    pub async fn launch_quirky(
        &mut self,
        agent_type: &str,
        quirks: &str,
        prompt: &str,
    ) -> Launched {
        self.mock_type(agent_type, |t| {
            t.required_env = vec!["KANDEV_MOCK_QUIRKS".into()];
        })
        .await;
        self.launch_watched_with(agent_type, prompt, |r| {
            r.env = [("KANDEV_MOCK_QUIRKS".to_string(), quirks.to_string())].into();
        })
        .await
    }

    /// Sends `request`; the launched (pending) instance.
    pub async fn launch_agent(&mut self, request: pb::LaunchAgentRequest) -> pb::AgentInstance {
        self.client
            .launch_agent(request)
            .await
            .unwrap()
            .into_inner()
    }

    /// Cancels the current turn of `instance_id` as the user; whether a
    /// turn was cancelled.
    pub async fn cancel(&mut self, instance_id: &str) -> bool {
        self.client
            .cancel_agent(pb::CancelAgentRequest {
                instance_id: instance_id.into(),
                reason: "user".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .cancelled
    }

    /// The last `tail` log lines kept for `instance_id` (0: the service's
    /// default number).
    pub async fn logs(&mut self, instance_id: &str, tail: i32) -> Vec<pb::LogLine> {
        self.client
            .get_logs(pb::GetLogsRequest {
                instance_id: instance_id.into(),
                tail,
            })
            .await
            .unwrap()
            .into_inner()
            .lines
    }

    /// Every instance of the task, ended ones too.
    pub async fn instances_of(&mut self, task: Uuid) -> Vec<pb::AgentInstance> {
        self.client
            .list_instances(pb::ListInstancesRequest {
                task_id: task.to_string(),
                active_only: false,
            })
            .await
            .unwrap()
            .into_inner()
            .instances
    }

    /// The task's changes on its branch.
    pub async fn changes(&mut self, task: Uuid) -> pb::Changes {
        self.client
            .get_changes(pb::GetChangesRequest {
                task_id: task.to_string(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// The diff of one file of the task's changes.
    pub async fn file_diff(&mut self, task: Uuid, path: &str) -> pb::FileDiff {
        self.client
            .get_file_diff(pb::GetFileDiffRequest {
                task_id: task.to_string(),
                path: path.into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// The ACP session `instance_id` holds now.
    pub async fn session(&mut self, instance_id: &str) -> pb::AgentSession {
        self.client
            .get_session(pb::GetSessionRequest {
                instance_id: instance_id.into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// Sends a follow-up `prompt` to `instance_id`.
    pub async fn send_prompt(&mut self, instance_id: &str, prompt: &str) {
        self.client
            .send_prompt(pb::SendPromptRequest {
                instance_id: instance_id.into(),
                prompt: prompt.into(),
            })
            .await
            .unwrap();
    }

    pub async fn status(&mut self, id: &str) -> pb::AgentInstance {
        self.client
            .get_status(pb::GetStatusRequest {
                instance_id: id.into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// The registered agent type `id`.
    pub async fn agent_type(&mut self, id: &str) -> pb::AgentType {
        self.client
            .get_agent_type(pb::GetAgentTypeRequest { id: id.into() })
            .await
            .unwrap()
            .into_inner()
    }

    /// Registers a copy of `mock-agent` under `id`, changed by `edit`.
    pub async fn mock_type(&mut self, id: &str, edit: impl FnOnce(&mut pb::AgentType)) {
        let mut t = self.agent_type("mock-agent").await;
        t.id = id.into();
        edit(&mut t);
        self.client
            .upsert_agent_type(pb::UpsertAgentTypeRequest {
                agent_type: Some(t),
            })
            .await
            .unwrap();
    }
}

pub fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        // The agent's clones belong to the agent's user, not the test's.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
        .stdout(Stdio::null())
        .status()
        .expect("git is installed");
    assert!(status.success(), "git {args:?}");
}

/// A launch of `agent_type` on a fresh clone of `repo` (branch `main`);
/// tests set more fields with struct update syntax.
pub fn launch_request(
    task_id: Uuid,
    agent_type: &str,
    repo: &str,
    prompt: &str,
) -> pb::LaunchAgentRequest {
    pb::LaunchAgentRequest {
        task_id: task_id.to_string(),
        agent_type: agent_type.into(),
        workspace: Some(pb::launch_agent_request::Workspace::Repository(
            pb::GitWorkspace {
                repository_url: repo.into(),
                branch: "main".into(),
                title: "Edit the readme".into(),
            },
        )),
        prompt: prompt.into(),
        ..Default::default()
    }
}

/// A git repository with `README.md` on branch `main`, under
/// `<parent>/repos` (the tests' allowed repository root); its `file://` URL.
pub fn git_repo(parent: &Path) -> String {
    let dir = parent
        .join("repos")
        .join(format!("repo-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("README.md"), "# Demo\n").unwrap();
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "-q", "-m", "init"]);
    format!("file://{}", dir.display())
}

/// A launch [`TestApp::launch_watched`] made.
pub struct Launched {
    pub repo: String,
    pub task: Uuid,
    pub watch: TaskWatch,
    pub instance: pb::AgentInstance,
}

impl Launched {
    /// The watch on the task and the launched instance, for tests that need
    /// nothing else.
    pub fn split(self) -> (TaskWatch, pb::AgentInstance) {
        (self.watch, self.instance)
    }
}

/// Everything published about one task: `acp.message.<task>` and `agent.*`.
pub struct TaskWatch {
    acp: async_nats::Subscriber,
    agent: async_nats::Subscriber,
    task_id: Uuid,
    /// ACP events seen so far (the `event` JSON of each message).
    pub events: Vec<serde_json::Value>,
    /// How many `acp.message` batches came compressed.
    pub packed_batches: usize,
    /// `agent.*` events seen so far, as (subject, data).
    pub lifecycle: Vec<(String, serde_json::Value)>,
}

impl TaskWatch {
    pub async fn start(task_id: Uuid) -> TaskWatch {
        let client = async_nats::connect(NATS_URL.as_str())
            .await
            .expect("nats is running");
        let acp = client
            .subscribe(format!("acp.message.{task_id}"))
            .await
            .unwrap();
        let agent = client.subscribe("agent.>").await.unwrap();
        client.flush().await.unwrap();
        TaskWatch {
            acp,
            agent,
            task_id,
            events: vec![],
            packed_batches: 0,
            lifecycle: vec![],
        }
    }

    /// Collects until an `agent.*` event with `subject` arrives for the task
    /// (after `skip` earlier ones of that subject); returns its data.
    pub async fn until(&mut self, subject: &str, skip: usize) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let seen = self
                .lifecycle
                .iter()
                .filter(|(s, _)| s == subject)
                .nth(skip)
                .map(|(_, d)| d.clone());
            if let Some(data) = seen {
                // Let the ACP messages published before it arrive too.
                self.drain_acp(Duration::from_millis(300)).await;
                return data;
            }
            tokio::select! {
                msg = self.acp.next() => self.add_batch(&msg.unwrap().payload),
                msg = self.agent.next() => {
                    let msg = msg.unwrap();
                    let env: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
                    if env["data"]["task_id"] == self.task_id.to_string().as_str() {
                        self.lifecycle.push((msg.subject.to_string(), env["data"].clone()));
                    }
                }
                () = tokio::time::sleep_until(deadline) => panic!(
                    "no {subject} within 60 s; lifecycle: {:?}", self.lifecycle
                ),
            }
        }
    }

    /// Collects ACP events until one matches `pred`.
    pub async fn until_event(&mut self, pred: impl Fn(&serde_json::Value) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !self.events.iter().any(&pred) {
            let msg = tokio::time::timeout_at(deadline, self.acp.next())
                .await
                .expect("the expected ACP event did not arrive")
                .unwrap();
            self.add_batch(&msg.payload);
        }
    }

    /// Takes the events of one `acp.message` batch, checking that their
    /// seqs run from `first_seq`.
    fn add_batch(&mut self, payload: &[u8]) {
        self.packed_batches += usize::from(kandev_events::pack::is_packed(payload));
        let json = kandev_events::pack::unpack(payload).unwrap();
        let env: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let first = env["data"]["first_seq"].as_u64().unwrap();
        for (i, event) in env["data"]["events"].as_array().unwrap().iter().enumerate() {
            assert_eq!(event["seq"].as_u64(), Some(first + i as u64), "{env}");
            self.events.push(event.clone());
        }
    }

    async fn drain_acp(&mut self, quiet: Duration) {
        while let Ok(Some(msg)) = tokio::time::timeout(quiet, self.acp.next()).await {
            self.add_batch(&msg.payload);
        }
    }

    /// Collects ACP events until the agent has said something.
    pub async fn until_agent_speaks(&mut self) {
        self.until_event(|e| e["kind"] == "message_chunk" && e["data"]["role"] == "agent")
            .await;
    }

    /// Asserts that the events seen so far are numbered 1, 2, 3… with no
    /// gap.
    pub fn assert_contiguous(&self) {
        let seqs = self.seqs();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    }

    /// Asserts that the task's lifecycle was exactly one run that started,
    /// ran and completed.
    pub fn assert_one_completed_run(&self) {
        let subjects: Vec<&str> = self.lifecycle.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            subjects,
            ["agent.started", "agent.running", "agent.completed"]
        );
    }

    pub fn kinds(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|e| e["kind"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub fn seqs(&self) -> Vec<u64> {
        self.events
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect()
    }
}

/// Containers labelled with the instance id, as `docker ps -a` ids.
pub fn containers_of(instance_id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=kandev.instance_id={instance_id}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `docker inspect` of one container.
pub fn inspect(container: &str) -> serde_json::Value {
    let out = Command::new("docker")
        .args(["inspect", container])
        .output()
        .unwrap();
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    all[0].clone()
}

/// Checks a `slow N` turn's stream as a consumer sees it: after dropping
/// repeated seqs (which must carry the same wire message: a line re-read
/// after a restart may be normalized with less context), seqs run 1..
/// without a gap and every chunk appears exactly once. Returns the last seq.
pub fn assert_slow_stream_complete(events: &[serde_json::Value], chunks: usize) -> u64 {
    let mut by_seq: std::collections::BTreeMap<u64, serde_json::Value> = Default::default();
    for e in events {
        let seq = e["seq"].as_u64().unwrap();
        let content = serde_json::json!([e["kind"], e["data"], e["raw"]]);
        if let Some(seen) = by_seq.get(&seq) {
            assert_eq!(
                (&seen[2], &seen[0] == "lifecycle"),
                (&content[2], &content[0] == "lifecycle"),
                "seq {seq} was reused for another event"
            );
        } else {
            by_seq.insert(seq, content);
        }
    }
    let seqs: Vec<u64> = by_seq.keys().copied().collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "gap in seq"
    );
    let texts: Vec<String> = by_seq
        .values()
        .filter(|c| c[0] == "message_chunk")
        .filter_map(|c| c[1]["text"].as_str().map(str::to_string))
        .collect();
    for i in 1..=chunks {
        let want = format!("chunk {i}/{chunks}\n");
        assert_eq!(
            texts.iter().filter(|c| **c == want).count(),
            1,
            "chunk {i} lost or duplicated: {texts:?}"
        );
    }
    *seqs.last().unwrap()
}
