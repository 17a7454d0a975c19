//! `kandev-mock-agent`: a scripted, deterministic mock ACP agent.
//!
//! Kandev's tests and demos run it inside containers in place of an LLM agent.
//! It speaks ACP v1 (JSON-RPC 2.0, one message per line on stdin/stdout), the
//! seed AGENTS.md dialect (`--dialect seed`) or the legacy line format
//! (`--dialect legacy`). The prompt text picks a script ("scenario") that
//! exercises one part of a client: streaming, tool calls with real file edits,
//! permission requests, cancellation, floods, crashes, garbage on stdout,
//! oversized lines, authentication and session replay. The protocol is written
//! by hand rather than with the SDK so that the agent can misbehave on purpose.
//! Logs go to stderr only. See `docs/mock-agent.md` for the grammar and flags.
//!
//! # Layout
//!
//! - `config`: flags and their environment variables.
//! - `log`: the stderr logger.
//! - `wire`: the stdout writer thread, JSON-RPC messages and errors, and the
//!   table of agent → client requests awaiting responses.
//! - `ctx`: process-wide state (client capabilities, auth, sessions).
//! - `session`: deterministic session ids, modes, config options, persistence.
//! - `scenario`: the prompt grammar.
//! - `turn`: what a running turn can do (emit updates in the active dialect,
//!   call the client, read/write files, observe cancellation).
//! - `play`: the scenarios themselves.
//! - `server`: the ACP and seed JSON-RPC loop.
//! - `legacy`: the legacy line-format runner.

mod config;
mod ctx;
mod legacy;
mod log;
mod play;
mod scenario;
mod server;
mod session;
mod turn;
mod wire;

use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

use crate::{config::Dialect, ctx::Ctx, log::info, wire::Out};

fn main() {
    let cfg = config::Config::parse();
    log::init(&cfg.log);
    if cfg.login {
        match server::login(&cfg.credentials) {
            Ok(()) => {
                println!(
                    "Logged in to kandev-mock-agent ({}).",
                    cfg.credentials.display()
                );
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("kandev-mock-agent: login failed: {e}");
                std::process::exit(1);
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds");
    let code = runtime.block_on(run(cfg));
    std::process::exit(code);
}

async fn run(cfg: config::Config) -> i32 {
    info!("starting ({:?} dialect, auth {:?})", cfg.dialect, cfg.auth);
    let out = Out::spawn();
    let ctx = Ctx::new(cfg, out.clone());
    let work = async {
        match ctx.cfg.dialect {
            Dialect::Legacy => legacy::run(ctx.clone()).await,
            Dialect::Acp | Dialect::Seed => server::serve(ctx.clone()).await,
        }
    };
    if ctx.cfg.quirks.ignore_sigterm {
        // A Node process as PID 1: SIGTERM and SIGINT do nothing.
        info!("quirk ignore-sigterm: only SIGKILL ends this agent");
        let _signals = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        return work.await;
    }
    // As PID 1 in a container nothing else would end us on `docker stop`.
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        _ => return work.await,
    };
    tokio::select! {
        code = work => code,
        _ = term.recv() => { info!("SIGTERM; exiting"); out.flush().await; 0 }
        _ = int.recv() => { info!("SIGINT; exiting"); out.flush().await; 0 }
    }
}
