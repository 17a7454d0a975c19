//! Driving one attempt at a turn: [`start_fresh`] creates, attaches and
//! starts a container and runs the ACP handshake and the prompt;
//! [`resume`] picks up a container that ran without a client (the manager
//! restarted, or the Docker engine did) from the stored output position.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use kandev_acp::{AcpClient, AcpError, ClientOptions, SessionInfo, Workspace, schema::StopReason};
use kandev_events::agent::{AgentEventKind, OutputCursor};
use tokio::sync::{mpsc, watch};
use tokio_util::io::StreamReader;
use uuid::Uuid;

use super::{
    CONTAINER_WORKSPACE, Interruption, RunHandle, Shared, Slots, TurnResult, TurnSpec,
    conversation, failed, interrupt, lock,
    output::{LineQueue, demux},
    pipeline::Pipeline,
    policy, publish_lifecycle, publish_retrying, refused,
};
use crate::{
    docker::{Docker, LogStream},
    domain::{AgentInstance, AgentType},
    exec::DockerExec,
};

/// A client connected to a container's stdin, reading the output that
/// `demux` will copy into `stdout`.
struct Connected {
    client: AcpClient,
    /// Taken by the output copier: the reader sees the end of the output
    /// when it drops it.
    stdout: Option<mpsc::Sender<std::io::Result<Bytes>>>,
    lines: LineQueue,
    drain: tokio::task::JoinHandle<()>,
    max_line: usize,
}

/// Connects an ACP client to the container `id` (stdin: `input`) with the
/// type's capabilities, its events drained into the pipeline.
fn connect(
    shared: &Shared,
    spec: &TurnSpec,
    handle: &Arc<RunHandle>,
    pipeline: &Pipeline,
    id: &str,
    input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    turn_end: Option<watch::Sender<Option<String>>>,
) -> Result<Connected, Interruption> {
    let (stdout, stdout_rx) = mpsc::channel::<std::io::Result<Bytes>>(64);
    let reader = StreamReader::new(tokio_stream::wrappers::ReceiverStream::new(stdout_rx));
    let offers = |cap: &str| spec.agent_type.capabilities.iter().any(|c| c == cap);
    let workspace = if offers("fs") {
        Some(
            Workspace::new(&spec.workspace, CONTAINER_WORKSPACE)
                .map_err(|e| failed(format!("workspace {:?}: {e}", spec.workspace)))?
                .with_owner(shared.settings.file_owner()),
        )
    } else {
        None
    };
    let terminal: Option<Arc<dyn kandev_acp::TerminalExecutor>> = if offers("terminal") {
        Some(Arc::new(DockerExec::new(
            shared.docker.clone(),
            id.to_string(),
        )))
    } else {
        None
    };
    let options = ClientOptions {
        start_seq: u64::try_from(spec.instance.last_seq).unwrap_or(0) + 1,
        initialize_timeout: std::time::Duration::from_secs(shared.settings.initialize_timeout_secs),
        permission: policy(
            spec.agent_type.permission_policy,
            shared,
            &spec.instance,
            handle,
        ),
        workspace,
        terminal,
        auth_env: env_names(&spec.container.env),
        // Events are forwarded, not inspected: chunks stay wire text.
        parse_raw: false,
        ..ClientOptions::default()
    };
    let max_line = options.max_line_bytes;
    let (client, events) = AcpClient::connect_buffered(reader, input, options);
    let lines = LineQueue::default();
    let drain = pipeline.drain(events, lines.clone(), turn_end);
    *lock(&handle.client) = Some(client.clone());
    Ok(Connected {
        client,
        stdout: Some(stdout),
        lines,
        drain,
        max_line,
    })
}

impl Connected {
    /// Starts copying `output` into the client, skipping `skip`.
    fn copy_output(&mut self, output: LogStream, skip: OutputCursor, slots: &Arc<Slots>) {
        let Some(stdout) = self.stdout.take() else {
            return;
        };
        *lock(&slots.demux) = Some(tokio::spawn(demux(
            output,
            stdout,
            self.client.clone(),
            self.lines.clone(),
            skip,
            self.max_line,
            slots.clone(),
        )));
    }
}

