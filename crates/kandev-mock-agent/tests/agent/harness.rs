//! Shared test plumbing: temp dirs and a raw JSON-lines driver.

use std::{
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, ChildStdin, ChildStdout, Command},
};

pub const BIN: &str = env!("CARGO_BIN_EXE_kandev-mock-agent");
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "kandev-mock-test-{}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).expect("create temp dir");
        // Canonical, so it compares equal to paths the agent reports.
        Self(path.canonicalize().expect("canonical temp dir"))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_dir_all(home_of(&self.0));
    }
}

/// The agent's home for a run in `cwd`: beside it, never inside (the mock
/// keeps its sessions in `$HOME/.kandev-mock`), and the same for every run
/// in `cwd`, so a restarted agent finds its sessions.
pub fn home_of(cwd: &Path) -> PathBuf {
    cwd.with_extension("home")
}

/// A command for the agent binary with quiet logs (set `TEST_LOG=1` to see them).
pub fn agent_command(cwd: &Path, args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(cwd).kill_on_drop(true);
    for var in [
        "KANDEV_MOCK_DIALECT",
        "KANDEV_MOCK_AUTH",
        "KANDEV_MOCK_API_KEY",
        "KANDEV_MOCK_CREDENTIALS",
        "KANDEV_MOCK_SEED",
        "KANDEV_MOCK_DEFAULT_SCENARIO",
        "KANDEV_MOCK_QUIRKS",
        "KANDEV_MOCK_STATE_DIR",
        "TASK_DESCRIPTION",
        "KANDEV_AGENT_ID",
        "KANDEV_TASK_ID",
        "KANDEV_MOCK_HEARTBEAT_MS",
    ] {
        cmd.env_remove(var);
    }
    let log = if std::env::var_os("TEST_LOG").is_some() {
        "debug"
    } else {
        "warn"
    };
    cmd.env("KANDEV_MOCK_LOG", log);
    let home = home_of(cwd);
    std::fs::create_dir_all(&home).expect("create the agent's home");
    cmd.env("HOME", home);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// The agent process, driven line by line.
pub struct RawAgent {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    pub dir: TempDir,
}

impl RawAgent {
    pub fn spawn(args: &[&str], envs: &[(&str, &str)]) -> Self {
        Self::spawn_in(TempDir::new(), args, envs)
    }

    pub fn spawn_in(dir: TempDir, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut child = agent_command(dir.path(), args, envs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kandev-mock-agent");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Self {
            child,
            stdin,
            stdout,
            next_id: 100,
            dir,
        }
    }

    pub fn cwd(&self) -> String {
        self.dir.path().to_str().expect("utf-8 temp dir").to_owned()
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(bytes).await.expect("write stdin");
        stdin.write_all(b"\n").await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    pub async fn send(&mut self, msg: &Value) {
        self.send_raw(msg.to_string().as_bytes()).await;
    }

    /// Sends a notification.
    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await;
    }

    /// Cancels the running turn of session `sid` (`session/cancel`).
    pub async fn cancel(&mut self, sid: &str) {
        self.notify("session/cancel", json!({ "sessionId": sid }))
            .await;
    }

    /// The answer to a request (its updates before it dropped).
    pub async fn answer(&mut self, method: &str, params: Value) -> Value {
        self.request(method, params).await.1
    }

    /// Sends a request and returns its id.
    pub async fn send_request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        id
    }

    /// The next stdout line without its newline, or `None` at EOF.
    pub async fn read_line(&mut self) -> Option<Vec<u8>> {
        let mut line = Vec::new();
        let n = tokio::time::timeout(TIMEOUT, self.stdout.read_until(b'\n', &mut line))
            .await
            .expect("the agent wrote a line in time")
            .expect("read stdout");
        if n == 0 {
            return None;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        Some(line)
    }

    pub async fn read_json(&mut self) -> Value {
        let line = self.read_line().await.expect("a line before EOF");
        serde_json::from_slice(&line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&line)))
    }

    /// Reads messages until the response to `id`; returns the messages before it and the response.
    pub async fn until_response(&mut self, id: u64) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let msg = self.read_json().await;
            if msg.get("method").is_none() && msg["id"] == json!(id) {
                return (before, msg);
            }
            before.push(msg);
        }
    }

    pub async fn request(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = self.send_request(method, params).await;
        self.until_response(id).await
    }

    pub async fn initialize_with(&mut self, client_capabilities: Value) -> Value {
        let (_, resp) = self
            .request(
                "initialize",
                json!({ "protocolVersion": 1, "clientCapabilities": client_capabilities }),
            )
            .await;
        resp["result"].clone()
    }

    pub async fn initialize(&mut self) -> Value {
        self.initialize_with(json!({})).await
    }

    /// Asks for a new session in the agent's directory, without MCP
    /// servers: the messages before the answer, and the answer.
    pub async fn request_session(&mut self) -> (Vec<Value>, Value) {
        let cwd = self.cwd();
        self.request("session/new", json!({ "cwd": cwd, "mcpServers": [] }))
            .await
    }

    pub async fn new_session(&mut self) -> String {
        let (_, resp) = self.request_session().await;
        resp["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {resp}"))
            .to_owned()
    }

    pub async fn start(args: &[&str], envs: &[(&str, &str)]) -> (Self, String) {
        let mut agent = Self::spawn(args, envs);
        agent.initialize().await;
        let sid = agent.new_session().await;
        (agent, sid)
    }

    pub async fn send_prompt(&mut self, sid: &str, text: &str) -> u64 {
        self.send_request(
            "session/prompt",
            json!({ "sessionId": sid, "prompt": [{ "type": "text", "text": text }] }),
        )
        .await
    }

    /// Runs a prompt to its response; returns the updates (the `update` objects) and the response.
    /// Sends a prompt and reads the turn's first message: the prompt's
    /// id and that message.
    pub async fn begin_turn(&mut self, sid: &str, text: &str) -> (u64, Value) {
        let id = self.send_prompt(sid, text).await;
        (id, self.read_json().await)
    }

    pub async fn prompt(&mut self, sid: &str, text: &str) -> (Vec<Value>, Value) {
        let id = self.send_prompt(sid, text).await;
        let (msgs, resp) = self.until_response(id).await;
        (updates(&msgs), resp)
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub async fn wait(&mut self) -> ExitStatus {
        self.close_stdin();
        tokio::time::timeout(TIMEOUT, self.child.wait())
            .await
            .expect("the agent exited in time")
            .expect("wait")
    }
}

