//! `kandev-agent-manager`: agent containers driven over ACP, over gRPC.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kandev_agent_manager::{Application, config};
use kandev_common::{shutdown, telemetry};

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Kandev agent manager: runs coding agents in Docker containers, drives
/// them over ACP and publishes their events to NATS JetStream.
///
/// Configuration: defaults, then the TOML file (--config or KANDEV_CONFIG),
/// then KANDEV_* environment variables (KANDEV_LISTEN_ADDR,
/// KANDEV_DATABASE_URL, KANDEV_NATS_URL, KANDEV_WORKSPACES_ROOT,
/// KANDEV_ALLOWED_WORKSPACE_ROOTS, KANDEV_AGENT_ENV__<NAME>, ...).
/// GITHUB_TOKEN, GITLAB_TOKEN, GEMINI_API_KEY and HOME are read from the
/// host environment once, at startup.
#[derive(Debug, Parser)]
#[command(name = "kandev-agent-manager", version)]
struct Cli {
    /// A TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let settings = config::load(cli.config.as_deref()).context("loading configuration")?;
    let _telemetry = telemetry::init("agent-manager", &settings.log);
    let shutdown = shutdown::on_signal();
    let app = Application::build(settings)
        .await
        .context("starting the agent manager")?;
    app.run_until_stopped(shutdown).await?;
    Ok(())
}
