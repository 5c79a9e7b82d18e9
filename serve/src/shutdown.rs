//! How both binaries learn that they should stop: SIGTERM (the kubelet) or SIGINT.

use tokio_util::sync::CancellationToken;

/// Resolves on the first SIGTERM or SIGINT.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; waiting for SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("signal received; shutting down");
}

/// Cancel `token` on the first SIGTERM or SIGINT (a task in the current runtime waits).
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        signal().await;
        token.cancel();
    });
}
