//! The metrics of the event streams, named once: each name, and what it
//! means ([`describe`], shown on `/metrics`). Operators read them in
//! `docs/operations.md`.

use metrics::{Unit, describe_counter, describe_histogram};

/// Agent (ACP) messages, by `hop`: published by the agent manager, stored
/// by the orchestrator, sent to browsers by the gateway.
pub const ACP_MESSAGES: &str = "kandev_acp_messages_total";
/// Bytes of the ACP messages published, by `hop`.
pub const ACP_BYTES: &str = "kandev_acp_bytes_total";
/// JetStream consumers re-opened at their ack floor after a reconnect.
pub const BUS_CONSUMER_REOPENED: &str = "kandev_bus_consumer_reopened_total";
/// Publishes to the in-process streams that waited their whole bound for
/// a consumer to read.
pub const LOCAL_STREAMS_ROOM_TIMEOUTS: &str = "kandev_local_streams_room_timeouts_total";
/// Messages the in-process streams stored per statement.
pub const LOCAL_STREAMS_GROUP_MESSAGES: &str = "kandev_local_streams_group_messages";

/// Describes this crate's metrics to the installed recorder.
pub fn describe() {
    describe_counter!(
        ACP_MESSAGES,
        "Agent (ACP) messages, by hop: agent_manager (published), orchestrator_store (stored), gateway (sent to browsers)"
    );
    describe_counter!(
        ACP_BYTES,
        Unit::Bytes,
        "Bytes of the ACP messages published, by hop"
    );
    describe_counter!(
        BUS_CONSUMER_REOPENED,
        "JetStream consumers re-opened at their ack floor after the client reconnected"
    );
    describe_counter!(
        LOCAL_STREAMS_ROOM_TIMEOUTS,
        "In-process stream publishes that waited their whole bound for a consumer to read"
    );
    describe_histogram!(
        LOCAL_STREAMS_GROUP_MESSAGES,
        "Messages the in-process streams stored in one statement"
    );
}