/// The names of the variables a container's environment (`KEY=VALUE`)
/// sets to something: the credentials an auth method may read.
fn env_names(env: &[String]) -> std::collections::BTreeSet<String> {
    env.iter()
        .filter_map(|pair| pair.split_once('='))
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Why a run needing authentication failed, for the person: the variable
/// to store when the agent's auth methods name one, else the type's
/// required variables.
fn auth_refusal(agent_type: &AgentType, message: &str, env: &[String]) -> String {
    let listed =
        |v: &String| agent_type.required_env.contains(v) || agent_type.optional_env.contains(v);
    if let Some(vars) = credential_to_store(env, listed) {
        return format!(
            "{} needs {vars}: store it on the Secrets page (the agent requires \
             authentication: {message})",
            agent_type.id
        );
    }
    let needs = if agent_type.required_env.is_empty() {
        "credentials for the agent".to_string()
    } else {
        agent_type.required_env.join(", ")
    };
    format!("the agent requires authentication ({message}); provide {needs}")
}

/// Why the agent refused a prompt, for a person. A refused key
/// (`-32000`, "Authentication required": what Claude Code's and Codex's
/// adapters answer to a vendor's 401) names the variable to fix and quotes
/// what the agent said about it.
fn prompt_refusal(agent_type: &AgentType, source: &kandev_acp::RpcError, said: &str) -> String {
    let auth = source.code == -32000 && source.message.to_lowercase().contains("auth");
    if !auth {
        return format!("the agent answered with an error: {}", source.explain());
    }
    let keys = if agent_type.required_env.is_empty() {
        "its credentials".to_string()
    } else {
        agent_type.required_env.join(" or ")
    };
    let said = said.trim();
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(" The agent said: {}", super::bounded_text(said, 1024))
    };
    format!(
        "{} could not use its credentials ({}): check {keys} on the Secrets page.{said}",
        agent_type.id,
        source.explain()
    )
}

/// `A or B`: the variables of `env` the agent type lists, or all of them
/// when it lists none; `None` without any.
fn credential_to_store(env: &[String], listed: impl Fn(&String) -> bool) -> Option<String> {
    let of_type: Vec<&str> = env
        .iter()
        .filter(|v| listed(v))
        .map(String::as_str)
        .collect();
    let vars = if of_type.is_empty() {
        env.iter().map(String::as_str).collect()
    } else {
        of_type
    };
    (!vars.is_empty()).then(|| vars.join(" or "))
}

/// Who stopped an agent's container is looked up from a second before its
/// turn started.
fn since(spec: &TurnSpec) -> i64 {
    spec.instance
        .started_at
        .unwrap_or(spec.instance.created_at)
        .timestamp()
        - 1
}

/// A new container: create, attach (before start, so no output is
/// missed), start, then `initialize`, the session and the prompt.
pub(super) async fn start_fresh(
    shared: &Shared,
    spec: &TurnSpec,
    handle: &Arc<RunHandle>,
    slots: &Arc<Slots>,
    pipeline: &Pipeline,
) -> Result<TurnResult, Interruption> {
    let (id, conn, started) = launch(shared, spec, handle, slots, pipeline).await?;
    let fresh = Fresh {
        shared,
        spec,
        slots,
        pipeline,
        handle,
        id: &id,
        client: &conn.client,
        since: since(spec),
    };
    match fresh.run(&started).await {
        Ok(result) => Ok(result),
        Err(Step::Plain(interruption)) => Err(interruption),
        Err(Step::Abandon(interruption)) => {
            Err(interrupt::abandon(&conn.client, handle, conn.drain, interruption).await)
        }
    }
}

/// Records how long a phase of the launch took.
fn phase(name: &'static str, since: std::time::Instant) {
    metrics::histogram!(crate::metric_names::LAUNCH_PHASE_SECONDS, "phase" => name)
        .record(since.elapsed().as_secs_f64());
}

