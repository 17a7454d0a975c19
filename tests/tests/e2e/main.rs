//! End-to-end scenarios: the real binaries, driven through the gateway.

mod api;
mod board;
mod board_push;
mod cancel;
mod changes;
mod cluster;
mod concurrency;
mod crash;
mod export;
mod faults;
mod followup;
mod fuzz;
mod happy;
mod metrics;
mod permission;
mod pool;
mod real_agents;
mod reopen;
mod replicas;
mod repositories;
mod review_comments;
mod secrets;
mod seed;
mod soak;
mod trace;
mod trackers;
