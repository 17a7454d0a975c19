//! The Kandev orchestrator: a persisted priority queue of eligible tasks,
//! launched through the agent manager within concurrency limits and
//! supervised through `agent.*` events; and the ACP feed, every
//! `acp.message.<task_id>` numbered per task, broadcast live and stored in
//! Postgres, replayed over WebSocket with no gap and no duplicate.
//!
//! # Layout
//! - [`config`]: the service's typed settings.
//! - [`domain`]: execution states and views, and [`OrchestratorError`] with
//!   its place in the error table; [`orchestration`]: the [`Orchestration`]
//!   port the adapters call, which the engine implements.
//! - [`engine`]: the queue, limits, launching, retries and event reactions.
//! - [`clients`]: the [`AgentControl`] trait over the agent manager, its gRPC
//!   implementation, and the task service client.
//! - [`consumers`]: durable JetStream consumers of `task.*` and `agent.*`.
//! - [`feed`]: the `acp.message.*` consumer, seq numbering, batched storage
//!   and the live [`FeedHub`].
//! - [`forge`]: pull / merge requests on GitHub and GitLab; [`forge::api`]:
//!   the one way every forge call is made, its answer size-bounded.
//! - [`pool`]: the agent managers as a pool: where a run is placed, where
//!   a call about an instance goes.
//! - [`checks`]: the CI checks of a pushed commit (GitHub check runs and
//!   commit statuses, GitLab pipelines' jobs), size-bounded.
//! - [`tracker`]: issue trackers (GitHub, GitLab) whose issues become a
//!   linked board's tasks, and their webhooks' signatures or tokens.
//! - [`http`] and [`ws`]: REST control and the WebSocket feed.
//! - [`grpc`]: the thin tonic adapter over an `Orchestration`.
//! - [`leader`]: replicas: one leader runs the consumers and the
//!   scheduler; decisions of all replicas are serialized in Postgres.
//! - [`startup`]: `build(settings)` then `run_until_stopped(shutdown)`.
//! - [`metric_names`]: every metric the crate records, named and described once.

pub mod checks;
pub mod clients;
pub mod config;
pub mod consumers;
pub mod domain;
pub mod engine;
pub mod feed;
pub mod forge;
pub mod grpc;
pub mod http;
pub mod leader;
pub mod metric_names;
pub mod orchestration;
pub mod pool;
pub mod startup;
pub mod tracker;
pub mod ws;

pub use clients::{AgentControl, GrpcAgentControl};
pub use config::Settings;
pub use domain::{ExecState, ExecutionView, OrchestratorError};
pub use feed::FeedHub;
pub use orchestration::Orchestration;
pub use startup::Application;
