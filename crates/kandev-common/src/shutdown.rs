//! Graceful shutdown: one token, cancelled on SIGTERM or ctrl-c.

use tokio_util::sync::CancellationToken;

/// A token that is cancelled when the process receives SIGTERM or ctrl-c.
/// Services stop accepting work when it fires and drain what is in flight.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received, draining");
        fire.cancel();
    });
    token
}

/// Resolves on the first SIGTERM or ctrl-c.
pub async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
