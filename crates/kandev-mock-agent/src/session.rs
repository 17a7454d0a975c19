//! Sessions: deterministic ids, in-memory state, modes and config options, and
//! the JSON file under `<state dir>/sessions/` (by default
//! `$HOME/.kandev-mock/sessions/`, the agent's home, never the workspace)
//! that lets a restarted agent answer `session/load`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, atomic::AtomicBool},
};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::log::{debug, warning};

/// Mode ids offered by every session.
pub(crate) const MODES: [(&str, &str, &str); 3] = [
    ("default", "Default", "Ask before writing files"),
    ("accept-edits", "Accept edits", "Write files without asking"),
    (
        "plan",
        "Plan",
        "Read only: describe edits instead of making them",
    ),
];

/// Values of the `model` select option.
pub(crate) const MODELS: [(&str, &str); 2] =
    [("mock-fast", "Mock Fast"), ("mock-smart", "Mock Smart")];

/// What is persisted for a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionRecord {
    pub(crate) session_id: String,
    pub(crate) cwd: PathBuf,
    pub(crate) mode_id: String,
    pub(crate) model: String,
    #[serde(default)]
    pub(crate) thinking: bool,
    #[serde(default)]
    pub(crate) turns: u64,
    #[serde(default)]
    pub(crate) allow_always: bool,
    /// The `mcpServers` of the last `session/new` or `session/load`.
    #[serde(default)]
    pub(crate) mcp_servers: Vec<Value>,
    /// `session/update` payloads replayed by `session/load`.
    #[serde(default)]
    pub(crate) history: Vec<Value>,
}

/// The prompt turn currently running in a session.
pub(crate) struct ActiveTurn {
    pub(crate) request_id: Value,
    pub(crate) cancel: CancellationToken,
    /// Set when the client cancelled the request itself (`$/cancel_request`).
    pub(crate) request_cancelled: Arc<AtomicBool>,
}

pub(crate) struct Session {
    pub(crate) record: SessionRecord,
    pub(crate) active: Option<ActiveTurn>,
}

pub(crate) type SessionRef = Arc<Mutex<Session>>;

/// All sessions of this process.
pub(crate) struct Sessions {
    seed: String,
    state_dir: PathBuf,
    counter: u64,
    map: HashMap<String, SessionRef>,
    last: Option<String>,
}

impl Sessions {
    pub(crate) fn new(seed: String, state_dir: PathBuf) -> Self {
        Self {
            seed,
            state_dir,
            counter: 0,
            map: HashMap::new(),
            last: None,
        }
    }

    /// Creates a session with a deterministic id: a hash of the seed, the cwd and
    /// a counter, skipping ids already in memory or on disk. The id's file is
    /// claimed at once, so agents sharing one home (a volume) never pick the
    /// same id.
    pub(crate) fn create(&mut self, cwd: &Path) -> (String, SessionRef) {
        let id = loop {
            self.counter += 1;
            let id = session_id(&self.seed, cwd, self.counter);
            if !self.map.contains_key(&id) && claim(&self.file(cwd, &id)) {
                break id;
            }
        };
        let record = SessionRecord {
            session_id: id.clone(),
            cwd: cwd.to_path_buf(),
            mode_id: MODES[0].0.to_owned(),
            model: MODELS[0].0.to_owned(),
            thinking: false,
            turns: 0,
            allow_always: false,
            mcp_servers: Vec::new(),
            history: Vec::new(),
        };
        let session = Arc::new(Mutex::new(Session {
            record,
            active: None,
        }));
        self.map.insert(id.clone(), session.clone());
        self.last = Some(id.clone());
        (id, session)
    }

    pub(crate) fn get(&self, id: &str) -> Option<SessionRef> {
        self.map.get(id).cloned()
    }

    /// The most recently created or loaded session (the seed dialect's prompts name none).
    pub(crate) fn last(&self) -> Option<(String, SessionRef)> {
        let id = self.last.clone()?;
        self.get(&id).map(|s| (id, s))
    }

    pub(crate) fn all(&self) -> Vec<SessionRef> {
        self.map.values().cloned().collect()
    }

