//! The Kandev agent manager: coding agents in Docker containers, driven over
//! ACP (JSON-RPC on the container's attached stdin/stdout), with every ACP
//! event published to `acp.message.<task_id>` and lifecycle events to
//! `agent.*` on NATS JetStream.
//!
//! # Layout
//! - [`domain`]: agent types, instances, statuses, and [`AgentError`] with
//!   its place in the common error table.
//! - [`store`]: the service's tables (`agent_types`, seeded,
//!   `agent_instances`, `agent_logs`, users' secrets, profiles), one
//!   statement text for Postgres and SQLite.
//! - [`docker`]: bollard: images, containers with limits and labels,
//!   attach, exit codes.
//! - [`images`]: the agent images Kandev builds from its recipes.
//! - [`exec`]: `terminal/*` as `docker exec` in the agent's container.
//! - [`workspace`]: a task's clone: Kandev's own repository under
//!   `<workspaces_root>/.kandev/<task_id>` and the agent's copy at
//!   `<workspaces_root>/<task_id>`, or an allowed host directory, and a
//!   follow-up's workspace; [`paths`]: where those two repositories live;
//!   [`repository`]: which repository URLs may be cloned, and URLs
//!   redacted for messages; [`preflight`]:
//!   whether a task may use its repository, asked before it is taken.
//! - [`mirror`]: copying the agent's work tree into Kandev's own without
//!   following or interpreting anything the agent wrote.
//! - [`git`]: git on the host, only ever in Kandev's own repository;
//!   [`changes`]: a task's branch and its changes against the base;
//!   [`delivery`]: committing and pushing them; [`reclone`]: what a
//!   delivered task's repository recorded, to clone it again on its pushed
//!   branch for a follow-up.
//! - [`runner`]: one prompt turn in one container, and the event pipeline.
//! - [`manager`]: the domain API ([`AgentManager`]) and reconciliation.
//! - [`grpc`]: the thin tonic adapter.
//! - [`announce`]: announcing this manager (load, capacity, images) to the
//!   orchestrators' pool on NATS.
//! - [`container`]: the container a turn runs in, built in one place (its
//!   environment for the run's user, profile, mounts, home volume, limits);
//!   [`credentials`]: each user's own secrets, stored sealed.
//! - [`profiles`]: agent profiles (model, mode, instructions, secrets' env,
//!   MCP servers) chosen per task.
//! - [`startup`]: `build(settings)` then `run_until_stopped(shutdown)`.
//! - [`config`]: the service's typed settings.
//! - [`metric_names`]: every metric the crate records, named and described once.

pub mod announce;
pub mod changes;
pub mod config;
pub mod container;
pub mod credentials;
pub mod delivery;
pub mod docker;
pub mod domain;
pub mod exec;
pub mod git;
pub mod grpc;
pub mod images;
pub mod manager;
pub mod metric_names;
pub mod mirror;
pub mod paths;
pub mod preflight;
pub mod profiles;
pub mod reclone;
pub mod repository;
pub mod runner;
pub mod startup;
pub mod store;
pub mod workspace;

pub use config::Settings;
pub use domain::AgentError;
pub use manager::AgentManager;
pub use startup::Application;