/// Creates the container, attaches its output to a new client and starts
/// it: its id, the connection and the instance as started (announced).
async fn launch(
    shared: &Shared,
    spec: &TurnSpec,
    handle: &Arc<RunHandle>,
    slots: &Arc<Slots>,
    pipeline: &Pipeline,
) -> Result<(String, Connected, AgentInstance), Interruption> {
    let docker = &shared.docker;
    let docker_failed = |e: crate::docker::DockerError| failed(e.to_string());
    let t = std::time::Instant::now();
    let id = docker
        .create(&spec.container)
        .await
        .map_err(docker_failed)?;
    phase("create", t);
    *lock(&slots.container) = Some(id.clone());
    if let Err(e) = shared.store.set_container(spec.instance.id, &id).await {
        tracing::warn!(error = %e, "cannot store container id");
    }
    let attach = docker.attach(&id, true).await.map_err(docker_failed)?;
    let mut conn = connect(shared, spec, handle, pipeline, &id, attach.input, None)?;
    conn.copy_output(attach.output, OutputCursor::default(), slots);
    let t = std::time::Instant::now();
    docker.start(&id).await.map_err(docker_failed)?;
    phase("start", t);
    let mut started = spec.instance.clone();
    started.container_id = id.clone();
    publish_lifecycle(
        shared.bus.as_ref(),
        &started,
        AgentEventKind::Started,
        |_| {},
    )
    .await;
    Ok((id, conn, started))
}

/// How a step of a fresh turn fails: as it is, or after the client is
/// given up ([`interrupt::abandon`]).
enum Step {
    Plain(Interruption),
    Abandon(Interruption),
}

impl Step {
    fn refused(why: impl Into<String>) -> Step {
        Step::Abandon(refused(why).into())
    }
}

/// A started container's turn, step by step.
struct Fresh<'a> {
    shared: &'a Shared,
    spec: &'a TurnSpec,
    slots: &'a Arc<Slots>,
    pipeline: &'a Pipeline,
    handle: &'a Arc<RunHandle>,
    id: &'a str,
    client: &'a AcpClient,
    since: i64,
}

