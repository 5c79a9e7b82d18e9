//! holdfast-webhook: the mutating and validating admission server.
#![forbid(unsafe_code)]

pub mod args;
pub use args::Args;

/// Serve until SIGTERM.
pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        tracing::info!(mode = %args.mode, "holdfast-webhook starting");
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}
