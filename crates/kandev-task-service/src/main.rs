//! `kandev-task-service`: boards and tasks over gRPC.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kandev_common::{config, shutdown, telemetry};
use kandev_task_service::{Application, Settings};

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Kandev task service: boards, tasks and their state machine over gRPC,
/// with task.* events published to NATS JetStream.
///
/// Configuration: defaults, then the TOML file (--config or KANDEV_CONFIG),
/// then KANDEV_* environment variables (KANDEV_LISTEN_ADDR,
/// KANDEV_DATABASE_URL, KANDEV_NATS_URL, KANDEV_LOG__FORMAT=json, ...).
#[derive(Debug, Parser)]
#[command(name = "kandev-task-service", version)]
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
    let _telemetry = telemetry::init("task-service", &settings.log);
    let shutdown = shutdown::on_signal();
    let app = Application::build(settings)
        .await
        .context("starting the task service")?;
    app.run_until_stopped(shutdown).await?;
    Ok(())
}
