//! `terminal/*` requests as `docker exec` in the agent's own container, so
//! paths need no translation and the command sees what the agent sees.
//!
//! The Docker API cannot signal an exec'd process, so `terminal/kill`
//! answers an error; every command dies with its container at the end of
//! the turn at the latest.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use async_trait::async_trait;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures::StreamExt;
use kandev_acp::{
    RpcError, TerminalExecutor,
    error::codes,
    schema::{CreateTerminalRequest, TerminalExitStatus, TerminalId, TerminalOutputResponse},
    terminal::{OutputBuffer, unknown_terminal},
};
use tokio::sync::watch;

use crate::docker::Docker;

struct ExecTerminal {
    output: Arc<Mutex<OutputBuffer>>,
    exit: watch::Receiver<Option<TerminalExitStatus>>,
    reader: tokio::task::JoinHandle<()>,
}

/// Runs terminal commands with `docker exec` in one container.
pub struct DockerExec {
    docker: Docker,
    container_id: String,
    terminals: Mutex<HashMap<String, ExecTerminal>>,
    next_id: AtomicU64,
}

impl DockerExec {
    pub fn new(docker: Docker, container_id: String) -> Self {
        DockerExec {
            docker,
            container_id,
            terminals: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }

    fn exit_rx(&self, id: &TerminalId) -> Result<ExitParts, RpcError> {
        let terminals = self.terminals.lock().unwrap_or_else(|e| e.into_inner());
        terminals
            .get(id.0.as_ref())
            .map(|t| (t.output.clone(), t.exit.clone()))
            .ok_or_else(|| unknown_terminal(id))
    }
}

type ExitParts = (
    Arc<Mutex<OutputBuffer>>,
    watch::Receiver<Option<TerminalExitStatus>>,
);

impl Drop for DockerExec {
    fn drop(&mut self) {
        let terminals = self.terminals.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, t) in terminals.drain() {
            t.reader.abort();
        }
    }
}

fn internal(msg: String) -> RpcError {
    RpcError::new(codes::INTERNAL_ERROR, msg)
}

#[async_trait]
impl TerminalExecutor for DockerExec {
    async fn create(&self, request: CreateTerminalRequest) -> Result<TerminalId, RpcError> {
        let mut cmd = vec![request.command.clone()];
        cmd.extend(request.args.iter().cloned());
        let env: Vec<String> = request
            .env
            .iter()
            .map(|v| format!("{}={}", v.name, v.value))
            .collect();
        let options = CreateExecOptions {
            cmd: Some(cmd),
            env: Some(env),
            working_dir: request.cwd.as_ref().map(|p| p.display().to_string()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let client = self
            .docker
            .api()
            .map_err(|e| internal(format!("cannot exec {}: {e}", request.command)))?;
        let exec = client
            .create_exec(&self.container_id, options)
            .await
            .map_err(|e| internal(format!("cannot exec {}: {e}", request.command)))?;
        let started = client
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await
            .map_err(|e| internal(format!("cannot start {}: {e}", request.command)))?;
        let output = Arc::new(Mutex::new(OutputBuffer::for_request(
            request.output_byte_limit,
        )));
        let (exit_tx, exit_rx) = watch::channel(None);
        let buffer = output.clone();
        let docker = client.clone();
        let exec_id = exec.id.clone();
        let reader = tokio::spawn(async move {
            if let StartExecResults::Attached {
                output: mut stream, ..
            } = started
            {
                while let Some(Ok(chunk)) = stream.next().await {
                    buffer
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(chunk.as_ref());
                }
            }
            let code = docker
                .inspect_exec(&exec_id)
                .await
                .ok()
                .and_then(|i| i.exit_code)
                .and_then(|c| u32::try_from(c).ok());
            let _ = exit_tx.send(Some(TerminalExitStatus::new().exit_code(code)));
        });
        let id = format!("term_{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        self.terminals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id.clone(),
                ExecTerminal {
                    output,
                    exit: exit_rx,
                    reader,
                },
            );
        Ok(TerminalId::new(id))
    }

    async fn output(&self, terminal_id: &TerminalId) -> Result<TerminalOutputResponse, RpcError> {
        let (output, exit) = self.exit_rx(terminal_id)?;
        let (text, truncated) = output.lock().unwrap_or_else(|e| e.into_inner()).snapshot();
        let status = exit.borrow().clone();
        Ok(TerminalOutputResponse::new(text, truncated).exit_status(status))
    }

    async fn wait_for_exit(
        &self,
        terminal_id: &TerminalId,
    ) -> Result<TerminalExitStatus, RpcError> {
        let (_, mut exit) = self.exit_rx(terminal_id)?;
        let status = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| internal("the terminal was released".into()))?
            .clone();
        status.ok_or_else(|| internal("no exit status".into()))
    }

    async fn kill(&self, terminal_id: &TerminalId) -> Result<(), RpcError> {
        self.exit_rx(terminal_id)?;
        Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            "terminal/kill is not supported for docker exec terminals",
        ))
    }

    async fn release(&self, terminal_id: &TerminalId) -> Result<(), RpcError> {
        let removed = self
            .terminals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(terminal_id.0.as_ref());
        match removed {
            Some(t) => {
                t.reader.abort();
                Ok(())
            }
            None => Err(unknown_terminal(terminal_id)),
        }
    }
}
