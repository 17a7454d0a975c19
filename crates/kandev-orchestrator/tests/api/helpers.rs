use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use kandev_common::CancellationToken;
use kandev_common::trace::{TracedChannel, traced};
use kandev_events::{
    Envelope, EventBus, JetStreamBus,
    agent::{AcpBatch, AgentEventKind, AgentLifecycle},
    subjects,
};
use kandev_orchestrator::{AgentControl, Application, Settings, config::ConsumerSettings};
use kandev_proto::v1::{self as pb, task_service_client::TaskServiceClient};
use kandev_testkit::{OwnNats, TestDb};
/// Calls to the orchestrator's REST API carry the service token, as its
/// callers must; `kandev_testkit::http` is the call without.
pub use kandev_testkit::{eventually, init_tracing, service_http as http};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, tungstenite::Message};
use tonic::{Status, transport::Channel};
use uuid::Uuid;

pub fn settings(db: &TestDb, nats_url: &str) -> Settings {
    Settings {
        common: kandev_testkit::service_settings(Settings::default().common, &db.url, nats_url),
        // Nobody listens there unless the test starts a task service.
        task_service_url: format!("http://127.0.0.1:{}", kandev_testkit::free_port()),
        feed_flush_ms: 20,
        retry_backoff_ms: 100,
        retry_backoff_max_ms: 400,
        consumers: ConsumerSettings::default(),
        ..Settings::default()
    }
}

/// A lazily connecting channel to a service at `addr` whose calls carry the
/// service token.
pub fn service_channel(addr: SocketAddr) -> TracedChannel {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URL")
        .connect_lazy();
    traced(channel, &kandev_testkit::SERVICE_TOKEN.into())
}

/// What the recording agent manager was asked.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentCall {
    Launch(Box<pb::LaunchAgentRequest>, Uuid),
    Prompt(Uuid, String),
    Cancel(Uuid),
    Stop(Uuid),
    Permission(pb::RespondPermissionRequest),
}

/// An [`AgentControl`] that records calls and answers them at once; the
/// test plays the agent manager's events on NATS. Used only where the test
/// is about the orchestrator's own decisions (queue, limits, retries).
#[derive(Default)]
pub struct RecordingAgents {
    pub calls: Mutex<Vec<AgentCall>>,
    /// When set, SendPrompt is refused with this code (the agent manager
    /// refuses a follow-up on a stopped instance, for example).
    pub refuse_prompts: Mutex<Option<tonic::Code>>,
    /// The tasks whose workspace RemoveWorkspace was asked to remove, in
    /// order.
    pub workspaces_removed: Mutex<Vec<String>>,
}

impl RecordingAgents {
    pub fn calls(&self) -> Vec<AgentCall> {
        self.calls.lock().unwrap().clone()
    }

    /// (task_id, instance_id) of every launch, in order.
    pub fn launches(&self) -> Vec<(String, Uuid, pb::LaunchAgentRequest)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                AgentCall::Launch(req, id) => Some((req.task_id.clone(), id, *req)),
                _ => None,
            })
            .collect()
    }
}

#[async_trait]
impl AgentControl for RecordingAgents {
    async fn launch(&self, request: pb::LaunchAgentRequest) -> Result<pb::AgentInstance, Status> {
        let id = Uuid::new_v4();
        let instance = pb::AgentInstance {
            id: id.to_string(),
            task_id: request.task_id.clone(),
            agent_type: request.agent_type.clone(),
            status: pb::AgentStatus::Starting as i32,
            ..Default::default()
        };
        self.calls
            .lock()
            .unwrap()
            .push(AgentCall::Launch(Box::new(request), id));
        Ok(instance)
    }

