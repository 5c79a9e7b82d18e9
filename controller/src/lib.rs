//! holdfast-controller: the snapshot reconciler, the hold executor and its HTTP API, the
//! Kueue readmission gate.
#![forbid(unsafe_code)]

pub mod api;
pub mod args;
pub mod arming;
pub mod backoff;
pub mod cert_events;
pub mod events;
pub mod execution;
pub mod held;
pub mod hold;
pub mod hold_api_ca;
pub mod install_check;
pub mod leader;
pub mod metrics;
pub mod multikueue;
pub mod multikueue_quota;
pub mod multikueue_snapshot;
pub mod pods;
pub mod readmission;
pub mod snapshot;
pub mod trainjob;
pub mod webhook_certs;
pub mod wiring;
pub use args::Args;

/// Run the controller until SIGTERM; an error (e.g. the Lease was lost) exits non-zero.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.log.init();
    holdfast_serve::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        tracing::info!(mode = %args.mode, "holdfast-controller starting");
        let shutdown = tokio_util::sync::CancellationToken::new();
        holdfast_serve::shutdown::cancel_on_signal(shutdown.clone());
        wiring::serve(args, shutdown).await
    })
}
