//! The gateway's metrics, named once: each name, and what it means
//! ([`describe`], shown on `/metrics`). Operators read them in
//! `docs/operations.md`.

use metrics::{describe_counter, describe_gauge};

pub use kandev_events::metric_names::ACP_MESSAGES;

/// Open stream WebSockets.
pub const WS_CLIENTS: &str = "kandev_ws_clients";
/// Clients too slow for their feed, closed with code 1008.
pub const WS_LAGGING_DISCONNECTS: &str = "kandev_ws_lagging_disconnects_total";

/// Describes the gateway's metrics (and the streams') to the installed
/// recorder.
pub fn describe() {
    kandev_events::metric_names::describe();
    describe_gauge!(
        WS_CLIENTS,
        "Open stream WebSockets (task feeds in browsers)"
    );
    describe_counter!(
        WS_LAGGING_DISCONNECTS,
        "Clients too slow to keep up with their feed, closed with code 1008"
    );
}