    async fn send_prompt(&self, instance_id: &str, prompt: &str) -> Result<(), Status> {
        let id = Uuid::parse_str(instance_id).unwrap();
        if let Some(code) = *self.refuse_prompts.lock().unwrap() {
            return Err(Status::new(code, "the instance was stopped"));
        }
        self.calls
            .lock()
            .unwrap()
            .push(AgentCall::Prompt(id, prompt.to_string()));
        Ok(())
    }

    async fn cancel(&self, instance_id: &str, _reason: &str) -> Result<(), Status> {
        let id = Uuid::parse_str(instance_id).unwrap();
        self.calls.lock().unwrap().push(AgentCall::Cancel(id));
        Ok(())
    }

    async fn stop(&self, instance_id: &str, _reason: &str) -> Result<(), Status> {
        let id = Uuid::parse_str(instance_id).unwrap();
        self.calls.lock().unwrap().push(AgentCall::Stop(id));
        Ok(())
    }

    async fn respond_permission(
        &self,
        request: pb::RespondPermissionRequest,
    ) -> Result<(), Status> {
        self.calls
            .lock()
            .unwrap()
            .push(AgentCall::Permission(request));
        Ok(())
    }

    async fn list_instances(&self, _task_id: &str) -> Result<Vec<pb::AgentInstance>, Status> {
        Ok(vec![])
    }

    async fn deliver(&self, _request: pb::DeliverChangesRequest) -> Result<pb::Delivery, Status> {
        Err(Status::unimplemented(
            "this recording agent manager has no workspaces",
        ))
    }

    async fn remove_workspace(&self, task_id: &str, _keep_delivered: bool) -> Result<bool, Status> {
        let mut removed = self.workspaces_removed.lock().unwrap();
        removed.push(task_id.to_string());
        Ok(true)
    }

    async fn open_user_secret(
        &self,
        _scope: &str,
        name: &str,
    ) -> Result<secrecy::SecretString, Status> {
        Err(Status::not_found(format!("no secret named {name:?}")))
    }
}

/// A running orchestrator (and, when asked, a task service) on a private
/// NATS and a fresh database.
pub struct TestApp {
    pub addr: SocketAddr,
    pub db: TestDb,
    pub nats: OwnNats,
    pub bus: JetStreamBus,
    pub agents: Arc<RecordingAgents>,
    /// What the orchestrator drives: `agents`, or the real agent manager.
    control: Arc<dyn AgentControl>,
    pub tasks: Option<TaskServiceClient<TracedChannel>>,
    pub settings: Settings,
    shutdown: CancellationToken,
    handle: JoinHandle<()>,
    task_service: Option<(CancellationToken, JoinHandle<()>)>,
    pub agent_manager: Option<AgentManagerProc>,
}

/// The real agent manager, in-process, with its workspaces in a temp dir.
pub struct AgentManagerProc {
    pub addr: SocketAddr,
    pub dir: std::path::PathBuf,
    stop: CancellationToken,
    handle: JoinHandle<()>,
}

pub struct Options {
    pub with_task_service: bool,
    /// Run the real agent manager (Docker, mock agent) instead of
    /// recording launches.
    pub with_agent_manager: bool,
    pub tweak: Box<dyn FnOnce(&mut Settings) + Send>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            with_task_service: false,
            with_agent_manager: false,
            tweak: Box::new(|_| {}),
        }
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Options::default()).await
}

