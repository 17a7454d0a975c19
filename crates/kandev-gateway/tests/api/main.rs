//! Router-level tests of the gateway, in front of the REAL task service
//! (in-process, fresh Postgres database per test, NATS).
//!
//! - `agents`, `orchestrator`: the gateway's own behaviour on those routes
//!   (auth, ownership, validation, 503 while the service is down, and the
//!   WebSocket proxy's mechanics against a stand-in server).
//! - `stack`: the whole stack with the REAL orchestrator and agent manager
//!   (mock agent in Docker): the integration test of those routes.
//! - `binary`: the built binary, its key checks and a graceful stop.
//! - `contract`: the users' storage contract, on Postgres and on SQLite.
//! - `deps`: subtasks and "blocked by" links, and their bad input.
//! - `not_found`: someone else's resources answer exactly like missing ones.
//! - `profiles`: agent profiles through the whole stack: bad input, whose
//!   profiles a user sees, secrets never returned, and a task's profile
//!   (model, mode, instructions, two MCP servers) reaching the mock agent.
//! - `repositories`: a task's repository checked by the REAL agent manager
//!   (in-process, no Docker) when the task is created or changed.

mod agents;
mod auth;
mod binary;
mod boards;
mod contract;
mod deps;
mod followups;
mod hardening;
mod helpers;
mod not_found;
mod openapi;
mod orchestrator;
mod profiles;
mod repositories;
mod stack;
mod tasks;
mod workflow;
