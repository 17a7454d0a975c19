//! The client's configuration and the dialects it speaks.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{
    framing::DEFAULT_MAX_LINE_BYTES,
    permission::{AutoApprove, PermissionPolicy},
    terminal::TerminalExecutor,
    workspace::Workspace,
};

/// The protocol dialect spoken by the agent, detected from its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// ACP protocol v1 (integer `protocolVersion: 1`).
    V1,
    /// The seed's AGENTS.md dialect (string `protocolVersion`, e.g. `"1.0"`).
    Seed,
    /// The legacy `{type: progress|log|result|...}` lines (not JSON-RPC).
    Legacy,
}

/// How much of an unparsable line is kept in its event's `raw`.
pub(crate) const BAD_LINE_PREVIEW: usize = 4096;
/// How many responses that arrive before their request was sent are kept.
pub(crate) const EARLY_RESPONSES: usize = 16;

/// Client configuration. `Default` gives the documented defaults.
#[derive(Clone)]
pub struct ClientOptions {
    /// `clientInfo.name` sent in `initialize`.
    pub client_name: String,
    /// `clientInfo.version`.
    pub client_version: String,
    /// The largest accepted line from the agent (default 8 MiB).
    pub max_line_bytes: usize,
    /// Timeout of `initialize` (default 30 s).
    pub initialize_timeout: Duration,
    /// Timeout of other control requests: `session/new`, `authenticate`,
    /// `session/load`, `session/set_*` (default 60 s).
    pub request_timeout: Duration,
    /// Timeout of a whole prompt turn (default none).
    pub prompt_timeout: Option<Duration>,
    /// Capacity of the event channel (default 1024). When it is full the
    /// reader stops reading: backpressure, never drops.
    pub event_capacity: usize,
    /// The first sequence number (default 1), to resume numbering after a
    /// restart.
    pub start_seq: u64,
    /// Decides `session/request_permission`, and `fs/write_text_file` the
    /// agent has no permission for yet (default [`AutoApprove`]).
    pub permission: Arc<dyn PermissionPolicy>,
    /// Enables `fs/*` confined to this workspace (and advertises `fs`).
    pub workspace: Option<Workspace>,
    /// Enables `terminal/*` (and advertises `terminal`).
    pub terminal: Option<Arc<dyn TerminalExecutor>>,
    /// Auth method ids the client may pass to `authenticate` by itself when
    /// `session/new` answers `auth_required`.
    pub allowed_auth_methods: Vec<String>,
    /// Names of the environment variables set in the agent's environment.
    /// When `session/new` answers `auth_required`, a method that reads one
    /// of them (see [`crate::auth`]) is used to `authenticate` by itself.
    pub auth_env: BTreeSet<String>,
    /// Auth method id → a variable it reads, for methods that do not name
    /// their variable themselves (default [`crate::auth::KNOWN_AUTH_ENV`]).
    pub auth_method_env: Vec<(String, String)>,
    /// At most this many agent requests are handled at once (default 64);
    /// more make the reader wait.
    pub max_concurrent_agent_requests: usize,
    /// Whether every event's `raw` holds the parsed message (default true).
    /// Off, the agent's text chunks (what it sends most) are read without
    /// building a JSON tree: their `raw` is null and the message is in
    /// `raw_json`, which is what serializing the event writes anyway. For a
    /// consumer that forwards events rather than inspecting them.
    pub parse_raw: bool,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("client_name", &self.client_name)
            .field("max_line_bytes", &self.max_line_bytes)
            .field("initialize_timeout", &self.initialize_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("prompt_timeout", &self.prompt_timeout)
            .field("event_capacity", &self.event_capacity)
            .field("start_seq", &self.start_seq)
            .field("workspace", &self.workspace)
            .field("terminal", &self.terminal.is_some())
            .field("allowed_auth_methods", &self.allowed_auth_methods)
            .field("auth_env", &self.auth_env)
            .finish_non_exhaustive()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            client_name: "kandev".to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            initialize_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            prompt_timeout: None,
            event_capacity: 1024,
            start_seq: 1,
            permission: Arc::new(AutoApprove),
            workspace: None,
            terminal: None,
            allowed_auth_methods: Vec::new(),
            auth_env: BTreeSet::new(),
            auth_method_env: crate::auth::known_auth_env(),
            max_concurrent_agent_requests: 64,
            parse_raw: true,
        }
    }
}
