//! `kandev-acp run`: drive an agent subprocess through one turn, printing
//! normalized events as NDJSON on stdout and a readable summary on stderr.
//!
//! Exit codes: 0 on `end_turn` (or a session without a prompt); 1 when the
//! turn ended otherwise (failed, cancelled, refusal, ...); 3 when the agent
//! requires authentication; 4 on a timeout; 5 when the agent crashed or
//! closed its output; 6 on a protocol error.

use std::{
    path::PathBuf,
    process::{ExitCode, ExitStatus},
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use kandev_acp::{
    AcpClient, AcpError, AcpEvent, AutoApprove, ClientOptions, Deny, EventKind, EventStream,
    LocalExecutor, PermissionPolicy, Workspace, event::LogSource, schema::StopReason,
};
use tokio::{
    io::AsyncWriteExt,
    process::{Child, Command},
};

#[derive(Debug, Parser)]
#[command(name = "kandev-acp", version, about = "Kandev ACP client")]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Debug, Subcommand)]
enum Commands {
    /// Run an agent as a local subprocess and drive one prompt turn.
    Run(RunArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PermissionArg {
    /// Select the first allow option.
    Allow,
    /// Select the first reject option.
    Deny,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Working directory of the agent and root of the workspace for fs/*.
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// The prompt; without it the run stops after creating the session.
    #[arg(long)]
    prompt: Option<String>,
    /// How to answer permission requests.
    #[arg(long, value_enum, default_value = "allow")]
    permission: PermissionArg,
    /// Timeout of the prompt turn, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Timeout of initialize, in seconds.
    #[arg(long, default_value_t = 30)]
    init_timeout: u64,
    /// Auth method ids the client may use on its own.
    #[arg(long = "auth-method")]
    auth_methods: Vec<String>,
    /// The agent command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    agent: Vec<String>,
}

fn summarize(event: &AcpEvent) -> Option<String> {
    let line = match &event.kind {
        EventKind::MessageChunk(c) => {
            format!("agent: {}", c.text.as_deref().unwrap_or("[non-text]"))
        }
        EventKind::ThoughtChunk(c) => format!("thought: {}", c.text.as_deref().unwrap_or("")),
        EventKind::ToolCall(t) | EventKind::ToolCallUpdate(t) => format!(
            "tool {}: {} {}",
            t.tool_call_id,
            t.title.as_deref().unwrap_or(""),
            t.status.as_deref().unwrap_or("")
        ),
        EventKind::Plan(p) => format!("plan: {} entries", p.entries.len()),
        EventKind::PermissionRequest(p) => format!(
            "permission requested for {} ({} options)",
            p.tool_call_id,
            p.options.len()
        ),
        EventKind::PermissionResponse(p) => format!(
            "permission {} {}",
            p.outcome,
            p.option_id.as_deref().unwrap_or("")
        ),
        EventKind::ModeChange(m) => format!("mode: {}", m.mode_id),
        EventKind::ConfigChange(_) => "config options changed".to_owned(),
        EventKind::Usage(u) => format!("usage: {}/{} tokens", u.used, u.size),
        EventKind::Progress(p) => format!(
            "progress: {}% {}",
            p.percent.unwrap_or_default(),
            p.message.as_deref().unwrap_or("")
        ),
        EventKind::TurnEnd(t) => format!(
            "turn ended: {}{}",
            t.stop_reason,
            t.message
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        ),
        EventKind::ProtocolError(e) => format!("protocol error: {}", e.message),
        EventKind::Log(l) => match l.source {
            LogSource::Stderr => format!("agent stderr: {}", l.line),
            LogSource::Agent => format!("agent log: {}", l.line),
        },
        EventKind::Lifecycle(l) => format!(
            "{}{}{}",
            serde_json::to_value(l.phase)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            l.dialect.map(|d| format!(" [{d:?}]")).unwrap_or_default(),
            l.detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ),
        EventKind::Other(_) => return None,
    };
    Some(line)
}

/// What went wrong, in a word, and the exit code that says it.
fn failure(error: &AcpError) -> (&'static str, u8) {
    match error {
        AcpError::AuthRequired { .. } => ("authentication required", 3),
        AcpError::Timeout { .. } => ("timeout", 4),
        AcpError::Closed { .. } | AcpError::Io(_) => ("agent crashed or exited", 5),
        AcpError::InvalidResponse { .. }
        | AcpError::UnsupportedVersion(_)
        | AcpError::Rpc { .. } => ("protocol error", 6),
        _ => ("error", 1),
    }
}

async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let cwd = match &args.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("no current directory")?,
    };
    let workspace = Workspace::local(&cwd)
        .with_context(|| format!("cannot use {} as the workspace", cwd.display()))?;
    let mut child = spawn_agent(&args, &workspace)?;
    let stdin = child.stdin.take().context("agent stdin")?;
    let stdout = child.stdout.take().context("agent stdout")?;
    let stderr = child.stderr.take().context("agent stderr")?;

    let (client, events) = AcpClient::connect(stdout, stdin, client_options(&args, &workspace));
    let printer = tokio::spawn(print_events(events));
    let stderr_client = client.clone();
    let stderr_task = tokio::spawn(async move { stderr_client.pump_stderr(stderr).await });

    let outcome = drive(&client, &args, workspace.host_root().to_owned()).await;

    // Let the agent finish on EOF, then make sure it is gone.
    let _ = client.close_stdin().await;
    let status = match tokio::time::timeout(Duration::from_secs(3), child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            let _ = child.kill().await;
            None
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), stderr_task).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), client.closed()).await;
    drop(client);
    let _ = printer.await;
    Ok(report(outcome, status))
}

/// The agent command, run in the workspace with its stdio piped.
fn spawn_agent(args: &RunArgs, workspace: &Workspace) -> anyhow::Result<Child> {
    let (program, program_args) = args.agent.split_first().context("no agent command")?;
    let mut command = Command::new(program);
    command
        .args(program_args)
        .current_dir(workspace.host_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(prompt) = &args.prompt {
        // Legacy agents read their task from the environment.
        command.env("TASK_DESCRIPTION", prompt);
    }
    command
        .spawn()
        .with_context(|| format!("cannot start agent {program}"))
}

/// The client's options: the permission answer, timeouts, and local
/// terminals and files in `workspace`.
fn client_options(args: &RunArgs, workspace: &Workspace) -> ClientOptions {
    let permission: Arc<dyn PermissionPolicy> = match args.permission {
        PermissionArg::Allow => Arc::new(AutoApprove),
        PermissionArg::Deny => Arc::new(Deny),
    };
    ClientOptions {
        initialize_timeout: Duration::from_secs(args.init_timeout),
        prompt_timeout: Some(Duration::from_secs(args.timeout)),
        permission,
        terminal: Some(Arc::new(LocalExecutor::new(Some(workspace.clone())))),
        workspace: Some(workspace.clone()),
        allowed_auth_methods: args.auth_methods.clone(),
        // The agent inherits this process's environment.
        auth_env: std::env::vars_os()
            .filter(|(_, value)| !value.is_empty())
            .filter_map(|(name, _)| name.into_string().ok())
            .collect(),
        ..ClientOptions::default()
    }
}

/// Each event as an NDJSON line on stdout, and its summary on stderr.
async fn print_events(mut events: EventStream) {
    let mut out = tokio::io::stdout();
    while let Some(event) = events.recv().await {
        if let Ok(mut line) = serde_json::to_vec(&event) {
            line.push(b'\n');
            if out.write_all(&line).await.is_err() {
                break;
            }
        }
        if let Some(summary) = summarize(&event) {
            eprintln!("kandev-acp: [{}] {summary}", event.seq);
        }
    }
    let _ = out.flush().await;
}

/// Says how the run ended (with the agent's exit `status` on an error)
/// and returns the exit code.
fn report(outcome: Result<Option<StopReason>, AcpError>, status: Option<ExitStatus>) -> u8 {
    match outcome {
        Ok(None) => {
            eprintln!("kandev-acp: session ready (no prompt given)");
            0
        }
        Ok(Some(StopReason::EndTurn)) => {
            eprintln!("kandev-acp: turn completed (end_turn)");
            0
        }
        Ok(Some(reason)) => {
            eprintln!("kandev-acp: turn ended without completing: {reason:?}");
            1
        }
        Err(error) => {
            let exit = status
                .map(|s| format!(" (agent exit status: {s})"))
                .unwrap_or_default();
            let (what, code) = failure(&error);
            eprintln!("kandev-acp: {what}: {error}{exit}");
            code
        }
    }
}

async fn drive(
    client: &AcpClient,
    args: &RunArgs,
    cwd: PathBuf,
) -> Result<Option<StopReason>, AcpError> {
    client.initialize().await?;
    client.new_session(cwd, Vec::new()).await?;
    let Some(prompt) = &args.prompt else {
        return Ok(None);
    };
    let turn = client.prompt(vec![prompt.clone().into()]);
    tokio::pin!(turn);
    tokio::select! {
        result = &mut turn => result.map(Some),
        _ = tokio::signal::ctrl_c() => {
            eprintln!("kandev-acp: cancelling");
            client.cancel().await?;
            turn.await.map(Some)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KANDEV_ACP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Commands::Run(args) => run(args).await,
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("kandev-acp: {error:#}");
            ExitCode::from(2)
        }
    }
}
