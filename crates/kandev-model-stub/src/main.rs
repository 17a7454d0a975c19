//! `kandev-model-stub [--listen ADDR] [-- COMMAND...]`: serves the scripted
//! model APIs on `ADDR` (loopback by default) and, given a command, runs it
//! with this process's stdin and stdout (an ACP agent speaks over them), then
//! exits with the command's status. Logs go to stderr only.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tokio::process::Command;

#[derive(Parser, Debug)]
#[command(about = "Scripted stand-ins for the vendors' model APIs")]
struct Args {
    /// Where to listen (the container's loopback).
    #[arg(long, env = "KANDEV_STUB_LISTEN", default_value = "127.0.0.1:8790")]
    listen: SocketAddr,
    /// The agent to run beside the server, with its arguments.
    #[arg(last = true)]
    command: Vec<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KANDEV_STUB_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    match run(Args::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kandev-model-stub: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(addr = %args.listen, "scripted model APIs listening");
    let server = axum::serve(listener, kandev_model_stub::router());
    let Some((program, rest)) = args.command.split_first() else {
        server.await?;
        return Ok(ExitCode::SUCCESS);
    };
    tokio::spawn(async move {
        if let Err(e) = server.await {
            tracing::error!(error = %e, "server ended");
        }
    });
    let mut child = Command::new(program)
        .args(rest)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let status = tokio::select! {
        status = child.wait() => status?,
        _ = terminated() => {
            // The container is being stopped: the agent goes with it.
            let _ = child.start_kill();
            child.wait().await?
        }
    };
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}

async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
