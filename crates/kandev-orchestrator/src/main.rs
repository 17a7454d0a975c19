//! `kandev-orchestrator`: the launch queue, agent supervision and the ACP feed.

use kandev_common::config;
use kandev_common::startup::{Binary, run_main};
use kandev_orchestrator::Application;

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `kandev-orchestrator` is, for `--help`.
const ORCHESTRATOR: Binary = Binary {
    name: "kandev-orchestrator",
    about: "Kandev orchestrator: queues eligible tasks, launches their agents \
     through the agent manager, follows their runs, and serves each task's \
     ACP feed over WebSocket (plus REST and gRPC control).\n\n\
     Configuration: defaults, then the TOML file (--config or KANDEV_CONFIG), \
     then KANDEV_* environment variables (KANDEV_LISTEN_ADDR, \
     KANDEV_DATABASE_URL, KANDEV_NATS_URL, KANDEV_TASK_SERVICE_URL, \
     KANDEV_AGENT_MANAGER_URL, KANDEV_MAX_CONCURRENT, ...).",
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    run_main(
        ORCHESTRATOR,
        config::load,
        Application::build,
        Application::run_until_stopped,
    )
    .await
}
