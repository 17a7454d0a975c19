//! End-to-end scenarios: the real binaries, driven through the gateway.

mod api;
mod happy;