    /// Finds a session in memory, else in its file under `cwd`.
    pub(crate) fn load(&mut self, id: &str, cwd: &Path) -> Option<SessionRef> {
        if let Some(session) = self.get(id) {
            self.last = Some(id.to_owned());
            return Some(session);
        }
        if !valid_session_id(id) {
            return None;
        }
        let path = self.file(cwd, id);
        let bytes = std::fs::read(&path).ok()?;
        let mut record: SessionRecord = match serde_json::from_slice(&bytes) {
            Ok(record) => record,
            Err(e) => {
                warning!("ignoring unreadable session file {}: {e}", path.display());
                return None;
            }
        };
        debug!("loaded session {id} from {}", path.display());
        record.session_id = id.to_owned();
        let session = Arc::new(Mutex::new(Session {
            record,
            active: None,
        }));
        self.map.insert(id.to_owned(), session.clone());
        self.last = Some(id.to_owned());
        Some(session)
    }

    pub(crate) fn file(&self, cwd: &Path, id: &str) -> PathBuf {
        session_file(&self.state_dir, cwd, id)
    }
}

pub(crate) fn session_file(state_dir: &Path, cwd: &Path, id: &str) -> PathBuf {
    cwd.join(state_dir)
        .join("sessions")
        .join(format!("{id}.json"))
}

/// Creates the empty session file `path` unless it exists; whether the id
/// is free. A store that cannot be written leaves it free (the session then
/// lives in memory only, as [`persist`] logs).
fn claim(path: &Path) -> bool {
    let created = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
        });
    match created {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => {
            warning!("cannot claim the session file {}: {e}", path.display());
            true
        }
    }
}

/// Writes the record to its session file; failures are logged, never fatal.
pub(crate) fn persist(state_dir: &Path, record: &SessionRecord) {
    let path = session_file(state_dir, &record.cwd, &record.session_id);
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(record)?)?;
        std::fs::rename(&tmp, &path)
    };
    if let Err(e) = write() {
        warning!("could not persist session to {}: {e}", path.display());
    }
}

/// Session ids are also file names, so only `[A-Za-z0-9_-]` is accepted.
pub(crate) fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// 64-bit FNV-1a; stable across Rust versions, unlike `DefaultHasher`.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

pub(crate) fn session_id(seed: &str, cwd: &Path, counter: u64) -> String {
    let cwd = cwd.to_string_lossy();
    let hash = fnv1a(&[seed.as_bytes(), cwd.as_bytes(), &counter.to_le_bytes()]);
    format!("sess_{hash:016x}")
}

pub(crate) fn modes_json(current: &str) -> Value {
    let available: Vec<Value> = MODES
        .iter()
        .map(
            |(id, name, description)| json!({ "id": id, "name": name, "description": description }),
        )
        .collect();
    json!({ "currentModeId": current, "availableModes": available })
}

/// The session's config options; `thinking` (a boolean option) only when the
/// client advertised `session.configOptions.boolean`.
pub(crate) fn config_options_json(record: &SessionRecord, boolean_options: bool) -> Value {
    let models: Vec<Value> = MODELS
        .iter()
        .map(|(value, name)| json!({ "value": value, "name": name }))
        .collect();
    let mut options = vec![json!({
        "id": "model",
        "name": "Model",
        "description": "Which mock model answers (both behave the same)",
        "category": "model",
        "type": "select",
        "currentValue": record.model,
        "options": models,
    })];
    if boolean_options {
        options.push(json!({
            "id": "thinking",
            "name": "Extended thinking",
            "category": "thought_level",
            "type": "boolean",
            "currentValue": record.thinking,
        }));
    }
    Value::Array(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let cwd = Path::new("/workspace");
        assert_eq!(session_id("", cwd, 1), session_id("", cwd, 1));
        assert_ne!(session_id("", cwd, 1), session_id("", cwd, 2));
        assert_ne!(session_id("", cwd, 1), session_id("x", cwd, 1));
        assert_ne!(
            session_id("", cwd, 1),
            session_id("", Path::new("/other"), 1)
        );
        assert!(valid_session_id(&session_id("", cwd, 1)));
    }

    #[test]
    fn session_ids_must_be_safe_file_names() {
        assert!(valid_session_id("sess_0123abcd"));
        assert!(!valid_session_id("../etc/passwd"));
        assert!(!valid_session_id(""));
        assert!(!valid_session_id("a/b"));
    }
}
