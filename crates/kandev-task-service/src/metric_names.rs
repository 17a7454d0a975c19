//! The task service's metrics, named once: each name, and what it means
//! ([`describe`], shown on `/metrics`). Operators read them in
//! `docs/operations.md`.

use metrics::{describe_counter, describe_gauge};

/// Events committed and not yet published to the bus.
pub const OUTBOX_BACKLOG: &str = "kandev_outbox_backlog";
/// Events published from the outbox.
pub const OUTBOX_PUBLISHED: &str = "kandev_outbox_published_total";

/// Describes the task service's metrics to the installed recorder.
pub fn describe() {
    describe_gauge!(
        OUTBOX_BACKLOG,
        "Events committed and not yet published to the bus"
    );
    describe_counter!(OUTBOX_PUBLISHED, "Events published from the outbox");
}
