//! The Kandev API gateway: the single entry point (port 8080). It holds no
//! business logic: it authenticates, validates, routes to the services over
//! gRPC, and serves each task's live stream over WebSocket.
//!
//! # Layout
//! - [`config`]: the gateway's typed settings (`KANDEV_*`).
//! - [`startup`]: `Application::build(settings)`, `port()`,
//!   `run_until_stopped(shutdown)`.
//! - [`app`]: the whole application: routes, health, UI and the layers
//!   around them.
//! - [`routes`]: the `/api/v1` routes, one module per resource;
//!   [`routes::access`] holds the ownership checks.
//! - [`api`]: REST request and response types (with OpenAPI schemas) and
//!   their conversions from the proto messages.
//! - [`auth`]: JWTs, password hashes, the auth middleware; [`users`] is the
//!   users table.
//! - [`error`]: [`ApiError`], the one error body; [`extract`]: extractors
//!   whose rejections use it.
//! - [`clients`]: the gRPC clients and their health checks.
//! - [`rate_limit`]: keyed token buckets.
//! - [`openapi`]: the generated document (`docs/openapi.yaml`).
//! - [`metric_names`]: every metric the crate records, named and described once.
//! - [`stream`]: the task stream WebSocket (history over gRPC, live frames
//!   from NATS).
//! - [`server`]: the HTTP server with a public port's timeouts;
//!   [`body_deadline`]: the deadline for a request's whole body.
//! - [`web`]: the embedded browser UI.
//! - [`state`]: the state shared by every handler; [`first_start`]: the JWT
//!   key and first admin password generated on a first start.

pub mod api;
pub mod app;
pub mod auth;
pub mod body_deadline;
pub mod clients;
pub mod config;
pub mod error;
pub mod extract;
pub mod first_start;
pub mod metric_names;
pub mod openapi;
pub mod rate_limit;
pub mod routes;
pub mod server;
pub mod startup;
pub mod state;
pub mod stream;
pub mod users;
pub mod web;

pub use config::Settings;
pub use error::ApiError;
pub use startup::Application;
