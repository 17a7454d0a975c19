//! `kandev-orchestrator`: the launch queue, agent supervision and the ACP feed.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kandev_common::{config, shutdown, telemetry};
use kandev_orchestrator::{Application, Settings};

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Kandev orchestrator: queues eligible tasks, launches their agents through
/// the agent manager, follows their runs, and serves each task's ACP feed
/// over WebSocket (plus REST and gRPC control).
///
/// Configuration: defaults, then the TOML file (--config or KANDEV_CONFIG),
/// then KANDEV_* environment variables (KANDEV_LISTEN_ADDR,
/// KANDEV_DATABASE_URL, KANDEV_NATS_URL, KANDEV_TASK_SERVICE_URL,
/// KANDEV_AGENT_MANAGER_URL, KANDEV_MAX_CONCURRENT, ...).
#[derive(Debug, Parser)]
#[command(name = "kandev-orchestrator", version)]
struct Cli {
    /// A TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let settings: Settings =
        config::load(cli.config.as_deref()).context("loading configuration")?;
    let _telemetry = telemetry::init("orchestrator", &settings.log);
    let shutdown = shutdown::on_signal();
    let app = Application::build(settings)
        .await
        .context("starting the orchestrator")?;
    app.run_until_stopped(shutdown).await?;
    Ok(())
}
