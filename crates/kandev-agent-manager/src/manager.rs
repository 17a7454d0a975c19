//! The agent manager's domain API: the registry, launching and driving
//! instances, and reconciling containers left by an earlier run.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use kandev_acp::PermissionDecision;
use kandev_common::sync::lock;
use kandev_events::{EventBus, agent::AgentEventKind, managers::ManagerAnnouncement};
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;
use uuid::Uuid;

mod preparing;
mod recovery;

use crate::{
    changes,
    config::{Settings, WorkspacePolicy},
    container::{self, RunEnv, RunFor},
    credentials::UserSecrets,
    docker::Docker,
    domain::{
        AgentError, AgentInstance, AgentType, InstanceStatus, LogLine, Result, env_name_ok, invalid,
    },
    images::{BuildSettings, ImageBuilder, ImageStatus},
    runner::{self, ProgressBook, RunHandle, Shared, TurnSpec},
    store::{LaunchFields, Outcome, Store},
    workspace::{self, Prepared, PreparedWorkspace, WorkspaceSource},
};

/// What a workflow column's prompt writes for the task's changes so far
/// (see [`LaunchRequest::fill_diff`]), and the most of them it gets.
pub const DIFF_PLACEHOLDER: &str = "{diff}";
const MAX_PROMPT_DIFF_BYTES: usize = 64 * 1024;

/// How long a prompt sent while a run is ending waits for it to end.
const QUEUE_CLOSED_WAIT: Duration = Duration::from_secs(30);

pub use crate::domain::{AUGGIE_SESSION_ID, TASK_DESCRIPTION};

/// A validated `LaunchAgent` request.
#[derive(Clone)]
pub struct LaunchRequest {
    pub task_id: Uuid,
    pub agent_type: String,
    pub workspace: WorkspaceSource,
    /// Extra env for the container; values may be secrets.
    pub env: BTreeMap<String, String>,
    pub prompt: String,
    pub resume_session_id: Option<String>,
    /// Kept on the instance and returned with it.
    pub priority: i32,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Whose agent home volume to use (the user; empty: one shared per type).
    pub home_scope: String,
    /// Replace `{diff}` in the prompt with the task's changes so far.
    pub fill_diff: bool,
}

impl std::fmt::Debug for LaunchRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchRequest")
            .field("task_id", &self.task_id)
            .field("agent_type", &self.agent_type)
            .field("workspace", &self.workspace)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl LaunchRequest {
    /// Checks the request and fills in what the seed lets it leave out:
    /// the prompt from `env.TASK_DESCRIPTION`, the session to resume from
    /// `env.AUGGIE_SESSION_ID`.
    fn complete(&mut self) -> Result<()> {
        if self.agent_type.trim().is_empty() {
            return Err(invalid("agent_type is required"));
        }
        if self.prompt.trim().is_empty() {
            self.prompt = self.env.get(TASK_DESCRIPTION).cloned().unwrap_or_default();
        }
        if self.prompt.trim().is_empty() {
            return Err(invalid(format!(
                "prompt (or env.{TASK_DESCRIPTION}) is required"
            )));
        }
        // The seed's resumption: `env.AUGGIE_SESSION_ID` continues that
        // session (through `session/load`) unless the request names one.
        if self.resume_session_id.is_none() {
            self.resume_session_id = self
                .env
                .get(AUGGIE_SESSION_ID)
                .filter(|id| !id.trim().is_empty())
                .cloned();
        }
        if let Some(bad) = self.env.keys().find(|k| !env_name_ok(k)) {
            return Err(invalid(format!(
                "{bad:?} is not an environment variable name"
            )));
        }
        Ok(())
    }
}

/// A turn about to start: its type, its run's environment and profile,
/// and what it sends.
#[derive(Debug)]
struct NextTurn {
    agent_type: AgentType,
    run_env: RunEnv,
    prompt: String,
    resume_session: Option<String>,
}

