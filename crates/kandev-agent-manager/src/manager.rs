//! The agent manager's domain API: the registry, launching and driving
//! instances, and reconciling containers left by an earlier run.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
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
    credentials::{self, UserSecrets},
    docker::{
        ContainerSpec, Docker, HomeVolume, LABEL_HOME, LABEL_INSTANCE, LABEL_MANAGER, LABEL_TASK,
        LABEL_TURN, LABEL_TYPE,
    },
    domain::{
        AgentError, AgentInstance, AgentType, InstanceStatus, LogLine, Result, env_name_ok,
        home_volume_name, invalid,
    },
    images::{BuildSettings, ImageBuilder, ImageStatus},
    runner::{self, CONTAINER_WORKSPACE, RunHandle, Shared, TurnSpec},
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
    pub async fn launch(&self, mut request: LaunchRequest) -> Result<AgentInstance> {
        if request.agent_type.trim().is_empty() {
            return Err(invalid("agent_type is required"));
        }
        if request.prompt.trim().is_empty() {
            request.prompt = request
                .env
                .get(TASK_DESCRIPTION)
                .cloned()
                .unwrap_or_default();
        }
        if request.prompt.trim().is_empty() {
            return Err(invalid(format!(
                "prompt (or env.{TASK_DESCRIPTION}) is required"
            )));
        }
        // The seed's resumption: `env.AUGGIE_SESSION_ID` continues that
        // session (through `session/load`) unless the request names one.
        if request.resume_session_id.is_none() {
            request.resume_session_id = request
                .env
                .get(AUGGIE_SESSION_ID)
                .filter(|id| !id.trim().is_empty())
                .cloned();
        }
        if request.fill_diff {
            request.prompt = self.with_diff(request.task_id, &request.prompt).await;
        }
        if let Some(bad) = request.env.keys().find(|k| !env_name_ok(k)) {
            return Err(invalid(format!(
                "{bad:?} is not an environment variable name"
            )));
        }
        let capacity = self.settings().max_instances;
        if capacity > 0 && self.store().count_active().await? >= i64::from(capacity) {
            return Err(AgentError::Unavailable(format!(
                "agent manager {} is at its capacity of {capacity} instances",
                self.settings().manager_id
            )));
        }
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
        let (agent_type, workspace, build) = match self.prepare(&request).await {
            Ok(prepared) => prepared,
            Err(err) => {
                self.fail_early(&instance, &err).await;
                return Err(err);
            }
        };
        lock(&self.inner.envs).insert(instance.id, request.env.clone());
        match (workspace, build) {
            (Prepared::Ready(ready), false) => {
                if let Err(err) = self.set_workspace(&instance, &ready).await {
                    self.fail_early(&instance, &err).await;
                    return Err(err);
                }
                self.start_turn(
                    instance.id,
                    agent_type,
                    ready.host_path,
                    request.prompt,
                    request.resume_session_id,
                )
                .await
            }
            (workspace, build_image) => {
                // A clone or an image build can take long: answer now, with
                // the instance `pending`; its end (or failure) is published
                // as usual.
                let this = self.clone();
                let pending = instance.clone();
                let work = preparing::Work {
                    workspace,
                    build_image,
                };
                self.inner.tasks.spawn(
                    async move {
                        this.prepare_then_start(pending, agent_type, work, request)
                            .await;
                    }
                    .instrument(tracing::info_span!("prepare", instance = %instance.id)),
                );
                Ok(instance)
            }
        }
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

    /// Checks type, env, image and workspace; a clone and an image build
    /// (`true`: the image is built from its recipe) are left to run.
    async fn prepare(&self, request: &LaunchRequest) -> Result<(AgentType, Prepared, bool)> {
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
        self.container_env(&agent_type, &request.env, &request.home_scope)
            .await?;
        self.resolve_profile(&request.metadata, &request.home_scope, &agent_type.id)
            .await?;
        let build = self.inner.images.needs_build(&agent_type.image).await;
        if !build {
            self.inner
                .shared
                .docker
                .ensure_image(&agent_type.image, self.settings().pull_images)
                .await?;
        }
        let prepared =
            workspace::prepare(self.settings(), request.task_id, request.workspace.clone()).await?;
        Ok((agent_type, prepared, build))
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

    /// `KEY=VALUE` for a container of the type, for the user the run is
    /// for ([`credentials::container_env`]).
    async fn container_env(
        &self,
        agent_type: &AgentType,
        request_env: &BTreeMap<String, String>,
        scope: &str,
    ) -> Result<Vec<String>> {
        let user_env = self.inner.secrets.env_for(scope).await?;
        credentials::container_env(self.settings(), agent_type, request_env, &user_env)
    }

    /// The task's agent profile for a run of `scope` (see
    /// [`crate::profiles::Profiles::for_launch`]), its secrets opened.
    async fn resolve_profile(
        &self,
        metadata: &serde_json::Map<String, serde_json::Value>,
        scope: &str,
        agent_type: &str,
    ) -> Result<Option<Arc<crate::profiles::ResolvedProfile>>> {
        let profiles = self.profiles();
        let Some(profile) = profiles.for_launch(metadata, scope, agent_type).await? else {
            return Ok(None);
        };
        let secrets = self.inner.secrets.env_for(scope).await?;
        let resolved = crate::profiles::resolve::resolve(&profile, &secrets)?;
        tracing::info!(profile = ?resolved, "the run uses an agent profile");
        Ok(Some(Arc::new(resolved)))
    }

    fn container_spec(
        &self,
        instance: &AgentInstance,
        agent_type: &AgentType,
        host_path: &Path,
        env: Vec<String>,
    ) -> ContainerSpec {
        let settings = self.settings();
        // Checked when the settings were loaded; a bad value never runs as
        // root either way.
        let (uid, gid) = settings.agent_owner().unwrap_or((1000, 1000));
        let mut binds = vec![format!("{}:{CONTAINER_WORKSPACE}:rw", host_path.display())];
        binds.extend(credentials::credential_binds(settings, agent_type));
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

    /// Registers a run for the instance and spawns it.
    async fn start_turn(
        &self,
        instance_id: Uuid,
        agent_type: AgentType,
        host_path: std::path::PathBuf,
        prompt: String,
        resume_session: Option<String>,
    ) -> Result<AgentInstance> {
        let handle = Arc::new(RunHandle::default());
        {
            let mut runs = lock(&self.inner.runs);
            if runs.contains_key(&instance_id) {
                return Err(AgentError::FailedPrecondition(
                    "a turn is already running for this instance".into(),
                ));
            }
            runs.insert(instance_id, handle.clone());
        }
        let instance = match self.store().begin_turn(instance_id).await {
            Ok(i) => i,
            Err(e) => {
                lock(&self.inner.runs).remove(&instance_id);
                return Err(e);
            }
        };
        let request_env = lock(&self.inner.envs)
            .get(&instance_id)
            .cloned()
            .unwrap_or_default();
        let prepared = match self
            .container_env(&agent_type, &request_env, &instance.home_scope)
            .await
        {
            Ok(env) => self
                .resolve_profile(&instance.metadata, &instance.home_scope, &agent_type.id)
                .await
                .map(|profile| (env, profile)),
            Err(e) => Err(e),
        };
        let (env, profile) = match prepared {
            Ok((env, profile)) => (with_profile_env(env, profile.as_deref()), profile),
            Err(e) => {
                lock(&self.inner.runs).remove(&instance_id);
                self.fail_early(&instance, &e).await;
                return Err(e);
            }
        };
        let root = Path::new(&self.settings().workspaces_root);
        if let Err(e) =
            crate::changes::exclude_state(root, instance.task_id, &agent_type.state_paths).await
        {
            tracing::warn!(task = %instance.task_id, error = %e, "cannot declare the agent's state paths");
        }
        let container = self.container_spec(&instance, &agent_type, &host_path, env);
        let spec = TurnSpec {
            instance: instance.clone(),
            agent_type,
            container,
            workspace: host_path,
            prompt,
            resume_session,
            reattach: None,
            profile,
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
        let workspace = crate::reclone::workspace_for_turn(self.settings(), &instance).await?;
        self.start_turn(
            id,
            agent_type,
            workspace,
            prompt,
            Some(instance.acp_session_id.clone()),
        )
        .await
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

/// The container's environment with the profile's variables added (a
/// variable the type or the request already sets keeps its value).
fn with_profile_env(
    mut env: Vec<String>,
    profile: Option<&crate::profiles::ResolvedProfile>,
) -> Vec<String> {
    let Some(profile) = profile else { return env };
    let name = |pair: &String| pair.split_once('=').map(|(n, _)| n.to_string());
    let set: std::collections::BTreeSet<String> = env.iter().filter_map(name).collect();
    env.extend(
        profile
            .env
            .iter()
            .filter(|pair| name(pair).is_some_and(|n| !set.contains(&n)))
            .cloned(),
    );
    env
}
