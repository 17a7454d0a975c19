//! Integration tests of the agent manager: a real tonic client against the
//! service bound to port 0, a fresh Postgres database each, real Docker
//! containers of the mock-agent image (network none), and events observed
//! on a real NATS JetStream; and the storage contract (`contract`) checked
//! against both databases, Postgres and SQLite.

mod auth;
mod binary;
mod boundary;
mod changes;
mod clones;
mod contract;
mod engine;
mod faults;
mod helpers;
mod images;
mod launch;
mod preflight;
mod reclone;
mod registry;
mod restart;
mod secrets;
mod sessions;
