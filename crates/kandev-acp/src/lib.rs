//! ACP (Agent Client Protocol) client for Kandev.
//!
//! Kandev drives coding agents over JSON-RPC 2.0 on their stdin/stdout. This
//! crate is the client half: a bounded transport, request/response
//! correlation with per-request timeouts, answers to the agent's own
//! requests (permissions, `fs/*`, `terminal/*`), detection of the three
//! dialects agents speak (ACP v1, the seed's AGENTS.md dialect and the
//! legacy line format), and one normalized, serializable event stream.
//!
//! ```no_run
//! # async fn run(stdout: tokio::process::ChildStdout, stdin: tokio::process::ChildStdin)
//! # -> Result<(), kandev_acp::AcpError> {
//! use kandev_acp::{AcpClient, ClientOptions};
//!
//! let (client, mut events) = AcpClient::connect(stdout, stdin, ClientOptions::default());
//! tokio::spawn(async move {
//!     while let Some(event) = events.recv().await {
//!         println!("{}", serde_json::to_string(&event).unwrap());
//!     }
//! });
//! client.initialize().await?;
//! client.new_session("/workspace", vec![]).await?;
//! let stop = client.prompt(vec!["Fix the bug".into()]).await?;
//! # let _ = stop; Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`auth`]: choosing the `authenticate` method from the credentials
//!   in the agent's environment.
//! - [`client`]: [`AcpClient`], [`ClientOptions`], [`EventStream`],
//!   [`Dialect`]; the reader task, correlation and agent-request dispatch.
//! - [`event`]: the normalized event model ([`AcpEvent`], [`EventKind`]).
//! - [`framing`]: the bounded line reader (8 MiB default).
//! - [`permission`]: [`PermissionPolicy`] and its implementations
//!   ([`AutoApprove`], [`Deny`], [`AskDecider`]).
//! - [`workspace`]: `fs/*` confined to a workspace root, with path
//!   translation between the container and the host.
//! - [`terminal`]: [`TerminalExecutor`] and the local-process
//!   [`LocalExecutor`].
//! - [`error`]: [`AcpError`], [`RpcError`] and the JSON-RPC error codes.
//! - `normalize` (private): wire message → [`EventKind`] for every dialect.
//! - `sync` (private): a poison-tolerant lock of the client's state (the
//!   crate depends on no other of Kandev's).
//! - `src/main.rs`: the `kandev-acp run` CLI.
//!
//! The protocol, the event model and how to write an agent are documented
//! in `docs/AGENTS.md`.

pub mod auth;
pub mod client;
pub mod error;
pub mod event;
pub mod framing;
mod normalize;
pub mod permission;
mod sync;
pub mod terminal;
pub mod workspace;

/// The ACP v1 schema types used in this crate's API (re-exported from the
/// official `agent-client-protocol` crate).
pub use agent_client_protocol::v1::schema;
pub use client::{AcpClient, ClientOptions, Dialect, EventStream, Handshake, SessionInfo};
pub use error::{AcpError, RpcError};
pub use event::{AcpEvent, Direction, EventKind, LifecyclePhase, RawJson};
pub use normalize::KNOWN_UPDATES;
pub use permission::{
    AskDecider, AutoApprove, Deny, PermissionAsk, PermissionDecision, PermissionPolicy,
};
pub use terminal::{LocalExecutor, TerminalExecutor};
pub use workspace::Workspace;
