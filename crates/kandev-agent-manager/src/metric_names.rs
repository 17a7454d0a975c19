//! The agent manager's metrics, named once: each name, and what it means
//! ([`describe`], shown on `/metrics`). Operators read them in
//! `docs/operations.md`.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

pub use kandev_events::metric_names::{ACP_BYTES, ACP_MESSAGES};

/// Time to publish one batch to the bus (acknowledged).
pub const BUS_PUBLISH_SECONDS: &str = "kandev_bus_publish_seconds";
/// Messages per published batch.
pub const BUS_BATCH_SIZE: &str = "kandev_bus_batch_size";
/// Time of each launch phase, by `phase`.
pub const LAUNCH_PHASE_SECONDS: &str = "kandev_launch_phase_seconds";
/// Docker engine calls that failed, by `operation`.
pub const DOCKER_ERRORS: &str = "kandev_docker_errors_total";
/// Agents this manager runs now, as it announces them.
pub const ACTIVE_INSTANCES: &str = "kandev_agent_manager_active_instances";
/// Agent image builds, by `phase` (started, built, failed).
pub const IMAGE_BUILDS: &str = "kandev_agent_image_builds_total";
/// Time to build an agent image.
pub const IMAGE_BUILD_SECONDS: &str = "kandev_agent_image_build_seconds";
/// Time to copy an agent's work tree into Kandev's own repository.
pub const WORKSPACE_SYNC_SECONDS: &str = "kandev_workspace_sync_seconds";

/// Describes the agent manager's metrics (and the streams') to the
/// installed recorder.
pub fn describe() {
    kandev_events::metric_names::describe();
    describe_histogram!(
        BUS_PUBLISH_SECONDS,
        Unit::Seconds,
        "Time to publish one batch of ACP messages to the bus (acknowledged)"
    );
    describe_histogram!(BUS_BATCH_SIZE, "ACP messages per published batch");
    describe_histogram!(
        LAUNCH_PHASE_SECONDS,
        Unit::Seconds,
        "Time of each launch phase: clone, create, start, initialize, session"
    );
    describe_counter!(
        DOCKER_ERRORS,
        "Docker engine calls that failed, by operation"
    );
    describe_gauge!(ACTIVE_INSTANCES, "Agents this manager runs now");
    describe_counter!(
        IMAGE_BUILDS,
        "Agent image builds, by phase: started, built, failed"
    );
    describe_histogram!(
        IMAGE_BUILD_SECONDS,
        Unit::Seconds,
        "Time to build an agent image"
    );
    describe_histogram!(
        WORKSPACE_SYNC_SECONDS,
        Unit::Seconds,
        "Time to copy an agent's work tree into Kandev's own repository"
    );
}
