//! The Kandev task service: boards and tasks on Postgres (or SQLite, on one
//! machine), an explicit state
//! machine, an audit log, and `task.*` events delivered at least once to NATS
//! JetStream through a transactional outbox.
//!
//! # Layout
//! - [`domain`]: task states and their transition table, validated inputs,
//!   and [`TaskError`] with its place in the common error table.
//! - [`store`]: the [`TaskStore`] and [`store::OutboxStore`] traits and their
//!   Postgres and SQLite implementations, which write each change, its audit
//!   row and its outbox event in one transaction.
//! - [`deps`]: subtasks and "blocked by" links: why a task is blocked,
//!   and the cycle a link would close.
//! - [`workflow`]: a board's columns (each mapping a state, with a WIP
//!   limit and automation) and the pure decisions of where a card goes.
//! - [`outbox`]: the relay that drains the outbox to the event bus in order.
//! - [`grpc`]: the thin tonic adapter over a `TaskStore`.
//! - [`startup`]: `build(settings)` then `run_until_stopped(shutdown)`.
//! - [`config`]: the service's typed settings.
//! - [`metric_names`]: every metric the crate records, named and described once.

pub mod config;
pub mod deps;
pub mod domain;
pub mod grpc;
pub mod metric_names;
pub mod outbox;
pub mod startup;
pub mod store;
pub mod workflow;

pub use config::Settings;
pub use domain::TaskError;
pub use startup::Application;
pub use store::{OutboxStore, PgTaskStore, SqliteTaskStore, TaskStore};
