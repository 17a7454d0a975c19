//! Integration tests of the orchestrator: the service in-process on port 0
//! (or its binary, for the crash test), a fresh Postgres database and a
//! private `nats-server -js` per test; the ACP feed driven through its real
//! input (AcpBatch envelopes on NATS), the task service in-process; and the
//! storage contract (`contract`) checked against Postgres and SQLite.

#[macro_use]
mod databases;

mod auth;
mod binary;
mod checks;
mod contract;
mod deps;
mod e2e;
mod feed;
mod feed_items;
mod feed_reopen;
mod followups;
mod forge;
mod helpers;
mod leader;
mod queue;
mod task_steps;
mod trackers;
mod trackers_gitlab;
mod workflow;
