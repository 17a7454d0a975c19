//! `kandev-gateway`: the API gateway on port 8080.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kandev_common::{config, shutdown, telemetry};
use kandev_gateway::{Application, Settings};

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Kandev API gateway: authentication, validation and routing to the task
/// service, agent manager and orchestrator; the task stream WebSocket proxy.
///
/// Configuration: defaults, then the TOML file (--config or KANDEV_CONFIG),
/// then KANDEV_* environment variables (KANDEV_LISTEN_ADDR,
/// KANDEV_DATABASE_URL, KANDEV_JWT_SECRET, KANDEV_ADMIN_USERNAME,
/// KANDEV_ADMIN_PASSWORD, KANDEV_TASK_SERVICE_URL, ...).
#[derive(Debug, Parser)]
#[command(name = "kandev-gateway", version)]
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
    let _telemetry = telemetry::init("gateway", &settings.log);
    let shutdown = shutdown::on_signal();
    let app = Application::build(settings)
        .await
        .context("starting the gateway")?;
    app.run_until_stopped(shutdown).await?;
    Ok(())
}
