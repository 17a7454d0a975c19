//! What every Kandev service shares: layered configuration, telemetry, the
//! one error-code table, serving gRPC and HTTP on one port, and graceful
//! shutdown.
//!
//! # Layout
//! - [`config`]: defaults, then an optional TOML file, then `KANDEV_*`
//!   environment variables, validated once; the settings every service
//!   shares ([`config::ServiceSettings`]).
//! - [`db`]: a Postgres pool pinned to the service's own schema, SQLite
//!   files, and one statement text for both ([`db::dialect`]).
//! - [`telemetry`]: tracing subscriber setup, human or JSON output, OTLP export.
//! - [`trace`]: W3C trace context in and out of requests, gRPC and NATS.
//! - [`error`]: [`ErrorCode`], mapped to `tonic::Code` and to HTTP statuses.
//! - [`serve`]: one listener answering gRPC, `/healthz` and `/readyz`.
//! - [`service_auth`]: the shared service token internal ports require.
//! - [`metrics`]: the Prometheus recorder, `/metrics`, request metrics.
//! - [`shutdown`]: a cancellation token fired by SIGTERM or ctrl-c.
//! - [`startup`]: what every service's start shares: binding, the migrated
//!   database, the gRPC routes, the internal port's layers, `main`.
//! - [`stream_command`]: a task stream's client commands and their
//!   `ack`/`error` answers, read once for the gateway and the orchestrator.
//! - [`sync`]: a poison-tolerant mutex [`lock`](sync::lock).
//! - [`text`]: text made storable (no NUL characters).
//! - [`webhook`]: GitHub's webhook signatures and GitLab's tokens, checked
//!   in constant time.

pub mod config;
pub mod db;
pub mod error;
pub mod metrics;
pub mod serve;
pub mod service_auth;
pub mod shutdown;
pub mod startup;
pub mod stream_command;
pub mod sync;
pub mod telemetry;
pub mod text;
pub mod trace;
pub mod webhook;

pub use error::{ErrorCode, ServiceError};
pub use tokio_util::sync::CancellationToken;
