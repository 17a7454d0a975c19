//! The protocol calls of [`AcpClient`]: the handshake, sessions, prompt
//! turns, cancel, modes and config options, in each dialect.

use std::path::PathBuf;

use agent_client_protocol::{
    schema::ProtocolVersion,
    v1::schema::{
        AuthenticateRequest, CancelNotification, ClientCapabilities, ContentBlock,
        FileSystemCapabilities, Implementation, InitializeRequest, InitializeResponse,
        LoadSessionRequest, McpServer, NewSessionRequest, PromptRequest, PromptResponse,
        SessionConfigOptionValue, SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
        SetSessionModeRequest, StopReason,
    },
};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{
    AcpClient, Dialect, Handshake, SessionInfo,
    core::TurnResult,
    wire::{lifecycle, parse_result, prompt_text, to_params},
};
use crate::{
    auth,
    error::{AcpError, RpcError, codes},
    event::{ConfigChangeData, Direction, EventKind, LifecyclePhase, ModeChangeData},
    normalize::TurnSignal,
    sync::lock,
};

impl AcpClient {
    /// Sends `initialize` (protocol version 1, client info, and only the
    /// capabilities that are handled) and detects the dialect from the
    /// answer: an integer `protocolVersion` 1 is v1, a string is the seed
    /// dialect, and legacy lines before any answer mean the legacy format.
    /// Times out after
    /// [`ClientOptions::initialize_timeout`](crate::ClientOptions::initialize_timeout).
    pub async fn initialize(&self) -> Result<Handshake, AcpError> {
        let options = &self.inner.options;
        let capabilities = ClientCapabilities::new()
            .fs(FileSystemCapabilities::new()
                .read_text_file(options.workspace.is_some())
                .write_text_file(options.workspace.is_some()))
            .terminal(options.terminal.is_some());
        let request = InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(capabilities)
            .client_info(Implementation::new(
                options.client_name.clone(),
                options.client_version.clone(),
            ));
        let mut dialect_rx = self.inner.dialect_tx.subscribe();
        let legacy = async move {
            let detected = dialect_rx
                .wait_for(|d| *d == Some(Dialect::Legacy))
                .await
                .is_ok();
            if !detected {
                std::future::pending::<()>().await;
            }
        };
        let raw = tokio::select! {
            result = self.inner.request(
                "initialize",
                to_params(&request),
                Some(options.initialize_timeout),
                None,
            ) => result?,
            () = legacy => {
                self.lifecycle(LifecyclePhase::Initialized, None).await;
                return Ok(Handshake { dialect: Dialect::Legacy, response: None, raw: Value::Null });
            }
        };
        let (dialect, response) = match raw.get("protocolVersion") {
            Some(Value::String(_)) => (Dialect::Seed, None),
            Some(Value::Number(n)) if n.as_u64() == Some(1) => {
                let response: InitializeResponse = parse_result("initialize", raw.clone())?;
                (Dialect::V1, Some(response))
            }
            Some(other) => return Err(AcpError::UnsupportedVersion(other.to_string())),
            None => {
                return Err(AcpError::InvalidResponse {
                    method: "initialize".to_owned(),
                    message: "missing protocolVersion".to_owned(),
                });
            }
        };
        {
            let mut state = lock(&self.inner.state);
            state.init = response.clone();
            state.auth_methods = auth::methods(
                raw.get("authMethods").unwrap_or(&Value::Null),
                &options.auth_method_env,
            );
            state.seed_init = raw.clone();
        }
        if self.inner.set_dialect(dialect) {
            self.lifecycle(LifecyclePhase::DialectDetected, None).await;
        }
        self.lifecycle(LifecyclePhase::Initialized, None).await;
        Ok(Handshake {
            dialect,
            response,
            raw,
        })
    }

    /// Emits a lifecycle event, numbered in the same sequence as every
    /// other event: the client's own phases, and its owner's (e.g. a prompt
    /// queued behind the running turn).
    pub async fn lifecycle(&self, phase: LifecyclePhase, detail: Option<String>) {
        self.inner
            .emit(
                Direction::Local,
                self.session_id(),
                lifecycle(phase, self.dialect(), detail),
                Value::Null,
            )
            .await;
    }

    fn require_dialect(&self) -> Result<Dialect, AcpError> {
        self.dialect()
            .ok_or_else(|| AcpError::State("call initialize first".to_owned()))
    }