pub async fn spawn_app_with(options: Options) -> TestApp {
    init_tracing();
    let nats = OwnNats::start().await;
    let db = TestDb::create().await;
    let mut settings = settings(&db, &nats.url());
    let mut task_service = None;
    let mut tasks = None;
    if options.with_task_service {
        let ts_settings = kandev_task_service::Settings {
            common: kandev_testkit::service_settings(
                kandev_task_service::Settings::default().common,
                &db.url,
                &nats.url(),
            ),
            outbox_poll_ms: 100,
            ..kandev_task_service::Settings::default()
        };
        let app = kandev_task_service::Application::build(ts_settings)
            .await
            .expect("task service builds");
        let addr = app.local_addr();
        let (stop, handle) = kandev_testkit::run_until_cancelled("task service runs", |stop| {
            app.run_until_stopped(stop)
        });
        settings.task_service_url = format!("http://{addr}");
        tasks = Some(TaskServiceClient::new(service_channel(addr)));
        task_service = Some((stop, handle));
    }
    let agents = Arc::new(RecordingAgents::default());
    let mut control: Arc<dyn AgentControl> = agents.clone();
    let mut agent_manager = None;
    if options.with_agent_manager {
        let am = spawn_agent_manager(&db, &nats).await;
        settings.agent_manager_url = format!("http://{}", am.addr);
        control = Arc::new(
            kandev_orchestrator::GrpcAgentControl::lazy(
                &settings.agent_manager_url,
                &kandev_testkit::SERVICE_TOKEN.into(),
            )
            .unwrap(),
        );
        agent_manager = Some(am);
    }
    (options.tweak)(&mut settings);
    let app = Application::build_with_agents(settings.clone(), control.clone())
        .await
        .expect("orchestrator builds");
    let addr = app.local_addr();
    let (shutdown, handle) = kandev_testkit::run_until_cancelled("orchestrator runs", |stop| {
        app.run_until_stopped(stop)
    });
    let bus = JetStreamBus::connect(&nats.url()).await.expect("bus");
    bus.ensure_streams().await.expect("streams");
    TestApp {
        addr,
        db,
        nats,
        bus,
        agents,
        control,
        tasks,
        settings,
        shutdown,
        handle,
        task_service,
        agent_manager,
    }
}

impl TestApp {
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.handle.await;
        if let Some((stop, handle)) = self.task_service {
            stop.cancel();
            let _ = handle.await;
        }
        if let Some(am) = self.agent_manager {
            am.stop.cancel();
            let _ = am.handle.await;
            let _ = std::fs::remove_dir_all(&am.dir);
        }
        self.db.drop_db().await;
    }

    /// Kills the orchestrator without any graceful shutdown: its future
    /// and every task it spawned are dropped mid-flight.
    pub async fn crash(&mut self) {
        self.handle.abort();
        let _ = (&mut self.handle).await;
    }

    /// Starts a new orchestrator on the same database, NATS and durable
    /// consumers (on a new port).
    pub async fn restart(&mut self) {
        let app = Application::build_with_agents(self.settings.clone(), self.control.clone())
            .await
            .expect("orchestrator builds again");
        self.addr = app.local_addr();
        (self.shutdown, self.handle) =
            kandev_testkit::run_until_cancelled("orchestrator runs", |stop| {
                app.run_until_stopped(stop)
            });
    }

    pub fn tasks(&self) -> TaskServiceClient<TracedChannel> {
        self.tasks.clone().expect("started with a task service")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn ws_url(&self, task_id: Uuid, after: Option<i64>) -> String {
        ws_url(self.addr, task_id, after)
    }
}

pub fn ws_url(addr: SocketAddr, task_id: Uuid, after: Option<i64>) -> String {
    let base = format!("ws://{addr}/api/v1/orchestrator/tasks/{task_id}/stream");
    match after {
        Some(a) => format!("{base}?after={a}"),
        None => base,
    }
}

/// One ACP event of an instance, as the agent manager serializes it.
pub fn acp_event(instance_seq: u64) -> Value {
    json!({
        "seq": instance_seq,
        "timestamp": "2026-01-10T12:00:00.000Z",
        "direction": "from_agent",
        "session_id": "sess_test",
        "kind": "message_chunk",
        "data": {"role": "agent", "text": format!("chunk {instance_seq}"), "content_type": "text"},
        "raw": null,
    })
}

/// A batch of one ACP event, as the agent manager publishes it.
pub fn acp(task_id: Uuid, instance_id: Uuid, instance_seq: u64) -> AcpBatch {
    acp_batch(task_id, instance_id, instance_seq..=instance_seq)
}

