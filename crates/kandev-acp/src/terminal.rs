//! `terminal/*` requests go through a [`TerminalExecutor`]. The agent manager
//! implements it with `docker exec` in the agent's container;
//! [`LocalExecutor`] runs commands as local processes (tests and the CLI).

use std::{
    collections::HashMap,
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use agent_client_protocol::v1::schema::{
    CreateTerminalRequest, TerminalExitStatus, TerminalId, TerminalOutputResponse,
};
use async_trait::async_trait;
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    sync::{Notify, watch},
};

use crate::{
    error::{RpcError, codes},
    sync::lock,
    workspace::Workspace,
};

/// Output kept per terminal when the agent gives no `outputByteLimit`.
pub const DEFAULT_OUTPUT_BYTE_LIMIT: u64 = 1024 * 1024;
/// Output is never kept beyond this, whatever the agent asks for.
pub const MAX_OUTPUT_BYTE_LIMIT: u64 = 16 * 1024 * 1024;

/// The answer to a `terminal/*` request naming a terminal that is not (or
/// no longer) there.
pub fn unknown_terminal(id: &TerminalId) -> RpcError {
    RpcError::new(codes::RESOURCE_NOT_FOUND, format!("unknown terminal {id}"))
}

/// Runs the agent's terminal commands.
///
/// Every method answers one `terminal/*` request; an `Err` is sent back to
/// the agent as the JSON-RPC error.
#[async_trait]
pub trait TerminalExecutor: Send + Sync + 'static {
    /// `terminal/create`: starts the command and returns at once.
    async fn create(&self, request: CreateTerminalRequest) -> Result<TerminalId, RpcError>;
    /// `terminal/output`: the output so far, and the exit status if exited.
    async fn output(&self, terminal_id: &TerminalId) -> Result<TerminalOutputResponse, RpcError>;
    /// `terminal/wait_for_exit`: waits for the command to exit.
    async fn wait_for_exit(&self, terminal_id: &TerminalId)
    -> Result<TerminalExitStatus, RpcError>;
    /// `terminal/kill`: kills the command; the terminal stays usable.
    async fn kill(&self, terminal_id: &TerminalId) -> Result<(), RpcError>;
    /// `terminal/release`: kills the command if running and forgets the id.
    async fn release(&self, terminal_id: &TerminalId) -> Result<(), RpcError>;
}

/// Output bounded to `limit` bytes: when it overflows, the start is dropped,
/// cutting on a UTF-8 character boundary.
#[derive(Debug)]
pub struct OutputBuffer {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl OutputBuffer {
    /// An empty buffer holding at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            truncated: false,
        }
    }

    /// An empty buffer for a `terminal/create` whose `outputByteLimit` is
    /// `requested`: [`DEFAULT_OUTPUT_BYTE_LIMIT`] when absent, never more
    /// than [`MAX_OUTPUT_BYTE_LIMIT`].
    pub fn for_request(requested: Option<u64>) -> Self {
        let limit = requested
            .unwrap_or(DEFAULT_OUTPUT_BYTE_LIMIT)
            .min(MAX_OUTPUT_BYTE_LIMIT);
        Self::new(usize::try_from(limit).unwrap_or(usize::MAX))
    }

    /// Appends output, dropping the oldest bytes beyond the limit.
    pub fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.limit {
            let mut cut = self.bytes.len() - self.limit;
            // Never start in the middle of a character.
            while cut < self.bytes.len() && (self.bytes[cut] & 0b1100_0000) == 0b1000_0000 {
                cut += 1;
            }
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }

    /// The text (invalid UTF-8 replaced) and whether anything was dropped.
    pub fn snapshot(&self) -> (String, bool) {
        (
            String::from_utf8_lossy(&self.bytes).into_owned(),
            self.truncated,
        )
    }
}

struct LocalTerminal {
    output: Arc<Mutex<OutputBuffer>>,
    exit: watch::Receiver<Option<TerminalExitStatus>>,
    kill: Arc<Notify>,
}

/// Runs terminal commands as local child processes. Output is bounded by
/// `outputByteLimit` (default [`DEFAULT_OUTPUT_BYTE_LIMIT`], at most
/// [`MAX_OUTPUT_BYTE_LIMIT`]). Children are killed when the executor drops.
pub struct LocalExecutor {
    workspace: Option<Workspace>,
    terminals: Mutex<HashMap<String, LocalTerminal>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for LocalExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalExecutor")
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl LocalExecutor {
    /// A local executor. With a workspace, `cwd` is translated from the
    /// agent's view and must lie inside it; it defaults to the root.
    pub fn new(workspace: Option<Workspace>) -> Self {
        Self {
            workspace,
            terminals: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }

    fn with_terminal<T>(
        &self,
        id: &TerminalId,
        f: impl FnOnce(&LocalTerminal) -> T,
    ) -> Result<T, RpcError> {
        let terminals = lock(&self.terminals);
        terminals
            .get(id.0.as_ref())
            .map(f)
            .ok_or_else(|| unknown_terminal(id))
    }
}

fn signal_name(signal: i32) -> String {
    match signal {
        1 => "SIGHUP".into(),
        2 => "SIGINT".into(),
        9 => "SIGKILL".into(),
        15 => "SIGTERM".into(),
        n => format!("SIG{n}"),
    }
}

fn exit_status(status: std::process::ExitStatus) -> TerminalExitStatus {
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status).map(signal_name);
    #[cfg(not(unix))]
    let signal: Option<String> = None;
    TerminalExitStatus::new()
        .exit_code(status.code().and_then(|c| u32::try_from(c).ok()))
        .signal(signal)
}

async fn pump(mut from: impl AsyncRead + Unpin, into: Arc<Mutex<OutputBuffer>>) {
    let mut chunk = vec![0u8; 8192];
    while let Ok(n) = from.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        lock(&into).push(&chunk[..n]);
    }
}

