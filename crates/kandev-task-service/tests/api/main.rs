//! Integration tests of the task service: a real tonic client against the
//! service bound to port 0, on a fresh Postgres database each, with events
//! observed on a real NATS JetStream.

mod auth;
mod binary;
mod boards;
mod events;
mod helpers;
mod tasks;
mod transitions;
