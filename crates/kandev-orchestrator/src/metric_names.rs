//! The orchestrator's metrics, named once: each name, and what it means
//! ([`describe`], shown on `/metrics`). Operators read them in
//! `docs/operations.md`.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

pub use kandev_events::metric_names::ACP_MESSAGES;

/// Tasks waiting for an agent slot.
pub const QUEUE_DEPTH: &str = "kandev_queue_depth";
/// Time a task waited between queued and launched.
pub const QUEUE_WAIT_SECONDS: &str = "kandev_queue_wait_seconds";
/// Agents running now, by `agent_type`.
pub const RUNNING_AGENTS: &str = "kandev_running_agents";
/// Agents each manager of the pool runs, by `manager`.
pub const POOL_ACTIVE_INSTANCES: &str = "kandev_pool_manager_active_instances";
/// Messages per feed write.
pub const FEED_STORE_BATCH_SIZE: &str = "kandev_feed_store_batch_size";
/// Time to store one feed batch.
pub const FEED_STORE_SECONDS: &str = "kandev_feed_store_seconds";
/// Feed batches refused because another orchestrator leads.
pub const FEED_FENCED_BATCHES: &str = "kandev_feed_fenced_batches_total";
/// Whether this replica leads (1) or not (0).
pub const LEADER: &str = "kandev_orchestrator_leader";
/// Times this replica became the leader.
pub const LEADERSHIP_ACQUIRED: &str = "kandev_orchestrator_leadership_acquired_total";
/// Runs moved from a lost agent manager to another.
pub const RUNS_MOVED: &str = "kandev_runs_moved_total";
/// Events on the bus that could not be parsed, by `source`.
pub const EVENTS_MALFORMED: &str = "kandev_events_malformed_total";
/// CI job or check statuses a forge sent that Kandev does not know, by `forge`.
pub const CI_UNKNOWN_STATUS: &str = "kandev_ci_unknown_status_total";

/// Describes the orchestrator's metrics (and the streams') to the
/// installed recorder.
pub fn describe() {
    kandev_events::metric_names::describe();
    describe_gauge!(QUEUE_DEPTH, "Tasks waiting for an agent slot");
    describe_histogram!(
        QUEUE_WAIT_SECONDS,
        Unit::Seconds,
        "Time a task waited between queued and launched"
    );
    describe_gauge!(RUNNING_AGENTS, "Agents running now, by agent type");
    describe_gauge!(
        POOL_ACTIVE_INSTANCES,
        "Agents each manager of the pool runs"
    );
    describe_histogram!(FEED_STORE_BATCH_SIZE, "ACP messages per feed write");
    describe_histogram!(
        FEED_STORE_SECONDS,
        Unit::Seconds,
        "Time to store one feed batch"
    );
    describe_counter!(
        FEED_FENCED_BATCHES,
        "Feed batches refused because another orchestrator leads"
    );
    describe_gauge!(LEADER, "1 while this orchestrator replica leads, else 0");
    describe_counter!(LEADERSHIP_ACQUIRED, "Times this replica became the leader");
    describe_counter!(
        RUNS_MOVED,
        "Runs moved from a lost agent manager to another"
    );
    describe_counter!(
        EVENTS_MALFORMED,
        "Bus events that could not be parsed, by source"
    );
    describe_counter!(
        CI_UNKNOWN_STATUS,
        "CI statuses a forge sent that Kandev does not know, by forge"
    );
}