impl Fresh<'_> {
    async fn run(&self, started: &AgentInstance) -> Result<TurnResult, Step> {
        let handshake = self.initialize().await?;
        let profile = self.spec.profile.as_deref();
        super::profile::check(profile, &handshake).map_err(Step::refused)?;
        let (session, lost_session) = self.open_session().await?;
        self.set_up(&session, started).await?;
        let stop = self.prompts(lost_session).await?;
        let stop_reason = serde_json::to_value(stop)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{stop:?}"));
        Ok(TurnResult {
            session_id: session.session_id,
            stop_reason,
        })
    }

    /// What a failed request of the client means: the agent's end (its
    /// output ended) or a failure of `what`.
    async fn crashed(&self, what: &'static str, err: AcpError) -> Step {
        Step::Abandon(if matches!(err, AcpError::Closed { .. }) {
            let docker = &self.shared.docker;
            interrupt::output_ended(docker, self.id, self.slots, what, self.since, false).await
        } else {
            failed(format!("{what} failed: {err}")).into()
        })
    }

    async fn initialize(&self) -> Result<kandev_acp::Handshake, Step> {
        let t = std::time::Instant::now();
        let initialized = self.client.initialize().await;
        phase("initialize", t);
        match initialized {
            Ok(handshake) => Ok(handshake),
            Err(AcpError::Timeout { .. }) => Err(Step::Abandon(
                failed(format!(
                    "the agent did not answer initialize within {} s",
                    self.shared.settings.initialize_timeout_secs
                ))
                .into(),
            )),
            Err(e) => Err(self.crashed("initialize", e).await),
        }
    }

    /// The session to resume, or a new one: with why the one to resume
    /// could not be loaded (the prompt then starts a new session, the
    /// conversation so far summarised before it).
    async fn open_session(&self) -> Result<(SessionInfo, Option<String>), Step> {
        let servers = || super::profile::servers(self.spec.profile.as_deref());
        let client = self.client;
        let t = std::time::Instant::now();
        let mut lost_session = None;
        let session = match &self.spec.resume_session {
            Some(session_id) => {
                match client
                    .load_session(session_id, CONTAINER_WORKSPACE, servers())
                    .await
                {
                    Err(AcpError::Rpc { method, source })
                        if source.code != kandev_acp::error::codes::AUTH_REQUIRED =>
                    {
                        // The agent answered: it no longer has the session
                        // (its store went with an earlier container).
                        lost_session = Some(format!("{method} failed: {}", source.explain()));
                        client.new_session(CONTAINER_WORKSPACE, servers()).await
                    }
                    Err(AcpError::Unsupported(why)) => {
                        lost_session = Some(why);
                        client.new_session(CONTAINER_WORKSPACE, servers()).await
                    }
                    other => other,
                }
            }
            None => client.new_session(CONTAINER_WORKSPACE, servers()).await,
        };
        phase("session", t);
        if let Some(why) = &lost_session {
            tracing::warn!(instance = %self.spec.instance.id, session = ?self.spec.resume_session, %why, "the session could not be loaded; starting a new one with the conversation summarised");
        }
        match session {
            Ok(session) => Ok((session, lost_session)),
            Err(AcpError::AuthRequired { message, env, .. }) => Err(Step::Plain(
                refused(auth_refusal(&self.spec.agent_type, &message, &env)).into(),
            )),
            // The agent answered: e.g. it does not know the session to load.
            Err(AcpError::Rpc { method, source }) => Err(Step::refused(format!(
                "{method} failed: {}",
                source.explain()
            ))),
            Err(e) => Err(self.crashed("session setup", e).await),
        }
    }

    /// The session's modes and profile, stored and announced as running.
    async fn set_up(&self, session: &SessionInfo, started: &AgentInstance) -> Result<(), Step> {
        let instance = &self.spec.instance;
        lock(&self.pipeline.state)
            .session_id
            .clone_from(&session.session_id);
        super::modes::apply(self.client, &self.spec.agent_type, session).await;
        super::profile::apply(self.client, self.spec.profile.as_deref(), session)
            .await
            .map_err(Step::refused)?;
        if let Err(e) = self
            .shared
            .store
            .set_running(instance.id, &session.session_id)
            .await
        {
            tracing::warn!(error = %e, "cannot store session id");
        }
        let mut running = started.clone();
        running.acp_session_id = session.session_id.clone();
        publish_lifecycle(
            self.shared.bus.as_ref(),
            &running,
            AgentEventKind::Running,
            |_| {},
        )
        .await;
        Ok(())
    }

    /// The prompt, then the follow-ups queued while it ran, in order, as
    /// long as each ends normally: how the last one stopped.
    async fn prompts(&self, lost_session: Option<String>) -> Result<StopReason, Step> {
        let profile = self.spec.profile.as_deref();
        let mut prompt = self.spec.prompt.clone();
        let mut preface = match &lost_session {
            Some(why) => {
                let exchanges =
                    conversation::of_task(self.shared, self.spec.instance.task_id).await;
                Some(conversation::summary(&exchanges, why))
            }
            None => None,
        };
        // A new session (not one loaded) is told the profile's instructions.
        let mut instruct = self.spec.resume_session.is_none() || lost_session.is_some();
        loop {
            lock(&self.slots.sent_prompts).push(prompt.clone());
            let text = match preface.take() {
                Some(summary) => summary + &prompt,
                None => prompt,
            };
            let text = if std::mem::take(&mut instruct) {
                super::profile::first_prompt(profile, text)
            } else {
                text
            };
            let stop = self.prompt(text).await?;
            if stop != StopReason::EndTurn {
                return Ok(stop);
            }
            match self.handle.next_prompt() {
                Some(next) => {
                    tracing::info!(instance = %self.spec.instance.id, "sending a queued follow-up prompt");
                    prompt = next;
                }
                None => return Ok(stop),
            }
        }
    }

    /// One prompt, until the agent answers it.
    async fn prompt(&self, text: String) -> Result<StopReason, Step> {
        match self.client.prompt(vec![text.into()]).await {
            Ok(stop) => Ok(stop),
            Err(AcpError::TurnFailed(why)) => Err(Step::Plain(
                refused(format!("the turn failed: {why}")).into(),
            )),
            Err(AcpError::Rpc { source, .. }) => {
                // The agent's own answer to the prompt: the same next time.
                let said = lock(&self.pipeline.state).summary.clone();
                Err(Step::refused(prompt_refusal(
                    &self.spec.agent_type,
                    &source,
                    &said,
                )))
            }
            Err(e) => Err(self.crashed("the turn", e).await),
        }
    }
}

