//! `kandev-task-service`: boards and tasks over gRPC.

use kandev_common::config;
use kandev_common::startup::{Binary, run_main};
use kandev_task_service::Application;

/// The parsed messages of the agent stream are many small allocations
/// freed on other threads: mimalloc keeps that cheap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `kandev-task-service` is, for `--help`.
const TASK_SERVICE: Binary = Binary {
    name: "kandev-task-service",
    about: "Kandev task service: boards, tasks and their state machine over gRPC, \
     with task.* events published to NATS JetStream.\n\n\
     Configuration: defaults, then the TOML file (--config or KANDEV_CONFIG), \
     then KANDEV_* environment variables (KANDEV_LISTEN_ADDR, \
     KANDEV_DATABASE_URL, KANDEV_NATS_URL, KANDEV_LOG__FORMAT=json, ...).",
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    run_main(
        TASK_SERVICE,
        config::load,
        Application::build,
        Application::run_until_stopped,
    )
    .await
}
