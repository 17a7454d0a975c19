//! Integration tests for `kandev-mock-agent`: the real binary is spawned with
//! `tokio::process` and driven over its pipes.
//!
//! # Layout
//!
//! - `harness`: temp dirs and a raw JSON-lines driver for the agent process.
//! - `raw`: every scenario, dialect and error path, with plain `serde_json`.
//! - `sdk`: a client built on the official `agent-client-protocol` SDK
//!   (coding turn with client fs and terminal, permissions, cancel, load).
//! - `docker`: builds the `FROM scratch` image with the repo script and runs
//!   an echo turn in it (skipped without Docker unless `KANDEV_REQUIRE_DOCKER=1`).

mod docker;
mod harness;
mod raw;
mod sdk;