/// A batch of the events `seqs` of an instance.
pub fn acp_batch(
    task_id: Uuid,
    instance_id: Uuid,
    seqs: std::ops::RangeInclusive<u64>,
) -> AcpBatch {
    AcpBatch {
        task_id,
        instance_id,
        first_seq: *seqs.start(),
        cursor: Default::default(),
        events: seqs.map(acp_event).collect(),
    }
}

/// Publishes ACP batches, in order, each acknowledged by JetStream.
pub async fn publish_acp(bus: &JetStreamBus, batches: &[AcpBatch]) {
    for b in batches {
        let (id, bytes) = b.encode();
        publish_acp_bytes(bus, b, id, bytes).await;
    }
}

/// Publishes a batch compressed, as the agent manager publishes large ones.
pub async fn publish_acp_packed(bus: &JetStreamBus, b: &AcpBatch) {
    let (id, bytes) = b.encode();
    let packed = kandev_events::pack::pack(bytes);
    assert!(
        kandev_events::pack::is_packed(&packed),
        "the batch is large enough to pack"
    );
    publish_acp_bytes(bus, b, id, packed).await;
}

/// Publishes a payload that claims to be a compressed batch but is not one.
pub async fn publish_acp_damaged(bus: &JetStreamBus, task_id: Uuid) {
    let subject = subjects::acp_message(&task_id);
    let mut payload = b"KLZ4".to_vec();
    payload.extend_from_slice(&1000u32.to_le_bytes());
    payload.extend_from_slice(b"not lz4 at all");
    bus.publish(&subject, Uuid::new_v4(), Bytes::from(payload))
        .await
        .expect("publish a damaged batch");
}

/// Publishes a batch under another envelope id than its own.
pub async fn publish_acp_with_id(bus: &JetStreamBus, b: &AcpBatch, id: Uuid) {
    let (_, bytes) = b.encode();
    let mut envelope: Value = serde_json::from_slice(&bytes).unwrap();
    envelope["id"] = json!(id);
    publish_acp_bytes(bus, b, id, serde_json::to_vec(&envelope).unwrap()).await;
}

async fn publish_acp_bytes(bus: &JetStreamBus, b: &AcpBatch, id: Uuid, bytes: Vec<u8>) {
    let subject = subjects::acp_message(&b.task_id);
    bus.publish(&subject, id, Bytes::from(bytes))
        .await
        .expect("publish acp batch");
}

/// Publishes batches fast: the acks are awaited together.
pub async fn publish_acp_fast(nats_url: &str, batches: &[AcpBatch]) {
    let client = async_nats::connect(nats_url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    for chunk in batches.chunks(256) {
        let mut acks = vec![];
        for b in chunk {
            let subject = subjects::acp_message(&b.task_id);
            let (id, bytes) = b.encode();
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", id.to_string().as_str());
            let ack = js
                .publish_with_headers(subject, headers, bytes.into())
                .await
                .unwrap();
            acks.push(ack);
        }
        for ack in acks {
            ack.await.unwrap();
        }
    }
}

/// Publishes an `agent.*` lifecycle event as the agent manager would.
pub async fn publish_agent(bus: &JetStreamBus, ev: AgentLifecycle, turn: u64) {
    let subject = ev.kind.subject();
    let id = ev.event_id(turn);
    let mut env = Envelope::new(subject, ev);
    env.id = id;
    bus.publish(subject, id, Bytes::from(env.to_bytes().unwrap()))
        .await
        .expect("publish agent event");
}

pub fn lifecycle(kind: AgentEventKind, task_id: &str, instance_id: Uuid) -> AgentLifecycle {
    AgentLifecycle::new(
        kind,
        Uuid::parse_str(task_id).unwrap(),
        instance_id,
        "mock-agent",
    )
}

pub type Ws = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the feed's WebSocket with the service token, as its callers must.
pub async fn ws_connect(url: &str) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request().expect("a WebSocket URL");
    request.headers_mut().insert(
        "authorization",
        kandev_testkit::service_bearer().parse().unwrap(),
    );
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connects");
    ws
}

