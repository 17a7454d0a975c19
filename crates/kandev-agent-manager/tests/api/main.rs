//! Integration tests of the agent manager: a real tonic client against the
//! service bound to port 0, a fresh Postgres database each, real Docker
//! containers of the mock-agent image (network none), and events observed
//! on a real NATS JetStream.

mod auth;
mod binary;
mod engine;
mod faults;
mod helpers;
mod launch;
mod registry;
mod restart;
mod secrets;