/// The `update` objects of the `session/update` notifications in `msgs`.
pub fn updates(msgs: &[Value]) -> Vec<Value> {
    msgs.iter()
        .map(|m| {
            assert_eq!(m["method"], "session/update", "unexpected message {m}");
            m["params"]["update"].clone()
        })
        .collect()
}

pub fn kinds(updates: &[Value]) -> Vec<&str> {
    updates
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap_or("?"))
        .collect()
}

/// Texts of the `agent_message_chunk` updates.
pub fn message_texts(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The `kind`s of the `tool_call` updates, in order.
pub fn tool_kinds(updates: &[Value]) -> Vec<&str> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .filter_map(|u| u["kind"].as_str())
        .collect()
}

/// Checks that `updates` have an update of each of `kinds`.
pub fn assert_has_kinds(updates: &[Value], kinds_wanted: &[&str]) {
    let k = kinds(updates);
    for kind in kinds_wanted {
        assert!(k.contains(kind), "missing {kind} in {k:?}");
    }
}

/// The `kind`s of a permission request's options.
pub fn option_kinds(request: &Value) -> Vec<&str> {
    request["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect()
}

pub fn stop_reason(resp: &Value) -> &str {
    resp["result"]["stopReason"]
        .as_str()
        .unwrap_or_else(|| panic!("no stopReason in {resp}"))
}