/// The service; cheap to clone.
#[derive(Clone)]
pub struct AgentManager {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Shared,
    /// When this manager was created: instances created since are never
    /// mistaken for leftovers of an earlier run.
    created_at: chrono::DateTime<chrono::Utc>,
    runs: Mutex<HashMap<Uuid, Arc<RunHandle>>>,
    /// Request env of each instance, kept in memory for follow-up turns.
    envs: Mutex<HashMap<Uuid, BTreeMap<String, String>>>,
    tasks: TaskTracker,
    secrets: UserSecrets,
    /// The agent images this manager builds from their recipes.
    images: ImageBuilder,
}

impl AgentManager {
    pub fn new(docker: Docker, store: Store, bus: Arc<dyn EventBus>, settings: Settings) -> Self {
        let secrets = UserSecrets::new(store.clone(), settings.secrets_key.as_ref());
        let images = ImageBuilder::new(docker.clone(), BuildSettings::from_settings(&settings));
        AgentManager {
            inner: Arc::new(Inner {
                secrets,
                images,
                shared: Shared {
                    docker,
                    progress: Arc::new(ProgressBook::new(
                        store.clone(),
                        Duration::from_millis(settings.seq_flush_ms),
                    )),
                    store,
                    bus,
                    settings: Arc::new(settings),
                },
                created_at: chrono::Utc::now(),
                runs: Mutex::new(HashMap::new()),
                envs: Mutex::new(HashMap::new()),
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// Where the image of a type stands on this manager's Docker host
    /// ([`ImageBuilder::status`]).
    pub async fn image_status(&self, image: &str) -> (ImageStatus, Option<f64>) {
        self.inner.images.status(image).await
    }

    /// What this manager announces to the pool: its load and the enabled
    /// agent types whose image its engine has.
    pub async fn announcement(&self, url: &str) -> Result<ManagerAnnouncement> {
        let settings = self.settings();
        let active = self.store().count_active().await?;
        let mut agent_types = Vec::new();
        for t in self.list_types(false).await? {
            // A type whose image is built on first use runs here too.
            if self.inner.images.can_build(&t.image)
                || self.inner.shared.docker.has_image(&t.image).await
            {
                agent_types.push(t.id);
            }
        }
        Ok(ManagerAnnouncement {
            id: settings.manager_id.clone(),
            url: url.to_string(),
            capacity: settings.max_instances,
            active: u32::try_from(active).unwrap_or(u32::MAX),
            agent_types,
            every_ms: settings.announce_ms,
            leaving: false,
        })
    }

    fn store(&self) -> &Store {
        &self.inner.shared.store
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.shared.settings
    }

    /// Users' own secrets for their agents.
    pub fn secrets(&self) -> &UserSecrets {
        &self.inner.secrets
    }

    /// Agent profiles ([`crate::profiles`]).
    pub fn profiles(&self) -> crate::profiles::Profiles {
        crate::profiles::Profiles::new(self.store().clone())
    }

    pub async fn ping_store(&self) -> Result<()> {
        self.store().ping().await
    }

    pub async fn ping_docker(&self) -> std::result::Result<(), String> {
        self.inner
            .shared
            .docker
            .ping()
            .await
            .map_err(|e| e.to_string())
    }

    // ---- registry ----

    pub async fn list_types(&self, include_disabled: bool) -> Result<Vec<AgentType>> {
        self.store().list_types(include_disabled).await
    }

    pub async fn get_type(&self, id: &str) -> Result<AgentType> {
        self.store().get_type(id).await
    }

    pub async fn upsert_type(&self, agent_type: AgentType) -> Result<AgentType> {
        agent_type.validate()?;
        self.store().upsert_type(&agent_type).await
    }

    // ---- instances ----

    pub async fn get_instance(&self, id: Uuid) -> Result<AgentInstance> {
        self.store().get_instance(id).await
    }

    pub async fn list_instances(&self, task_id: Option<Uuid>) -> Result<Vec<AgentInstance>> {
        self.store().list_instances(task_id).await
    }

    /// This manager's pending, starting and running instances.
    pub async fn active_instances(&self) -> Result<Vec<AgentInstance>> {
        self.store().active_instances().await
    }

    pub async fn logs(&self, id: Uuid, tail: i64) -> Result<Vec<LogLine>> {
        self.store().get_instance(id).await?;
        let tail = if tail <= 0 { 200 } else { tail.min(10_000) };
        self.store().tail_logs(id, tail).await
    }

    /// Creates the instance, prepares type, env, image and workspace, and
    /// starts the first turn in the background. A preparation failure ends
    /// the instance `failed` (published as `agent.failed`) and is returned.
    ///
    /// Without a prompt, the first turn is the task as the seed gives it to
    /// the agent: `env.TASK_DESCRIPTION`.
    #[tracing::instrument(skip_all, fields(task_id = %request.task_id, agent_type = %request.agent_type))]
    pub async fn launch(&self, mut request: LaunchRequest) -> Result<AgentInstance> {
        request.complete()?;
        if request.fill_diff {
            request.prompt = self.with_diff(request.task_id, &request.prompt).await;
        }
        self.check_capacity().await?;
        let instance = self
            .store()
            .create_instance(
                Uuid::now_v7(),
                request.task_id,
                &request.agent_type,
                &LaunchFields {
                    priority: request.priority,
                    metadata: &request.metadata,
                    home_scope: &request.home_scope,
                },
            )
            .await?;
        let request_env = request.env.clone();
        let work = match self.prepare(request).await {
            Ok(work) => work,
            Err(err) => {
                self.fail_early(&instance, &err).await;
                return Err(err);
            }
        };
        // Kept for the follow-up turns' environment.
        lock(&self.inner.envs).insert(instance.id, request_env);
        match work.workspace {
            Prepared::Ready(ready) if !work.build_image => {
                if let Err(err) = self.set_workspace(&instance, &ready).await {
                    self.fail_early(&instance, &err).await;
                    return Err(err);
                }
                self.start_turn(instance.id, work.turn, ready.host_path)
                    .await
            }
            _ => {
                // A clone or an image build can take long: answer now, with
                // the instance `pending`; its end (or failure) is published
                // as usual.
                let this = self.clone();
                let pending = instance.clone();
                self.inner.tasks.spawn(
                    async move { this.prepare_then_start(pending, work).await }
                        .instrument(tracing::info_span!("prepare", instance = %instance.id)),
                );
                Ok(instance)
            }
        }
    }

    /// Refuses a launch beyond the manager's capacity.
    async fn check_capacity(&self) -> Result<()> {
        let capacity = self.settings().max_instances;
        if capacity > 0 && self.store().count_active().await? >= i64::from(capacity) {
            return Err(AgentError::Unavailable(format!(
                "agent manager {} is at its capacity of {capacity} instances",
                self.settings().manager_id
            )));
        }
        Ok(())
    }

    /// `prompt` with each `{diff}` replaced by the task's changes so far,
    /// read from Kandev's own repository of the task (as the Changes panel
    /// reads them); a task without one has no changes yet.
    async fn with_diff(&self, task_id: Uuid, prompt: &str) -> String {
        if !prompt.contains(DIFF_PLACEHOLDER) {
            return prompt.to_string();
        }
        let root = Path::new(&self.settings().workspaces_root);
        let diff = match changes::task_changes_repo(root, task_id).await {
            Ok(repo) => changes::whole_diff(&repo, MAX_PROMPT_DIFF_BYTES).await,
            Err(AgentError::NotFound(_)) => Ok(String::new()),
            Err(e) => Err(e),
        };
        let diff = match diff {
            Ok(d) if d.trim().is_empty() => "(no changes yet)".to_string(),
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(%task_id, error = %e, "the task's diff could not be read for its prompt");
                format!("(the changes could not be read: {e})")
            }
        };
        prompt.replace(DIFF_PLACEHOLDER, &diff)
    }

    async fn set_workspace(
        &self,
        instance: &AgentInstance,
        ready: &PreparedWorkspace,
    ) -> Result<()> {
        let path = ready.host_path.display().to_string();
        self.store()
            .set_workspace(instance.id, &path, ready.owned)
            .await
    }

    /// Checks the type, builds the run's environment (the user's secrets
    /// and profile), checks the image and starts on the workspace; a clone
    /// and an image build are left to run.
    async fn prepare(&self, request: LaunchRequest) -> Result<preparing::Work> {
        let agent_type = match self.store().get_type(&request.agent_type).await {
            Ok(t) => t,
            Err(AgentError::NotFound(_)) => {
                return Err(AgentError::NotFound(format!(
                    "agent type {:?}",
                    request.agent_type
                )));
            }
            Err(e) => return Err(e),
        };
        if !agent_type.enabled {
            return Err(AgentError::FailedPrecondition(format!(
                "agent type {:?} is disabled",
                agent_type.id
            )));
        }
        let run_env = self
            .run_env(RunFor {
                agent_type: &agent_type,
                request_env: &request.env,
                metadata: &request.metadata,
                scope: &request.home_scope,
            })
            .await?;
        let build_image = self.inner.images.needs_build(&agent_type.image).await;
        if !build_image {
            self.inner
                .shared
                .docker
                .ensure_image(&agent_type.image, self.settings().pull_images)
                .await?;
        }
        let workspace =
            workspace::prepare(self.settings(), request.task_id, request.workspace).await?;
        Ok(preparing::Work {
            workspace,
            build_image,
            turn: NextTurn {
                agent_type,
                run_env,
                prompt: request.prompt,
                resume_session: request.resume_session_id,
            },
        })
    }

    /// Ends an instance that failed before its agent ran, publishing
    /// `agent.failed` with whether running it again may succeed
    /// ([`AgentError::retryable`]): a refusal (no such type, a missing
    /// secret, a repository gone) fails its task once.
    async fn fail_early(&self, instance: &AgentInstance, err: &AgentError) {
        let message = match err {
            AgentError::Storage(_) | AgentError::Internal(_) => "internal error".to_string(),
            AgentError::NotFound(what) => format!("unknown {what}"),
            other => other.to_string(),
        };
        let outcome = Outcome {
            error: message.clone(),
            ..Outcome::default()
        };
        if let Err(e) = self
            .store()
            .finish(instance.id, InstanceStatus::Failed, &outcome)
            .await
        {
            tracing::error!(error = %e, "cannot store the failure");
        }
        runner::publish_lifecycle(
            self.inner.shared.bus.as_ref(),
            instance,
            AgentEventKind::Failed,
            |e| {
                e.error = Some(message);
                e.retryable = Some(err.retryable());
            },
        )
        .await;
    }

    /// The environment and profile of a run ([`container::run_env`]).
    async fn run_env(&self, run: RunFor<'_>) -> Result<RunEnv> {
        container::run_env(&self.inner.secrets, &self.profiles(), self.settings(), run).await
    }

    /// Registers a run for the instance: `None` when one is registered.
    fn register_run(&self, instance_id: Uuid) -> Option<Arc<RunHandle>> {
        let mut runs = lock(&self.inner.runs);
        if runs.contains_key(&instance_id) {
            return None;
        }
        let handle = Arc::new(RunHandle::default());
        runs.insert(instance_id, handle.clone());
        Some(handle)
    }

    /// Starts the instance's next turn in `workspace`, in a container built
    /// from `turn` ([`container::spec`]), and spawns it.
    async fn start_turn(
        &self,
        instance_id: Uuid,
        turn: NextTurn,
        workspace: PathBuf,
    ) -> Result<AgentInstance> {
        let Some(handle) = self.register_run(instance_id) else {
            return Err(AgentError::FailedPrecondition(
                "a turn is already running for this instance".into(),
            ));
        };
        let instance = match self.store().begin_turn(instance_id).await {
            Ok(i) => i,
            Err(e) => {
                lock(&self.inner.runs).remove(&instance_id);
                return Err(e);
            }
        };
        let root = Path::new(&self.settings().workspaces_root);
        if let Err(e) =
            crate::changes::exclude_state(root, instance.task_id, &turn.agent_type.state_paths)
                .await
        {
            tracing::warn!(task = %instance.task_id, error = %e, "cannot declare the agent's state paths");
        }
        let NextTurn {
            agent_type,
            run_env,
            prompt,
            resume_session,
        } = turn;
        let container = container::spec(
            self.settings(),
            &instance,
            &agent_type,
            &workspace,
            run_env.env,
        );
        let spec = TurnSpec {
            instance: instance.clone(),
            agent_type,
            container,
            workspace,
            prompt,
            resume_session,
            reattach: None,
            profile: run_env.profile,
        };
        self.spawn_turn(&instance, spec, handle);
        Ok(instance)
    }

    /// Runs a turn in the background, in a span continuing the trace of the
    /// launch or prompt that started it; the instance's run handle goes
    /// when the turn ends.
    fn spawn_turn(&self, instance: &AgentInstance, spec: TurnSpec, handle: Arc<RunHandle>) {
        let inner = self.inner.clone();
        let instance_id = instance.id;
        let span = tracing::info_span!(
            "turn",
            instance = %instance_id,
            task_id = %instance.task_id,
            trace_id = tracing::field::Empty,
        );
        kandev_common::trace::continue_from(&span, None);
        self.inner.tasks.spawn(
            runner::run_turn(self.inner.shared.clone(), spec, handle, move || {
                lock(&inner.runs).remove(&instance_id);
            })
            .instrument(span),
        );
    }

    /// A follow-up prompt in the instance's ACP session. While a turn runs
    /// it is queued and sent in the same session when the current prompt
    /// ends; otherwise the turn runs in a new container that resumes the
    /// stored session with `session/load`.
    pub async fn send_prompt(&self, id: Uuid, prompt: String) -> Result<AgentInstance> {
        if prompt.trim().is_empty() {
            return Err(invalid("prompt is required"));
        }
        if prompt.len() > runner::MAX_PROMPT_BYTES {
            return Err(invalid(format!(
                "a prompt may be at most {} bytes",
                runner::MAX_PROMPT_BYTES
            )));
        }
        let instance = self.store().get_instance(id).await?;
        if let Some(run) = self.run(id) {
            match run.queue_prompt(prompt.clone()).await {
                Ok(()) => {
                    tracing::info!(instance = %id, "follow-up prompt queued behind the running turn");
                    return Ok(instance);
                }
                Err(runner::QueueRefusal::Full { waiting }) => {
                    return Err(AgentError::ResourceExhausted(format!(
                        "this run already has {waiting} follow-up{} waiting; wait for the turn to end",
                        if waiting == 1 { "" } else { "s" }
                    )));
                }
                Err(runner::QueueRefusal::Closed) => {}
            }
            // The run is ending: the prompt starts the next turn.
            if tokio::time::timeout(QUEUE_CLOSED_WAIT, run.wait_done())
                .await
                .is_err()
            {
                return Err(AgentError::FailedPrecondition(
                    "a turn is ending; send the prompt again when it has".into(),
                ));
            }
        }
        let instance = self.store().get_instance(id).await?;
        if instance.status == InstanceStatus::Stopped {
            return Err(AgentError::FailedPrecondition(
                "the instance was stopped".into(),
            ));
        }
        if instance.acp_session_id.is_empty() || instance.workspace_path.is_empty() {
            return Err(AgentError::FailedPrecondition(
                "the instance has no ACP session to continue".into(),
            ));
        }
        let agent_type = self.store().get_type(&instance.agent_type).await?;
        let workspace = workspace::workspace_for_turn(self.settings(), &instance).await?;
        let request_env = lock(&self.inner.envs).get(&id).cloned().unwrap_or_default();
        let run_env = self
            .run_env(RunFor {
                agent_type: &agent_type,
                request_env: &request_env,
                metadata: &instance.metadata,
                scope: &instance.home_scope,
            })
            .await?;
        let turn = NextTurn {
            agent_type,
            run_env,
            prompt,
            resume_session: Some(instance.acp_session_id.clone()),
        };
        self.start_turn(id, turn, workspace).await
    }

    fn run(&self, id: Uuid) -> Option<Arc<RunHandle>> {
        lock(&self.inner.runs).get(&id).cloned()
    }

    /// `session/cancel` on the running turn, which then ends `cancelled`.
    pub async fn cancel(&self, id: Uuid) -> Result<bool> {
        self.store().get_instance(id).await?;
        let Some(run) = self.run(id) else {
            return Err(AgentError::FailedPrecondition("no turn is running".into()));
        };
        run.cancel()
            .await
            .map_err(|e| AgentError::FailedPrecondition(format!("cannot cancel: {e}")))
    }

    /// Kills and removes the container; the instance ends `stopped`.
    pub async fn stop(&self, id: Uuid, reason: &str) -> Result<AgentInstance> {
        let instance = self.store().get_instance(id).await?;
        if let Some(run) = self.run(id) {
            run.stop(reason);
            let _ = tokio::time::timeout(Duration::from_secs(30), run.wait_done()).await;
        } else if !instance.status.is_terminal() {
            if !instance.container_id.is_empty() {
                self.inner
                    .shared
                    .docker
                    .remove(&instance.container_id)
                    .await;
            }
            let outcome = Outcome {
                stop_reason: "stopped".into(),
                ..Outcome::default()
            };
            if self
                .store()
                .finish(id, InstanceStatus::Stopped, &outcome)
                .await?
            {
                let reason = reason.to_string();
                runner::publish_lifecycle(
                    self.inner.shared.bus.as_ref(),
                    &instance,
                    AgentEventKind::Stopped,
                    |e| e.error = (!reason.is_empty()).then_some(reason),
                )
                .await;
            }
        }
        let instance = self.store().get_instance(id).await?;
        if self.settings().workspace_policy == WorkspacePolicy::RemoveOnStop
            && instance.workspace_owned
            && !instance.workspace_path.is_empty()
        {
            let root = Path::new(&self.settings().workspaces_root);
            if let Err(e) = crate::changes::remove_workspace(root, instance.task_id).await {
                tracing::warn!(task = %instance.task_id, error = %e, "cannot remove the workspace");
            }
        }
        lock(&self.inner.envs).remove(&id);
        Ok(instance)
    }

    /// Answers an `ask` permission request of the running turn, as the
    /// person `by` (a username, named in the feed; empty: nobody named).
    pub async fn respond_permission(
        &self,
        id: Uuid,
        request_id: &str,
        decision: PermissionDecision,
        by: &str,
    ) -> Result<()> {
        self.store().get_instance(id).await?;
        let key_value: serde_json::Value = serde_json::from_str(request_id)
            .unwrap_or_else(|_| serde_json::Value::String(request_id.to_string()));
        let Some(run) = self.run(id) else {
            return Err(AgentError::FailedPrecondition("no turn is running".into()));
        };
        let key = runner::ask_key(&key_value);
        match run.respond(&key, decision, by) {
            Some(true) => {
                let instance = self.store().get_instance(id).await?;
                runner::publish_lifecycle(
                    &*self.inner.shared.bus,
                    &instance,
                    AgentEventKind::InputReceived,
                    |e| e.request_id = Some(key),
                )
                .await;
                Ok(())
            }
            Some(false) => Err(AgentError::FailedPrecondition(
                "the permission request already ended (timed out or cancelled)".into(),
            )),
            None => Err(AgentError::NotFound(format!(
                "open permission request {request_id}"
            ))),
        }
    }
}
