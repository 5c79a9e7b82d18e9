//! holdfast-controller: the snapshot reconciler, the hold executor and its HTTP API, the
//! Kueue readmission gate.
#![forbid(unsafe_code)]

pub mod args;
pub mod certs;
pub use args::Args;

/// Run the controller until SIGTERM.
pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        tracing::info!(mode = %args.mode, "holdfast-controller starting");
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}