/// What a client read.
#[derive(Debug)]
pub enum Read {
    Frame(Value),
    Closed(Option<(u16, String)>),
}

pub async fn ws_read(ws: &mut Ws, wait: Duration) -> Option<Read> {
    loop {
        let msg = match tokio::time::timeout(wait, ws.next()).await {
            Err(_) => return None,
            Ok(None) => return Some(Read::Closed(None)),
            Ok(Some(Err(_))) => return Some(Read::Closed(None)),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => {
                return Some(Read::Frame(serde_json::from_str(t.as_str()).unwrap()));
            }
            Message::Close(frame) => {
                return Some(Read::Closed(
                    frame.map(|f| (u16::from(f.code), f.reason.to_string())),
                ));
            }
            _ => continue,
        }
    }
}

/// Reads feed frames until `n` arrived; panics on a timeout or a close.
pub async fn ws_frames(ws: &mut Ws, n: usize) -> Vec<Value> {
    let mut out = vec![];
    while out.len() < n {
        match ws_read(ws, Duration::from_secs(20)).await {
            Some(Read::Frame(f)) => {
                if f.get("seq").is_some() {
                    out.push(f);
                }
            }
            other => panic!("after {} of {n} frames: {other:?}", out.len()),
        }
    }
    out
}

pub async fn ws_send(ws: &mut Ws, value: Value) {
    ws.send(Message::Text(value.to_string().into()))
        .await
        .unwrap();
}

pub fn seqs(frames: &[Value]) -> Vec<i64> {
    frames.iter().map(|f| f["seq"].as_i64().unwrap()).collect()
}

/// The task's stored frames once there are `n`, waiting up to `secs`
/// seconds.
pub async fn wait_stored(db: &TestDb, task_id: Uuid, n: usize, secs: u64) -> Vec<(i64, Uuid, i64)> {
    eventually(secs, &format!("{n} frames of {task_id} stored"), || async {
        let rows = stored(db, task_id).await;
        (rows.len() == n).then_some(rows)
    })
    .await
}

/// (seq, instance_id, instance_seq) of every stored frame of a task.
pub async fn stored(db: &TestDb, task_id: Uuid) -> Vec<(i64, Uuid, i64)> {
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let rows = sqlx::query_as(
        "SELECT first_seq + i, instance_id, first_instance_seq + i \
         FROM orchestrator.feed_chunks, generate_series(0, last_seq - first_seq) AS i \
         WHERE task_id = $1 ORDER BY 1",
    )
    .bind(task_id)
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows
}

pub fn limits(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

async fn spawn_agent_manager(db: &TestDb, nats: &OwnNats) -> AgentManagerProc {
    tokio::task::spawn_blocking(kandev_testkit::ensure_docker)
        .await
        .unwrap();
    let dir = kandev_testkit::agent_manager_dir("kandev-orch-am");
    let settings = kandev_agent_manager::Settings {
        common: kandev_testkit::service_settings(
            kandev_agent_manager::Settings::default().common,
            &db.url,
            &nats.url(),
        ),
        manager_id: db.name.clone(),
        pull_images: false,
        initialize_timeout_secs: 20,
        seq_flush_ms: 100,
        ..kandev_agent_manager::Settings::rooted_in(&dir)
    };
    let app = kandev_agent_manager::Application::build(settings)
        .await
        .expect("agent manager builds");
    let addr = app.local_addr();
    let (stop, handle) = kandev_testkit::run_until_cancelled("agent manager runs", |stop| {
        app.run_until_stopped(stop)
    });
    AgentManagerProc {
        addr,
        dir,
        stop,
        handle,
    }
}
