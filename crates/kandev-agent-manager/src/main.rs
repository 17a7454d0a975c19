//! `kandev-agent-manager`: agent containers driven over ACP, over gRPC.

use kandev_agent_manager::{Application, config};
use kandev_common::startup::{Binary, run_main};

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `kandev-agent-manager` is, for `--help`.
const AGENT_MANAGER: Binary = Binary {
    name: "kandev-agent-manager",
    about: "Kandev agent manager: runs coding agents in Docker containers, drives \
     them over ACP and publishes their events to NATS JetStream.\n\n\
     Configuration: defaults, then the TOML file (--config or KANDEV_CONFIG), \
     then KANDEV_* environment variables (KANDEV_LISTEN_ADDR, \
     KANDEV_DATABASE_URL, KANDEV_NATS_URL, KANDEV_WORKSPACES_ROOT, \
     KANDEV_ALLOWED_WORKSPACE_ROOTS, KANDEV_AGENT_ENV__<NAME>, ...). \
     GITHUB_TOKEN, GITLAB_TOKEN, GEMINI_API_KEY and HOME are read from the \
     host environment once, at startup.",
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    run_main(
        AGENT_MANAGER,
        config::load,
        Application::build,
        Application::run_until_stopped,
    )
    .await
}
