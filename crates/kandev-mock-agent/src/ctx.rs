//! State shared by the whole process: configuration, the writer, outgoing
//! requests, what the client advertised, authentication and sessions.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};

use serde_json::Value;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    config::{AuthMode, Config},
    session::Sessions,
    wire::{Out, Rpc},
};

/// The client capabilities the mock acts on, from `initialize`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClientCaps {
    pub(crate) read_text_file: bool,
    pub(crate) write_text_file: bool,
    pub(crate) terminal: bool,
    pub(crate) auth_terminal: bool,
    pub(crate) notices: bool,
    pub(crate) compaction: bool,
    pub(crate) boolean_config: bool,
}

impl ClientCaps {
    /// Reads `clientCapabilities`; a capability that is absent counts as unsupported.
    pub(crate) fn from_initialize(params: &Value) -> Self {
        let caps = &params["clientCapabilities"];
        let flag = |v: &Value| v.as_bool().unwrap_or(false);
        let present = |v: &Value| v.is_object();
        Self {
            read_text_file: flag(&caps["fs"]["readTextFile"]),
            write_text_file: flag(&caps["fs"]["writeTextFile"]),
            terminal: flag(&caps["terminal"]),
            auth_terminal: flag(&caps["auth"]["terminal"]),
            notices: present(&caps["session"]["notices"]),
            compaction: present(&caps["session"]["compaction"]),
            boolean_config: present(&caps["session"]["configOptions"]["boolean"]),
        }
    }
}

pub(crate) struct Ctx {
    pub(crate) cfg: Config,
    pub(crate) out: Out,
    pub(crate) rpc: Rpc,
    pub(crate) caps: Mutex<ClientCaps>,
    pub(crate) authenticated: AtomicBool,
    pub(crate) sessions: Mutex<Sessions>,
    /// Cancelled when stdin reaches EOF: turns waiting on the client give up.
    pub(crate) shutdown: CancellationToken,
    /// Running prompt turns; EOF waits for them before exiting.
    pub(crate) turns: TaskTracker,
}

impl Ctx {
    pub(crate) fn new(cfg: Config, out: Out) -> Arc<Self> {
        let authenticated = match cfg.auth {
            AuthMode::None => true,
            _ if cfg.api_key.as_deref().is_some_and(|k| !k.is_empty()) => true,
            AuthMode::Agent => false,
            AuthMode::Terminal => cfg.credentials.exists(),
        };
        let sessions = Sessions::new(cfg.seed.clone(), cfg.state_dir.clone());
        Arc::new(Self {
            rpc: Rpc::new(out.clone()),
            out,
            caps: Mutex::new(ClientCaps::default()),
            authenticated: AtomicBool::new(authenticated),
            sessions: Mutex::new(sessions),
            shutdown: CancellationToken::new(),
            turns: TaskTracker::new(),
            cfg,
        })
    }

    pub(crate) fn caps(&self) -> ClientCaps {
        *self.caps.lock().expect("caps lock")
    }

    pub(crate) fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Acquire)
    }

    pub(crate) fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().expect("sessions lock")
    }
}
