//! `kandev`: all of Kandev in one process, for one machine. Needs Docker
//! (the agents' runtime) and nothing else: state in SQLite files of the data
//! directory, events in process.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kandev::Kandev;
use kandev_common::{
    config::{self, Validate},
    shutdown,
    telemetry::{self, LogSettings},
};
use serde::{Deserialize, Serialize};

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Kandev, a kanban board whose cards AI coding agents work on, in one
/// process: the board, its API and its WebSocket on one port
/// (KANDEV_LISTEN_ADDR, 127.0.0.1:8080 by default).
///
/// Configuration: the services' own settings (the TOML file, then KANDEV_*
/// variables: KANDEV_LISTEN_ADDR, KANDEV_ADMIN_USERNAME,
/// KANDEV_ADMIN_PASSWORD, KANDEV_ALLOWED_REPOSITORY_ROOTS, ...). On first
/// start the admin's password is generated and kept in the data directory.
#[derive(Debug, Parser)]
#[command(name = "kandev", version)]
struct Cli {
    /// Where Kandev keeps its state (created when missing).
    #[arg(long, env = "KANDEV_DATA_DIR", value_name = "DIR", global = true)]
    data_dir: Option<PathBuf>,
    /// A TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Copies this installation's users, boards, tasks, runs and feeds into
    /// the Postgres database of the four-service deployment (each service's
    /// schema, made by its migrations). Stop kandev first. See
    /// docs/deployment.md.
    Export {
        /// The deployment's database (its KANDEV_DATABASE_URL).
        #[arg(value_name = "POSTGRES_URL")]
        url: String,
        /// Delete what the target's tables hold first (without it, a target
        /// holding data is an error).
        #[arg(long)]
        replace: bool,
    },
}

/// How the process logs (`KANDEV_LOG__FILTER`, `KANDEV_LOG__FORMAT`).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Logging {
    log: LogSettings,
}

impl Validate for Logging {}

/// `$XDG_DATA_HOME/kandev`, else `~/.local/share/kandev`.
fn default_data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("kandev"));
    }
    let home = std::env::var_os("HOME").context("set KANDEV_DATA_DIR (no HOME to put it in)")?;
    Ok(PathBuf::from(home).join(".local/share/kandev"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let data_dir = match cli.data_dir {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    if let Some(Command::Export { url, replace }) = cli.command {
        let report = kandev::export::export(&data_dir, &url, replace)
            .await
            .context("exporting")?;
        for (table, rows) in &report.rows {
            println!("{table}: {rows} rows");
        }
        println!(
            "Exported {} to Postgres. To read the users' stored secrets the agent manager \
             needs the key kandev sealed them with as its KANDEV_SECRETS_KEY (the one kandev \
             was given, else the file {}); sessions start anew.",
            data_dir.display(),
            data_dir.join(kandev::SECRETS_KEY_FILE).display()
        );
        return Ok(());
    }
    let logging: Logging = config::load(cli.config.as_deref()).context("loading configuration")?;
    let _telemetry = telemetry::init("kandev", &logging.log);
    let shutdown = shutdown::on_signal();
    let app = Kandev::build(&data_dir, cli.config.as_deref())
        .await
        .context("starting kandev")?;
    let password = app
        .data_dir()
        .join(kandev_gateway::first_start::ADMIN_PASSWORD_FILE);
    println!("Kandev is running at http://{}", app.local_addr());
    println!("Data directory: {}", app.data_dir().display());
    if password.is_file() {
        println!(
            "The admin's password (unless KANDEV_ADMIN_PASSWORD set another) is in {}",
            password.display()
        );
    }
    app.run_until_stopped(shutdown).await?;
    Ok(())
}
