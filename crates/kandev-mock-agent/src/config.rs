//! Command-line flags, each of which can also come from the environment so a
//! container can be configured by env alone.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Which wire format the agent speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Dialect {
    /// ACP v1: JSON-RPC 2.0, integer `protocolVersion: 1`.
    Acp,
    /// The seed AGENTS.md dialect: `protocolVersion: "1.0"`, `session/prompt {message}`
    /// answered `{accepted: true}`, then `session/update {type, data}` notifications.
    Seed,
    /// The legacy line format `{type, timestamp, agent_id, task_id, data}` (not JSON-RPC).
    Legacy,
}

/// Whether `session/new` and `session/load` require authentication first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AuthMode {
    /// No authentication.
    None,
    /// One agent method, `mock-login`, accepted by `authenticate`.
    Agent,
    /// One terminal method, `mock-terminal-login` (runs this binary with `--login`).
    Terminal,
}

/// Deliberate deviations that real agents show (see `docs/mock-agent.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Quirks {
    /// Send `available_commands_update` for a new session before answering `session/new`.
    pub(crate) early_updates: bool,
    /// Send one more `agent_message_chunk` after the `session/prompt` response.
    pub(crate) late_updates: bool,
    /// Answer a cancelled turn with `end_turn` instead of `cancelled`.
    pub(crate) cancel_end_turn: bool,
    /// Never answer `initialize`, like a mis-launched agent.
    pub(crate) silent_initialize: bool,
    /// Keep running after stdin reaches EOF, as the Node ACP adapters do.
    pub(crate) ignore_eof: bool,
    /// Ignore SIGTERM and SIGINT, as a Node process running as PID 1 does:
    /// only SIGKILL ends the agent.
    pub(crate) ignore_sigterm: bool,
    /// Answer every `session/load` "Session not found", like an agent whose
    /// session store went with its container.
    pub(crate) lose_sessions: bool,
}

impl Quirks {
    fn parse(list: &str) -> Result<Self, String> {
        let mut quirks = Self::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "early-updates" => quirks.early_updates = true,
                "late-updates" => quirks.late_updates = true,
                "cancel-end-turn" => quirks.cancel_end_turn = true,
                "silent-initialize" => quirks.silent_initialize = true,
                "ignore-eof" => quirks.ignore_eof = true,
                "ignore-sigterm" => quirks.ignore_sigterm = true,
                "lose-sessions" => quirks.lose_sessions = true,
                other => return Err(format!("unknown quirk `{other}`")),
            }
        }
        Ok(quirks)
    }
}

/// A scripted, deterministic mock ACP agent for Kandev's tests and demos.
///
/// The prompt text chooses a scenario; see docs/mock-agent.md.
#[derive(Debug, Clone, Parser)]
#[command(name = "kandev-mock-agent", version)]
pub(crate) struct Config {
    /// Wire format.
    #[arg(long, env = "KANDEV_MOCK_DIALECT", value_enum, default_value_t = Dialect::Acp)]
    pub(crate) dialect: Dialect,

    /// Accepted and ignored: the seed launches agents as `agent --acp`.
    #[arg(long, hide = true)]
    pub(crate) acp: bool,

    /// Authentication required before `session/new` (ACP dialect only).
    #[arg(long, env = "KANDEV_MOCK_AUTH", value_enum, default_value_t = AuthMode::None)]
    pub(crate) auth: AuthMode,

    /// A non-empty key counts as already authenticated, like an agent's API key env var.
    #[arg(long, env = "KANDEV_MOCK_API_KEY", hide_env_values = true)]
    pub(crate) api_key: Option<String>,

    /// File whose existence means "logged in" for `--auth terminal`; `--login` creates it.
    #[arg(long, env = "KANDEV_MOCK_CREDENTIALS", default_value_os_t = in_home("credentials"))]
    pub(crate) credentials: PathBuf,

    /// Perform the terminal login (create the credentials file) and exit 0.
    #[arg(long)]
    pub(crate) login: bool,

    /// Mixed into session ids; ids are otherwise derived from cwd and a counter.
    #[arg(long, env = "KANDEV_MOCK_SEED", default_value = "")]
    pub(crate) seed: String,

    /// Scenario used when the prompt does not name one.
    #[arg(long, env = "KANDEV_MOCK_DEFAULT_SCENARIO", default_value = "echo")]
    pub(crate) default_scenario: String,

    /// Comma-separated quirks: early-updates, late-updates, cancel-end-turn,
    /// silent-initialize, ignore-eof, ignore-sigterm, lose-sessions.
    #[arg(long = "quirks", env = "KANDEV_MOCK_QUIRKS", default_value = "", value_parser = Quirks::parse)]
    pub(crate) quirks: Quirks,

    /// Directory for session files: the agent's home, as a real agent keeps
    /// its sessions (`~/.claude`, `~/.codex`); a relative path is resolved
    /// against the session cwd (the workspace).
    #[arg(long, env = "KANDEV_MOCK_STATE_DIR", default_value_os_t = in_home(""))]
    pub(crate) state_dir: PathBuf,

    /// Log level on stderr: off, error, warn, info, debug.
    #[arg(long, env = "KANDEV_MOCK_LOG", default_value = "info")]
    pub(crate) log: String,

    /// Legacy dialect: the prompt (otherwise the first stdin line is read).
    #[arg(long, env = "TASK_DESCRIPTION")]
    pub(crate) task_description: Option<String>,

    /// Legacy dialect: `agent_id` of every line.
    #[arg(long, env = "KANDEV_AGENT_ID", default_value = "kandev-mock-agent")]
    pub(crate) agent_id: String,

    /// Legacy dialect: `task_id` of every line.
    #[arg(long, env = "KANDEV_TASK_ID", default_value = "")]
    pub(crate) task_id: String,

    /// Legacy dialect: emit a heartbeat line every N ms while working (0 = only one at start).
    #[arg(long, env = "KANDEV_MOCK_HEARTBEAT_MS", default_value_t = 0)]
    pub(crate) heartbeat_ms: u64,
}

/// `$HOME/.kandev-mock/<name>`: the mock's state lives in its home, never
/// in the workspace it works on. Without `HOME`, `/` (as Docker sets it for
/// a user the image does not name).
fn in_home(name: &str) -> PathBuf {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let dir = home.join(".kandev-mock");
    if name.is_empty() { dir } else { dir.join(name) }
}