#[async_trait]
impl TerminalExecutor for LocalExecutor {
    async fn create(&self, request: CreateTerminalRequest) -> Result<TerminalId, RpcError> {
        let cwd = match (&request.cwd, &self.workspace) {
            (Some(cwd), Some(ws)) => Some(
                ws.to_host(cwd)
                    .map_err(|e| RpcError::new(codes::INVALID_PARAMS, e.to_string()))?,
            ),
            (Some(cwd), None) => Some(cwd.clone()),
            (None, Some(ws)) => Some(ws.host_root().to_owned()),
            (None, None) => None,
        };
        let mut command = tokio::process::Command::new(&request.command);
        command
            .args(&request.args)
            .envs(request.env.iter().map(|v| (&v.name, &v.value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().map_err(|e| {
            RpcError::new(
                codes::INTERNAL_ERROR,
                format!("cannot start {}: {e}", request.command),
            )
        })?;
        let output = Arc::new(Mutex::new(OutputBuffer::for_request(
            request.output_byte_limit,
        )));
        let (exit_tx, exit_rx) = watch::channel(None);
        let kill = Arc::new(Notify::new());
        let stdout = child
            .stdout
            .take()
            .map(|s| tokio::spawn(pump(s, output.clone())));
        let stderr = child
            .stderr
            .take()
            .map(|s| tokio::spawn(pump(s, output.clone())));
        let killer = kill.clone();
        // The waiter owns the child; it ends when the child exits.
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                () = killer.notified() => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            // Let the pipes drain, but not forever (grandchildren may hold them).
            for pump in [stdout, stderr].into_iter().flatten() {
                let _ = tokio::time::timeout(Duration::from_secs(1), pump).await;
            }
            let status = match status {
                Ok(status) => exit_status(status),
                Err(_) => TerminalExitStatus::new(),
            };
            let _ = exit_tx.send(Some(status));
        });
        let id = format!("term-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        lock(&self.terminals).insert(
            id.clone(),
            LocalTerminal {
                output,
                exit: exit_rx,
                kill,
            },
        );
        Ok(TerminalId::new(id))
    }

    async fn output(&self, terminal_id: &TerminalId) -> Result<TerminalOutputResponse, RpcError> {
        self.with_terminal(terminal_id, |t| {
            let (text, truncated) = lock(&t.output).snapshot();
            TerminalOutputResponse::new(text, truncated).exit_status(t.exit.borrow().clone())
        })
    }

    async fn wait_for_exit(
        &self,
        terminal_id: &TerminalId,
    ) -> Result<TerminalExitStatus, RpcError> {
        let mut exit = self.with_terminal(terminal_id, |t| t.exit.clone())?;
        let status = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| RpcError::new(codes::INTERNAL_ERROR, "terminal waiter is gone"))?;
        Ok(status.clone().unwrap_or_default())
    }

    async fn kill(&self, terminal_id: &TerminalId) -> Result<(), RpcError> {
        self.with_terminal(terminal_id, |t| t.kill.notify_one())
    }

    async fn release(&self, terminal_id: &TerminalId) -> Result<(), RpcError> {
        let removed = lock(&self.terminals).remove(terminal_id.0.as_ref());
        match removed {
            Some(t) => {
                t.kill.notify_one();
                Ok(())
            }
            None => Err(unknown_terminal(terminal_id)),
        }
    }
}

impl Drop for LocalExecutor {
    fn drop(&mut self) {
        let terminals = self.terminals.get_mut().unwrap_or_else(|e| e.into_inner());
        for t in terminals.values() {
            t.kill.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_buffer_drops_the_start_on_a_char_boundary() {
        let mut buf = OutputBuffer::new(4);
        buf.push("aé".as_bytes());
        assert_eq!(buf.snapshot(), ("aé".to_owned(), false));
        // 6 bytes, keep 4: the cut would fall inside "é", so it moves past it.
        buf.push("xyz".as_bytes());
        assert_eq!(buf.snapshot(), ("xyz".to_owned(), true));
        buf.push("é".as_bytes());
        assert_eq!(buf.snapshot(), ("yzé".to_owned(), true));
    }

    #[tokio::test]
    async fn local_executor_runs_limits_and_kills() {
        let exec = LocalExecutor::new(None);
        let id = exec
            .create(
                CreateTerminalRequest::new("s", "sh")
                    .args(vec!["-c".into(), "printf 0123456789; exit 3".into()])
                    .output_byte_limit(4u64),
            )
            .await
            .expect("create");
        let status = exec.wait_for_exit(&id).await.expect("wait");
        assert_eq!(status.exit_code, Some(3));
        let out = exec.output(&id).await.expect("output");
        assert_eq!(out.output, "6789");
        assert!(out.truncated);
        assert_eq!(out.exit_status.and_then(|s| s.exit_code), Some(3));
        exec.release(&id).await.expect("release");
        assert!(exec.output(&id).await.is_err());

        let id = exec
            .create(CreateTerminalRequest::new("s", "sleep").args(vec!["30".into()]))
            .await
            .expect("create");
        assert!(
            exec.output(&id)
                .await
                .expect("output")
                .exit_status
                .is_none()
        );
        exec.kill(&id).await.expect("kill");
        let status = exec.wait_for_exit(&id).await.expect("wait");
        assert_eq!(status.signal.as_deref(), Some("SIGKILL"));
    }
}