    fn require_session(&self) -> Result<String, AcpError> {
        self.session_id()
            .ok_or_else(|| AcpError::State("no session: call new_session or load_session".into()))
    }

    fn set_session(&self, session_id: &str) {
        lock(&self.inner.state).session_id = Some(session_id.to_owned());
    }

    /// Creates a session (`session/new {cwd, mcpServers}`; the seed dialect
    /// sends empty params). When the agent answers `auth_required` and
    /// advertises a non-terminal auth method listed in
    /// [`ClientOptions::allowed_auth_methods`](crate::ClientOptions::allowed_auth_methods)
    /// or reading a variable of
    /// [`ClientOptions::auth_env`](crate::ClientOptions::auth_env) (see
    /// [`crate::auth`]), the client
    /// authenticates and retries once; otherwise it returns
    /// [`AcpError::AuthRequired`] with the agent's message and the
    /// variables that would have done.
    pub async fn new_session(
        &self,
        cwd: impl Into<PathBuf>,
        mcp_servers: Vec<McpServer>,
    ) -> Result<SessionInfo, AcpError> {
        let timeout = Some(self.inner.options.request_timeout);
        let raw = match self.require_dialect()? {
            Dialect::Legacy => {
                // Legacy agents have no sessions; make an id for the events.
                let session_id = format!("legacy-{}", uuid::Uuid::new_v4());
                self.set_session(&session_id);
                self.lifecycle(LifecyclePhase::SessionCreated, Some(session_id.clone()))
                    .await;
                return Ok(SessionInfo {
                    session_id,
                    raw: Value::Null,
                });
            }
            Dialect::Seed => {
                self.inner
                    .request("session/new", json!({}), timeout, None)
                    .await?
            }
            Dialect::V1 => {
                let params = to_params(&NewSessionRequest::new(cwd).mcp_servers(mcp_servers));
                match self
                    .inner
                    .request("session/new", params.clone(), timeout, None)
                    .await
                {
                    Err(AcpError::Rpc { source, .. }) if source.code == codes::AUTH_REQUIRED => {
                        self.authenticate_for(*source).await?;
                        match self
                            .inner
                            .request("session/new", params, timeout, None)
                            .await
                        {
                            Err(AcpError::Rpc { source, .. })
                                if source.code == codes::AUTH_REQUIRED =>
                            {
                                return Err(AcpError::AuthRequired {
                                    message: source.message,
                                    methods: self.auth_method_ids(),
                                    env: Vec::new(),
                                });
                            }
                            other => other?,
                        }
                    }
                    other => other?,
                }
            }
        };
        let session_id = raw
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| AcpError::InvalidResponse {
                method: "session/new".to_owned(),
                message: "missing sessionId".to_owned(),
            })?
            .to_owned();
        self.set_session(&session_id);
        self.lifecycle(LifecyclePhase::SessionCreated, Some(session_id.clone()))
            .await;
        Ok(SessionInfo { session_id, raw })
    }

    fn auth_method_ids(&self) -> Vec<String> {
        lock(&self.inner.state)
            .init
            .as_ref()
            .map(|init| {
                init.auth_methods
                    .iter()
                    .map(|m| m.id().0.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Picks a non-terminal method the client may use (allowed, or reading
    /// a variable set in the agent's environment) and sends `authenticate`.
    async fn authenticate_for(&self, source: RpcError) -> Result<(), AcpError> {
        let options = &self.inner.options;
        let chosen = auth::choose(
            &lock(&self.inner.state).auth_methods,
            &options.allowed_auth_methods,
            &options.auth_env,
        );
        let method = match chosen {
            Ok(method) => method,
            Err(env) => {
                return Err(AcpError::AuthRequired {
                    message: source.message,
                    methods: self.auth_method_ids(),
                    env,
                });
            }
        };
        self.inner
            .request(
                "authenticate",
                to_params(&AuthenticateRequest::new(method.clone())),
                Some(options.request_timeout),
                None,
            )
            .await?;
        self.lifecycle(LifecyclePhase::Authenticated, Some(method))
            .await;
        Ok(())
    }

    /// Resumes a stored session with `session/load` (v1 agents that
    /// advertise `loadSession`; seed agents that advertise
    /// `sessionResumption`). The history replay arrives as events before
    /// this returns.
    pub async fn load_session(
        &self,
        session_id: &str,
        cwd: impl Into<PathBuf>,
        mcp_servers: Vec<McpServer>,
    ) -> Result<SessionInfo, AcpError> {
        let timeout = Some(self.inner.options.request_timeout);
        let params = match self.require_dialect()? {
            Dialect::V1 => {
                let supported = lock(&self.inner.state)
                    .init
                    .as_ref()
                    .is_some_and(|i| i.agent_capabilities.load_session);
                if !supported {
                    return Err(AcpError::Unsupported(
                        "the agent does not advertise loadSession".into(),
                    ));
                }
                to_params(
                    &LoadSessionRequest::new(session_id.to_owned(), cwd).mcp_servers(mcp_servers),
                )
            }
            Dialect::Seed => {
                let supported = lock(&self.inner.state)
                    .seed_init
                    .pointer("/capabilities/sessionResumption")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if !supported {
                    return Err(AcpError::Unsupported(
                        "the agent does not advertise sessionResumption".into(),
                    ));
                }
                json!({"sessionId": session_id})
            }
            Dialect::Legacy => {
                return Err(AcpError::Unsupported(
                    "legacy agents have no sessions".into(),
                ));
            }
        };
        // Set first so the replayed updates carry the id.
        self.set_session(session_id);
        let raw = self
            .inner
            .request("session/load", params, timeout, None)
            .await?;
        self.lifecycle(LifecyclePhase::SessionLoaded, Some(session_id.to_owned()))
            .await;
        Ok(SessionInfo {
            session_id: session_id.to_owned(),
            raw,
        })
    }

    fn begin_turn(&self) {
        let mut token = lock(&self.inner.turn_cancel);
        if token.is_cancelled() && !self.is_closed() {
            *token = CancellationToken::new();
        }
        let mut state = lock(&self.inner.state);
        state.cancel_requested = false;
        state.write_grants.end_turn();
    }

    /// Registers the turn waiter; a turn end that already arrived (legacy
    /// agents start working on their own) completes it at once.
    fn turn_waiter(&self, keep_stashed: bool) -> oneshot::Receiver<TurnResult> {
        let (tx, rx) = oneshot::channel();
        let mut state = lock(&self.inner.state);
        let stashed = state.stashed_turn.take().filter(|_| keep_stashed);
        if let Some(signal) = stashed {
            let _ = tx.send(TurnResult::Signal(signal));
        } else if let Some(reason) = &state.closed {
            let _ = tx.send(TurnResult::Closed(reason.clone()));
        } else {
            state.turn_waiter = Some(tx);
        }
        rx
    }

    async fn wait_turn(&self, rx: oneshot::Receiver<TurnResult>) -> Result<StopReason, AcpError> {
        let result = match self.inner.options.prompt_timeout {
            Some(limit) => {
                tokio::time::timeout(limit, rx)
                    .await
                    .map_err(|_| AcpError::Timeout {
                        method: "session/prompt".to_owned(),
                        timeout: limit,
                    })?
            }
            None => rx.await,
        };
        let cancelled = lock(&self.inner.state).cancel_requested;
        match result {
            Ok(TurnResult::Signal(TurnSignal::Stopped(reason))) => Ok(reason),
            Ok(TurnResult::Signal(TurnSignal::Failed(message))) => {
                Err(AcpError::TurnFailed(message))
            }
            // Seed agents exit on cancel.
            Ok(TurnResult::Closed(_)) | Err(_) if cancelled => Ok(StopReason::Cancelled),
            Ok(TurnResult::Closed(reason)) => Err(AcpError::Closed {
                reason: Some(reason),
            }),
            Err(_) => Err(AcpError::Closed { reason: None }),
        }
    }

    /// Sends a prompt and waits for the end of the turn, returning the stop
    /// reason. v1: `session/prompt {sessionId, prompt}` and its
    /// `stopReason`. Seed: `session/prompt {message}` answered
    /// `{accepted: true}`, then a `complete` / `error` update ends the turn.
    /// Legacy: nothing is sent (legacy agents get their task from the
    /// environment); the turn ends with a `result` line.
    pub async fn prompt(&self, prompt: Vec<ContentBlock>) -> Result<StopReason, AcpError> {
        let dialect = self.require_dialect()?;
        self.begin_turn();
        match dialect {
            Dialect::V1 => {
                let session_id = self.require_session()?;
                let params = to_params(&PromptRequest::new(session_id, prompt));
                let timeout = self.inner.options.prompt_timeout;
                let raw = self
                    .inner
                    .request("session/prompt", params, timeout, None)
                    .await?;
                let response: PromptResponse = parse_result("session/prompt", raw)?;
                Ok(response.stop_reason)
            }
            Dialect::Seed => {
                let rx = self.turn_waiter(false);
                let params = json!({"message": prompt_text(&prompt)});
                let timeout = Some(self.inner.options.request_timeout);
                let raw = self
                    .inner
                    .request("session/prompt", params, timeout, None)
                    .await;
                let raw = match raw {
                    Ok(raw) => raw,
                    Err(e) => {
                        lock(&self.inner.state).turn_waiter = None;
                        return Err(e);
                    }
                };
                if raw.get("accepted").and_then(Value::as_bool) == Some(false) {
                    lock(&self.inner.state).turn_waiter = None;
                    return Err(AcpError::TurnFailed(
                        "the agent did not accept the prompt".into(),
                    ));
                }
                self.wait_turn(rx).await
            }
            Dialect::Legacy => {
                let rx = self.turn_waiter(true);
                self.wait_turn(rx).await
            }
        }
    }

    /// Cancels the current turn: every open permission request is answered
    /// `cancelled`, and `session/cancel` is sent (v1: `{sessionId}`; seed:
    /// `{reason}`; legacy agents get nothing). The prompt call then returns
    /// the agent's stop reason (normally `cancelled`).
    pub async fn cancel(&self) -> Result<(), AcpError> {
        lock(&self.inner.state).cancel_requested = true;
        lock(&self.inner.turn_cancel).cancel();
        match self.dialect() {
            Some(Dialect::V1) => {
                let session_id = self.require_session()?;
                self.inner
                    .notify(
                        "session/cancel",
                        to_params(&CancelNotification::new(session_id)),
                    )
                    .await
            }
            Some(Dialect::Seed) => {
                self.inner
                    .notify("session/cancel", json!({"reason": "cancelled by the user"}))
                    .await
            }
            Some(Dialect::Legacy) | None => {
                self.lifecycle(LifecyclePhase::CancelRequested, None).await;
                Ok(())
            }
        }
    }

    fn require_v1(&self, what: &str) -> Result<String, AcpError> {
        if self.require_dialect()? != Dialect::V1 {
            return Err(AcpError::Unsupported(format!("{what} needs ACP v1")));
        }
        self.require_session()
    }

    /// `session/set_mode`.
    pub async fn set_mode(&self, mode_id: &str) -> Result<(), AcpError> {
        let session_id = self.require_v1("session/set_mode")?;
        let kind = EventKind::ModeChange(ModeChangeData {
            mode_id: mode_id.to_owned(),
        });
        self.inner
            .request(
                "session/set_mode",
                to_params(&SetSessionModeRequest::new(session_id, mode_id.to_owned())),
                Some(self.inner.options.request_timeout),
                Some(kind),
            )
            .await?;
        Ok(())
    }

    /// `session/set_model {sessionId, modelId}`: ACP's (unstable) model
    /// selection, for agents whose session answer lists `models`.
    pub async fn set_model(&self, model_id: &str) -> Result<(), AcpError> {
        let session_id = self.require_v1("session/set_model")?;
        let kind = EventKind::ConfigChange(ConfigChangeData {
            config_id: Some("model".to_owned()),
            value: Some(Value::String(model_id.to_owned())),
            config_options: None,
        });
        self.inner
            .request(
                "session/set_model",
                json!({"sessionId": session_id, "modelId": model_id}),
                Some(self.inner.options.request_timeout),
                Some(kind),
            )
            .await?;
        Ok(())
    }

    /// `session/set_config_option`; returns the agent's full option list.
    pub async fn set_config_option(
        &self,
        config_id: &str,
        value: SessionConfigOptionValue,
    ) -> Result<SetSessionConfigOptionResponse, AcpError> {
        let session_id = self.require_v1("session/set_config_option")?;
        let request =
            SetSessionConfigOptionRequest::new(session_id, config_id.to_owned(), value.clone());
        let kind = EventKind::ConfigChange(ConfigChangeData {
            config_id: Some(config_id.to_owned()),
            value: Some(to_params(&value)),
            config_options: None,
        });
        let raw = self
            .inner
            .request(
                "session/set_config_option",
                to_params(&request),
                Some(self.inner.options.request_timeout),
                Some(kind),
            )
            .await?;
        parse_result("session/set_config_option", raw)
    }
}
