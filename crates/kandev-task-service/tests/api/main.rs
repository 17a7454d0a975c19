//! Integration tests of the task service: a real tonic client against the
//! service bound to port 0, on a fresh Postgres database each, with events
//! observed on a real NATS JetStream; and the storage contract
//! (`contract`) checked against both databases, Postgres and SQLite.

mod auth;
mod binary;
mod boards;
mod contract;
mod deps;
mod events;
mod helpers;
mod sqlite;
mod tasks;
mod transitions;
mod upgrade;
mod workflow;
