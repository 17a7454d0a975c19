//! `kandev-gateway`: the API gateway on port 8080.

use kandev_common::config;
use kandev_common::startup::{Binary, run_main};
use kandev_gateway::Application;

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `kandev-gateway` is, for `--help`.
const GATEWAY: Binary = Binary {
    name: "kandev-gateway",
    about: "Kandev API gateway: authentication, validation and routing to the task \
     service, agent manager and orchestrator; the task stream WebSocket \
     proxy.\n\n\
     Configuration: defaults, then the TOML file (--config or KANDEV_CONFIG), \
     then KANDEV_* environment variables (KANDEV_LISTEN_ADDR, \
     KANDEV_DATABASE_URL, KANDEV_JWT_SECRET, KANDEV_ADMIN_USERNAME, \
     KANDEV_ADMIN_PASSWORD, KANDEV_TASK_SERVICE_URL, ...).",
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    run_main(
        GATEWAY,
        config::load,
        Application::build,
        Application::run_until_stopped,
    )
    .await
}