/// A container whose turn was prompted by an earlier client: its output is
/// re-read from the Docker log after the stored position and numbered on;
/// the agent's answer to that prompt ends the turn. An agent that exited
/// while no client ran only has its log to replay.
pub(super) async fn resume(
    shared: &Shared,
    spec: &TurnSpec,
    id: &str,
    handle: &Arc<RunHandle>,
    slots: &Arc<Slots>,
    pipeline: &Pipeline,
) -> Result<TurnResult, Interruption> {
    let docker = &shared.docker;
    let instance = &spec.instance;
    let since = since(spec);
    *lock(&slots.container) = Some(id.to_string());
    let exited = docker.is_running(id).await != Some(true);
    let input = reattach_input(docker, id, exited).await?;
    let (turn_tx, mut turn_rx) = watch::channel(None::<String>);
    let mut conn = connect(shared, spec, handle, pipeline, id, input, Some(turn_tx))?;
    *lock(&handle.session) = instance.acp_session_id.clone();
    republish_sync_point(shared, instance.sync_event.as_ref()).await;
    conn.copy_output(docker.follow_logs(id), instance.cursor, slots);
    tracing::info!(instance = %instance.id, container = %id, "re-attached");
    let client = &conn.client;
    let Some(stop_reason) = turn_end(&mut turn_rx, client).await else {
        let during = if exited {
            "the turn, while the manager was not running"
        } else {
            "the turn"
        };
        let failure = interrupt::output_ended(docker, id, slots, during, since, exited).await;
        return Err(interrupt::abandon(client, handle, conn.drain, failure).await);
    };
    Ok(TurnResult {
        session_id: instance.acp_session_id.clone(),
        stop_reason,
    })
}

/// The agent's stdin again: attached when the container runs (its silent
/// output half held until the end), a sink when it exited.
async fn reattach_input(
    docker: &Docker,
    id: &str,
    exited: bool,
) -> Result<std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>, Interruption> {
    if exited {
        return Ok(Box::pin(tokio::io::sink()));
    }
    let attach = docker
        .attach(id, false)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut attach_output = attach.output;
    tokio::spawn(async move { while attach_output.next().await.is_some() {} });
    Ok(attach.input)
}

/// Publishes the turn's last stored sync point again: it may not have been
/// published before the crash (the bus drops it if it was).
async fn republish_sync_point(shared: &Shared, envelope: Option<&serde_json::Value>) {
    if let Some(envelope) = envelope
        && let (Some(subject), Some(event_id)) = (
            envelope["type"].as_str(),
            envelope["id"]
                .as_str()
                .and_then(|i| Uuid::parse_str(i).ok()),
        )
        && let Ok(bytes) = serde_json::to_vec(envelope)
    {
        publish_retrying(
            shared.bus.as_ref(),
            subject,
            event_id,
            bytes.into(),
            &tokio_util::sync::CancellationToken::new(),
        )
        .await;
    }
}

/// The stop reason of the resumed turn: once the agent answers its prompt,
/// or, when its output ends first, within 5 s more for the drain to reach
/// the last lines. `None` when it never answers.
async fn turn_end(
    turn_rx: &mut watch::Receiver<Option<String>>,
    client: &AcpClient,
) -> Option<String> {
    let ended = tokio::select! {
        biased;
        stop = turn_rx.wait_for(Option::is_some) => stop.ok().and_then(|stop| stop.clone()),
        () = client.closed() => None,
    };
    if ended.is_some() {
        return ended;
    }
    let drained = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        turn_rx.wait_for(Option::is_some),
    )
    .await;
    drained.ok()?.ok().and_then(|stop| stop.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(vars: &[&str]) -> Vec<String> {
        vars.iter().map(|v| (*v).to_string()).collect()
    }

    #[test]
    fn only_variables_set_to_something_count_as_credentials() {
        let env = names(&["OPENAI_API_KEY=sk-1", "EMPTY=", "A=b=c", "NOVALUE"]);
        let got: Vec<_> = env_names(&env).into_iter().collect();
        assert_eq!(got, ["A", "OPENAI_API_KEY"]);
    }

    #[test]
    fn the_credential_to_store_is_the_one_the_type_lists() {
        let env = names(&["CODEX_API_KEY", "OPENAI_API_KEY"]);
        let openai = |v: &String| v == "OPENAI_API_KEY";
        assert_eq!(
            credential_to_store(&env, openai).as_deref(),
            Some("OPENAI_API_KEY")
        );
        assert_eq!(
            credential_to_store(&env, |_| false).as_deref(),
            Some("CODEX_API_KEY or OPENAI_API_KEY")
        );
        assert_eq!(credential_to_store(&[], openai), None);
    }
}
