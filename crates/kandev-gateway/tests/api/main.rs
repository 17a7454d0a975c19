//! Router-level tests of the gateway, in front of the REAL task service
//! (in-process, fresh Postgres database per test, NATS). The agent manager
//! and orchestrator are not committed yet: their routes are tested for the
//! gateway's own behaviour (auth, ownership, validation, 503 when down).

mod agents;
mod auth;
mod boards;
mod hardening;
mod helpers;
mod openapi;
mod orchestrator;
mod stack;
mod tasks;
